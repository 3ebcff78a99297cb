"""Revisions and checkpoint suites, offline: model.revision resolves to the commit the local hub
cache holds for it (its SHA in env.json), a suite's (seed, step) names its checkpoint and the
tokens it had seen, what a suite holds is read from the cache and never guessed, and
`python -m bertology.reproduce --checkpoints` judges a suite's members as a population."""

from __future__ import annotations

import csv
import json
import os

import pytest
from hub_cache import branch_suite, cache_commit, multiberts_cache, tiny_bert

from bertology.config.groups import ModelConfig
from bertology.config.hub_revisions import cached_refs, checkpoint_record
from bertology.config.suites import load_suite
from bertology.errors import UserError
from bertology.study.judge.encoders import ENCODER_STUDIES
from bertology.study.schedule import external

BRANCH_SUITE = "org/encoder-suite"
SEEDED_SUITE = "org/encoder-seed{seed}"  # a repo per seed, a branch per step (PolyPythias')


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """A hub cache with 5 MultiBERTs seeds (finals, and seeds 0-1 at step 20k) and a
    branch-style suite of three steps."""
    root = tmp_path_factory.mktemp("hub")
    cache, work = root / "cache", root / "work"
    multi = multiberts_cache(cache, range(5), work)
    multi.update(multiberts_cache(cache, range(2), work, steps=(20000,)))
    branches = branch_suite(cache, BRANCH_SUITE, (1000, 2000, 3000), work)
    branch_suite(cache, SEEDED_SUITE, (1000, 2000), work)
    suite_file = root / "encoder-suite.yaml"
    suite_file.write_text(f"layout: revisions\nrepo: {BRANCH_SUITE}\nrevision: step{{step}}\n"
                          "final_step: 3000\ntokens_per_step: 4096\n")
    seeded_file = root / "seeded.yaml"
    seeded_file.write_text(f"layout: revisions\nrepo: {SEEDED_SUITE}\nrevision: step{{step}}\n"
                           "final_step: 2000\ntokens_per_step: 4096\n")
    return {"cache": cache, "multi": multi, "branches": branches, "suite_file": suite_file,
            "seeded_file": seeded_file}


@pytest.fixture
def in_cache(hub, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(hub["cache"]))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return hub


def test_a_revision_is_read_from_its_snapshot_and_its_sha_recorded(in_cache):
    """model.revision=step2000 becomes the snapshot folder of that commit, whatever main
    points to; a copy of the pinned config (dataclasses.replace) stays pinned; the record
    names the commit."""
    model = ModelConfig(name_or_path=BRANCH_SUITE, revision="step2000")
    sha = in_cache["branches"][2000]
    assert model.name_or_path.endswith(f"snapshots/{sha}")
    assert sha != in_cache["branches"][3000] == cached_refs(BRANCH_SUITE)["main"]
    import dataclasses

    assert dataclasses.replace(model, family="bert").name_or_path == model.name_or_path
    record = checkpoint_record(model.name_or_path, model.revision)
    assert record == {"name_or_path": model.name_or_path, "revision": "step2000", "sha": sha}
    # a hub id without a revision: main's commit, from the cache
    assert checkpoint_record(BRANCH_SUITE, None)["sha"] == in_cache["branches"][3000]
    # a commit SHA is a revision too
    assert ModelConfig(name_or_path=BRANCH_SUITE, revision=sha).name_or_path == model.name_or_path


def test_a_revision_the_cache_lacks_is_refused_with_those_it_holds(in_cache, tmp_path):
    with pytest.raises(UserError) as err:
        ModelConfig(name_or_path=BRANCH_SUITE, revision="step2500")
    message = str(err.value)
    assert "step2500" in message and "main, step1000, step2000, step3000" in message
    assert "\n" not in message
    with pytest.raises(UserError, match="is a local folder"):
        ModelConfig(name_or_path=str(tmp_path), revision="main")
    with pytest.raises(UserError, match="needs a hub checkpoint"):
        ModelConfig(revision="main")


