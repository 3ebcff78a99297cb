"""Do two runs of the same findings agree? Issue 38 asks that no verdict which is not fragile
differ between the last two full runs on different CPUs: a verdict that flips on float noise
(position_layers and special_heads crossed Holm's threshold between an AMD EPYC and an Intel
Xeon with effects equal to four digits) is not a finding. This compares two reports' Holm
verdicts finding by finding.

    python -m bertology.study.stability <report A> <report B>

prints a table of the findings whose verdict differs, each with both verdicts, fragility and
Holm-adjusted p, and exits 1 when one of them is fragile in neither run (0 otherwise).
Findings judged in only one of the runs are listed apart and do not count.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from bertology.errors import UserError
from bertology.study.summary import read_findings


@dataclass(frozen=True)
class Difference:
    finding: str
    a: dict[str, str]  # its row of each run's tables/findings.csv
    b: dict[str, str]

    @property
    def firm(self) -> bool:
        """Fragile in neither run: a flip that a factor of 2 in p cannot explain."""
        return self.a["fragile"] != "True" and self.b["fragile"] != "True"


def differences(a: Path, b: Path) -> tuple[list[Difference], list[str]]:
    """The findings whose Holm verdict differs between reports a and b, and those judged in
    one of them only."""
    rows_a = {r["finding"]: r for r in read_findings(a)}
    rows_b = {r["finding"]: r for r in read_findings(b)}
    found = [Difference(f, rows_a[f], rows_b[f]) for f in sorted(rows_a.keys() & rows_b.keys())
             if rows_a[f]["corrected_verdict"] != rows_b[f]["corrected_verdict"]]
    return found, sorted(rows_a.keys() ^ rows_b.keys())


def verdict(row: dict[str, str]) -> str:
    fragile = " (fragile)" if row["fragile"] == "True" else ""
    return f"{row['corrected_verdict']}{fragile}, p_holm {float(row['p_holm']):.3g}"


def table(found: list[Difference], only_one: list[str], a: Path, b: Path) -> list[str]:
    lines = [f"{len(found)} verdict(s) differ between {a} (A) and {b} (B); "
             f"{sum(d.firm for d in found)} of them fragile in neither run"]
    if found:
        lines += ["", "| finding | A | B | firm |", "|---|---|---|---|"]
        lines += [f"| {d.finding} | {verdict(d.a)} | {verdict(d.b)} | "
                  f"{'yes' if d.firm else 'no'} |" for d in found]
    if only_one:
        lines += ["", f"judged in one run only (not compared): {', '.join(only_one)}"]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bertology.study.stability",
                                     description="the findings whose verdict two runs differ on")
    parser.add_argument("reports", nargs=2, type=Path, help="two report dirs")
    args = parser.parse_args(argv)
    try:
        found, only_one = differences(*args.reports)
    except UserError as err:
        parser.exit(2, f"{parser.prog}: error: {err}\n")
    print("\n".join(table(found, only_one, *args.reports)))
    return 1 if any(d.firm for d in found) else 0


if __name__ == "__main__":
    raise SystemExit(main())
