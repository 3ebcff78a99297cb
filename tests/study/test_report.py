"""bertology report: verdicts from synthetic run dirs (with and without item replicates),
reductions over layer curves, paired and unpaired designs, compound claims, Holm over a suite,
studies shared by several findings, and the CLI end to end."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import REPO, run_cli
from omegaconf import OmegaConf
from scipy import stats

from bertology.errors import UserError
from bertology.pipelines import report
from bertology.run.replicates import write_replicates
from bertology.study.judge import catalog
from bertology.study.judge.evidence import REDUCTIONS, lower_middle_layers
from bertology.study.judge.results import find_runs
from bertology.study.judge.specs import parse_finding
from bertology.study.judge.suite import correct_suite
from bertology.study.judge.verdicts import judge
from bertology.study.pages.reporting import FINDING_COLUMNS

FINDING = {"id": "demo", "claim": "a beats b", "source": "a paper, Table 1",
           "unit": "checkpoint", "compare": {"a": "eval/a", "b": "eval/b", "expect": "greater"}}


def study_of(finding: dict) -> str:
    return finding.get("study") or finding["id"]


def write_run(path: Path, metrics: dict, seed: int, finding: dict | None = None,
              replicates: dict | None = None, **config) -> Path:
    """A finished run dir as a pipeline leaves it; with a finding, labelled with its study."""
    (path / ".hydra").mkdir(parents=True)
    label = {"label": study_of(finding)} if finding else {}
    (path / ".hydra" / "config.yaml").write_text(yaml.safe_dump({"seed": seed, **config,
                                                                 **label}))
    (path / "metrics.json").write_text(json.dumps(metrics))
    if replicates:
        write_replicates(path, "test", replicates)
    return path


def write_findings(folder: Path, *findings: dict) -> Path:
    """The user's own findings, as `bertology report findings_dir=<folder>` reads them."""
    folder.mkdir(parents=True)
    for finding in findings:
        (folder / f"{finding['id']}.yaml").write_text(
            yaml.safe_dump({**finding, "study": study_of(finding)}))
    return folder


def run_report(runs: Path, out: Path, *findings: dict) -> dict[str, float]:
    """`bertology report <runs> findings_dir=<a folder of these findings>` into out."""
    config = {"runs": [str(runs)]}
    if findings:
        config["findings_dir"] = str(write_findings(out.parent / f"{out.name}_findings", *findings))
    return report.run(OmegaConf.create(config), out)


def judge_runs(tmp_path: Path, pairs: list[tuple[float, float]], finding=FINDING):
    for seed, (a, b) in enumerate(pairs):
        write_run(tmp_path / str(seed), {"eval/a": a, "eval/b": b}, seed, finding)
    return judge(parse_finding(finding), find_runs([tmp_path]))


@pytest.mark.parametrize("pairs, verdict", [
    ([(0.80, 0.70), (0.82, 0.71), (0.81, 0.69)], "holds"),
    ([(0.60, 0.70), (0.62, 0.71), (0.61, 0.69)], "does not hold"),
    ([(0.80, 0.70), (0.60, 0.71), (0.75, 0.72)], "inconclusive"),  # seeds disagree
    ([(0.80, 0.70)], "underpowered"),  # one run and no replicates: no uncertainty measured
])
def test_verdicts_from_seeds(tmp_path, pairs, verdict):
    result = judge_runs(tmp_path, pairs)
    assert result.raw.label == verdict
    assert result.tests[0].estimate.n == len(pairs)
    assert result.tests[0].estimate.mean == pytest.approx(
        sum(a - b for a, b in pairs) / len(pairs))


@pytest.mark.parametrize("margin, verdict", [(0.05, "holds"), (0.0, "does not hold")])
def test_less_with_a_margin(tmp_path, margin, verdict):
    """a − b ≈ +0.02: below a margin of 0.05 ("at most 5 points worse"), not below 0."""
    finding = {**FINDING, "compare": {"a": "eval/a", "b": "eval/b", "expect": "less",
                                      "margin": margin}}
    result = judge_runs(tmp_path, [(0.72, 0.70), (0.73, 0.71), (0.715, 0.70)], finding)
    assert result.raw.label == verdict


def test_one_run_with_item_replicates_measures_no_seed_variance(tmp_path):
    """Its items put a − b = 0.1 at 7 item SDs, but one seed says nothing of the seed-to-seed
    variance: underpowered, never holds (issue 28)."""
    rng = np.random.default_rng(0)
    reps = {"eval/a": 0.80 + rng.normal(0, 0.01, 400), "eval/b": 0.70 + rng.normal(0, 0.01, 400)}
    write_run(tmp_path / "0", {"eval/a": 0.80, "eval/b": 0.70}, 0, FINDING, reps)
    result = judge(parse_finding(FINDING), find_runs([tmp_path]))
    assert result.tests[0].estimate.items
    assert result.raw.label == "underpowered" and "one seed" in result.note


def layer_metrics(values: list[float]) -> dict[str, float]:
    return {f"probe/layer_{i:02d}/accuracy": v for i, v in enumerate(values)}


