"""Pipelines are verbs: run(cfg, out_dir) -> dict[str, float], read like a table of contents."""

import json
import logging
from collections.abc import Callable
from pathlib import Path

from omegaconf import DictConfig

log = logging.getLogger(__name__)


def run_nested(run: Callable[[DictConfig, Path], dict], cfg: DictConfig, out_dir: Path,
               what: str) -> dict[str, float]:
    """Another pipeline's run into a sub-directory of this run (distill's teacher, prune's
    fine-tuned model and student), once: a finished one (its metrics.json) is reused when the
    outer run is resumed. Returns its metrics."""
    if not (out_dir / "metrics.json").exists():
        log.info("%s into %s", what, out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        run(cfg, out_dir)
    metrics = json.loads((out_dir / "metrics.json").read_text())
    log.info("%s: %s", what, " ".join(f"{k}={v:.4f}" for k, v in sorted(metrics.items())
                                      if k.startswith(("eval/", "distill/retained"))))
    return metrics