def test_a_suite_names_its_checkpoints_and_their_tokens(in_cache):
    """MultiBERTs: one repo per (seed, step), the final model its own repo; 131,072 tokens a
    step (256 x 512). The suite's members are what the cache holds."""
    suite = load_suite("multiberts")
    assert suite.checkpoint(3, None) == ("google/multiberts-seed_3", None)
    assert suite.checkpoint(3, 2000000) == ("google/multiberts-seed_3", None)
    assert suite.checkpoint(1, 20000) == ("google/multiberts-seed_1-step_20k", None)
    assert suite.tokens(20000) == 20000 * 256 * 512
    assert suite.tokens(None) == 2000000 * 131072
    with pytest.raises(UserError, match="multiples of 1000"):
        suite.checkpoint(0, 1500)
    with pytest.raises(UserError, match="model.suite_step=-1000 must be >= 0"):
        suite.checkpoint(0, -1000)
    with pytest.raises(UserError, match="model.suite_seed=-1 must be >= 0"):
        suite.checkpoint(-1, None)
    held = [(seed, step) for seed, step, _, _ in suite.members()]
    assert held == [(0, None), (0, 20000), (1, None), (1, 20000), (2, None), (3, None),
                    (4, None)]
    pythia = load_suite("pythia-160m")
    assert pythia.checkpoint(None, 1000) == ("EleutherAI/pythia-160m", "step1000")
    assert pythia.tokens(1000) == 1000 * 1024 * 2048
    own = load_suite(str(in_cache["suite_file"]))
    assert [(s, step, rev) for s, step, _, rev in own.members()] == [
        (0, 1000, "step1000"), (0, 2000, "step2000"), (0, 3000, "step3000")]


def test_model_suite_keys_pick_the_checkpoint(in_cache):
    model = ModelConfig(suite="multiberts", suite_seed=1, suite_step=20000)
    # a cached hub id is read from its snapshot: the commit the run records
    assert model.name_or_path.endswith(
        f"models--google--multiberts-seed_1-step_20k/snapshots/{in_cache['multi'][1, 20000]}")
    assert model.revision is None
    own = ModelConfig(suite=str(in_cache["suite_file"]), suite_step=2000)
    assert own.name_or_path.endswith(f"snapshots/{in_cache['branches'][2000]}")
    assert own.revision == "step2000"
    with pytest.raises(UserError, match="picks the checkpoint"):
        ModelConfig(suite="multiberts", name_or_path="bert-base-uncased")
    with pytest.raises(UserError, match="is not a suite; choose from multiberts, pythia-160m"):
        ModelConfig(suite="multibert")
    with pytest.raises(UserError, match="set model.suite"):
        ModelConfig(suite_seed=2)


def test_checkpoints_of_a_suite_become_population_members(in_cache, tmp_path, monkeypatch):
    """`--checkpoints suite:multiberts` expands to the five final models the cache holds, a
    branch suite at a step to its revision; the cost is stated per member before any step,
    and each member's studies read its checkpoint (and revision) with its own seeds."""
    final = external.parse_checkpoints(["suite:multiberts"])
    assert [c.label for c in final] == [f"google/multiberts-seed_{s}" for s in range(5)]
    assert all(c.tokens == 2000000 * 131072 for c in final)
    at_the_end = external.parse_checkpoints(["suite:multiberts:2000000"])  # its final step
    assert [c.label for c in at_the_end] == [c.label for c in final]
    early = external.parse_checkpoints(["suite:multiberts:20000"])
    assert [c.name for c in early] == [f"google/multiberts-seed_{s}-step_20k" for s in (0, 1)]
    own = external.parse_checkpoints([f"suite:{in_cache['suite_file']}:2000",
                                      f"{BRANCH_SUITE}@step1000"])
    assert [c.label for c in own] == [f"{BRANCH_SUITE}@step2000", f"{BRANCH_SUITE}@step1000"]
    with pytest.raises(UserError, match="holds no checkpoint of suite multiberts at step 40000"):
        external.parse_checkpoints(["suite:multiberts:40000"])
    with pytest.raises(UserError, match="twice"):
        external.parse_checkpoints(["google/multiberts-seed_0", "google/multiberts-seed_0"])
    seeded = external.parse_checkpoints([f"suite:{in_cache['seeded_file']}"])
    assert [c.label for c in seeded] == [f"org/encoder-seed{s}@step2000" for s in range(3)]
    assert all(c.tokens == 2000 * 4096 for c in seeded)


