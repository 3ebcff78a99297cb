"""Every conf/experiment/finding_*.yaml: its header gives the command that runs it, its
`finding:` block is complete, it composes and passes its pipeline's checks, and its smoke
variant runs one step end to end and gets a computed verdict from `bertology report`."""

from __future__ import annotations

import importlib
import re

import pytest
from conftest import REPO, compose_config
from omegaconf import OmegaConf

from bertology import report
from bertology.cli import CONFIG_CHECKS, PIPELINES

FINDINGS = sorted(p.stem for p in (REPO / "conf" / "experiment").glob("finding_*.yaml"))
VERDICTS = ("holds", "does not hold", "inconclusive")

pytestmark = pytest.mark.usefixtures("one_thread")


def pipeline_of(name: str) -> str:
    text = (REPO / "conf" / "experiment" / f"{name}.yaml").read_text()
    match = re.search(rf"bertology (\w+) -m experiment={name}\b", text)
    assert match, f"{name}: the header must give `bertology <pipeline> -m experiment={name}`"
    return match.group(1)


@pytest.mark.parametrize("name", FINDINGS)
def test_a_finding_composes_and_is_complete(name):
    pipeline = pipeline_of(name)
    cfg = compose_config(pipeline, [f"experiment={name}", "seed=0"])
    CONFIG_CHECKS[pipeline](cfg)
    finding = OmegaConf.to_container(cfg.finding, resolve=True)
    assert {"id", "claim", "source", "compare", "smoke"} <= set(finding)
    assert f"finding_{finding['id']}" == name
    assert finding["compare"]["expect"] in report.EXPECTATIONS


@pytest.mark.parametrize("name", FINDINGS)
def test_a_finding_runs_one_step_and_gets_a_verdict(name, tmp_path):
    pipeline = pipeline_of(name)
    smoke = OmegaConf.to_container(compose_config(pipeline, [f"experiment={name}"]).finding.smoke)
    cfg = compose_config(pipeline, [f"experiment={name}", "seed=0", "logger=none", *smoke])
    run_dir = tmp_path / "run"
    (run_dir / ".hydra").mkdir(parents=True)
    OmegaConf.save(cfg, run_dir / ".hydra" / "config.yaml")  # as Hydra saves a run's config
    importlib.import_module(PIPELINES[pipeline]).run(cfg, run_dir)
    result = report.judge(name.removeprefix("finding_"), report.find_runs([run_dir]))
    assert result.verdict in VERDICTS and result.diff.n == 1
