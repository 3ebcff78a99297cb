"""The findings suite: every study bundle composes, every job of its sweep passes its
pipeline's checks, and its smoke variant runs end to end and produces every metric its
findings read; every finding names its source, composes with its study, and picks jobs of
that study's sweep; make reproduce runs every study once."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import REPO, compose_config
from omegaconf import OmegaConf
from test_experiments import sweep_jobs

from bertology.config.path_checks import MADE_BY_THE_RUN
from bertology.config.verbs import load_config_check, pipeline_names
from bertology.errors import UserError
from bertology.pipelines import load_pipeline
from bertology.run.rundir import RunDir
from bertology.study.judge.catalog import (
    FINDINGS,
    finding_files,
    load_catalog,
    load_studies,
    runs_of,
)
from bertology.study.judge.contrasts import selects
from bertology.study.judge.evidence import Evidence, evaluate
from bertology.study.judge.results import find_runs
from bertology.study.judge.specs import evidence_of
from bertology.study.schedule import command as reproduce
from bertology.study.schedule import runner

EXPERIMENTS = REPO / "conf" / "experiment"
STUDIES = sorted(p.stem.removeprefix("study_") for p in EXPERIMENTS.glob("study_*.yaml"))
CATALOG = load_catalog()
STUDY = load_studies()

pytestmark = pytest.mark.usefixtures("one_thread")


def evidences(spec) -> list[Evidence]:
    return evidence_of(spec)  # the report's own list: comparisons and guards


def test_every_finding_says_what_it_is_about():
    """The headline counts claims about the model; two claims about probes (Hewitt & Liang's
    memorising control, strong random-init probes) are true of random vectors per word type
    too, so they are claims about the method. MLP selectivity does not hold on random
    vectors per type (tests/study/test_noise.py), so it is a model claim judged against the twin;
    so are the two claims about fine-tuning a pretrained model (finetuning_top_layers,
    special_token_gradients), judged against the twin fine-tuned the same way. word_order is a
    behaviour an order-blind classifier shares (most SST-2 predictions survive shuffling),
    not something pretraining put in the model, so it is counted with the method's.
    The catalog says so explicitly in each yaml (the parser's default is not relied on)."""
    for path in finding_files():
        assert OmegaConf.load(path).get("about") in ("model", "method"), path.name
    method = {spec.id for spec in CATALOG.values() if spec.about == "method"}
    assert method == {"control_memorised", "random_init_strong", "word_order"}


PRETRAINING_STUDIES = {"pretrain_masking", "pretrain_nsp", "pretrain_shape", "pretrain_electra"}


def test_every_finding_declares_its_unit_of_replication():
    """Each yaml says `unit:` (no default relied on): a finding whose runs each pretrain their
    own encoder (the pretraining studies) replicates the procedure; every other one reads a
    given checkpoint (model.name_or_path, compare_to, a shared fine-tuned MiniLM), so its
    seeds resample items, probes or fine-tuning of one model (Sellam et al., 2021)."""
    for path in finding_files():
        assert OmegaConf.load(path).get("unit") in ("checkpoint", "pretraining"), path.name
    pretraining = {spec.id for spec in CATALOG.values() if spec.unit == "pretraining"}
    assert pretraining == {spec.id for spec in CATALOG.values()
                           if set(spec.studies) <= PRETRAINING_STUDIES}
    assert pretraining == {"depth_over_width", "dynamic_masking", "electra", "no_nsp"}
    # the studies whose runs pretrain (each run its own encoder, from random init)
    assert {name for name, study in STUDY.items() if study.pipeline == "pretrain"} == \
        PRETRAINING_STUDIES


def test_the_docs_table_of_units_is_the_catalogues():
    """docs/findings.md's "Unit of replication" table lists every finding under its unit."""
    text = (REPO / "docs" / "findings.md").read_text().split("### Unit of replication")[1]
    listed = {}
    for line in text.split("## How verdicts")[0].splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| ") and cells[0] in ("checkpoint", "pretraining"):
            listed.update({name.strip().rstrip("\\*"): cells[0] for name in cells[2].split(",")})
    assert listed == {spec.id: spec.unit for spec in CATALOG.values()}


@pytest.mark.parametrize("unit", [None, "seed", ["checkpoint"]])
def test_a_missing_or_unknown_unit_is_one_line_naming_the_file(tmp_path, unit):
    block = OmegaConf.to_container(OmegaConf.load(FINDINGS / "anisotropy.yaml"))
    block.pop("unit")
    if unit is not None:
        block["unit"] = unit
    (tmp_path / "anisotropy.yaml").write_text(OmegaConf.to_yaml(block))
    with pytest.raises(UserError) as err:
        load_catalog(tmp_path)
    message = str(err.value)
    assert len(message.splitlines()) == 1 and str(tmp_path / "anisotropy.yaml") in message
    assert f"unit={unit!r}; valid: checkpoint, pretraining" in message


def test_every_model_claim_is_a_contrast_with_its_twin_or_says_why_not():
    """A claim about what training put in the model is judged against the random-init twin
    (a comparison with a twin block or a twin's metric) unless its yaml's no_twin says why
    none applies (issue 38); a finding with a twin contrast does not also disclaim one."""
    for spec in CATALOG.values():
        if spec.about == "model":
            assert spec.reads_twin != bool(spec.no_twin), spec.id
            assert not spec.no_twin or len(spec.no_twin) > 80, spec.id  # a reason, not a tag
    twins = {spec.id for spec in CATALOG.values() if spec.about == "model" and spec.reads_twin}
    assert {"feature_layers", "scalar_mix", "pos_layers", "ner_later_than_pos", "numbers",
            "dependency_heads", "special_heads", "head_similarity", "finetuning_top_layers",
            "special_token_gradients"} <= twins


def test_the_suite_has_thirty_findings_over_its_studies():
    assert len(CATALOG) >= 30
    assert {s for spec in CATALOG.values() for s in spec.studies} == set(STUDIES) == set(STUDY)


def test_conf_experiment_holds_what_a_pipeline_runs_and_no_finding():
    """The runner's bundles carry no claim: a finding lives in findings/ alone, and a
    study bundle only files its runs under its label (the runner never reads it)."""
    assert not list(EXPERIMENTS.glob("finding_*.yaml"))
    for study in STUDIES:
        cfg = compose_config(STUDY[study].pipeline, [f"experiment=study_{study}"])
        assert cfg.label == study and "study" not in cfg and "finding" not in cfg


@pytest.mark.parametrize("finding", sorted(CATALOG))
def test_a_finding_names_its_claim_and_source_and_composes(finding):
    spec = CATALOG[finding]
    assert spec.claim and spec.source and "survey" in spec.source
    study = STUDY[spec.studies[0]]
    cfg = compose_config(study.pipeline, [f"experiment={study.bundle}", "seed=0"])
    assert cfg.label == study.name
    text = (FINDINGS / f"{finding}.yaml").read_text()
    assert text.startswith("# Test:")  # the header says what is tested
    assert " ".join(text.split()).count(spec.claim) == 1  # the claim is stated once


@pytest.mark.slow
@pytest.mark.parametrize("study", STUDIES)
def test_every_job_of_a_study_passes_its_checks(study):
    pipeline = STUDY[study].pipeline
    # the shared SST-2 model (and its twin) is made by an earlier job of `make reproduce`, as
    # the run's own
    reproduce_overrides = [o.replace("{sst2_model}", f"'{MADE_BY_THE_RUN}'")
                           .replace("{sst2_twin}", f"'{MADE_BY_THE_RUN}'")
                           for o in STUDY[study].reproduce]
    jobs = []
    for overrides in sweep_jobs(f"study_{study}", pipeline):
        job = compose_config(pipeline, [*overrides, *reproduce_overrides])
        load_config_check(pipeline)(job)
        jobs.append(RunDir(Path(study), {}, OmegaConf.to_container(job, resolve=True)))
    for spec in CATALOG.values():  # each side of each finding picks some job of the sweep
        for side in evidences(spec):
            if study in spec.studies and not any(selects(j, side) for j in jobs):
                assert len(spec.studies) > 1, f"{spec.id}: {side.describe()} picks no job"


@pytest.mark.slow
@pytest.mark.parametrize("study", STUDIES)
def test_a_study_runs_one_step_and_yields_what_its_findings_read(study, tmp_path):
    pipeline = STUDY[study].pipeline
    cfg = compose_config(pipeline, [f"experiment=study_{study}", "seed=0", "logger=none",
                                    *STUDY[study].smoke])
    run_dir = tmp_path / "run"
    (run_dir / ".hydra").mkdir(parents=True)
    OmegaConf.save(cfg, run_dir / ".hydra" / "config.yaml")  # as Hydra saves a run's config
    load_pipeline(pipeline)(cfg, run_dir)
    (run,) = find_runs([run_dir])
    for spec in CATALOG.values():
        if study not in spec.studies or not runs_of(spec, [run]):
            continue
        for side in evidences(spec):
            if selects(run, side):  # this arm of the sweep is the smoke run's
                value, _ = evaluate(side, run.metrics, run.replicates)
                assert isinstance(value, float), (spec.id, side.describe())


def test_reproduce_runs_every_study_once():
    studies = reproduce.studies_to_run(None)
    assert set(studies) == set(STUDIES)
    assert {f for s in studies.values() for f in s["findings"]} == set(CATALOG)
    assert all(spec["pipeline"] in pipeline_names() for spec in studies.values())


def test_reproduce_fine_tunes_one_model_per_seed(tmp_path, monkeypatch):
    """No pseudo-replication (issue 28): the compression and fine-tuning studies' seed s reads
    MiniLM fine-tuned with seed s, not one model shared by every seed."""
    commands = []

    def record(args, log_path, threads=None):
        commands.append(args)
        return 0, 0.0

    monkeypatch.setattr(runner, "bertology", record)
    reproduce.main(["--out", str(tmp_path), "--only", "int8", "distillation"])
    finetunes = [c for c in commands if c[0] == "finetune" and "init=random" not in c]
    assert sorted(a for c in finetunes for a in c if a.startswith("seed=")) == \
        ["seed=0", "seed=1", "seed=2"]
    assert len({a for c in finetunes for a in c if a.startswith("hydra.run.dir=")}) == 3
    per_job = f"{tmp_path}/sst2_model/seed_${{seed}}/model"
    for study in ("prune", "distill"):
        (command,) = [c for c in commands if c[0] == study]
        assert any(a.endswith(f"_path={per_job}") for a in command), command


def test_reproduce_fine_tunes_the_twin_per_seed_as_the_model(tmp_path, monkeypatch):
    """finetuning_top_layers and special_token_gradients are judged against the random-init
    twin fine-tuned the same way (issue 38): per seed, the SST-2 model's command with
    init=random added (the same recipe, data and seed; the twin's weights are the probe's
    twin's of that seed), passed to the probe as compare_to_twin and to prune as
    twin_name_or_path; a study that reads neither makes no twin."""
    commands = []

    def record(args, log_path, threads=None):
        commands.append(args)
        return 0, 0.0

    monkeypatch.setattr(runner, "bertology", record)
    reproduce.main(["--out", str(tmp_path), "--only", "finetuning_top_layers",
                    "special_token_gradients"])
    finetunes = [c for c in commands if c[0] == "finetune"]
    models = [c for c in finetunes if "init=random" not in c]
    twins = [c for c in finetunes if "init=random" in c]
    # a model and a twin per seed any study reads: the probe's (studies.yaml), prune's 3
    probe_seeds = load_studies()["probe_pos"].seeds
    assert probe_seeds > 3 and len(models) == len(twins) == probe_seeds
    for model, twin in zip(models, twins):
        assert [a for a in twin if a != "init=random" and not a.startswith("hydra.")] == \
            [a for a in model if not a.startswith("hydra.")]
        assert twin[-1].replace("sst2_twin", "sst2_model") == model[-1]
    per_job = f"{tmp_path}/sst2_twin/seed_${{seed}}/model"
    (probe,) = [c for c in commands if c[0] == "probe"]
    (prune,) = [c for c in commands if c[0] == "prune"]
    assert f"compare_to_twin={per_job}" in probe and f"twin_name_or_path={per_job}" in prune
    assert f"seed={','.join(map(str, range(probe_seeds)))}" in probe
    assert not [a for a in prune if a.startswith("seed=")]
    commands.clear()
    reproduce.main(["--out", str(tmp_path / "other"), "--only", "distillation"])
    assert not [c for c in commands if "init=random" in c]


def test_reproduce_runs_a_step_after_the_steps_it_waits_for_and_alone_steps_alone(tmp_path,
                                                                                   monkeypatch):
    """Two lanes: the studies that read the SST-2 models start after every model is made; an
    `alone` study (it times latency) starts after every other step ended, on every core."""
    import threading
    import time

    running, spans, lock = set(), {}, threading.Lock()

    def fake(args, log_path, threads=None):
        name = log_path.stem
        with lock:
            running.add(name)
            spans[name] = [time.perf_counter(), None, set(running), threads]
        time.sleep(0.05)
        with lock:
            running.discard(name)
            spans[name][1] = time.perf_counter()
        return 0, 0.05

    monkeypatch.setattr(runner, "bertology", fake)
    Step = runner.Step
    steps = [Step("m0", [], tmp_path / "m0.log"), Step("m1", [], tmp_path / "m1.log"),
             Step("free", [], tmp_path / "free.log"),
             Step("reads", [], tmp_path / "reads.log", after=("m0", "m1")),
             Step("latency", [], tmp_path / "latency.log", after=("m0",), alone=True)]
    results = runner.run_steps(steps, lanes=2)
    assert set(results) == {s.name for s in steps}
    assert spans["reads"][0] >= max(spans["m0"][1], spans["m1"][1])
    assert spans["latency"][2] == {"latency"} and spans["latency"][3] is None  # every core
    shared = ("m0", "m1", "free", "reads")
    assert spans["latency"][0] >= max(spans[n][1] for n in shared)
    assert max(len(s[2]) for s in spans.values()) <= 2  # never more than two side by side
    assert {spans[n][3] for n in shared} == {max(1, (os.cpu_count() or 1) // 2)}


def test_the_log_counts_the_steps_done_and_failed(monkeypatch, tmp_path, caplog):
    """A population runs for hours: each step's end says how many of the run's are done, and
    how many of those failed."""
    monkeypatch.setattr(runner, "bertology",
                        lambda args, log_path, threads=None: (int(log_path.stem == "b"), 0.0))
    steps = [runner.Step(name, [], tmp_path / f"{name}.log") for name in ("a", "b", "c")]
    with caplog.at_level("INFO", logger="bertology.reproduce"):
        runner.run_steps(steps, lanes=1)
    counts = [r.getMessage() for r in caplog.records if "steps done" in r.getMessage()]
    assert counts == ["1 of 3 steps done", "2 of 3 steps done (1 failed)",
                      "3 of 3 steps done (1 failed)"]


@pytest.mark.parametrize("args, says", [(["--lanes", "0"], "--lanes 0 must be 1 or more"),
                                        (["--only", "no_such_finding"], "no finding matches")])
@pytest.mark.slow
def test_reproduce_refuses_bad_arguments_in_one_line_before_any_step(args, says, tmp_path):
    import subprocess
    import sys

    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "bertology.reproduce", "--out", str(out),
                           *args], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("python -m bertology.reproduce: error: ")
    assert says in done.stderr and not out.exists()


@pytest.mark.parametrize("study", STUDIES)
def test_every_arm_of_a_study_trains_in_one_fixed_precision(study):
    """auto times each run and may answer differently per arm (or per seed) on a bf16 CPU: a
    comparison between arms must not also compare precisions, so no study leaves it to auto,
    for its own training nor for a downstream fine-tuning."""
    pipeline = STUDY[study].pipeline
    for overrides in sweep_jobs(f"study_{study}", pipeline):
        job = compose_config(pipeline, overrides)
        for trainer in (job.get("trainer"), (job.get("downstream") or {}).get("trainer")):
            if trainer is not None and "mixed_precision" in trainer:
                assert trainer.mixed_precision != "auto", (study, overrides)