def test_layer_reductions_by_hand():
    layers = np.arange(5)
    values = np.array([0.5, 0.9, 0.8, 0.7, 0.6])
    assert REDUCTIONS["argmax_fraction"](layers, values) == 0.25
    assert REDUCTIONS["top_minus_bottom"](layers, values) == pytest.approx(0.65 - 0.7)
    # depth 0, .25, .5, .75, 1: the middle third [1/3, 2/3] is layer 2 alone
    assert REDUCTIONS["middle"](layers, values) == pytest.approx(0.8)
    assert REDUCTIONS["middle_minus_ends"](layers, values) == pytest.approx(0.8 - 0.675)
    # the lower-middle band (1/4, 1/2] leaves depth .25 out: layer 2 alone, minus the top
    assert REDUCTIONS["lower_middle_minus_top"](layers, values) == pytest.approx(0.8 - 0.6)
    assert REDUCTIONS["lower_middle"](layers, values) == pytest.approx(0.8)
    # MiniLM's 6 layers and the embeddings (pos_used): depth 2/6 and 3/6, layers 2 and 3
    assert REDUCTIONS["lower_middle"](np.arange(7), np.arange(7.0)) == pytest.approx(2.5)
    # BERT-base's 12 layers and the embeddings: depth 3/12 = 1/4 is out, layers 4, 5, 6 are in
    assert np.flatnonzero(lower_middle_layers(np.arange(13))).tolist() == [4, 5, 6]
    # slope over depth 0, .25, .5, .75, 1 of a line rising 0.1 per layer: 0.4 bottom to top
    assert REDUCTIONS["slope"](layers, 0.1 * layers) == pytest.approx(0.4)
    # Tenney's expected layer: Δ = (.4, −.1, −.1, −.1) at l = 1..4, Σ lΔ = .4 − .2 − .3 − .4
    assert REDUCTIONS["expected_layer"](layers, values) == pytest.approx(
        (0.4 - 0.2 - 0.3 - 0.4) / 0.1 / 4)
    assert np.isnan(REDUCTIONS["expected_layer"](layers, values[::-1] * 0 + 0.5))
    # row by row over replicates
    table = np.stack([values, values + 0.1])
    assert REDUCTIONS["max"](layers, table).tolist() == pytest.approx([0.9, 1.0])


def test_a_discrete_reduction_gets_the_sign_test(tmp_path):
    """'POS peaks in the lower half': three agreeing seeds are not enough (p = 1/8)."""
    finding = {**FINDING, "compare": {"a": {"metric": "probe/layer_*/accuracy",
                                            "reduce": "argmax_fraction"},
                                      "b": 0.5, "expect": "less"}}
    for seed, peak in enumerate([1, 2, 1]):
        values = [0.6] * 6 + [0.6 + 0.001 * seed]  # real seeds differ somewhere (else: repeats)
        values[peak] = 0.9
        write_run(tmp_path / str(seed), layer_metrics(values), seed, finding)
    result = judge(parse_finding(finding), find_runs([tmp_path]))
    assert result.p_holds == 0.125
    assert result.raw.label == "underpowered" and "6 seeds" in result.note


def test_groups_of_a_sweep_are_compared_by_where_and_paired_by_seed(tmp_path):
    """Dynamic vs static masking: two config groups of one sweep, paired by seed."""
    finding = {**FINDING, "compare": {"a": {"metric": "eval/acc",
                                            "where": {"model.masking": "dynamic"}},
                                      "b": {"metric": "eval/acc",
                                            "where": {"model.masking": "static"}},
                                      "expect": "greater", "margin": -0.01}}
    for seed in range(3):
        for masking, acc in (("dynamic", 0.702 + 0.01 * seed), ("static", 0.70 + 0.01 * seed)):
            write_run(tmp_path / f"{masking}{seed}", {"eval/acc": acc}, seed, finding,
                      model={"masking": masking})
    result = judge(parse_finding(finding), find_runs([tmp_path]))
    assert [p.design for p in result.parts] == ["paired by seed"]
    assert result.tests[0].estimate.mean == pytest.approx(0.002)
    assert result.raw.label == "underpowered"  # identical differences, no replicates: zero width


def test_sides_without_common_seeds_are_compared_by_welch(tmp_path):
    finding = {**FINDING, "compare": {"a": {"metric": "eval/acc", "where": {"arm": "x"}},
                                      "b": {"metric": "eval/acc", "where": {"arm": "y"}}}}
    for seed, acc in enumerate([0.80, 0.81, 0.82]):
        write_run(tmp_path / f"x{seed}", {"eval/acc": acc}, seed, finding, arm="x")
    for seed, acc in zip((7, 8, 9, 10), [0.60, 0.62, 0.61, 0.63]):
        write_run(tmp_path / f"y{seed}", {"eval/acc": acc}, seed, finding, arm="y")
    result = judge(parse_finding(finding), find_runs([tmp_path]))
    assert [p.design for p in result.parts] == ["unpaired (Welch)"] and result.raw.label == "holds"


def test_a_compound_claim_needs_every_part(tmp_path):
    finding = {**FINDING, "compare": {"all": [
        {"a": "eval/a", "b": "eval/b", "expect": "greater"},        # holds
        {"a": "eval/a", "b": 0.9, "expect": "greater"}]}}            # does not hold
    result = judge_runs(tmp_path, [(0.80, 0.70), (0.82, 0.71), (0.81, 0.69)], finding)
    assert len(result.tests) == 2 and result.raw.label == "does not hold"


