"""REPORT.html: the report as one self-contained page a browser opens from disk, offline. The
claims table (claim, source, test, effect, interval, raw and Holm verdicts), each claim's
figure inlined as a base64 data URI, and the run dirs behind it. No script and no network:
every byte the page shows is in the file, and all text is escaped."""

from __future__ import annotations

import base64
from html import escape
from pathlib import Path

from bertology.run.atomic import write_text_atomic
from bertology.run.rundir import RunDir, headline_keys
from bertology.study.judge.evidence import Evidence
from bertology.study.judge.record import FindingResult, Verdict
from bertology.study.judge.scale import Shortfall
from bertology.study.judge.scope import scope_of
from bertology.study.judge.selection import Selection
from bertology.study.pages.reporting import (
    FIRM_WORDS,
    KIND_TITLES,
    METHOD,
    compute_mean_sd,
    format_estimate,
    group_runs,
    headline,
    split_by_kind,
    title_line,
)

REPORT_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; max-width: 1600px; margin: 2em auto;
       padding: 0 1em; color: #1a1a1a; }
table { border-collapse: collapse; margin: 1em 0; font-size: 13px; width: 100%; }
td.claim { min-width: 14em; }
td.note { font-size: 12px; color: #444; max-width: 30em; }
td code { word-break: break-word; }
th, td { border: 1px solid #ccc; padding: 4px 8px; vertical-align: top; text-align: left; }
th { background: #f2f2f2; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
code { font-size: 12px; }
.holds { color: #0072B2; font-weight: bold; }
.does-not-hold { color: #D55E00; font-weight: bold; }
.leans-against { color: #8a4a00; font-weight: bold; }
.underpowered, .inconclusive, .uninformative { color: #555; font-weight: bold; }
.fragile { font-weight: normal; font-style: italic; color: #555; }
section.finding { border-top: 1px solid #ccc; margin-top: 2em; }
section.finding img, figure img { max-width: 100%; height: auto; }
"""


def members_rows(selection: Selection) -> str:
    """The members table's header and rows (Selection.table), a set-aside member in bold."""
    header, rows = selection.table()
    cells = ["<tr>" + "".join(f"<th>{escape(h)}</th>" for h in header) + "</tr>"]
    cells += ["<tr>" + "".join(f"<td><b>{escape(c)}</b></td>" if c == "no: set aside"
                               else f"<td>{escape(c)}</td>" for c in row) + "</tr>"
              for row in rows]
    return "".join(cells)


def verdict_cell(verdict: Verdict, fragile: bool = False) -> str:
    mark = ' <span class="fragile">(fragile)</span>' if fragile else ""
    label = verdict.label
    return f'<span class="{escape(label.replace(" ", "-"))}">{escape(label)}</span>{mark}'


def image_uri(path: Path) -> str:
    """A PNG as a data URI: the page opens from anywhere, the figure inside it."""
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def claims_table(results: list[FindingResult]) -> list[str]:
    """A row per comparison of each finding; the finding's cells on its first row."""
    lines = ["<table>", "<tr><th>finding</th><th>claim</th><th>scope</th><th>source</th>"
             "<th>test</th>"
             "<th>effect a − b</th><th>95% interval</th><th>seeds</th><th>raw</th>"
             "<th>Holm</th><th>note</th></tr>"]
    for r in results:
        for i, (test, comparison) in enumerate(zip(r.tests, r.spec.comparisons)):
            effect, interval = format_estimate(test.estimate)
            head = (f'<td><a href="#{escape(r.id)}">{escape(r.id)}</a></td>'
                    f'<td class="claim">{escape(r.spec.claim)}</td>'
                    f"<td>{escape(scope_of(r).words)}</td><td>{escape(r.spec.source)}</td>"
                    if i == 0 else "<td></td>" * 4)
            tail = (f"<td>{verdict_cell(r.raw)}</td><td>{verdict_cell(r.corrected, r.fragile)}</td>"
                    f'<td class="note">{escape(r.note)}</td>' if i == 0 else "<td></td>" * 3)
            lines.append(f"<tr>{head}<td><code>{escape(comparison.describe())}</code></td>"
                         f'<td class="num">{escape(effect)}</td>'
                         f'<td class="num">{escape(interval)}</td>'
                         f'<td class="num">{test.estimate.n}</td>{tail}</tr>')
    return lines + ["</table>"]


# an evidence's metric prefix -> the figure its analysis draws in a run's plots/: the per-layer
# effect with its item interval beside the probe's curve ("decodable vs used")
RUN_FIGURES = {"interchange/": "interchange_*.png", "erasure_use/": "erasure_use_*.png"}


def run_figures(result: FindingResult) -> list[Path]:
    """The figures the finding's first run drew of the analysis its claim reads (none for a
    claim on other metrics): one run's curves, as its own report shows them."""
    metrics = [e.metric for c in result.spec.comparisons for e in (c.a, c.b)
               if isinstance(e, Evidence)]
    patterns = {glob for prefix, glob in RUN_FIGURES.items()
                if any(m.startswith(prefix) for m in metrics)}
    if not result.runs or not patterns:
        return []
    plots = result.runs[0].path / "plots"
    return sorted(p for pattern in patterns for p in plots.glob(pattern))


def finding_section(result: FindingResult, figure: Path) -> list[str]:
    """A claim with its figure, the figures its first run drew of the analysis it reads, and
    the run dirs it was judged on."""
    runs = "".join(f"<li><code>{escape(str(run.path))}</code></li>" for run in result.runs)
    drawn = [f'<figure><img src="{image_uri(path)}" alt="{escape(path.stem)}"><figcaption>'
             f"{escape(path.stem)}: {escape(str(result.runs[0].path))}</figcaption></figure>"
             for path in run_figures(result)]
    return [f'<section class="finding" id="{escape(result.id)}">',
            f"<h3>{escape(result.id)}: {escape(result.spec.claim)}</h3>",
            f"<p>{escape(result.spec.source)} — raw {verdict_cell(result.raw)}, "
            f"Holm {verdict_cell(result.corrected, result.fragile)}, "
            f"{escape(scope_of(result).words)}</p>",
            f'<img src="{image_uri(figure)}" alt="{escape(f"figure of {result.id}")}">',
            *drawn, f"<p>RunDir dirs ({len(result.runs)}):</p><ul>{runs}</ul>", "</section>"]


def runs_table(runs: list[RunDir]) -> list[str]:
    """The headline metrics of each group of runs that differ only in their seed."""
    lines = ["<table>", "<tr><th>group</th><th>runs</th><th>seeds</th><th>metric</th>"
             "<th>mean ± std</th></tr>"]
    for index, group in enumerate(group_runs(runs).values()):
        for name in headline_keys({k for r in group for k in r.metrics}):
            s = compute_mean_sd([r.metrics[name] for r in group if name in r.metrics])
            paths = "<br>".join(f"<code>{escape(str(r.path))}</code>" for r in group)
            lines.append(f'<tr><td class="num">{index}</td><td>{paths}</td>'
                         f'<td class="num">{len(group)}</td><td>{escape(name)}</td>'
                         f'<td class="num">{s["mean"]:.4g} ± {s["std"]:.2g}</td></tr>')
    return lines + ["</table>"]


def write_html(results: list[FindingResult], skipped: list[tuple[str, str]], runs: list[RunDir],
               out_dir: Path, figures: dict[str, str],
               curves: dict[str, str] | None = None, shortfalls: list[Shortfall] = (),
               selection: Selection | None = None) -> Path:
    """REPORT.html beside REPORT.md; figures maps a finding's id to its PNG (relative), curves
    a caption to a figure of layer curves across runs (study/pages/curves.py)."""
    body = [f"<h1>{escape(title_line(list(shortfalls)).removeprefix('# '))}</h1>",
            f"<p>{len(runs)} finished runs; {len(results)} findings judged. {METHOD}; the "
            "corrected verdict applies Holm's correction over every finding here; a finding "
            f"whose guard fails is uninformative; a resolved verdict is {FIRM_WORDS}, else "
            "fragile; seeds counts independent runs (for a claim about one checkpoint, "
            "runs of that checkpoint: each verdict's scope says which).</p>",
            "<p>" + "<br>".join(escape(line) for line in headline(results)) + "</p>"]
    if selection:
        body += [f"<p>Members: {escape(selection.words())}. {escape(selection.about())}.</p>",
                 "<table>", members_rows(selection), "</table>"]
    for kind, group in split_by_kind(results).items():
        if group:
            title, says = KIND_TITLES[kind]
            body += [f"<h2>{escape(title)}</h2>", f"<p>{escape(says[0].upper() + says[1:])}.</p>",
                     *claims_table(group)]
    body += [f"<p>Not judged: {escape(finding)} ({escape(reason)}).</p>"
             for finding, reason in skipped]
    body.append("<h2>Evidence</h2>")
    for r in results:
        body += finding_section(r, out_dir / figures[r.id])
    if curves:
        body += ["<h2>Layer curves across runs</h2>", "<p>One curve per group of runs (a "
                 "checkpoint sweep: one per checkpoint), the mean over its seeds.</p>"]
        body += [f'<figure><img src="{image_uri(out_dir / path)}" alt="{escape(caption)}">'
                 f"<figcaption>{escape(caption)}</figcaption></figure>"
                 for caption, path in curves.items()]
    body += ["<h2>Runs</h2>", "<p>Runs that differ only in their seed form a group; all "
             "metrics are in <code>tables/metrics.csv</code>.</p>", *runs_table(runs)]
    page = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
            "<title>bertology report</title>", f"<style>{REPORT_STYLE}</style>", "</head>",
            "<body>", *body, "</body>", "</html>"]
    path = out_dir / "REPORT.html"
    write_text_atomic(path, "\n".join(page) + "\n")
    return path
