"""A report dir from run dirs: the runs → the findings they can judge (judge/catalog.py) → a
raw verdict per finding (judge/verdicts.py) → the manipulation checks and Holm's correction over
all of them (judge/suite.py) → a figure per finding, and one per task of the probe's layer
curves across runs (a checkpoint sweep; curves.py) → REPORT.md, REPORT.html (self-contained:
figures inlined), tables/findings.csv and tables/metrics.csv. Claims about pretraining and
claims about one checkpoint are counted apart (judge/scope.py), in the headline and in the
metrics (report/pretraining/…, report/checkpoint/…). `bertology report` is a thin verb over
write_report_dir (pipelines/report.py).
"""

from __future__ import annotations

import logging
from pathlib import Path

from bertology.config.report_config import ReportConfig
from bertology.errors import UserError
from bertology.run.atomic import write_json_atomic
from bertology.run.rundir import METRICS_FILE
from bertology.run.tables import write_table
from bertology.study.judge.catalog import (
    check_presuppositions,
    findings_for,
    load_catalog,
    studies_guide,
)
from bertology.study.judge.record import FindingResult
from bertology.study.judge.results import find_runs
from bertology.study.judge.scale import SCALE_TABLE, find_shortfalls, smoke_line
from bertology.study.judge.selection import MEMBERS_TABLE, Selection
from bertology.study.judge.suite import correct_suite
from bertology.study.judge.verdicts import apply_presuppositions, judge
from bertology.study.pages.curves import plot_layer_curves_across_runs
from bertology.study.pages.report_html import write_html
from bertology.study.pages.reporting import (
    FINDING_COLUMNS,
    finding_rows,
    holm_verdict,
    metric_rows,
    plot_finding,
    split_by_kind,
    verdict_counts,
    write_report,
)

log = logging.getLogger(__name__)


def write_report_dir(config: ReportConfig, out_dir: Path) -> dict[str, float]:
    """The report over config.runs into out_dir (REPORT.md, REPORT.html, tables/, figures,
    metrics.json); the metrics it writes."""
    runs = [r for r in find_runs(config.runs)
            if out_dir not in r.path.parents and r.path != out_dir]
    catalog = load_catalog()
    if config.findings_dir is not None:  # the user's own, beside the survey's
        catalog.update(load_catalog(config.findings_dir))
    check_presuppositions(catalog)
    results, skipped = judge_all(runs, catalog)
    results = correct_suite(apply_presuppositions(results))  # the manipulation check, then Holm
    shortfalls = find_shortfalls(runs)  # runs smaller than their studies state: say so first
    if shortfalls:
        log.warning("%s", smoke_line(shortfalls))
    write_table(out_dir, SCALE_TABLE, [s.row() for s in shortfalls],
                ["study", "key", "runs", "stated"])
    selection = load_selection(config.members_table, out_dir)
    write_table(out_dir, "metrics", metric_rows(runs))
    write_table(out_dir, "findings", finding_rows(results, selection), FINDING_COLUMNS)
    figures = {r.id: plot_finding(r, out_dir) for r in results}
    curves = plot_layer_curves_across_runs(runs, out_dir)  # a checkpoint sweep's probe curves
    guide = None
    if not results:
        guide = studies_guide(catalog)
        log.info("no finding judged: the runs carry no study label; REPORT.md lists each "
                 "study's command and the findings it answers (e.g. bertology probe -m "
                 "experiment=study_probe_pos)")
    report = write_report(results, skipped, runs, out_dir, figures, curves, guide, shortfalls,
                          selection)
    write_html(results, skipped, runs, out_dir, figures, curves, shortfalls, selection)
    log.info("%s: %d runs, %s", report, len(runs),
             ", ".join(f"{r.id}={r.raw.label}/{holm_verdict(r)}" for r in results) or "no findings")
    metrics = {"report/runs": float(len(runs)), "report/smoke_sized": float(bool(shortfalls)),
               **verdict_metrics("report", results)}
    for kind, group in split_by_kind(results).items():  # pretraining and checkpoint apart
        metrics.update(verdict_metrics(f"report/{kind}", group))
    write_json_atomic(out_dir / METRICS_FILE, metrics)
    return metrics


def load_selection(table: Path | None, out_dir: Path) -> Selection | None:
    """A population's members table (members_table=), copied into tables/members.csv: every
    member drawn, set aside or not (study/judge/selection.py)."""
    if table is None:
        return None
    selection = Selection.read(table)
    write_table(out_dir, MEMBERS_TABLE, [dict(row) for row in selection.rows])
    log.info("members: %s", selection.words())
    return selection


def verdict_metrics(prefix: str, results: list[FindingResult]) -> dict[str, float]:
    """<prefix>/findings, <prefix>/{raw,corrected}/<verdict> and <prefix>/corrected/fragile."""
    metrics = {f"{prefix}/findings": float(len(results))}
    for which in ("raw", "corrected"):
        for verdict, count in verdict_counts(results, which).items():
            metrics[f"{prefix}/{which}/{verdict.replace(' ', '_')}"] = float(count)
    metrics[f"{prefix}/corrected/fragile"] = float(sum(r.fragile for r in results))
    return metrics


def judge_all(runs, catalog) -> tuple[list[FindingResult], list[tuple[str, str]]]:
    """Every finding of the catalog the runs can judge; one whose evidence is missing from
    them is listed with the reason instead of failing the report."""
    results, skipped = [], []
    for spec, spec_runs in findings_for(runs, catalog):
        try:
            results.append(judge(spec, spec_runs))
        except UserError as err:
            skipped.append((spec.id, str(err)))
            log.warning("finding %s not judged: %s", spec.id, err)
    return results, skipped

