"""Finished runs as the report reads them: metrics, the saved config, item replicates."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
from omegaconf import OmegaConf

from bertology.errors import UserError, require
from bertology.run.replicates import read_replicates
from bertology.run.rundir import finished_runs


@dataclass
class Run:
    path: Path
    metrics: dict[str, float]
    config: dict = field(repr=False)

    @property
    def seed(self) -> int | None:
        seed = self.config.get("seed")
        return int(seed) if isinstance(seed, int) and not isinstance(seed, bool) else None

    @property
    def study(self) -> str | None:
        """The study the run belongs to (its bundle's `study.name`), if any."""
        block = self.config.get("study")
        return block.get("name") if isinstance(block, dict) else block

    @property
    def finding(self) -> dict | None:
        """The finding block a run made by `experiment=finding_<id>` carries."""
        return self.config.get("finding")

    @cached_property
    def replicates(self) -> dict[str, np.ndarray]:
        return read_replicates(self.path)

    def choice(self, key: str):
        node = self.config
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return node


NOT_THE_EXPERIMENT = ("seed", "paths", "finding")  # config keys that do not define the runs


def replication_key(run: Run) -> str:
    """The run's config less its seed, paths and finding block: runs sharing it are
    replications of one experiment."""
    config = {k: v for k, v in run.config.items() if k not in NOT_THE_EXPERIMENT}
    return json.dumps(config, sort_keys=True, default=str)


def load_run(path: Path) -> Run:
    try:
        metrics = json.loads((path / "metrics.json").read_text())
        config = OmegaConf.to_container(OmegaConf.load(path / ".hydra" / "config.yaml"))
    except (OSError, ValueError) as err:
        raise UserError(f"{path}: unreadable run ({str(err).splitlines()[0]}); remove it "
                        "or rerun it") from err
    return Run(path, {k: float(v) for k, v in metrics.items()}, config)


def find_runs(roots: list[Path]) -> list[Run]:
    """Every finished run under the roots (a root may be a run itself)."""
    runs = [load_run(path) for path in finished_runs(roots)]
    require(bool(runs), f"no finished runs (metrics.json + .hydra/config.yaml) under "
            f"{', '.join(map(str, roots))}")
    return runs
