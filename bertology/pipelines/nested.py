"""A pipeline run nested in another (distill's teacher, prune's fine-tuned model and
student, pretrain's downstream fine-tuning), dispatched by name through config/verbs.py's
rows as the CLI does, so no pipeline imports another."""

import logging
from pathlib import Path

from omegaconf import DictConfig

from bertology.pipelines import load_pipeline
from bertology.run.rundir import RunDir

log = logging.getLogger(__name__)


def run_nested(pipeline: str, cfg: DictConfig, out_dir: Path, what: str) -> dict[str, float]:
    """`bertology <pipeline>` run into a sub-directory of this run, once: a finished one (its
    metrics.json) is reused when the outer run is resumed. Returns its metrics."""
    if not RunDir(out_dir).finished:
        log.info("%s into %s", what, out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        load_pipeline(pipeline)(cfg, out_dir)
    metrics = RunDir(out_dir).metrics
    log.info("%s: %s", what, " ".join(f"{k}={v:.4f}" for k, v in sorted(metrics.items())
                                      if k.startswith(("eval/", "distill/retained"))))
    return metrics
