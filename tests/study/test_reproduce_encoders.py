"""The findings across encoders (issue 32, part 2): `python -m bertology.reproduce --encoders
minilm bert modernbert` pretrains each other encoder once (cached by its command), reruns the
studies that read a model on it, judges each in its own report, and writes the finding x
encoder matrix. The steps are checked with a recording runner; the matrix on hand-made
findings tables whose cells are worked out here."""

from __future__ import annotations

import csv
import dataclasses
import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from unittest import mock

import pytest
import yaml
from conftest import REPO, compose_config
from omegaconf import OmegaConf
from scipy import stats

from bertology.errors import UserError
from bertology.study.judge import encoders
from bertology.study.judge.catalog import RECIPES_FILE, load_catalog, load_recipes, load_studies
from bertology.study.pages import matrix
from bertology.study.pages.summary import write_summary
from bertology.study.schedule import command as reproduce
from bertology.study.schedule import runner
from bertology.study.schedule.members import (
    Draws,
    check_member_seeds,
    member_steps,
    write_members_table,
)
from bertology.study.schedule.steps import (
    EncoderSteps,
    encoder_steps,
    model_reading,
    sst2_model_steps,
)


def record_commands(monkeypatch) -> list[list[str]]:
    commands = []

    def record(args, log_path, threads=None):
        commands.append(args)
        for arg in args:  # the sweep's dir, as the report looks for it
            if arg.startswith("hydra.sweep.dir="):
                Path(arg.split("=", 1)[1]).mkdir(parents=True, exist_ok=True)
        return 0, 0.0

    monkeypatch.setattr(runner, "bertology", record)
    return commands


def population_steps(size, extra, studies, out, cache, per_member=None, first=0):
    """The steps `--population size --first-member first` plans: its seeds checked, then
    members first..first+size-1 (members.reproduce_population without --replace-failed)."""
    check_member_seeds(studies, per_member, first, first + size)
    return member_steps(range(first, first + size), extra, studies, out, cache, per_member)


def test_each_pretrained_encoder_reruns_the_model_reading_studies_on_its_own_model(
        tmp_path, monkeypatch):
    monkeypatch.setenv("BERTOLOGY_CACHE_DIR", str(tmp_path / "cache"))
    commands = record_commands(monkeypatch)
    reproduce.main(["--out", str(tmp_path / "out"), "--encoders", "minilm", "bert",
                    "--only", "pos_layers", "freeze_lower", "int8"])
    (pretrain,) = [c for c in commands if c[0] == "pretrain"]
    assert "model=bert" in pretrain and "data=wikipedia" in pretrain
    assert "model.tokenizer_name_or_path=sentence-transformers/all-MiniLM-L6-v2" in pretrain
    run_dir = encoders.encoder_dir("bert", tmp_path / "cache")
    assert pretrain[-1] == f"hydra.run.dir={run_dir}"
    on_bert = [c for c in commands if f"model.name_or_path={run_dir}/model" in c]
    sweeps = {next(a for a in c if a.startswith("hydra.sweep.dir=")).split("/")[-1]
              for c in on_bert if "-m" in c}
    assert sweeps == {"probe_pos", "finetune_sst2"}  # prune_sst2 (int8) reads MiniLM only
    # its SST-2 model and twin per seed of the probe, which runs more seeds than its bundle's
    # 3 (studies.yaml: a probe job costs a minute or two); finetune_sst2 keeps its bundle's 3
    seeds = load_studies()["probe_pos"].seeds
    tuned = [c for c in on_bert if "-m" not in c]
    assert sorted(c[-2] for c in tuned if "init=random" in c) == \
        sorted(f"seed={s}" for s in range(seeds))
    assert seeds > 3 and len(tuned) == 2 * seeds
    probe = next(c for c in on_bert if "experiment=study_probe_pos" in c)
    assert f"seed={','.join(map(str, range(seeds)))}" in probe
    assert not any(a.startswith("seed=") for a in next(
        c for c in on_bert if "experiment=study_finetune_sst2" in c))
    assert f"compare_to={tmp_path}/out/bert/sst2_model/seed_${{seed}}/model" in probe
    assert f"compare_to_twin={tmp_path}/out/bert/sst2_twin/seed_${{seed}}/model" in probe
    reports = [c for c in commands if c[0] == "report"]
    assert [c[-1] for c in reports] == [f"hydra.run.dir={tmp_path}/out/report",
                                        f"hydra.run.dir={tmp_path}/out/bert/report"]
    assert sorted(reports[1][1:-1]) == [f"{tmp_path}/out/bert/finetune_sst2",
                                        f"{tmp_path}/out/bert/probe_pos"]


