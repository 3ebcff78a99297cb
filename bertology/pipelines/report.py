"""bertology report: run dirs → REPORT.md, REPORT.html, tables and figures, with a verdict
per survey finding.

runs → the findings they can judge (findings/catalog.py) → a raw verdict per finding
(findings/verdicts.py) → Holm's correction over all of them → a figure per finding, and one
per task of the probe's layer curves across runs (a checkpoint sweep; findings/curves.py) →
REPORT.md, REPORT.html (self-contained: figures inlined), tables/findings.csv and
tables/metrics.csv.
"""

from __future__ import annotations

import logging
from pathlib import Path

from omegaconf import DictConfig

from bertology.config.report import load_report_config
from bertology.errors import UserError
from bertology.findings.catalog import findings_for
from bertology.findings.curves import plot_layer_curves
from bertology.findings.html import write_html
from bertology.findings.reporting import (
    finding_rows,
    metric_rows,
    plot_finding,
    verdict_counts,
    write_report,
)
from bertology.findings.results import find_runs
from bertology.findings.verdicts import FindingResult, correct_suite, judge
from bertology.run.files import write_json_atomic
from bertology.run.tables import write_table

log = logging.getLogger(__name__)


def run(cfg: DictConfig, out_dir: Path) -> dict[str, float]:
    roots = load_report_config(cfg)
    runs = [r for r in find_runs(roots) if out_dir not in r.path.parents and r.path != out_dir]
    results, skipped = judge_all(runs)
    correct_suite(results)
    write_table(out_dir, "metrics", metric_rows(runs))
    write_table(out_dir, "findings", finding_rows(results))
    figures = {r.id: plot_finding(r, out_dir) for r in results}
    curves = plot_layer_curves(runs, out_dir)  # a checkpoint sweep's probe curves
    report = write_report(results, skipped, runs, out_dir, figures, curves)
    write_html(results, skipped, runs, out_dir, figures, curves)
    log.info("%s: %d runs, %s", report, len(runs),
             ", ".join(f"{r.id}={r.raw}/{r.corrected}" for r in results) or "no findings")
    metrics = {"report/runs": float(len(runs)), "report/findings": float(len(results))}
    for which in ("raw", "corrected"):
        for verdict, count in verdict_counts(results, which).items():
            metrics[f"report/{which}/{verdict.replace(' ', '_')}"] = float(count)
    write_json_atomic(out_dir / "metrics.json", metrics)
    return metrics


def judge_all(runs) -> tuple[list[FindingResult], list[tuple[str, str]]]:
    """Every finding the runs can judge; one whose evidence is missing from them is listed
    with the reason instead of failing the report."""
    results, skipped = [], []
    for spec, spec_runs in findings_for(runs):
        try:
            results.append(judge(spec, spec_runs))
        except UserError as err:
            skipped.append((spec.id, str(err)))
            log.warning("finding %s not judged: %s", spec.id, err)
    return results, skipped

