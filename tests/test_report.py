"""bertology report: verdicts computed from synthetic run dirs where a claim holds, fails or is
inconclusive; reductions over layer curves; aggregation over seeds; the CLI end to end."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml
from conftest import run_cli
from omegaconf import OmegaConf

from bertology.errors import UserError
from bertology.pipelines import report

FINDING = {"id": "demo", "claim": "a beats b", "source": "a paper, Table 1",
           "compare": {"a": "eval/a", "b": "eval/b", "expect": "greater"}}


def write_run(path: Path, metrics: dict, seed: int, finding: dict | None = None,
              **config) -> Path:
    (path / ".hydra").mkdir(parents=True)
    (path / ".hydra" / "config.yaml").write_text(
        yaml.safe_dump({"seed": seed, **config, **({"finding": finding} if finding else {})}))
    (path / "metrics.json").write_text(json.dumps(metrics))
    return path


def judge_runs(tmp_path: Path, pairs: list[tuple[float, float]], finding=FINDING):
    for seed, (a, b) in enumerate(pairs):
        write_run(tmp_path / str(seed), {"eval/a": a, "eval/b": b}, seed, finding)
    runs = report.find_runs([tmp_path])
    return report.judge("demo", runs)


@pytest.mark.parametrize("pairs, verdict", [
    ([(0.80, 0.70), (0.82, 0.71), (0.81, 0.69)], "holds"),
    ([(0.60, 0.70), (0.62, 0.71), (0.61, 0.69)], "does not hold"),
    ([(0.80, 0.70), (0.60, 0.71), (0.75, 0.72)], "inconclusive"),  # seeds disagree
    ([(0.80, 0.70)], "holds"),  # one deterministic value: the sign decides
])
def test_verdicts_from_seeds(tmp_path, pairs, verdict):
    result = judge_runs(tmp_path, pairs)
    assert result.verdict == verdict
    assert result.diff.n == len(pairs)
    assert result.a.mean == pytest.approx(sum(a for a, _ in pairs) / len(pairs))


@pytest.mark.parametrize("margin, verdict", [(0.05, "holds"), (0.0, "does not hold")])
def test_less_with_a_margin(tmp_path, margin, verdict):
    """a − b ≈ +0.02: below a margin of 0.05 ("at most 5 points worse"), not below 0."""
    finding = {**FINDING, "compare": {"a": "eval/a", "b": "eval/b", "expect": "less",
                                      "margin": margin}}
    result = judge_runs(tmp_path, [(0.72, 0.70), (0.73, 0.71), (0.715, 0.70)], finding)
    assert result.verdict == verdict


def test_the_interval_is_a_t_interval():
    summary = report.summarise([1.0, 2.0, 3.0])
    assert summary.mean == 2.0 and summary.std == 1.0
    assert summary.high - summary.mean == pytest.approx(4.302653 / 3**0.5, rel=1e-5)


def layer_metrics(values: list[float]) -> dict[str, float]:
    return {f"probe/layer_{i:02d}/accuracy": v for i, v in enumerate(values)}


def test_layer_reductions():
    layers, values = report.layer_series(layer_metrics([0.5, 0.9, 0.8, 0.7, 0.6]),
                                         "probe/layer_*/accuracy")
    assert layers == [0, 1, 2, 3, 4]
    assert report.REDUCTIONS["argmax_fraction"](layers, values) == 0.25
    assert report.REDUCTIONS["peak_off_middle"](layers, values) == 0.25
    assert report.REDUCTIONS["trend"](layers, [0.1, 0.2, 0.3, 0.5, 0.4]) == pytest.approx(0.9)
    assert report.REDUCTIONS["top_minus_bottom"](layers, values) == pytest.approx(
        (0.7 + 0.6) / 2 - (0.5 + 0.9) / 2)


def test_a_threshold_finding_over_layer_curves(tmp_path):
    """'POS peaks in the lower half': argmax fraction < 0.5 in every seed."""
    finding = {**FINDING, "compare": {"a": {"metric": "probe/layer_*/accuracy",
                                            "reduce": "argmax_fraction"},
                                      "b": 0.5, "expect": "less"}}
    for seed, peak in enumerate([1, 2, 1]):
        values = [0.6] * 7
        values[peak] = 0.9
        write_run(tmp_path / str(seed), layer_metrics(values), seed, finding)
    result = report.judge("demo", report.find_runs([tmp_path]))
    assert result.verdict == "holds" and result.diff.n == 3


def test_groups_of_a_sweep_are_compared_by_where(tmp_path):
    """Dynamic vs static masking: two config groups of one sweep, paired by seed."""
    finding = {**FINDING, "compare": {"a": {"metric": "eval/acc", "reduce": "max",
                                            "where": {"model.masking": "dynamic"}},
                                      "b": {"metric": "eval/acc",
                                            "where": {"model.masking": "static"}},
                                      "expect": "greater", "margin": -0.01}}
    for seed in range(3):
        for masking, acc in (("dynamic", 0.70 + 0.01 * seed), ("static", 0.70 + 0.01 * seed)):
            write_run(tmp_path / f"{masking}{seed}", {"eval/acc": acc}, seed, finding,
                      model={"masking": masking})
    result = report.judge("demo", report.find_runs([tmp_path]))
    assert result.verdict == "holds"  # equal within the 1-point margin: "at least as good"
    assert result.diff.mean == pytest.approx(0.0)


def test_report_pipeline_writes_markdown_tables_and_figures(tmp_path):
    runs = tmp_path / "runs"
    judge_runs(runs, [(0.8, 0.7), (0.81, 0.7), (0.79, 0.71)])
    write_run(runs / "plain", {"eval/accuracy": 0.5}, 0)  # a run of no finding: aggregated
    out = tmp_path / "report"
    metrics = report.run(OmegaConf.create({"runs": [str(runs)]}), out)
    assert metrics["report/findings"] == 1 and metrics["report/holds"] == 1
    text = (out / "REPORT.md").read_text()
    assert "| demo | a beats b | a paper, Table 1 |" in text and "**holds**" in text
    assert "| eval/accuracy | 0.5 |" in text  # the plain run's group, in the runs section
    assert (out / "plots" / "finding_demo.png").stat().st_size > 0
    with (out / "tables" / "findings.csv").open() as handle:
        assert next(csv.DictReader(handle))["verdict"] == "holds"
    with (out / "tables" / "metrics.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    a = next(r for r in rows if r["metric"] == "eval/a")
    assert int(a["n"]) == 3 and float(a["mean"]) == pytest.approx(0.8)


def test_no_runs_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="no finished runs"):
        report.find_runs([tmp_path])


def test_cli_takes_dirs_as_arguments(tmp_path):
    judge_runs(tmp_path / "runs", [(0.8, 0.7), (0.81, 0.7)])
    result = run_cli("report", str(tmp_path / "runs"), "hydra.run.dir=out", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "**holds**" in (tmp_path / "out" / "REPORT.md").read_text()
    missing = run_cli("report", str(tmp_path / "nowhere"), cwd=tmp_path)
    assert missing.returncode == 2
    assert "does not exist" in missing.stderr.strip().splitlines()[-1]