def test_the_pretrained_encoder_is_reused_and_waited_for(tmp_path):
    studies = reproduce.studies_to_run(["pos_layers"])
    encoder, pretrain, rest = reproduce.pretrained_encoder("modernbert", studies,
                                                           tmp_path / "out", tmp_path / "cache")
    steps = [*pretrain, *rest]
    assert steps[0].name == "pretrain modernbert"
    assert all("pretrain modernbert" in s.after for s in steps[1:])
    probe = steps[-1]
    assert set(probe.after) == {"pretrain modernbert", *(s.name for s in steps[1:-1])}
    run_dir = encoders.encoder_dir("modernbert", tmp_path / "cache")
    (run_dir / "model").mkdir(parents=True)
    (run_dir / "model" / "config.json").write_text("{}")
    (run_dir / "metrics.json").write_text("{}")
    _, none, cached = reproduce.pretrained_encoder("modernbert", studies, tmp_path / "out",
                                                   tmp_path / "cache")
    assert none == []
    assert [s.name for s in cached] == [s.name for s in steps[1:]]
    assert all(s.after == tuple(a for a in s.after if a != "pretrain modernbert")
               for s in cached)


def test_changed_pretraining_settings_never_reuse_an_encoder(tmp_path, monkeypatch):
    before = encoders.encoder_dir("bert", tmp_path)
    recipes = load_recipes()
    changed = dataclasses.replace(recipes, encoder_pretrain=(*recipes.encoder_pretrain, "seed=1"))
    monkeypatch.setattr(encoders, "load_recipes", lambda: changed)
    assert encoders.encoder_dir("bert", tmp_path) != before
    assert encoders.encoder_dir("modernbert", tmp_path) != encoders.encoder_dir("bert", tmp_path)


def test_the_recipes_in_yaml_keep_the_cache_keys_of_the_population_run(tmp_path):
    """findings/recipes.yaml holds the commands that were Python lists until 2026-12-05; a
    command is its cache key, so moving them must not change one: members 100 and 101 keep the
    dirs the pre-registered population run (docs/reproduce.md) pretrained them into, and a
    member's SST-2 model its command."""
    assert encoders.member_dir(100, (), tmp_path).name == "bert-seed100-d190e042eb36"
    assert encoders.member_dir(101, (), tmp_path).name == "bert-seed101-e75eac121c98"
    recipes = load_recipes()
    assert dict(recipes.member_finetuning) == {
        "sst2_model": ("trainer.lr=3e-4", "trainer.epochs=2"),
        "sst2_twin": ("trainer.lr=3e-4", "trainer.epochs=2"),
        "finetune_sst2": ("trainer.lr=3e-4", "trainer.max_train_examples=4000")}
    assert recipes.sst2_model[:3] == ("model=minilm", "task=sst2", "trainer=finetune_cpu")


@pytest.mark.parametrize("text, says", [
    (None, "recipes.yaml is missing"),
    ("sst2_model: [task=sst2\n", "is not valid YAML"),
    ("- task=sst2\n", "must map each recipe to its overrides"),
    ("sst2_model: [task=sst2]\nencoder_pretrain: [size=mini]\n", "member_finetuning must map"),
    ("sst2_model: task=sst2\nencoder_pretrain: []\nmember_finetuning: {}\n",
     "sst2_model must be a list of Hydra overrides"),
    ("sst2_model: []\nencoder_pretrain: []\nmember_finetuning: {sst2_model: [lr]}\n",
     "member_finetuning.sst2_model must be a list of Hydra overrides"),
    ("sst2_model: []\nencoder_pretrain: []\nmember_finetuning: {finetune_sts2: [a=1]}\n",
     "member_finetuning.finetune_sts2 names no step; choose from sst2_model, sst2_twin, "
     "finetune_sst2")])
def test_a_malformed_recipes_file_is_a_one_line_error(tmp_path, text, says):
    (tmp_path / "studies.yaml").write_text("finetune_sst2:\n  pipeline: finetune\n")
    if text is not None:
        (tmp_path / RECIPES_FILE).write_text(text)
    with pytest.raises(UserError, match=says) as raised:
        load_recipes.__wrapped__(tmp_path)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("name", encoders.pretrainable())
def test_every_pretrained_encoder_trains_in_fp32(name):
    """auto times each run: on an AMX Xeon it trained the matrix's BERT in bf16 and its
    ModernBERT in fp32. Encoders compared in the matrix, and members of a population, must not
    differ in precision, so the recipe fixes it (as the pretraining studies do)."""
    args = encoders.pretrain_args(name)
    assert compose_config("pretrain", args[1:]).trainer.mixed_precision == "no", args


def test_population_members_train_in_fp32_unless_member_overrides_say_otherwise():
    member = encoders.member_args(3)
    assert compose_config("pretrain", member[1:]).trainer.mixed_precision == "no", member
    # a GPU population asks for bf16 through --member, which comes after the recipe
    gpu = encoders.member_args(3, ("trainer.mixed_precision=bf16",))
    assert compose_config("pretrain", gpu[1:]).trainer.mixed_precision == "bf16"


