"""The checked `report` config: which run dirs to read. Light on imports, as the CLI checks
every config before a run starts."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from bertology.errors import require


def load_report_config(cfg: DictConfig) -> list[Path]:
    """The run dirs to report on, checked: given, and present."""
    runs = OmegaConf.to_container(cfg).get("runs") or []
    require(isinstance(runs, list) and bool(runs), "no run dirs given; usage: bertology report "
            "outputs/<pipeline>/<date>/<time> [more dirs or sweep dirs]")
    roots = [Path(str(p)).expanduser() for p in runs]
    for root in roots:
        require(root.exists(), f"{root} does not exist; give run dirs or sweep dirs "
                "(e.g. outputs/probe/multirun/<date>/<time>)")
    return roots
