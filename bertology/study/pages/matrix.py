"""The findings across encoders: a row per finding that reads a model, a column per encoder,
each cell the effect, its 95% interval and the verdict, from each encoder's own report.

Written into the MiniLM report of a `--encoders` run: tables/encoders.csv (a row per finding,
comparison and encoder), ENCODERS.md (the table; SUMMARY.md and the README quote it), and a
section of REPORT.md and REPORT.html. Each column's verdicts are Holm-corrected within its
encoder's report (MiniLM's over all its findings, a pretrained encoder's over the findings of
the studies it ran), so a column keeps its family-wise level by itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape
from pathlib import Path

from scipy import stats

from bertology.run.atomic import write_text_atomic
from bertology.run.tables import write_table
from bertology.study.judge.catalog import load_catalog, load_recipes
from bertology.study.judge.encoders import ENCODER_STUDIES
from bertology.study.judge.stats import ALPHA, holm
from bertology.study.pages.summary import is_fragile, read_comparisons

SECTION = "## Findings across encoders"


def model_reading_findings() -> list[str]:
    """The findings whose studies all read an encoder the run can swap (encoders.py)."""
    return sorted(spec.id for spec in load_catalog().values()
                  if spec.studies and set(spec.studies) <= set(ENCODER_STUDIES))


# ---------------------------------------------------------------- effects across encoders
#
# "differs" is a claim that the effect depends on the encoder: an interaction, tested on the
# difference of two encoders' effects (Welch: their variances add, ν the smaller of the two),
# with Holm over every such test of the matrix. Two verdicts that differ (one holds, one is
# underpowered) say nothing of the kind: significance is not an effect (Gelman & Stern,
# 2006).


@dataclass(frozen=True)
class Cell:
    """One comparison of a finding on one encoder, as its findings.csv row has it."""

    effect: float
    se: float
    dof: float
    low: float
    high: float

    @classmethod
    def of(cls, row: dict[str, str]) -> Cell:
        return cls(*(float(row[k]) for k in ("effect", "se", "dof", "ci_low", "ci_high")))

    @property
    def measured(self) -> bool:
        """An interval of some width: not one independent run (nan), nor seeds that scored
        alike on every resample (zero width: stats.Estimate.exact)."""
        return math.isfinite(self.low) and math.isfinite(self.high) and self.low < self.high


def difference_p(a: Cell, b: Cell) -> float:
    """Two-sided p of a.effect = b.effect, on the degrees of freedom of the cells whose
    spread it counts (an exact cell, se 0, adds none: its ν is nan); 1 where neither has a
    measured spread."""
    variance = a.se ** 2 + b.se ** 2
    if not (math.isfinite(variance) and variance > 0):
        return 1.0
    dof = min(c.dof for c in (a, b) if c.se > 0)
    if not dof > 0:
        return 1.0
    t = abs(a.effect - b.effect) / math.sqrt(variance)
    return float(2 * (stats.norm.sf(t) if math.isinf(dof) else stats.t.sf(t, dof)))


def claim_sides(finding: str) -> list[tuple[float, str]]:
    """(margin, expect) of each comparison of a catalog finding."""
    return [(c.margin, c.expect) for c in load_catalog()[finding].comparisons]


def side(cell: Cell, margin: float, expect: str) -> int:
    """+1 where the interval lies beyond the margin on the claim's side, −1 on the other; 0
    for a cell with no interval to show (Cell.measured), as the matrix prints it."""
    if not cell.measured:
        return 0
    sign = 1 if expect == "greater" else -1
    return sign if cell.low > margin else -sign if cell.high < margin else 0


def interaction_tests(tables, findings) -> dict[str, list[float]]:
    """finding -> the p of every encoder pair's difference, comparison by comparison."""
    tests: dict[str, list[float]] = {}
    for finding in findings:
        judged = [rows[finding] for rows in tables.values() if rows.get(finding)]
        tests[finding] = [difference_p(Cell.of(a[i]), Cell.of(b[i]))
                          for x, a in enumerate(judged) for b in judged[x + 1:]
                          for i in range(min(len(a), len(b)))]
    return tests


def agreement(tables, findings) -> dict[str, str]:
    """finding -> "differs" (some pair of encoders' effects differs, Holm over the matrix),
    "same direction" (every encoder's interval beyond the margin on one side, for every
    comparison) or "not resolved"."""
    tests = interaction_tests(tables, findings)
    flat = [(finding, p) for finding, ps in tests.items() for p in ps]
    adjusted = holm([p for _, p in flat])
    differs = {finding for (finding, _), p in zip(flat, adjusted) if p < ALPHA}
    across = {}
    for finding in findings:
        judged = [rows[finding] for rows in tables.values() if rows.get(finding)]
        sides = {side(Cell.of(row), *claim) for rows in judged
                 for row, claim in zip(rows, claim_sides(finding))}
        across[finding] = ("differs" if finding in differs else
                           "same direction" if len(judged) > 1 and sides in ({1}, {-1})
                           else "not resolved")
    return across


def no_interval(seeds: int) -> str:
    """Why a cell has no interval: one independent run, or seeds that all scored the same
    with zero spread (a floor or ceiling measured, counted as the seeds they are)."""
    if seeds > 1:
        return f"(no interval: its {seeds} seeds scored alike)"
    return "(no interval: 1 independent run)"