def composed_finetune(args: list[str]):
    """A step's fine-tuning config as its first job sees it (a member's sweep over its seeds
    composes as its first seed)."""
    return compose_config("finetune", [a.split(",")[0] if a.startswith("seed=") else a
                                       for a in args[1:] if a not in ("finetune", "-m")
                                       and not a.startswith("hydra.")])


def test_population_members_fine_tune_on_sst2_at_their_own_rate_and_size(tmp_path):
    """A member is a small BERT pretrained for minutes: on MiniLM's 1e-4 and 1,500 phrases its
    SST-2 models sit under the guard of freeze_lower and word_order (docs/reproduce.md), so a
    member's SST-2 fine-tunings (its models, their twins, finetune_sst2) take 3e-4 and 4,000
    phrases, its models two epochs (at one, 2 of 12 stayed at the majority class); its other
    fine-tuning (CoNLL) and MiniLM's own stay the studies'."""
    studies = reproduce.studies_to_run(None)
    steps, _ = population_steps(2, (), studies, tmp_path / "out", tmp_path / "cache")
    minilm = encoder_steps(studies, EncoderSteps(tmp_path / "m", tmp_path / "l"))
    probe_seeds = load_studies()["probe_pos"].seeds  # MiniLM's SST-2 models: one a probe seed
    conll_trainers = set()
    for label, step_list, rate, phrases in (("member", steps, 3e-4, 4000),
                                            ("MiniLM", minilm, 1e-4, 1500)):
        finetunes = {s.name: s.args for s in step_list if s.args[0] == "finetune"}
        models = [a for name, a in finetunes.items() if "sst2_model" in name
                  or "sst2_twin" in name]
        sst2 = [a for name, a in finetunes.items() if name.endswith("finetune_sst2")]
        conll = [a for name, a in finetunes.items() if name.endswith("finetune_conll")]
        assert len(models) == 2 * (2 if label == "member" else probe_seeds) and sst2 and conll, \
            finetunes
        for args in models:  # a member's: two epochs, as its finetune_sst2 runs train
            trainer = composed_finetune(args).trainer
            assert (trainer.lr, trainer.max_train_examples, trainer.epochs) == (
                rate, 4000, 2 if label == "member" else 1), (label, args)
        for args in sst2:
            trainer = composed_finetune(args).trainer
            assert (trainer.lr, trainer.max_train_examples) == (rate, phrases), (label, args)
        conll_trainers |= {OmegaConf.to_yaml(composed_finetune(args).trainer) for args in conll}
    assert len(conll_trainers) == 1, conll_trainers  # the study's own, members and MiniLM alike


def member_sweeps(steps, member) -> dict[str, list[str]]:
    """A member's study sweeps by study: step label minus the member's prefix -> args."""
    return {s.name.removeprefix(member.label): s.args for s in steps
            if s.name.startswith(member.label) and "-m" in s.args}


def seeds_arg(member: int, count: int) -> str:
    """The seed override of member's sweep with count seeds a member: member, member + 1000, …"""
    return "seed=" + ",".join(str(member + 1000 * r) for r in range(count))


def test_member_seeds_give_each_member_its_own_replicates_and_models(tmp_path):
    """--member-seeds R: member s's sweeps run seeds s, s + 1000, …, each with its own SST-2
    model and twin where a study reads them; no seed is shared between members (they are each
    member's private replicates). Without it each study runs its studies.yaml member_seeds,
    which are 1 unless set, so a one-seed population's commands are as they were."""
    studies = reproduce.studies_to_run(None)
    steps, members = population_steps(3, (), studies, tmp_path / "out",
                                      tmp_path / "cache", per_member=3)
    for member in members:
        mine = [member.member + 1000 * r for r in range(3)]
        sweeps = member_sweeps(steps, member)
        assert set(sweeps) == set(model_reading(studies))
        assert all(seeds_arg(member.member, 3) in a for a in sweeps.values()), sweeps
        models = [s for s in steps if s.name.startswith(f"{member.label}sst2_")]
        assert sorted(s.args[-2] for s in models) == sorted(
            f"seed={seed}" for seed in mine for _ in ("model", "twin")), models
    single, members = population_steps(3, (), studies, tmp_path / "out",
                                       tmp_path / "cache", per_member=1)
    ones = {name: {**spec, "member_seeds": 1} for name, spec in studies.items()}
    default, _ = population_steps(3, (), ones, tmp_path / "out", tmp_path / "cache")
    assert [s.args for s in single] == [s.args for s in default]
    assert all(f"seed={m.member}" in a for m in members
               for a in member_sweeps(single, m).values())
    with pytest.raises(UserError, match="members' seeds would overlap"):
        population_steps(1001, (), studies, tmp_path / "out", tmp_path / "cache",
                         per_member=2)


def first_seed(args: list[str]) -> int:
    """The first seed a sweep's args run."""
    (seeds,) = [a.removeprefix("seed=") for a in args if a.startswith("seed=")]
    return int(seeds.split(",")[0])


