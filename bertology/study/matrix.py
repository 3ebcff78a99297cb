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
from html import escape
from pathlib import Path

from bertology.run.atomic import write_text_atomic
from bertology.run.tables import write_table
from bertology.study.catalog import load_catalog
from bertology.study.encoders import ENCODER_PRETRAIN, ENCODER_STUDIES
from bertology.study.summary import read_comparisons

SECTION = "## Findings across encoders"


def model_reading_findings() -> list[str]:
    """The findings whose studies all read an encoder the run can swap (encoders.py)."""
    return sorted(spec.id for spec in load_catalog().values()
                  if spec.studies and set(spec.studies) <= set(ENCODER_STUDIES))


def agreement(verdicts: list[str]) -> str:
    """Whether the claim holds everywhere, nowhere or for some encoders only ("differs")."""
    holds = [v == "holds" for v in verdicts]
    return "holds for all" if all(holds) else "differs" if any(holds) else "holds for none"


def cell(rows: list[dict[str, str]]) -> str:
    """A finding's first comparison on one encoder: effect [interval] and the Holm verdict."""
    if not rows:
        return "not judged"
    r = rows[0]
    low, high = float(r["ci_low"]), float(r["ci_high"])
    interval = (f"[{low:+.3g}, {high:+.3g}]" if math.isfinite(low) and math.isfinite(high)
                else f"(no interval: {r['seeds']} independent run)")  # seeds identical
    return f"{float(r['effect']):+.3g} {interval} **{r['corrected_verdict']}**"


def matrix(tables: dict[str, dict[str, list[dict[str, str]]]], findings: list[str]
           ) -> list[dict[str, str]]:
    """One entry per finding: its about, a cell per encoder and the agreement across them."""
    entries = []
    for finding in findings:
        judged = {name: rows.get(finding, []) for name, rows in tables.items()}
        about = next((rows[0]["about"] for rows in judged.values() if rows), "model")
        verdicts = [rows[0]["corrected_verdict"] if rows else "not judged"
                    for rows in judged.values()]
        entries.append({"finding": finding, "about": about, "across": agreement(verdicts),
                        **{name: cell(rows) for name, rows in judged.items()}})
    return entries


def csv_rows(tables: dict[str, dict[str, list[dict[str, str]]]], findings: list[str]
             ) -> list[dict]:
    keep = ("about", "test", "effect", "ci_low", "ci_high", "seeds", "raw_verdict",
            "corrected_verdict", "note")
    return [{"finding": finding, "encoder": name, **{k: row[k] for k in keep}}
            for finding in findings for name, rows in tables.items()
            for row in rows.get(finding, [])]


def explain(names: list[str]) -> str:
    """The paragraph above the table: what each column is and what a cell says."""
    budget = next(o for o in ENCODER_PRETRAIN if o.startswith("trainer.max_flops="))
    return (f"The findings that read a model, judged on each encoder: {names[0]} (the studies' "
            f"own), and {', '.join(names[1:])} pretrained by this run from random init with "
            f"their families' recipes at one budget ({budget.split('=')[1]} training FLOPs) on "
            "Wikipedia with MiniLM's WordPiece, each against its own random-init twin. A cell "
            "is the effect a − b of the finding's first comparison, its 95% interval and the "
            "verdict after Holm's correction within that encoder's report; *: a claim about "
            "the method. \"differs\" marks a finding that holds for some encoders and not "
            "others (every comparison: tables/encoders.csv).")


def markdown(entries: list[dict[str, str]], names: list[str]) -> list[str]:
    lines = [SECTION, "", explain(names), "",
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
                      f"<p>{escape(explain(names))}</p>", "<table>", *rows, "</table>"])


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