def test_reproduce_checkpoints_runs_each_members_studies_on_its_commit(in_cache, tmp_path,
                                                                      monkeypatch):
    """The steps `--checkpoints suite:<branch suite>` plans: every model-reading study on each
    of the three seeds at its revision, with the member's own seeds; one report reads them
    with the members table, which names each checkpoint's revision and SHA."""
    from test_reproduce_encoders import record_commands

    from bertology.study.schedule import command as schedule

    commands = record_commands(monkeypatch)
    status = schedule.main(["--out", str(tmp_path / "out"), "--checkpoints",
                            f"suite:{in_cache['seeded_file']}"])
    assert status == 0
    for member in range(3):
        name = SEEDED_SUITE.format(seed=member)
        mine = [c for c in commands if f"model.name_or_path={name}" in c]
        assert all("model.revision=step2000" in c for c in mine)
        sweeps = {c[c.index("-m") + 1] for c in mine if "-m" in c}
        assert sweeps == {f"experiment=study_{s}" for s in ENCODER_STUDIES}
        assert all(f"seed={member}" in " ".join(c) for c in mine)
    (report,) = [c for c in commands if c[0] == "report"]
    assert any(a.startswith("members_table=") for a in report)
    rows = write_members(tmp_path / "out" / "population" / "tables" / "members.csv")
    shas = {SEEDED_SUITE.format(seed=s): cached_refs(SEEDED_SUITE.format(seed=s))["step2000"]
            for s in range(3)}
    assert [(r["checkpoint"], r["revision"], r["sha"]) for r in rows] == [
        (name, "step2000", sha) for name, sha in shas.items()]
    assert all(r["layers"] == "6" and r["tokens"] == str(2000 * 4096) for r in rows)
    dry = schedule.main(["--out", str(tmp_path / "dry"), "--checkpoints",
                         f"suite:{in_cache['seeded_file']}", "--dry-run"])
    assert dry == 0 and not (tmp_path / "dry").exists()


def test_non_embedding_parameters_scale_the_cost():
    """12·L·H² at a 4H FFN: BERT-base 84.9M, 18x a population member (6 x 256)."""
    base = {"num_hidden_layers": 12, "hidden_size": 768, "intermediate_size": 3072}
    member = {"num_hidden_layers": 6, "hidden_size": 256, "intermediate_size": 1024}
    assert external.non_embedding_parameters(base) == 12 * 12 * 768 ** 2 == 84_934_656
    assert external.non_embedding_parameters(base) / external.non_embedding_parameters(
        member) == pytest.approx(18.0)


def test_a_local_folder_suite(tmp_path, monkeypatch):
    """folders: a template path; the members are the folders that hold a config.json."""
    for seed, step in ((0, 10), (0, 20), (1, 10)):
        tiny_bert(tmp_path / "runs" / f"seed_{seed}" / f"step_{step}", seed)
    row = tmp_path / "mine.yaml"
    row.write_text(f"layout: folders\nrepo: {tmp_path}/runs/seed_{{seed}}/step_{{step}}\n"
                   "tokens_per_step: 1000\n")
    suite = load_suite(str(row))
    assert [(s, step) for s, step, _, _ in suite.members()] == [(0, 10), (0, 20), (1, 10)]
    model = ModelConfig(suite=str(row), suite_seed=1, suite_step=10)
    assert model.name_or_path == f"{tmp_path}/runs/seed_1/step_10" and model.revision is None
    with pytest.raises(UserError, match="not a suite row"):
        (tmp_path / "bad.yaml").write_text("layout: branches\nrepo: x\n")
        load_suite(str(tmp_path / "bad.yaml"))


