"""Every conf/experiment/finding_*.yaml: its header gives the command that runs it, its
`finding:` block is complete, it composes and passes its pipeline's checks (every job of its
sweep), and its smoke variant runs one step end to end, producing the evidence the report reads
(and, for a finding within one run, a computed verdict)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from conftest import REPO, compose_config
from omegaconf import OmegaConf
from test_experiments import sweep_jobs

from bertology import reproduce
from bertology.cli import CONFIG_CHECKS, PIPELINES
from bertology.pipelines import report

FINDINGS = sorted(p.stem for p in (REPO / "conf" / "experiment").glob("finding_*.yaml"))
VERDICTS = ("holds", "does not hold", "inconclusive")

pytestmark = pytest.mark.usefixtures("one_thread")


def pipeline_of(name: str) -> str:
    return reproduce.pipeline_of(REPO / "conf" / "experiment" / f"{name}.yaml")


@pytest.mark.parametrize("name", FINDINGS)
def test_a_finding_composes_and_is_complete(name):
    pipeline = pipeline_of(name)
    cfg = compose_config(pipeline, [f"experiment={name}", "seed=0"])
    finding = OmegaConf.to_container(cfg.finding, resolve=True)
    assert {"id", "claim", "source", "compare", "smoke", "reproduce"} <= set(finding)
    assert f"finding_{finding['id']}" == name
    assert finding["compare"]["expect"] in report.EXPECTATIONS
    reproduce = [o.replace("{sst2_model}", "outputs/some/model") for o in finding["reproduce"]]
    jobs = []
    for overrides in sweep_jobs(name, pipeline):
        job = compose_config(pipeline, [*overrides, *reproduce])
        CONFIG_CHECKS[pipeline](job)
        jobs.append(report.Run(Path(name), {}, OmegaConf.to_container(job, resolve=True),
                               finding))
    for side in (finding["compare"]["a"], finding["compare"]["b"]):
        if not isinstance(side, (int, float)):  # each side is some job of the sweep
            assert any(report.selects(job, side) for job in jobs), side


@pytest.mark.parametrize("name", FINDINGS)
def test_a_finding_runs_one_step_and_gets_a_verdict(name, tmp_path):
    pipeline = pipeline_of(name)
    smoke = OmegaConf.to_container(compose_config(pipeline, [f"experiment={name}"]).finding.smoke)
    cfg = compose_config(pipeline, [f"experiment={name}", "seed=0", "logger=none", *smoke])
    run_dir = tmp_path / "run"
    (run_dir / ".hydra").mkdir(parents=True)
    OmegaConf.save(cfg, run_dir / ".hydra" / "config.yaml")  # as Hydra saves a run's config
    importlib.import_module(PIPELINES[pipeline]).run(cfg, run_dir)
    (run,) = report.find_runs([run_dir])
    compare = run.finding["compare"]
    sides = [side for side in (compare["a"], compare["b"]) if not isinstance(side, (int, float))]
    for side in sides:  # the run produced the evidence (a sweep's arm aside)
        assert isinstance(report.evidence_value(run, side), float)
    if not any(isinstance(side, dict) and side.get("where") for side in sides):
        result = report.judge(name.removeprefix("finding_"), [run])
        assert result.verdict in VERDICTS and result.diff.n == 1


def test_reproduce_runs_every_finding():
    findings = reproduce.load_findings(None)
    assert {f"finding_{name}" for name in findings} == set(FINDINGS)
    assert all(spec["pipeline"] in PIPELINES for spec in findings.values())