def test_report_pipeline_writes_markdown_tables_and_figures(tmp_path):
    runs = tmp_path / "runs"
    judge_runs(runs, [(0.8, 0.7), (0.81, 0.7), (0.79, 0.71)])
    write_run(runs / "plain", {"eval/accuracy": 0.5}, 0)  # a run of no finding: aggregated
    out = tmp_path / "report"
    metrics = run_report(runs, out, FINDING)
    assert metrics["report/findings"] == 1 and metrics["report/raw/holds"] == 1
    assert metrics["report/corrected/holds"] == 1  # Holm over one finding changes nothing
    assert metrics["report/checkpoint/corrected/holds"] == 1
    assert metrics["report/pretraining/findings"] == 0
    text = (out / "REPORT.md").read_text()
    assert "| demo | a beats b | for one checkpoint | a paper, Table 1 |" in text  # none recorded
    assert "**holds**" in text
    assert "| eval/accuracy | 0.5 ± 0 |" in text  # the plain run's group, in the runs section
    assert (out / "plots" / "finding_demo.png").stat().st_size > 0
    with (out / "tables" / "findings.csv").open() as handle:
        row = next(csv.DictReader(handle))
    assert list(row) == FINDING_COLUMNS  # the declared columns are the rows' own
    assert row["raw_verdict"] == row["corrected_verdict"] == "holds"
    assert row["unit"] == "checkpoint" and row["scope"] == "checkpoint: not recorded"
    assert float(row["ci_low"]) > 0 and int(row["seeds"]) == 3
    with (out / "tables" / "metrics.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    a = next(r for r in rows if r["metric"] == "eval/a")
    assert int(a["n"]) == 3 and float(a["mean"]) == pytest.approx(0.8)


def test_a_report_that_judges_no_finding_still_writes_the_findings_header(tmp_path):
    write_run(tmp_path / "runs" / "plain", {"eval/accuracy": 0.5}, 0)  # no label: no study
    metrics = run_report(tmp_path / "runs", tmp_path / "out")
    assert metrics["report/findings"] == 0
    lines = (tmp_path / "out" / "tables" / "findings.csv").read_text().splitlines()
    assert lines == [",".join(FINDING_COLUMNS)]


def test_holm_over_the_report_can_overturn_a_raw_verdict(tmp_path):
    """Three findings: one clear, one just past the 2.5% edge alone, one null. Holm multiplies
    the edge's p-value by 2 (it ranks second of three), so after the correction only the clear
    one holds. By hand (t, 2 dof): edge differences .03, .045, .06 give p = 0.0175."""
    clear = {**FINDING, "id": "clear"}
    edge = {**FINDING, "id": "edge", "compare": {"a": "eval/c", "b": "eval/d"}}
    null = {**FINDING, "id": "null", "compare": {"a": "eval/e", "b": "eval/f"}}
    for seed, (c, d) in enumerate([(0.53, 0.50), (0.545, 0.50), (0.56, 0.50)]):
        write_run(tmp_path / "runs" / f"c{seed}", {"eval/c": c, "eval/d": d}, seed, edge)
    for seed, (a, b) in enumerate([(0.8, 0.7), (0.81, 0.7), (0.79, 0.71)]):
        write_run(tmp_path / "runs" / f"a{seed}", {"eval/a": a, "eval/b": b}, seed, clear)
    for seed, (e, f) in enumerate([(0.52, 0.50), (0.47, 0.50), (0.51, 0.50)]):
        write_run(tmp_path / "runs" / f"e{seed}", {"eval/e": e, "eval/f": f}, seed, null)
    run_report(tmp_path / "runs", tmp_path / "out", edge, clear, null)
    with (tmp_path / "out" / "tables" / "findings.csv").open() as handle:
        rows = {r["finding"]: r for r in csv.DictReader(handle)}
    assert float(rows["edge"]["p_holds"]) == pytest.approx(0.0175, abs=1e-3)
    assert rows["edge"]["raw_verdict"] == "holds"
    assert rows["edge"]["corrected_verdict"] == "underpowered"
    assert rows["clear"]["corrected_verdict"] == "holds"


def test_a_study_serves_every_finding_of_the_catalog(tmp_path):
    """Runs of a study (made by make reproduce) are judged by every finding of that study."""
    specs = {s["id"]: parse_finding(s) for s in (
        {**FINDING, "id": "one", "study": "demo_study"},
        {**FINDING, "id": "two", "study": "demo_study", "compare": {"a": "eval/a", "b": 0.5}},
        {**FINDING, "id": "three", "study": "other"})}
    for seed in range(3):
        write_run(tmp_path / str(seed), {"eval/a": 0.8 + seed / 100, "eval/b": 0.7}, seed,
                  label="demo_study")
    pairs = catalog.findings_for(find_runs([tmp_path]), specs)
    assert [spec.id for spec, runs in pairs] == ["one", "two"]
    assert all(len(runs) == 3 for _, runs in pairs)


def test_every_catalog_finding_names_a_study_of_the_catalogue():
    specs, studies = catalog.load_catalog(), catalog.load_studies()
    assert specs, "findings holds no finding"
    for spec in specs.values():
        assert spec.studies and set(spec.studies) <= set(studies), spec.id
        assert (REPO / "findings" / f"{spec.id}.yaml").exists(), spec.id


@pytest.mark.parametrize("key, seeds, least, default", [
    ("seeds", 1, 2, 3), ("seeds", "five", 2, 3), ("seeds", True, 2, 3),  # the bundles' sweep
    ("member_seeds", 0, 1, 1), ("member_seeds", "two", 1, 1),  # a member: the members
    ("member_seeds", True, 1, 1)])                             # replicate
def test_a_study_seed_count_too_small_or_not_a_number_is_a_user_error(tmp_path, key, seeds,
                                                                      least, default):
    (tmp_path / catalog.STUDIES_FILE).write_text(
        f"probe_pos:\n  pipeline: probe\n  {key}: {seeds}\n")
    with pytest.raises(UserError, match=rf"probe_pos\.{key}=.*at least {least}"):
        catalog.load_studies(tmp_path)
    (tmp_path / catalog.STUDIES_FILE).write_text("probe_pos:\n  pipeline: probe\n")
    assert getattr(catalog.load_studies(tmp_path)["probe_pos"], key) == default


def test_no_runs_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="no finished runs"):
        find_runs([tmp_path])