def test_a_confirmatory_population_starts_at_its_first_member(tmp_path):
    """--first-member 100 --population 3: members 100-102, their own pretraining commands
    (seed=100…), dirs and study seeds; none of a run over members 0..K-1 is reused."""
    studies = reproduce.studies_to_run(None)
    steps, members = population_steps(3, (), studies, tmp_path / "out",
                                      tmp_path / "cache", first=100)
    assert [m.member for m in members] == [100, 101, 102]
    assert [m.root.name for m in members] == ["member_100", "member_101", "member_102"]
    pretrains = [s for s in steps if s.args[0] == "pretrain"]
    assert [s.args[-2] for s in pretrains] == ["seed=100", "seed=101", "seed=102"]
    assert all(first_seed(a) == 101 for a in member_sweeps(steps, members[1]).values())
    with pytest.raises(UserError, match="member seeds must stay under 1000"):
        population_steps(3, (), studies, tmp_path / "out", tmp_path / "cache",
                         per_member=2, first=998)


def test_a_study_s_member_seeds_set_its_own_and_paired_studies_must_agree(tmp_path):
    """studies.yaml's member_seeds give one study more seeds a member (its replicates are
    cheap, or its noise within a member is what keeps its verdicts open); the others keep
    theirs. Studies one finding pairs seed by seed (probe_pos and probe_ner) must agree."""
    studies = reproduce.studies_to_run(None)
    studies["finetune_conll"]["member_seeds"] = 3
    steps, members = population_steps(2, (), studies, tmp_path / "out",
                                      tmp_path / "cache")
    sweeps = member_sweeps(steps, members[1])
    assert "seed=1,1001,2001" in sweeps["finetune_conll"]
    assert all(seeds_arg(1, studies[name]["member_seeds"]) in a
               for name, a in sweeps.items() if name != "finetune_conll")
    folder = tmp_path / "findings"
    shutil.copytree(REPO / "findings", folder)
    text = (folder / "studies.yaml").read_text()
    (folder / "studies.yaml").write_text(text.replace("probe_ner:\n", "probe_ner:\n"
                                                      "  member_seeds: 2\n"))
    studies_here = reproduce.catalog.load_studies(folder)
    with mock.patch.object(reproduce.catalog, "load_studies", lambda: studies_here):
        mismatched = reproduce.studies_to_run(None)  # make reproduce runs no member: fine
    with pytest.raises(UserError, match="ner_later_than_pos pairs studies probe_pos, "
                       "probe_ner seed by seed"):
        population_steps(2, (), mismatched, tmp_path / "out", tmp_path / "cache")
    steps, _ = population_steps(2, (), mismatched, tmp_path / "out",
                                tmp_path / "cache", per_member=2)  # one count for all
    assert steps and not (tmp_path / "out").exists()


@pytest.mark.parametrize("args", [["--member-seeds", "2"], ["--first-member", "100"]])
def test_member_settings_without_a_population_are_one_line_and_exit_2(args, tmp_path, capsys):
    with pytest.raises(SystemExit) as done:
        reproduce.main(["--out", str(tmp_path / "out"), *args])
    err = capsys.readouterr().err
    assert done.value.code == 2 and "add --population K" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


def test_an_sst2_model_is_reused_only_where_its_command_made_it(tmp_path):
    """A rerun into the same --out keeps a finished SST-2 model made by the same command (the
    overrides Hydra recorded); one an older recipe made is a one-line error naming the dir,
    not a model the studies would read under a command that does not describe it."""
    encoder = EncoderSteps(tmp_path, tmp_path / "logs")
    seeds = {"sst2_model": (0,), "sst2_twin": ()}
    [step] = sst2_model_steps(encoder, seeds)
    run_dir = tmp_path / "sst2_model" / "seed_0"
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / "metrics.json").write_text("{}")
    made = [a for a in step.args[1:] if not a.startswith("hydra.")]
    (run_dir / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(made))
    assert sst2_model_steps(encoder, seeds) == []
    member = dataclasses.replace(encoder, settings=load_recipes().member_finetuning)
    with pytest.raises(UserError, match=f"{run_dir} holds an SST-2 model made by another"):
        sst2_model_steps(member, seeds)


@pytest.mark.parametrize("args, says", [
    (["--encoders", "bert"], "--encoders must name minilm"),
    (["--encoders", "minilm", "gpt2"], "--encoders gpt2 is not an encoder")])
@pytest.mark.slow
def test_bad_encoders_are_one_line_and_exit_2_before_any_step(args, says, tmp_path):
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "bertology.reproduce", "--out", str(out),
                           *args], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and says in done.stderr
    assert not out.exists()


def test_the_matrix_rows_are_the_findings_that_read_a_swappable_encoder():
    catalog = load_catalog()
    rows = matrix.model_reading_findings()
    assert {"pos_layers", "ner_later_than_pos", "freeze_lower", "feature_layers"} <= set(rows)
    assert not {"int8", "distillation", "electra", "no_nsp"} & set(rows)
    for finding in rows:
        assert set(catalog[finding].studies) <= set(encoders.ENCODER_STUDIES)
    for study in encoders.ENCODER_STUDIES:  # each reads MiniLM unless told another encoder
        bundle = (REPO / "conf" / "experiment" / f"study_{study}.yaml").read_text()
        assert "override /model: minilm" in bundle, study


