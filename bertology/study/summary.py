"""The front page's findings block, written by the run rather than by hand: verdict counts per
kind of claim (about the model, about the method), raw and Holm-corrected, with the findings
behind each Holm-corrected count, read from the report's tables/findings.csv.

    python -m bertology.study.summary outputs/reproduce/<stamp>/report

prints it and writes it to <report>/SUMMARY.md (README.md and docs/reproduce.md quote it).
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

from bertology.errors import UserError, require
from bertology.study.verdicts import VERDICTS

KINDS = {"model": "claims about the model (the headline)",
         "method": "claims about the method (probes, metrics, architecture)"}


def read_comparisons(report: Path) -> dict[str, list[dict[str, str]]]:
    """finding -> its rows of report/tables/findings.csv, one per comparison (a finding that
    tests two, pos_layers: lower layers and selectivity, has two rows carrying its one
    verdict)."""
    table = report / "tables" / "findings.csv"
    require(table.is_file(), f"{table} not found: pass the report dir of a `make reproduce` run "
            "(outputs/reproduce/<stamp>/report)")
    rows: dict[str, list[dict[str, str]]] = {}
    with table.open(newline="") as handle:
        for row in csv.DictReader(handle):
            rows.setdefault(row["finding"], []).append(row)
    return rows


def read_findings(report: Path) -> list[dict[str, str]]:
    """One row per finding: its first comparison's."""
    return [rows[0] for rows in read_comparisons(report).values()]


def counts_table(rows: list[dict[str, str]]) -> list[str]:
    """One line per verdict: raw and Holm-corrected counts for each kind, and the findings
    with that Holm-corrected verdict."""
    kinds = [kind for kind in KINDS if any(r["about"] == kind for r in rows)]
    method = {r["finding"] for r in rows if r["about"] == "method"}
    header = ["verdict"] + [f"{kind}: raw / Holm" for kind in kinds] + ["findings (Holm)"]
    lines = ["| " + " | ".join(header) + " |", "|---" + "|---:" * len(kinds) + "|---|"]
    for verdict in VERDICTS:
        cells = []
        for kind in kinds:
            of_kind = [r for r in rows if r["about"] == kind]
            raw = sum(r["raw_verdict"] == verdict for r in of_kind)
            holm = sum(r["corrected_verdict"] == verdict for r in of_kind)
            cells.append(f"{raw} / {holm}")
        names = sorted(r["finding"] for r in rows if r["corrected_verdict"] == verdict)
        fragile = {r["finding"] for r in rows if is_fragile(r)}
        shown = ", ".join(f"{name}{'*' if name in method else ''}"
                          f"{' (fragile)' if name in fragile else ''}" for name in names)
        lines.append(f"| {verdict} | " + " | ".join(cells) + f" | {shown or '–'} |")
    return lines


def is_fragile(row: dict[str, str]) -> bool:
    """A findings.csv row whose Holm-adjusted p lies within 2× of α (a report before the
    fragile column: none)."""
    return row.get("fragile", "False") == "True"


def summary(rows: list[dict[str, str]]) -> list[str]:
    model = [r for r in rows if r["about"] == "model"]
    held = [r for r in model if r["corrected_verdict"] == "holds"]
    firm = sum(not is_fragile(r) for r in held)
    fragile = len(held) - firm
    more = f"{fragile} more holds but is" if fragile == 1 else f"{fragile} more hold but are"
    return [f"**{firm} of the {len(model)} claims about the model hold firmly**, and {more} "
            f"fragile (Holm-adjusted p within 2× of α), after Holm's correction over all "
            f"{len(rows)} findings "
            f"({len(rows) - len(model)} claims about the method, marked *, are reported "
            "apart).", "", *counts_table(rows)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bertology.study.summary",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, help="the report dir of a make reproduce run")
    args = parser.parse_args(argv)
    try:
        print(write_summary(args.report), end="")
    except UserError as err:
        parser.exit(2, f"{parser.prog}: error: {err}\n")
    return 0


def write_summary(report: Path) -> str:
    """SUMMARY.md in the report dir; its text."""
    text = "\n".join(summary(read_findings(report))) + "\n"
    encoders = report / "ENCODERS.md"  # a run over several encoders: the matrix (matrix.py)
    if encoders.is_file():
        text += "\n" + encoders.read_text()
    (report / "SUMMARY.md").write_text(text)
    return text


if __name__ == "__main__":
    raise SystemExit(main())
