"""bertology report: run dirs → REPORT.md, REPORT.html, tables and figures, with a verdict
per survey finding. The verb reads its config and hands it to the study
(study/pages/report_dir.py), which judges the runs and writes the pages.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from bertology.config.report_config import load_report_config
from bertology.study.pages.report_dir import write_report_dir


def run(cfg: DictConfig, out_dir: Path) -> dict[str, float]:
    return write_report_dir(load_report_config(cfg), out_dir)
