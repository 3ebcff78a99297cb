"""The checked `report` config: which run dirs to read. Light on imports, as the CLI checks
every config before a run starts."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from bertology.errors import require


def load_report_config(cfg: DictConfig) -> list[Path]:
    """The run dirs to report on, checked: given, and folders."""
    container = OmegaConf.to_container(cfg)
    unknown = sorted(set(container) - {"runs"})
    require(not unknown, f"{unknown[0] if unknown else ''} is not a known key; report takes "
            "run dirs only: bertology report outputs/<pipeline>/<date>/<time> [more dirs]")
    runs = container.get("runs") or []
    require(isinstance(runs, list) and bool(runs), "no run dirs given; usage: bertology report "
            "outputs/<pipeline>/<date>/<time> [more dirs or sweep dirs]")
    roots = [Path(str(p)).expanduser() for p in runs]
    for root in roots:
        require(root.exists(), f"runs: {root} does not exist; give run dirs or sweep dirs "
                "(e.g. outputs/probe/multirun/<date>/<time>)")
        require(root.is_dir(), f"runs: {root} is a file, not a run dir; give run dirs or "
                "sweep dirs (e.g. outputs/probe/multirun/<date>/<time>)")
    return roots
