"""Finished runs as the study reads them (RunDir, bertology/run/rundir.py), and which of them
replicate one experiment."""

from __future__ import annotations

import json
from pathlib import Path

from bertology.errors import require
from bertology.run.rundir import RunDir, finished_runs

NOT_THE_EXPERIMENT = ("seed", "paths", "finding")  # config keys that do not define the runs


def replication_key(run: RunDir) -> str:
    """The run's config less its seed, paths and finding block: runs sharing it are
    replications of one experiment."""
    config = {k: v for k, v in run.config.items() if k not in NOT_THE_EXPERIMENT}
    return json.dumps(config, sort_keys=True, default=str)


def find_runs(roots: list[Path]) -> list[RunDir]:
    """Every finished run under the roots (a root may be a run itself), each read whole now,
    so a damaged run is refused before any verdict is computed."""
    runs = [RunDir(path) for path in finished_runs(roots)]
    for run in runs:
        run.metrics, run.config  # noqa: B018  (read now: a damaged file fails here, named)
    require(bool(runs), f"no finished runs (metrics.json + .hydra/config.yaml) under "
            f"{', '.join(map(str, roots))}")
    return runs


def flatten(config: dict, prefix: str = "") -> dict[str, object]:
    """{"model.name_or_path": ..., ...} from a nested config."""
    flat: dict[str, object] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat
