"""The checked `report` config: which run dirs to read, and an optional folder of the user's own
findings. Light on imports, as the CLI checks every config before a run starts."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from bertology.errors import require

KEYS = ("runs", "findings_dir", "members_table")


@dataclass(frozen=True)
class ReportConfig:
    runs: list[Path]  # run dirs or sweep dirs, searched recursively
    findings_dir: Path | None = None  # <id>.yaml files judged beside findings/'s
    # a population's members table (study/schedule/members.py): every member drawn, its recipe and
    # whether it learned; the report states the selection with the verdicts' scope
    members_table: Path | None = None


def load_report_config(cfg: DictConfig) -> ReportConfig:
    """The run dirs to report on, checked: given, and folders; the findings folder, if given."""
    container = OmegaConf.to_container(cfg)
    unknown = sorted(set(container) - set(KEYS))
    require(not unknown, f"{unknown[0] if unknown else ''} is not a known key; report takes "
            "run dirs, findings_dir=<folder> and members_table=<csv>: bertology report "
            "outputs/<pipeline>/<date>/<time> [more dirs]")
    runs = container.get("runs") or []
    require(isinstance(runs, list) and bool(runs), "no run dirs given; usage: bertology report "
            "outputs/<pipeline>/<date>/<time> [more dirs or sweep dirs]")
    roots = [Path(str(p)).expanduser() for p in runs]
    for root in roots:
        require(root.exists(), f"runs: {root} does not exist; give run dirs or sweep dirs "
                "(e.g. outputs/probe/multirun/<date>/<time>)")
        require(root.is_dir(), f"runs: {root} is a file, not a run dir; give run dirs or "
                "sweep dirs (e.g. outputs/probe/multirun/<date>/<time>)")
    # the user's folder of findings, judged beside the survey's catalogue (findings/)
    folder = container.get("findings_dir")
    if folder is not None:
        folder = Path(str(folder)).expanduser()
        require(folder.is_dir() and any(folder.glob("*.yaml")),
                f"findings_dir={folder}: not a folder of finding files; give a folder of "
                "<id>.yaml files laid out as findings/<id>.yaml, or leave it out")
    table = container.get("members_table")
    if table is not None:
        table = Path(str(table)).expanduser()
        require(table.is_file() and table.suffix == ".csv",
                f"members_table={table}: not a CSV file; give the members.csv a population run "
                "writes (python -m bertology.reproduce --population K), or leave it out")
    return ReportConfig(roots, folder, table)