def test_env_json_records_a_suite_members_commit_and_tokens(in_cache):
    """What env.json's "checkpoint" holds, from the composed config: a revision's SHA, and a
    suite member's suite, seed, step and tokens seen."""
    from omegaconf import OmegaConf

    from bertology.config.suites import read_checkpoint_record

    pinned = OmegaConf.create({"model": {"name_or_path": BRANCH_SUITE, "revision": "step2000"}})
    assert read_checkpoint_record(pinned) == {"name_or_path": BRANCH_SUITE,
                                              "revision": "step2000",
                                              "sha": in_cache["branches"][2000]}
    member = OmegaConf.create({"model": {"name_or_path": None, "suite": "multiberts",
                                         "suite_seed": 1, "suite_step": 20000}})
    assert read_checkpoint_record(member) == {
        "name_or_path": "google/multiberts-seed_1-step_20k", "revision": None,
        "sha": in_cache["multi"][1, 20000], "suite": "multiberts", "seed": 1, "step": 20000,
        "tokens_seen": 20000 * 131072}
    assert read_checkpoint_record(OmegaConf.create({"model": {"name_or_path": None}})) is None


@pytest.mark.slow
def test_a_probe_on_a_revision_records_its_commit_in_env_json(in_cache, tmp_path):
    """Through the CLI, offline: env.json names the checkpoint, the revision and the SHA."""
    from conftest import run_cli

    result = run_cli("probe", f"model.name_or_path={BRANCH_SUITE}", "model.revision=step1000",
                     "task=synthetic_pos", "analysis=linear", "analysis.linear.random_init=false",
                     "analysis.linear.control=false", "seeds=[0]", "max_train_sentences=60",
                     "max_eval_sentences=30", "logger=none", f"hydra.run.dir={tmp_path / 'run'}",
                     cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    record = json.loads((tmp_path / "run" / "env.json").read_text())["checkpoint"]
    assert record == {"name_or_path": BRANCH_SUITE, "revision": "step1000",
                      "sha": in_cache["branches"][1000]}


def write_members(path):
    with path.open() as handle:
        return list(csv.DictReader(handle))


def test_cache_commit_lays_out_what_huggingface_hub_reads(in_cache, tmp_path):
    """The fixture's layout is the real one: huggingface_hub's own reader finds the file."""
    from huggingface_hub import try_to_load_from_cache

    model = tiny_bert(tmp_path / "m", 0)
    sha = cache_commit(in_cache["cache"], "org/laid-out", model, ["main", "v1"])
    found = try_to_load_from_cache("org/laid-out", "config.json", cache_dir=in_cache["cache"],
                                   revision="v1")
    assert found == str(in_cache["cache"] / "models--org--laid-out" / "snapshots" / sha /
                        "config.json")


def test_the_cost_keeps_the_fixed_part_and_scales_the_rest():
    """probe_pos: 94 s on the reference member, 25 s of it fixed: 25 + 69·18 at BERT-base's
    18x, and the fixed part alone on a checkpoint of no compute."""
    from omegaconf import OmegaConf

    costs = OmegaConf.to_container(OmegaConf.load(external.COSTS))
    assert costs["seconds"]["probe_pos"] == 94 and costs["overhead"]["probe_pos"] == 25
    assert external.step_seconds(costs, "probe_pos", 18.0) == pytest.approx(25 + 69 * 18)
    assert external.step_seconds(costs, "probe_pos", 0.0) == pytest.approx(25)
    assert set(costs["seconds"]) == set(costs["overhead"])


@pytest.mark.slow
@pytest.mark.data("ud_english_ewt", "glue_sst2", "conll2003_ner")
def test_one_command_judges_a_branch_suite_on_every_model_reading_finding(in_cache, tmp_path):
    """`python -m bertology.reproduce --checkpoints suite:<row>`, offline: three seeds of a
    branch-style suite at step 2000, every study that reads a model on each, one report that
    judges the model-reading findings across the three (each one it cannot judge named); each
    run's env.json names the revision and the commit it read."""
    import subprocess
    import sys

    from conftest import REPO

    env = {**os.environ, "BERTOLOGY_CACHE_DIR": str(tmp_path / "cache")}
    result = subprocess.run(
        [sys.executable, "-m", "bertology.reproduce", "--out", str(tmp_path / "out"),
         "--checkpoints", f"suite:{in_cache['seeded_file']}"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=3000)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr.index("estimated cost") < result.stderr.index("member0_")
    report = tmp_path / "out" / "population" / "report"
    with (report / "tables" / "findings.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    from bertology.study.schedule.command import studies_to_run
    from bertology.study.schedule.steps import model_reading

    reading = {f for s in model_reading(studies_to_run(None)).values() for f in s["findings"]}
    judged = {r["finding"] for r in rows}  # a row per comparison part
    assert judged <= reading and len(judged) >= 20, sorted(reading - judged)
    assert all(r["members"] == "3" for r in rows if r["unit"] == "pretraining")
    text = (report / "REPORT.md").read_text()
    assert all(f in text for f in reading - judged)  # each one not judged is named, with why
    assert "3 checkpoints read as they are (org/encoder-seed0@step2000" in text
    env_json = next((tmp_path / "out" / "population" / "member_1" / "probe_pos").glob("*/env.json"))
    record = json.loads(env_json.read_text())["checkpoint"]
    assert record["revision"] == "step2000"
    assert record["sha"] == cached_refs("org/encoder-seed1")["step2000"]
    assert (report / "SUMMARY.md").read_text().startswith("**Pretraining claims, across 3 "
                                                           "checkpoints read as they are")


def test_the_how_to_pages_reproduce_commands_check_and_price(tmp_path, monkeypatch):
    """Every `python -m bertology.reproduce` line of docs/howto/checkpoint-suites.md, with
    --dry-run, against a cache holding what it names: its checkpoints are found and checked,
    the cost printed, nothing run."""
    import shlex

    from conftest import REPO
    from hub_cache import documented_cache

    from bertology.study.schedule import command as schedule

    page = (REPO / "docs" / "howto" / "checkpoint-suites.md").read_text()
    lines = [line.split("  #")[0].strip() for line in page.splitlines()
             if line.startswith("python -m bertology.reproduce")]
    assert len(lines) == 5
    monkeypatch.setenv("HF_HUB_CACHE", str(documented_cache(tmp_path / "cache", tmp_path)))
    tiny_bert(tmp_path / "ckpts" / "mine" / "model", 3)
    monkeypatch.chdir(tmp_path)
    for line in lines:
        args = shlex.split(line)[3:]
        args += [] if "--dry-run" in args else ["--dry-run"]
        assert schedule.main([*args, "--out", str(tmp_path / "out")]) == 0, line
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_sweep_over_a_suites_steps_is_drawn_against_tokens_seen(in_cache, tmp_path):
    """`bertology probe -m model.suite=<row> model.suite_step=1000,2000,3000`, then `bertology
    report` over the sweep: a figure with tokens seen on its x axis, each job's env.json with
    its step's revision, commit and tokens."""
    from conftest import run_cli

    sweep = tmp_path / "sweep"
    probe = run_cli("probe", "-m", f"model.suite={in_cache['suite_file']}",
                    "model.suite_step=1000,2000,3000", "task=synthetic_pos", "analysis=linear",
                    "analysis.linear.random_init=false", "seeds=[0]", "max_train_sentences=60",
                    "max_eval_sentences=30", "logger=none", f"hydra.sweep.dir={sweep}",
                    cwd=tmp_path)
    assert probe.returncode == 0, probe.stderr[-2000:]
    records = [json.loads((sweep / str(i) / "env.json").read_text())["checkpoint"]
               for i in range(3)]
    assert [(r["revision"], r["sha"], r["tokens_seen"]) for r in records] == [
        (f"step{s}", in_cache["branches"][s], s * 4096) for s in (1000, 2000, 3000)]
    report = run_cli("report", str(sweep), f"hydra.run.dir={tmp_path / 'report'}",
                     cwd=tmp_path)
    assert report.returncode == 0, report.stderr[-2000:]
    assert (tmp_path / "report" / "plots" / "pretraining_accuracy_synthetic_pos.png").is_file()