@pytest.mark.slow
def test_cli_takes_dirs_as_arguments(tmp_path):
    judge_runs(tmp_path / "runs", [(0.8, 0.7), (0.81, 0.7), (0.82, 0.71)])
    findings = write_findings(tmp_path / "mine", FINDING)
    result = run_cli("report", str(tmp_path / "runs"), f"findings_dir={findings}",
                     "hydra.run.dir=out", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "**holds**" in (tmp_path / "out" / "REPORT.md").read_text()
    missing = run_cli("report", str(tmp_path / "nowhere"), cwd=tmp_path)
    assert missing.returncode == 2


GUARDED = {**FINDING, "compare": {"a": "eval/a", "b": "eval/b", "expect": "greater",
                                  "margin": -0.01},
           "guard": {"a": "eval/a", "b": "eval/twin", "expect": "greater", "margin": 0.01}}


@pytest.mark.parametrize("twin_gap, verdict", [(0.10, "holds"), (0.0, "uninformative")])
def test_a_failed_guard_makes_the_verdict_uninformative(tmp_path, twin_gap, verdict):
    """Equal arms satisfy a non-inferiority claim; only when the task separates the encoder
    from its random-init twin does that mean anything (issue 28: no_nsp held on a keyword task
    both arms and any encoder learn)."""
    for seed, noise in enumerate((0.003, 0.0, 0.006)):
        a = 0.80 + noise
        write_run(tmp_path / str(seed), {"eval/a": a, "eval/b": a - noise,
                                         "eval/twin": a - twin_gap - noise}, seed, GUARDED)
    result = judge(parse_finding(GUARDED), find_runs([tmp_path]))
    assert result.raw.label == verdict
    if verdict == "uninformative":
        assert "guard not met" in result.note and "eval/twin" in result.note
        [result] = correct_suite([result])
        assert result.corrected.label == "uninformative" and result.p_adjusted == 1.0


PERFECT_GUARD = {**FINDING, "guard": {"a": "eval/acc", "b": 0.9, "expect": "greater"}}


@pytest.mark.parametrize("seeds, met", [(2, False), (6, True)])
def test_a_guard_met_perfectly_on_every_seed_is_a_sign_test(tmp_path, seeds, met):
    """A guard at one value on every seed (a model at verb accuracy 1.000 on each) has no
    spread: its p is the sign test's 0.5^n, 0.25 at two seeds (unmet at α/2 = 0.025) and 0.016
    at six; the unmet note gives the estimate, the p and the replicates that would meet it."""
    for seed in range(seeds):
        a = 0.80 + 0.01 * seed  # every resample of the guard's metric at 1.0 too
        reps = {"eval/a": a + np.linspace(-0.01, 0.01, 50), "eval/b": np.full(50, 0.70),
                "eval/acc": np.full(50, 1.0)}
        write_run(tmp_path / str(seed), {"eval/a": a, "eval/b": 0.70, "eval/acc": 1.0}, seed,
                  PERFECT_GUARD, reps)
    result = judge(parse_finding(PERFECT_GUARD), find_runs([tmp_path]))
    assert (result.raw.label != "uninformative") is met
    assert result.guard_tests[0].p_holds == pytest.approx(0.5 ** seeds)
    if not met:
        assert "guard not met: eval/acc − 0.9 > 0 (+0.1 [0.1, 0.1]" in result.note
        assert "p = 0.25; every one of its 2 replicates at one value" in result.note
        assert "6 or more would meet it" in result.note


def test_identical_seeds_count_once(tmp_path):
    """Three 'seeds' of a pipeline the seed does not reach are one measurement: the verdict
    counts one independent run and says so (issue 28: int8's and magnitude's seeds)."""
    reps = {"eval/a": 0.80 + np.linspace(-0.01, 0.01, 50), "eval/b": np.full(50, 0.70)}
    for seed in range(3):
        write_run(tmp_path / str(seed), {"eval/a": 0.80, "eval/b": 0.70}, seed, FINDING, reps)
    result = judge(parse_finding(FINDING), find_runs([tmp_path]))
    assert result.tests[0].estimate.n == 1 and len(result.runs) == 1
    assert "2 run(s) repeat another exactly" in result.note
    # one measurement, whatever the seeds: the note does not ask for more of them
    assert result.raw.label == "underpowered" and "more seeds cannot resolve it" in result.note
    assert "run more seeds" not in result.note
    # seeds that differ are all counted
    write_run(tmp_path / "3", {"eval/a": 0.81, "eval/b": 0.70}, 3, FINDING, reps)
    assert judge(parse_finding(FINDING), find_runs([tmp_path])).tests[0].estimate.n == 2


def test_runs_of_an_arm_the_finding_does_not_read_are_not_called_repeats(tmp_path):
    """word_order reads the freeze_layers=0 arm of its sweep; the freeze_layers=3 arm's seeds
    read nothing for it, so they are not 'runs that repeat another exactly'."""
    arm_a = {**FINDING, "compare": {"a": {"metric": "eval/a", "where": {"arm": "a"}},
                                    "b": {"metric": "eval/b", "where": {"arm": "a"}},
                                    "expect": "greater"}}
    for seed, a in enumerate((0.80, 0.82, 0.81)):
        write_run(tmp_path / f"a{seed}", {"eval/a": a, "eval/b": 0.70}, seed, arm_a, arm="a")
        write_run(tmp_path / f"b{seed}", {"eval/a": 0.5, "eval/b": 0.5}, seed, arm_a, arm="b")
    result = judge(parse_finding(arm_a), find_runs([tmp_path]))
    assert result.tests[0].estimate.n == 3 and "repeat" not in result.note


MINILM = {"name_or_path": "sentence-transformers/all-MiniLM-L6-v2"}


def test_the_headline_counts_pretraining_and_checkpoint_claims_apart(tmp_path):
    """REPORT.md and REPORT.html: claims about pretraining, about one checkpoint and about the
    method in separate tables; the headline counts pretraining claims first and checkpoint
    claims apart, naming the checkpoint from the runs' config; each row states its scope."""
    method = {**FINDING, "id": "probe_fact", "about": "method", "study": "s"}
    model = {**FINDING, "id": "model_fact", "about": "model", "study": "s"}
    pretrained = {**FINDING, "id": "recipe_fact", "unit": "pretraining", "study": "s"}
    for seed, (a, b) in enumerate([(0.80, 0.70), (0.82, 0.71), (0.81, 0.69)]):
        write_run(tmp_path / "runs" / str(seed), {"eval/a": a, "eval/b": b}, seed, label="s",
                  model=MINILM)
    cat = {s["id"]: parse_finding(s) for s in (method, model, pretrained)}
    runs = find_runs([tmp_path / "runs"])
    results = [judge(spec, runs) for spec in cat.values()]
    results = correct_suite(results)
    assert [r.corrected.label for r in results] == ["holds"] * 3
    from bertology.study.pages.report_html import write_html
    from bertology.study.pages.reporting import write_report
    figures = {r.id: "x.png" for r in results}
    (tmp_path / "x.png").write_bytes(b"\x89PNG")
    text = write_report(results, [], runs, tmp_path, figures).read_text()
    # 3 seeds: resolved, never firm
    assert "Pretraining claims, across independently pretrained encoders: 1 of 1 hold (1 " \
        "fragile) after Holm's correction\nCheckpoint claims (all-MiniLM-L6-v2; not claims " \
        "about BERT): 1 of 1 hold (1 fragile)" in text
    assert "verdicts on the 1 pretraining claims: 1 holds," in text
    assert "verdicts on the 1 checkpoint claims: 1 holds," in text
    assert "Claims about the method (1, not counted above): 1 holds" in text
    assert text.index("## Claims about pretraining") < text.index("recipe_fact") < text.index(
        "## Claims about one checkpoint") < text.index("model_fact") < text.index(
        "## Claims about the method") < text.index("probe_fact")
    assert "| model_fact | a beats b | for all-MiniLM-L6-v2 |" in text
    assert "| recipe_fact | a beats b | across 3 independently pretrained encoders |" in text
    page = write_html(results, [], runs, tmp_path, figures).read_text()
    assert "Checkpoint claims (all-MiniLM-L6-v2; not claims about BERT): 1 of 1 hold" in page
    assert "<td>for all-MiniLM-L6-v2</td>" in page and "Claims about pretraining" in page
    assert "Claims about the method" in page


def test_findings_csv_and_metrics_count_the_two_units_apart(tmp_path):
    """The pipeline end to end: a pretraining claim that holds and a checkpoint claim that does
    not; findings.csv's scope column and the report/<unit>/… metrics keep them apart, and the
    totals stay the sum."""
    pretrained = {**FINDING, "id": "recipe", "unit": "pretraining", "study": "pre"}
    checkpoint = {**FINDING, "id": "ckpt", "study": "ck"}
    runs = tmp_path / "runs"
    for seed, (a, b) in enumerate([(0.80, 0.70), (0.82, 0.71), (0.81, 0.69)]):
        write_run(runs / f"pre{seed}", {"eval/a": a, "eval/b": b}, seed, pretrained)
        write_run(runs / f"ck{seed}", {"eval/a": b, "eval/b": a}, seed, checkpoint,
                  model=MINILM)
    out = tmp_path / "report"
    metrics = run_report(runs, out, pretrained, checkpoint)
    assert metrics["report/pretraining/findings"] == metrics["report/checkpoint/findings"] == 1
    assert metrics["report/pretraining/corrected/holds"] == 1
    assert metrics["report/checkpoint/corrected/holds"] == 0
    assert metrics["report/checkpoint/corrected/does_not_hold"] == 1
    assert metrics["report/method/findings"] == 0 and metrics["report/corrected/holds"] == 1
    with (out / "tables" / "findings.csv").open() as handle:
        rows = {row["finding"]: row for row in csv.DictReader(handle)}
    assert rows["recipe"]["unit"] == "pretraining"
    assert rows["recipe"]["scope"] == "pretraining: 3 encoders"
    assert rows["ckpt"]["scope"] == "checkpoint: all-MiniLM-L6-v2"
    assert (out / "REPORT.md").read_text().count("1 of 1 hold (1 fragile)") == 1  # 3 seeds


def test_a_fine_tuned_checkpoint_is_named_by_the_checkpoint_it_started_from(tmp_path):
    """make reproduce prunes (and distils from) a MiniLM fine-tuned per seed in a run dir of its
    own: the scope follows model.name_or_path (a distill run: teacher.name_or_path) back to that
    run's config; a local dir that is no run's stays as given; no checkpoint at all (random
    init) is "for one checkpoint"."""
    from bertology.run.rundir import RunDir
    from bertology.study.judge.scope import Scope, checkpoint_of

    tuned = write_run(tmp_path / "sst2_model" / "seed_0", {}, 0, model=MINILM)
    prune = write_run(tmp_path / "prune", {}, 0, model={"name_or_path": str(tuned / "model")})
    distill = write_run(tmp_path / "distill", {}, 0, model={"name_or_path": None},
                        teacher={"name_or_path": str(tuned / "model"),
                                 "model": {"name_or_path": None}})
    alone = write_run(tmp_path / "alone", {}, 0, model={"name_or_path": str(tmp_path / "x")})
    assert checkpoint_of(RunDir(prune)) == checkpoint_of(RunDir(distill)) == "all-MiniLM-L6-v2"
    assert checkpoint_of(RunDir(alone)) == str(tmp_path / "x")
    assert checkpoint_of(RunDir(tmp_path, config={"seed": 0})) is None
    assert Scope("checkpoint").words == "for one checkpoint"


def test_a_fragile_verdict_is_shown_and_counted_apart(tmp_path):
    """a − b whose one-sided p is 0.02 (Holm-adjusted 0.04, not below α/10) on 3 seeds (never
    firm): REPORT.md's Holm cell, REPORT.html, the headline, findings.csv and the metrics mark
    it fragile, and the note says why."""
    gap = stats.t.isf(0.02, 2) * 1e-3 / math.sqrt(3)
    runs = tmp_path / "runs"
    for seed, d in enumerate((gap, gap + 1e-3, gap - 1e-3)):
        write_run(runs / str(seed), {"eval/a": 0.7 + d, "eval/b": 0.7}, seed, FINDING)
    out = tmp_path / "report"
    metrics = run_report(runs, out, FINDING)
    assert metrics["report/corrected/holds"] == 1 and metrics["report/corrected/fragile"] == 1
    text = (out / "REPORT.md").read_text()
    assert "**holds (fragile)**" in text and "1 holds (1 fragile)" in text
    assert "fragile: 3 seeds; firm needs 4 or more" in text
    page = (out / "REPORT.html").read_text()
    assert 'holds</span> <span class="fragile">(fragile)</span>' in page
    with (out / "tables" / "findings.csv").open() as handle:
        row = next(csv.DictReader(handle))
    assert row["fragile"] == "True" and float(row["p_holm"]) == pytest.approx(0.04, rel=1e-3)


def test_a_difference_in_differences_subtracts_the_twins_contrast_by_hand(tmp_path):
    """feature_layers against its twin: (concat − last) on the pretrained encoder minus the
    same on the random-init twin, seed by seed. Seeds 0, 1, 2: pretrained +0.30, +0.32,
    +0.31 and twin +0.28, +0.31, +0.27 give +0.02, +0.01, +0.04: mean 0.07/3, s² = 0.0007/3
    (t on 2 dof: t = (0.07/3) / √(0.0007/9) = √7 = 2.646): underpowered, not holds."""
    finding = {**FINDING, "compare": {
        "a": {"metric": "eval/f1", "where": {"features": "concat", "init": "pretrained"}},
        "b": {"metric": "eval/f1", "where": {"features": "last", "init": "pretrained"}},
        "twin": {"a": {"metric": "eval/f1", "where": {"features": "concat", "init": "random"}},
                 "b": {"metric": "eval/f1", "where": {"features": "last", "init": "random"}}},
        "expect": "greater"}}
    gains = {"pretrained": (0.30, 0.32, 0.31), "random": (0.28, 0.31, 0.27)}
    for init, gain in gains.items():
        for seed, g in enumerate(gain):
            base = 0.4 + 0.05 * seed
            for features, f1 in (("last", base), ("concat", base + g)):
                write_run(tmp_path / f"{init}{features}{seed}", {"eval/f1": f1}, seed, finding,
                          init=init, features=features)
    result = judge(parse_finding(finding), find_runs([tmp_path]))
    estimate = result.tests[0].estimate
    assert [p.design for p in result.parts] == ["paired by seed, difference in differences"]
    assert estimate.mean == pytest.approx(0.07 / 3)
    assert estimate.variance == pytest.approx(np.var([0.02, 0.01, 0.04], ddof=1) / 3)
    assert result.tests[0].z == pytest.approx(math.sqrt(7)) and result.raw.label == "underpowered"
    assert "(eval/f1 [features=concat, init=pretrained] − eval/f1 [features=last, " \
        "init=pretrained]) − (eval/f1 [features=concat, init=random]" in \
        parse_finding(finding).describe()


def test_a_report_that_judges_nothing_says_which_studies_to_run(tmp_path):
    """Issue 42: a report over one unlabelled probe run said only "no findings". Now REPORT.md
    lists each study, its command and the findings it answers, and the runs table shows the
    run's headline metrics (a probe's best layer, not only eval/*)."""
    write_run(tmp_path / "runs" / "0", {"probe/best_layer/accuracy": 0.91,
                                        "probe/layer_03/accuracy": 0.9}, 0)
    run_report(tmp_path / "runs", tmp_path / "report")
    text = (tmp_path / "report" / "REPORT.md").read_text()
    assert "## No finding judged" in text
    assert "| probe_pos | `bertology probe -m experiment=study_probe_pos` | anisotropy, " in text
    assert "| probe/best_layer/accuracy | 0.91 ± 0 |" in text
    assert "probe/layer_03/accuracy" not in text.split("## Runs")[1]  # the rest: metrics.csv


ARMS = {**FINDING, "compare": {
    "a": {"metric": "eval/accuracy", "where": {"arm": "frozen"}},
    "b": {"metric": "eval/accuracy", "where": {"arm": "full"}},
    "expect": "greater", "margin": -0.015}}


def write_arms(folder: Path, accuracy: dict[str, tuple], floor: float) -> Path:
    for arm, values in accuracy.items():
        for seed, acc in enumerate(values):
            write_run(folder / f"{arm}{seed}", {"eval/accuracy": acc,
                                                "eval/majority_accuracy": floor},
                      seed, ARMS, arm=arm)
    return folder


def clopper_pearson(k: int, n: int) -> tuple[float, float]:
    """The exact 95% interval by its beta quantiles."""
    low = 0.0 if k == 0 else stats.beta.ppf(0.025, k, n - k + 1)
    high = 1.0 if k == n else stats.beta.ppf(0.975, k + 1, n - k)
    return low, high


def per_seed_interval(values: list[float]) -> str:
    """A paired mean and its t interval on n − 1 degrees of freedom, as a note writes it."""
    values = np.array(values)
    half = stats.t.isf(0.025, len(values) - 1) * values.std(ddof=1) / math.sqrt(len(values))
    mean = values.mean()
    return f"{mean:+.3g} [{mean - half:+.3g}, {mean + half:+.3g}]"


def test_a_collapsed_seed_counts_and_its_rate_is_reported(tmp_path):
    """A fine-tuning seed at the majority class (Mosbach et al., 2021: a failed run) counts in
    the verdict (intention to treat): freezing "costs" 0.30 on seed 2 because that seed of the
    frozen arm collapsed, and the estimate is the mean over all three seeds. The note gives each
    arm's rate (1 of 3 frozen, 0 of 3 full, each with its Clopper–Pearson interval) and, as a
    secondary line, the contrast on the two seeds that trained in both arms. With every frozen
    seed collapsed, no seed trained in both arms and the note says so."""
    write_arms(tmp_path, {"full": (0.80, 0.82, 0.81), "frozen": (0.805, 0.823, 0.51)}, 0.51)
    result = judge(parse_finding(ARMS), find_runs([tmp_path]))
    assert result.tests[0].estimate.n == 3
    assert result.tests[0].estimate.mean == pytest.approx((0.005 + 0.003 - 0.30) / 3)
    low, high = clopper_pearson(1, 3)
    assert f"arm=frozen 1 of 3 [{low:.2g}, {high:.2g}]" in result.note
    assert f"arm=full 0 of 3 [0, {1 - 0.025 ** (1 / 3):.2g}]" in result.note
    assert "every seed counts in the verdict" in result.note
    assert ("secondary, per protocol, on the 2 seeds that trained in every arm: "
            + per_seed_interval([0.805 - 0.80, 0.823 - 0.82])) in result.note
    for seed in (0, 1):  # all three frozen seeds collapse: none trained in both arms
        (tmp_path / f"frozen{seed}" / "metrics.json").write_text(json.dumps(
            {"eval/accuracy": 0.50 + 0.005 * seed, "eval/majority_accuracy": 0.51}))
    result = judge(parse_finding(ARMS), find_runs([tmp_path]))
    assert result.tests[0].estimate.n == 3 and "arm=frozen 3 of 3" in result.note
    assert "no per-protocol estimate: fewer than 2 replicates trained" in result.note


def test_an_arm_that_collapses_on_2_of_5_seeds_is_its_own_endpoint(tmp_path):
    """freeze_lower's shape: the all-layers arm collapses on seeds 1 and 3 (0.51 and 0.515
    against a floor of 0.509: within the band, though above the floor), the frozen arm never.
    The primary estimate is the mean over all 5 seeds; the note shows both rates and Fisher's
    exact p (by hand, the hypergeometric: 2 collapses among 10 runs, 5 an arm; 0 in the frozen
    arm has probability C(5, 2)/C(10, 2) = 2/9, as has 2, so p = 4/9); the per-protocol line
    uses seeds 0, 2 and 4; findings.csv carries the rates and the p; REPORT.md and the page
    show the note."""
    full, frozen = (0.80, 0.51, 0.82, 0.515, 0.81), (0.79, 0.805, 0.80, 0.81, 0.795)
    runs = write_arms(tmp_path / "runs", {"full": full, "frozen": frozen}, 0.509)
    result = judge(parse_finding(ARMS), find_runs([runs]))
    gaps = [f - a for f, a in zip(frozen, full)]
    assert result.tests[0].estimate.n == 5
    assert result.tests[0].estimate.mean == pytest.approx(sum(gaps) / 5)
    low, high = clopper_pearson(2, 5)
    assert f"arm=full 2 of 5 [{low:.2g}, {high:.2g}]" in result.note
    assert f"arm=frozen 0 of 5 [0, {1 - 0.025 ** (1 / 5):.2g}]" in result.note
    p = 2 * math.comb(5, 2) / math.comb(10, 2)
    assert f"Fisher's exact p = {p:.2g} between the arms" in result.note
    assert ("on the 3 seeds that trained in every arm: "
            + per_seed_interval([gaps[0], gaps[2], gaps[4]])) in result.note
    run_report(runs, tmp_path / "report", ARMS)
    with (tmp_path / "report" / "tables" / "findings.csv").open() as handle:
        row = next(csv.DictReader(handle))
    assert row["collapsed"] == "arm=frozen:0/5;arm=full:2/5"
    assert float(row["collapse_fisher_p"]) == pytest.approx(4 / 9)
    assert "arm=full 2 of 5" in (tmp_path / "report" / "REPORT.md").read_text()
    assert "arm=full 2 of 5" in (tmp_path / "report" / "REPORT.html").read_text()


def test_a_population_member_keeps_its_collapsed_seed(tmp_path):
    """Three checkpoints, three fine-tuning seeds each (seed s of member m: 10m + s); member c's
    all-layers run of seed 21 collapses (0.52 against 0.509, within the band). Each member's
    value is the mean of all its seeds' contrasts, the collapsed one too, and the verdict is
    across the 3 members; the rate counts the 9 runs of each arm; the secondary line drops
    seed 21 alone: 8 seeds of 3 checkpoints, member c's mean over its other two."""
    gaps = {"a": (-0.010, -0.012, -0.008), "b": (-0.020, -0.018, -0.022),
            "c": (-0.015, 0.52, -0.013)}  # frozen − full per seed; c's second: full collapsed
    for m, (member, row) in enumerate(gaps.items()):
        for s, gap in enumerate(row):
            full = 0.52 if gap > 0.3 else 0.80 + 0.01 * s
            frozen = 0.80 + 0.01 * s + (gap if gap < 0.3 else 0.0)
            for arm, acc in (("full", full), ("frozen", frozen)):
                write_run(tmp_path / f"{member}{arm}{s}", {"eval/accuracy": acc,
                                                           "eval/majority_accuracy": 0.509},
                          10 * m + s, ARMS, arm=arm, model={"name_or_path": f"ckpt-{member}"})
    result = judge(parse_finding(ARMS), find_runs([tmp_path]))
    assert result.members == ("ckpt-a", "ckpt-b", "ckpt-c")
    c_itt = (-0.015 + (0.80 + 0.01 - 0.52) - 0.013) / 3
    means = [np.mean(gaps["a"]), np.mean(gaps["b"]), c_itt]
    assert result.tests[0].estimate.n == 3
    assert result.tests[0].estimate.mean == pytest.approx(np.mean(means))
    assert "arm=frozen 0 of 9" in result.note and "arm=full 1 of 9" in result.note
    trained = [np.mean(gaps["a"]), np.mean(gaps["b"]), (-0.015 - 0.013) / 2]
    assert ("on the 8 seeds of 3 checkpoints that trained in every arm: "
            + per_seed_interval(trained)) in result.note


@pytest.mark.parametrize("model, shown", [("sentence-transformers/all-MiniLM-L6-v2", True),
                                          ("/cache/encoders/bert-seed0-abc/model", False)])
def test_a_caveat_about_one_checkpoint_shows_only_on_its_runs(tmp_path, model, shown):
    finding = {**FINDING, "caveat": "MiniLM is sentence-tuned",
               "caveat_checkpoint": "all-MiniLM-L6-v2"}
    for seed, (a, b) in enumerate([(0.80, 0.70), (0.82, 0.71), (0.81, 0.69)]):
        write_run(tmp_path / str(seed), {"eval/a": a, "eval/b": b}, seed, finding,
                  model={"name_or_path": model})
    result = judge(parse_finding(finding), find_runs([tmp_path]))
    assert result.corrected.label == "holds"
    assert ("MiniLM is sentence-tuned" in result.note) is shown


def test_runs_that_could_not_measure_a_metric_are_named(tmp_path):
    """A metric some runs lack (too few items for the analysis: a relation under
    min_dependents) leaves the finding unjudged, and the error names those runs."""
    for seed in range(3):
        metrics = {"eval/a": 0.8 + seed / 100, "eval/b": 0.7} if seed else {"eval/b": 0.7}
        write_run(tmp_path / f"run{seed}", metrics, seed, FINDING)
    with pytest.raises(UserError, match=r"1 of the 3 runs have no metric matching 'eval/a' "
                                        r"\(.*run0\): they could not measure it"):
        judge(parse_finding(FINDING), find_runs([tmp_path]))


def test_a_firm_verdict_survives_each_seed_left_out(tmp_path):
    """Five seeds of a − b = 0.10, 0.11, 0.09, 0.105, 0.095: the report leaves each seed out in
    turn and judges the other four (each p by hand, the t-test on 3 degrees of freedom); none
    loses it and the Holm-adjusted p is below α/10, so it is firm, with its P(replication) in
    findings.csv; a sixth seed at −0.05 leaves it resolved (Holm-adjusted p 0.03) but fragile."""
    gaps = [0.10, 0.11, 0.09, 0.105, 0.095]
    runs = tmp_path / "runs"
    for seed, d in enumerate(gaps):
        write_run(runs / str(seed), {"eval/a": 0.7 + d, "eval/b": 0.7}, seed, FINDING)
    result = judge(parse_finding(FINDING), find_runs([runs]))
    assert result.replicates == 5 and [name for name, _, _ in result.left_out] == [
        f"seed {s}" for s in range(5)]
    for i, (_, p_holds, _) in enumerate(result.left_out):
        rest = np.array(gaps[:i] + gaps[i + 1:])
        t = rest.mean() / (rest.std(ddof=1) / 2)
        assert p_holds == pytest.approx(stats.t.sf(t, 3), rel=1e-6)
    metrics = run_report(runs, tmp_path / "report", FINDING)
    assert metrics["report/corrected/holds"] == 1 and metrics["report/corrected/fragile"] == 0
    with (tmp_path / "report" / "tables" / "findings.csv").open() as handle:
        row = next(csv.DictReader(handle))
    assert row["fragile"] == "False" and 0.9 < float(row["p_replication"]) <= 1.0
    write_run(runs / "5", {"eval/a": 0.65, "eval/b": 0.7}, 5, FINDING)
    metrics = run_report(runs, tmp_path / "report6", FINDING)
    assert metrics["report/corrected/holds"] == 1 and metrics["report/corrected/fragile"] == 1


def test_a_compound_verdict_whose_first_part_holds_says_so(tmp_path):
    """finetuning_top_layers' shape: the model's contrast holds (a − b = 0.10 on every seed,
    give or take 0.005) while the twin shows more of it (0.20): the claim beyond the twin
    does not hold, and its note says the first part holds on the model."""
    compound = {**FINDING, "id": "beyond_twin", "compare": {"all": [
        {"a": "eval/a", "b": "eval/b", "expect": "greater"},
        {"a": "eval/a", "b": "eval/b", "twin": {"a": "eval/ta", "b": "eval/tb"},
         "expect": "greater"}]}}
    runs = tmp_path / "runs"
    for seed, d in enumerate((0.0, 0.005, -0.005)):
        write_run(runs / str(seed), {"eval/a": 0.8 + d, "eval/b": 0.7, "eval/ta": 0.9 - d,
                                     "eval/tb": 0.7}, seed, compound)
    metrics = run_report(runs, tmp_path / "report", compound)
    assert metrics["report/corrected/does_not_hold"] == 1
    with (tmp_path / "report" / "tables" / "findings.csv").open() as handle:
        row = next(csv.DictReader(handle))
    assert row["note"].startswith("its first part holds on the model (p = ")
    assert row["note"].split(";")[0].endswith("not beyond its twin")


GUARD = {**FINDING, "id": "learned", "study": "s",
         "compare": {"a": "eval/trained", "b": "eval/twin", "expect": "greater", "margin": 0.02}}
CLAIM = {**FINDING, "id": "where", "study": "s", "presupposes": "learned"}


def presupposing_runs(tmp_path, gain: float) -> Path:
    """Three seeds whose a − b = 0.1 (the claim holds on its own) and whose trained − twin
    gain is `gain` (± 0.001)."""
    runs = tmp_path / "runs"
    for seed, d in enumerate((0.0, 0.001, -0.001)):
        write_run(runs / str(seed), {"eval/a": 0.8 + d, "eval/b": 0.7, "eval/trained": 0.5 + gain
                                     + d, "eval/twin": 0.5}, seed, label="s")
    return runs


def test_a_claim_whose_presupposition_fails_is_uninformative_with_its_estimate(tmp_path):
    """The manipulation check one level up: `where` holds on its own, but the runs' gain over
    the twin (+0.009) is short of `learned`'s margin of 0.02, so `where` says the runs did not
    learn what it presupposes, with that estimate; out of Holm's families."""
    metrics = run_report(presupposing_runs(tmp_path, 0.009), tmp_path / "report", GUARD, CLAIM)
    with (tmp_path / "report" / "tables" / "findings.csv").open() as handle:
        rows = {row["finding"]: row for row in csv.DictReader(handle)}
    assert rows["learned"]["corrected_verdict"] == "does not hold"
    assert rows["where"]["raw_verdict"] == rows["where"]["corrected_verdict"] == "uninformative"
    assert rows["where"]["note"].startswith("the runs did not learn what the claim presupposes: "
                                           "learned does not hold (+0.009 [")
    assert "against its margin 0.02" in rows["where"]["note"]
    assert metrics["report/corrected/uninformative"] == 1


def test_a_claim_whose_presupposition_holds_is_judged(tmp_path):
    run_report(presupposing_runs(tmp_path, 0.2), tmp_path / "report", GUARD, CLAIM)
    with (tmp_path / "report" / "tables" / "findings.csv").open() as handle:
        rows = {row["finding"]: row for row in csv.DictReader(handle)}
    assert rows["learned"]["corrected_verdict"] == rows["where"]["corrected_verdict"] == "holds"


def test_a_presupposition_no_finding_defines_is_refused_in_one_line(tmp_path):
    typo = {**CLAIM, "presupposes": "learnt"}
    with pytest.raises(UserError, match="presupposes learnt, which no findings file defines"):
        run_report(presupposing_runs(tmp_path, 0.2), tmp_path / "report", GUARD, typo)


def test_the_catalog_presupposes_the_manipulation_check_for_probe_claims_about_the_model():
    specs = catalog.load_catalog()
    catalog.check_presuppositions(specs)
    probing = {s.id for s in specs.values() if s.about == "model"
               and set(s.studies) & {"probe_pos", "probe_ner"}} - {"pretraining_beats_random"}
    assert {s.id for s in specs.values() if s.presupposes} == probing
    assert len(probing) == 15