FIELDS = ["finding", "about", "claim", "test", "effect", "ci_low", "ci_high", "se", "dof",
          "seeds", "raw_verdict", "corrected_verdict", "fragile", "note"]


def write_findings(report, rows):
    """rows: (finding, about, effect, se, verdict[, fragile]); 3 seeds (ν = 2), the t
    interval; se nan: one independent run, no interval."""
    (report / "tables").mkdir(parents=True)
    with (report / "tables" / "findings.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, FIELDS)
        writer.writeheader()
        for finding, about, effect, se, verdict, *extra in rows:
            fragile, seeds = (extra + ["", None])[:2]
            half = 4.302653 * se
            writer.writerow({"finding": finding, "about": about, "claim": "c", "test": "a - b",
                             "effect": effect, "ci_low": effect - half,
                             "ci_high": effect + half, "se": se, "dof": 2 if se == se else
                             float("nan"), "seeds": seeds or (3 if se == se else 1),
                             "raw_verdict": verdict, "corrected_verdict": verdict,
                             "fragile": bool(fragile), "note": ""})


def test_an_exact_cell_has_no_side_and_adds_no_degrees_of_freedom():
    """Seeds that scored alike on every resample (se 0, ν nan, a zero-width interval): the
    matrix prints no interval for it, so it puts the finding on no side; against a measured
    cell the difference is judged on that cell's ν, whichever comes first (min(nan, 4) and
    min(4, nan) differ)."""
    exact = matrix.Cell(-0.25, 0.0, float("nan"), -0.25, -0.25)
    measured = matrix.Cell(0.1, 0.05, 4.0, -0.04, 0.24)
    assert matrix.side(exact, 0.0, "greater") == 0
    p = matrix.difference_p(exact, measured)
    assert p == matrix.difference_p(measured, exact) == pytest.approx(
        2 * stats.t.sf(0.35 / 0.05, 4))
    assert matrix.difference_p(exact, exact) == 1.0


def test_the_matrix_compares_effects_not_verdicts(tmp_path, monkeypatch):
    """"differs" needs a test of the difference between encoders (Holm over the matrix):
    two verdicts that differ are not two effects that differ (issue 38: feature_layers
    "differed" although every encoder's interval lay on the claim's side)."""
    monkeypatch.setattr(matrix, "model_reading_findings", lambda: ["a", "b", "c", "m", "d", "e"])
    monkeypatch.setattr(matrix, "claim_sides", lambda finding: [(0.0, "greater")] * 2)
    minilm, bert = tmp_path / "report", tmp_path / "bert" / "report"
    write_findings(minilm, [("a", "model", 0.12, 0.005, "holds"),
                            ("a", "model", 0.3, 0.02, "holds"),  # a second comparison
                            ("b", "model", 0.01, 0.007, "underpowered"),
                            ("c", "model", 0.2, 0.02, "holds"),
                            ("m", "method", 0.5, 0.02, "holds"),
                            ("d", "model", 0.2, 0.02, "holds"),
                            ("int8", "model", 0.0, 0.002, "holds")])
    write_findings(bert, [("a", "model", -0.004, 0.005, "underpowered"),
                          ("m", "method", 0.45, 0.01, "holds"),
                          # the feature_layers case: a smaller effect on the same side
                          ("c", "model", 0.15, 0.025, "underpowered", "fragile"),
                          # every seed gave the same value: one independent run, no interval
                          ("b", "model", -0.25, float("nan"), "underpowered"),
                          # five seeds that all scored 0 on every resample (special_heads
                          # on a weak BERT): an interval of zero width
                          ("e", "model", 0.0, 0.0, "underpowered", "", 5)])
    (minilm / "REPORT.md").write_text("# bertology report\n\n## Runs\n\n| group |\n")
    (minilm / "REPORT.html").write_text("<body><h1>r</h1>\n<h2>Runs</h2>\n</body>")
    lines = matrix.write_matrix(minilm, {"minilm": minilm, "bert": bert})
    table = {line.split(" | ")[0]: line for line in lines if line.startswith("| ")}
    # a: the effects differ by 25 standard errors of their difference: differs
    assert table["| a"] == ("| a | +0.12 [+0.0985, +0.142] **holds** | -0.004 [-0.0255, "
                            "+0.0175] **underpowered** | **differs** |")
    # c: holds and underpowered, but both intervals beyond 0 and the effects alike
    assert table["| c"].endswith("**underpowered** (fragile) | same direction |")
    assert table["| b"].endswith("(no interval: 1 independent run) **underpowered** | "
                                 "not resolved |")
    assert table["| d"].endswith("| not judged | not resolved |")  # one encoder: no contrast
    assert table["| e"] == ("| e | not judged | +0 (no interval: its 5 seeds scored alike) "
                            "**underpowered** | not resolved |")
    assert table["| m*"].endswith("**holds** | same direction |")
    assert "| int8" not in table  # not a model-reading finding
    with (minilm / "tables" / "encoders.csv").open(newline="") as handle:
        written = list(csv.DictReader(handle))
    assert [(r["finding"], r["encoder"]) for r in written] == [
        ("a", "minilm"), ("a", "minilm"), ("a", "bert"), ("b", "minilm"), ("b", "bert"),
        ("c", "minilm"), ("c", "bert"), ("m", "minilm"), ("m", "bert"), ("d", "minilm"),
        ("e", "bert")]
    report = (minilm / "REPORT.md").read_text()
    assert report.index(matrix.SECTION) < report.index("## Runs")
    page = (minilm / "REPORT.html").read_text()
    assert page.index("<h2>Findings across encoders</h2>") < page.index("<h2>Runs</h2>")
    assert "<td>differs</td>" in page and "**" not in page
    assert write_summary(minilm).endswith("\n".join(lines) + "\n")  # the front page's block


def test_a_population_pretrains_each_member_with_its_seed_and_judges_them_together(
        tmp_path, monkeypatch):
    """`--population 3`: three BERTs of one recipe that differ in the seed, each with its own
    cache dir; each member's studies run with its own seed on its own model (and its SST-2
    model and fine-tuned twin of that seed); one report reads every member's study dirs."""
    monkeypatch.setenv("BERTOLOGY_CACHE_DIR", str(tmp_path / "cache"))
    commands = record_commands(monkeypatch)
    reproduce.main(["--out", str(tmp_path / "out"), "--population", "3",
                    "--only", "pos_layers", "freeze_lower", "--member", "size=small"])
    studies = reproduce.studies_to_run(None)
    pretrains = [c for c in commands if c[0] == "pretrain"]
    assert [c[-2] for c in pretrains] == ["seed=0", "seed=1", "seed=2"]
    assert all("model=bert" in c and "size=small" in c for c in pretrains)
    dirs = [encoders.member_dir(seed, ("size=small",), tmp_path / "cache") for seed in range(3)]
    assert len(set(dirs)) == 3
    for seed, run_dir in enumerate(dirs):
        on_member = [c for c in commands if f"model.name_or_path={run_dir}/model" in c]
        sweeps = [c for c in on_member if "-m" in c]
        assert {c[c.index("-m") + 1] for c in sweeps} == {"experiment=study_probe_pos",
                                                           "experiment=study_finetune_sst2"}
        for c in sweeps:  # its seeds: seed, seed + 1000, … as many as studies.yaml says
            study = c[c.index("-m") + 1].removeprefix("experiment=study_")
            assert seeds_arg(seed, studies[study]["member_seeds"]) in c, c
        models = [c for c in on_member if "-m" not in c]  # its SST-2 model and twin: its seed
        assert len(models) == 2 and all(f"seed={seed}" in c for c in models)
    (report,) = [c for c in commands if c[0] == "report"]
    assert report[-1] == f"hydra.run.dir={tmp_path}/out/population/report"
    # every member drawn, in the table the report states the selection from
    assert report[-2] == f"members_table={tmp_path}/out/population/tables/members.csv"
    assert len(report[1:-2]) == 6  # 3 members x 2 studies


def fake_pretraining(monkeypatch, failing: set[int]) -> list[list[str]]:
    """runner.bertology recording commands; a pretraining writes its run dir as a finished run
    would, its held-out MLM accuracy under its floor for the seeds in failing."""
    commands = record_commands(monkeypatch)
    record = runner.bertology

    def pretrain(args, log_path, threads=None):
        if args[0] == "pretrain":
            seed = int(next(a for a in args if a.startswith("seed=")).split("=")[1])
            run_dir = Path(args[-1].split("=", 1)[1])
            (run_dir / "model").mkdir(parents=True)
            (run_dir / "model" / "config.json").write_text("{}")
            accuracy = 0.050 if seed in failing else 0.095
            (run_dir / "metrics.json").write_text(json.dumps(
                {"eval/mlm_accuracy": accuracy, "eval/mlm_majority_accuracy": 0.057}))
        return record(args, log_path, threads)

    monkeypatch.setattr(runner, "bertology", pretrain)
    return commands


def test_replace_failed_draws_members_until_k_learned_and_studies_only_those(tmp_path,
                                                                            monkeypatch):
    """`--replace-failed`: the members are pretrained first; one that ends at or below its
    floor (seeds 101 and 103 here) is replaced by the next seed until 3 have learned, and
    only those get studies. A rerun reads the draws from the cache and pretrains nothing."""
    monkeypatch.setenv("BERTOLOGY_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(runner, "code_identity", lambda: None)  # the rerun runs every study
    commands = fake_pretraining(monkeypatch, failing={101, 103})
    argv = ["--out", str(tmp_path / "out"), "--population", "3", "--first-member", "100",
            "--replace-failed", "--only", "pos_layers"]
    reproduce.main(argv)
    pretrains = [c for c in commands if c[0] == "pretrain"]
    assert sorted(c[-2] for c in pretrains) == [f"seed={s}" for s in (100, 101, 102, 103, 104)]
    assert studied_members(commands) == {"100", "102", "104"}
    for seed in (100, 102, 104):  # a member's studies run after its own pretraining
        pretrained = next(i for i, c in enumerate(commands) if f"seed={seed}" in c)
        assert all(i > pretrained for i, c in enumerate(commands)
                   if "-m" in c and any(f"/member_{seed}/" in a for a in c))
    (report,) = [c for c in commands if c[0] == "report"]
    assert len(report[1:-2]) == 3  # 3 learned members x probe_pos (and the members table)
    commands.clear()
    reproduce.main(argv)
    assert not [c for c in commands if c[0] == "pretrain"]
    assert studied_members(commands) == {"100", "102", "104"}


def studied_members(commands: list[list[str]]) -> set[str]:
    """The members whose study sweeps the commands ran."""
    return {a.split("/member_")[1].split("/")[0] for c in commands if "-m" in c for a in c
            if a.startswith("hydra.sweep.dir=")}


def test_replace_failed_stops_at_twice_the_members_asked_for(tmp_path, monkeypatch, caplog):
    """A recipe that never learns: 2K members are drawn, then the run goes on with none and
    says so, rather than drawing for ever."""
    commands = fake_pretraining(monkeypatch, failing=set(range(10)))
    draws = Draws(2, 0, (), {}, tmp_path / "out", tmp_path / "cache")
    results = runner.run_steps(draws.start(), 1, then=draws.then)
    assert draws.members() == [] and draws.drawn == [0, 1, 2, 3]
    assert len([c for c in commands if c[0] == "pretrain"]) == 4 == len(results)
    assert "0 of 4 members drawn learned (2 asked for)" in caplog.text


def test_an_error_in_a_lane_ends_the_run_in_the_caller_not_in_a_hang(tmp_path, monkeypatch):
    """A step that cannot start (its log unwritable, a full disk) raises in its lane: the other
    lane finishes the step it runs, takes no more, and run_steps raises the error, rather than
    waiting for ever on a step that will never report."""
    calls = []

    def flaky(args, log_path, threads=None):
        calls.append(args[0])
        if args[0] == "bad":
            raise OSError("no space left on device")
        return 0, 0.0

    monkeypatch.setattr(runner, "bertology", flaky)
    steps = [runner.Step(name, [name], tmp_path / f"{name}.log") for name in ("bad", "ok")]
    steps.append(runner.Step("after", ["after"], tmp_path / "after.log", after=("bad", "ok")))
    raised = []

    def run() -> None:
        try:
            runner.run_steps(steps, 2)
        except OSError as err:
            raised.append(str(err))

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout=20)
    assert not worker.is_alive(), "run_steps hung"
    assert raised == ["no space left on device"] and "after" not in calls


def test_a_planning_error_of_the_draws_is_one_line_not_a_lost_member(tmp_path, monkeypatch,
                                                                     capsys):
    """Planning a learned member's studies can refuse (an SST-2 model in --out made by another
    command). Under --replace-failed that happens in a lane; it still ends the run as a one-line
    error, exit 2, and the member is not counted as studied."""
    monkeypatch.setenv("BERTOLOGY_CACHE_DIR", str(tmp_path / "cache"))
    fake_pretraining(monkeypatch, failing=set())
    stale = tmp_path / "out" / "population" / "member_0" / "sst2_model" / "seed_0"
    (stale / ".hydra").mkdir(parents=True)
    (stale / "metrics.json").write_text("{}")
    (stale / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(["trainer.lr=1e-4"]))
    with pytest.raises(SystemExit) as done:
        reproduce.main(["--out", str(tmp_path / "out"), "--population", "2", "--replace-failed",
                        "--lanes", "1", "--only", "pos_layers"])
    err = capsys.readouterr().err
    assert done.value.code == 2 and "holds an SST-2 model made by another command" in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_a_learned_member_s_studies_run_beside_a_replacement_s_pretraining(tmp_path,
                                                                            monkeypatch):
    """On two lanes, the replacement for a member that did not learn pretrains while the
    other lane runs the studies of those that did, rather than idling until every draw is
    made (in rounds, a lane sat idle for a whole pretraining). The replacement's pretraining
    waits here until a study has started, so in rounds it would time out."""
    monkeypatch.setenv("BERTOLOGY_CACHE_DIR", str(tmp_path / "cache"))
    commands = fake_pretraining(monkeypatch, failing={1})
    fake = runner.bertology
    study_started, waited = threading.Event(), []

    def beside(args, log_path, threads=None):
        if "-m" in args:
            study_started.set()
        elif args[0] == "pretrain" and "seed=2" in args:
            waited.append(study_started.wait(timeout=10))
        return fake(args, log_path, threads)

    monkeypatch.setattr(runner, "bertology", beside)
    reproduce.main(["--out", str(tmp_path / "out"), "--population", "2", "--replace-failed",
                    "--lanes", "2", "--only", "pos_layers"])
    assert waited == [True]  # a study started while the replacement pretrained
    assert studied_members(commands) == {"0", "2"}


def test_replace_failed_needs_a_population(tmp_path):
    with pytest.raises(SystemExit) as done:
        reproduce.main(["--out", str(tmp_path), "--replace-failed"])
    assert done.value.code == 2 and not tmp_path.joinpath("logs").exists()


def test_a_population_of_one_is_refused(tmp_path):
    result = subprocess.run([sys.executable, "-m", "bertology.reproduce", "--population", "1",
                             "--out", str(tmp_path)], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 2 and "2 or more members" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_rerun_keeps_the_sweeps_an_earlier_run_finished_at_the_same_code(tmp_path,
                                                                            monkeypatch):
    """A killed `make reproduce` rerun into the same --out resumes: a study's sweep that
    finished (its dir holds runner.STEP_RECORD: the command and the commit) is kept; one
    recorded under other code, or run from a checkout with changes, runs again."""
    monkeypatch.setenv("BERTOLOGY_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(runner, "code_identity", lambda: "commit-a")
    commands = record_commands(monkeypatch)
    out = ["--out", str(tmp_path / "out"), "--only", "int8", "freeze_lower"]

    def sweeps() -> list[str]:
        found = sorted(a.split("=")[1] for c in commands if "-m" in c for a in c
                       if a.startswith("experiment="))
        commands.clear()
        return found

    reproduce.main(out)
    assert sweeps() == ["study_finetune_sst2", "study_prune_sst2"]
    record = json.loads((tmp_path / "out" / "prune_sst2" / runner.STEP_RECORD).read_text())
    assert record["code"] == "commit-a" and "experiment=study_prune_sst2" in record["args"]
    (tmp_path / "out" / "finetune_sst2" / runner.STEP_RECORD).unlink()  # killed mid-sweep
    reproduce.main(out)
    assert sweeps() == ["study_finetune_sst2"]
    monkeypatch.setattr(runner, "code_identity", lambda: "commit-b")
    reproduce.main(out)
    assert sweeps() == ["study_finetune_sst2", "study_prune_sst2"]
    monkeypatch.setattr(runner, "code_identity", lambda: None)  # uncommitted changes
    reproduce.main(out)
    assert sweeps() == ["study_finetune_sst2", "study_prune_sst2"]


def test_the_members_table_names_a_member_whose_pretraining_did_not_learn(tmp_path, caplog):
    """tables/members.csv: held-out MLM accuracy at each member's first evaluation and its
    last, and its floor (always the most frequent masked token). A member that stayed on its
    plateau (the population run's member 7: 0.0523 at step 250, 0.0517 at the end) is
    `learned` False and named in the log: against its floor where the run recorded one (the
    verdicts set it aside), else against its first evaluation (they keep it)."""
    histories = {0: [0.07, 0.09, 0.099], 1: [0.0523, 0.0523, 0.0517],
                 2: [0.0523, 0.0523, 0.0517]}
    floors = {0: 0.0521, 2: 0.0521}  # member 1: a run from before the floor was recorded
    for seed, history in histories.items():
        run_dir = encoders.member_dir(seed, (), tmp_path / "cache")
        run_dir.mkdir(parents=True)
        (run_dir / "metrics.jsonl").write_text("".join(
            json.dumps({"step": 250 * (i + 1), "train/loss": 7.0}) + "\n" +
            json.dumps({"step": 250 * (i + 1), "eval/mlm_accuracy": a}) + "\n"
            for i, a in enumerate(history)))
        floor = {"eval/mlm_majority_accuracy": floors[seed]} if seed in floors else {}
        (run_dir / "metrics.json").write_text(json.dumps(
            {"eval/mlm_accuracy": history[-1], "train/steps": 670, **floor}))
    write_members_table(tmp_path / "report", range(3), (), tmp_path / "cache")
    with (tmp_path / "report" / "tables" / "members.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["first_mlm_accuracy"], r["mlm_accuracy"], r["mlm_floor"], r["learned"])
            for r in rows] == [("0.07", "0.099", "0.0521", "True"),
                               ("0.0523", "0.0517", "", "False"),
                               ("0.0523", "0.0517", "0.0521", "False")]
    assert ("member 1 did not learn: held-out MLM accuracy 0.0517 at its last evaluation, "
            "against 0.0523 at its first; the verdicts keep it") in caplog.text
    assert ("member 2 did not learn: held-out MLM accuracy 0.0517 at its last evaluation, "
            "against the floor 0.0521; the verdicts set it aside") in caplog.text
    assert "member 0 " not in caplog.text