def cell(rows: list[dict[str, str]]) -> str:
    """A finding's first comparison on one encoder: effect [interval] and the Holm verdict."""
    if not rows:
        return "not judged"
    r = rows[0]
    shown = Cell.of(r)
    interval = (f"[{shown.low:+.3g}, {shown.high:+.3g}]" if shown.measured
                else no_interval(int(r["seeds"])))
    fragile = " (fragile)" if is_fragile(r) else ""
    return f"{float(r['effect']):+.3g} {interval} **{r['corrected_verdict']}**{fragile}"


def matrix(tables: dict[str, dict[str, list[dict[str, str]]]], findings: list[str]
           ) -> list[dict[str, str]]:
    """One entry per finding: its about, a cell per encoder and the agreement across them."""
    across = agreement(tables, findings)
    entries = []
    for finding in findings:
        judged = {name: rows.get(finding, []) for name, rows in tables.items()}
        about = next((rows[0]["about"] for rows in judged.values() if rows), "model")
        entries.append({"finding": finding, "about": about, "across": across[finding],
                        **{name: cell(rows) for name, rows in judged.items()}})
    return entries


def csv_rows(tables: dict[str, dict[str, list[dict[str, str]]]], findings: list[str]
             ) -> list[dict]:
    keep = ("about", "test", "effect", "ci_low", "ci_high", "seeds", "raw_verdict",
            "corrected_verdict", "fragile", "note")
    return [{"finding": finding, "encoder": name, **{k: row.get(k, "") for k in keep}}
            for finding in findings for name, rows in tables.items()
            for row in rows.get(finding, [])]


def explain_columns(names: list[str]) -> str:
    """The paragraph above the table: what each column is and what a cell says."""
    budget = next(o for o in load_recipes().encoder_pretrain
                  if o.startswith("trainer.max_flops="))
    return (f"The findings that read a model, judged on each encoder: {names[0]} (the studies' "
            f"own), and {', '.join(names[1:])} pretrained by this run from random init with "
            f"their families' recipes at one budget ({budget.split('=')[1]} training FLOPs) on "
            "Wikipedia with MiniLM's WordPiece, each against its own random-init twin. A cell "
            "is the effect a − b of the finding's first comparison, its 95% interval and the "
            "verdict after Holm's correction within that encoder's report; *: a claim about "
            "the method. Across encoders: \"differs\" where the effect itself differs between "
            "two encoders (a test of the difference, Holm over the matrix), \"same "
            "direction\" where every encoder's interval lies beyond the margin on one side, "
            "else \"not resolved\" (every comparison: tables/encoders.csv).")


def markdown(entries: list[dict[str, str]], names: list[str]) -> list[str]:
    lines = [SECTION, "", explain_columns(names), "",
             "| finding | " + " | ".join(names) + " | across encoders |",
             "|---" * (len(names) + 2) + "|"]
    for e in entries:
        star = "*" if e["about"] == "method" else ""
        across = f"**{e['across']}**" if e["across"] == "differs" else e["across"]
        lines.append(f"| {e['finding']}{star} | " + " | ".join(e[n] for n in names)
                     + f" | {across} |")
    return lines


def html(entries: list[dict[str, str]], names: list[str]) -> str:
    """The same section for REPORT.html (text escaped, no markdown emphasis)."""
    def row(cells: list[str], tag: str = "td") -> str:
        return "<tr>" + "".join(f"<{tag}>{escape(c.replace('**', ''))}</{tag}>"
                                for c in cells) + "</tr>"

    rows = [row(["finding", *names, "across encoders"], "th")]
    rows += [row([e["finding"] + ("*" if e["about"] == "method" else ""),
                  *(e[n] for n in names), e["across"]]) for e in entries]
    return "\n".join([f"<h2>{escape(SECTION.lstrip('# '))}</h2>",
                      f"<p>{escape(explain_columns(names))}</p>", "<table>", *rows, "</table>"])


def write_matrix(report: Path, reports: dict[str, Path]) -> list[str]:
    """The matrix into the report dir (ENCODERS.md, tables/encoders.csv, a section of
    REPORT.md and REPORT.html), from reports: encoder -> its report dir, first the default."""
    names = list(reports)
    tables = {name: read_comparisons(path) for name, path in reports.items()}
    findings = model_reading_findings()
    entries = matrix(tables, findings)
    lines = markdown(entries, names)
    write_table(report, "encoders", csv_rows(tables, findings))
    write_text_atomic(report / "ENCODERS.md", "\n".join(lines) + "\n")
    section = "\n".join(lines) + "\n\n"
    insert_before(report / "REPORT.md", "## Runs\n", section)
    insert_before(report / "REPORT.html", "<h2>Runs</h2>", html(entries, names) + "\n")
    return lines


def insert_before(path: Path, marker: str, text: str) -> None:
    """text into the file before marker's first occurrence (at the end where it is absent)."""
    page = path.read_text()
    at = page.find(marker)
    at = len(page) if at < 0 else at
    write_text_atomic(path, page[:at] + text + page[at:])
