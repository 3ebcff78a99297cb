"""Do two runs of the same findings agree? A verdict that flips on float noise or on a rerun
is not a finding. This compares two reports finding by finding, on their effects and their
Holm verdicts, and fails where they disagree beyond what their own noise excuses:

- an effect that moved more than 3 combined standard errors, |θ̂_A − θ̂_B| > 3·√(se_A² + se_B²),
  in any comparison, whatever the verdicts say;
- a holds ↔ does not hold reversal, unconditionally;
- any other change of verdict, unless one side is a fragile resolved verdict (suite.py: not
  firm) and the other is not its reversal. An unresolved verdict carries no mark, so a change
  between two unresolved verdicts (underpowered ↔ inconclusive) is a disagreement.

    python -m bertology.study.pages.stability <report A> <report B>

prints a table of the findings that changed or moved, with both verdicts, their marks, effects
and Holm-adjusted p, and exits 1 when any of them is a disagreement (0 otherwise). Findings
judged in only one of the runs are listed apart and do not count.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path

from bertology.errors import UserError
from bertology.study.judge.scale import number
from bertology.study.judge.verdicts import RESOLVED
from bertology.study.pages.summary import read_comparisons

MOVED_SE = 3.0  # an effect that moved more than this many combined standard errors


def cell_value(row: dict[str, str], key: str) -> float:
    """A findings.csv cell as a number, nan where it is blank or missing."""
    value = number(row.get(key))
    return math.nan if value is None else value


def moved(a: dict[str, str], b: dict[str, str]) -> float:
    """How many combined standard errors one comparison's effect moved (nan: unmeasured)."""
    se = math.sqrt(cell_value(a, "se") ** 2 + cell_value(b, "se") ** 2)
    gap = abs(cell_value(a, "effect") - cell_value(b, "effect"))
    return gap / se if se > 0 else math.inf if gap > 0 else math.nan


@dataclass(frozen=True)
class Difference:
    finding: str
    a: list[dict[str, str]]  # its rows of each run's tables/findings.csv, one per comparison
    b: list[dict[str, str]]

    @property
    def verdicts(self) -> tuple[str, str]:
        return self.a[0]["corrected_verdict"], self.b[0]["corrected_verdict"]

    @property
    def changed(self) -> bool:
        return self.verdicts[0] != self.verdicts[1]

    @property
    def reversal(self) -> bool:
        return set(self.verdicts) == set(RESOLVED)

    @property
    def most_moved(self) -> float:
        """The largest move of an effect over its comparisons, in combined standard errors."""
        moves = [m for a, b in zip(self.a, self.b) if not math.isnan(m := moved(a, b))]
        return max(moves, default=math.nan)

    @property
    def excused(self) -> bool:
        """A change the reports' own marks predict: a fragile resolved verdict on one side and
        no reversal."""
        fragile = any(rows[0]["corrected_verdict"] in RESOLVED and rows[0]["fragile"] == "True"
                      for rows in (self.a, self.b))
        return fragile and not self.reversal

    @property
    def disagrees(self) -> bool:
        return (self.changed and not self.excused) or self.most_moved > MOVED_SE


def differences(a: Path, b: Path) -> tuple[list[Difference], list[str]]:
    """The findings whose Holm verdict differs, or whose effect moved, between reports a and b,
    and those judged in one of them only."""
    rows_a, rows_b = read_comparisons(a), read_comparisons(b)
    both = [Difference(f, rows_a[f], rows_b[f]) for f in sorted(rows_a.keys() & rows_b.keys())]
    found = [d for d in both if d.changed or d.most_moved > MOVED_SE]
    return found, sorted(rows_a.keys() ^ rows_b.keys())


def verdict(rows: list[dict[str, str]]) -> str:
    row = rows[0]
    fragile = " (fragile)" if row["corrected_verdict"] in RESOLVED and row["fragile"] == "True" \
        else ""
    return f"{row['corrected_verdict']}{fragile}, p_holm {float(row['p_holm']):.3g}"


def why(d: Difference) -> str:
    reasons = [f"effect moved {d.most_moved:.1f} SE"] if d.most_moved > MOVED_SE else []
    if d.reversal:
        reasons.append("reversal")
    elif d.changed:
        reasons.append("excused: a fragile side" if d.excused else "changed")
    return "; ".join(reasons)


def table(found: list[Difference], only_one: list[str], a: Path, b: Path) -> list[str]:
    changed = sum(d.changed for d in found)
    lines = [f"{changed} verdict(s) differ between {a} (A) and {b} (B); "
             f"{sum(d.disagrees for d in found)} finding(s) disagree (a reversal, an effect "
             f"moved > {MOVED_SE:g} SE, or a change no fragile side excuses)"]
    if found:
        lines += ["", "| finding | A | B | why | disagrees |", "|---|---|---|---|---|"]
        lines += [f"| {d.finding} | {verdict(d.a)} | {verdict(d.b)} | {why(d)} | "
                  f"{'yes' if d.disagrees else 'no'} |" for d in found]
    if only_one:
        lines += ["", f"judged in one run only (not compared): {', '.join(only_one)}"]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bertology.study.pages.stability",
                                     description="the findings two runs disagree on")
    parser.add_argument("reports", nargs=2, type=Path, help="two report dirs")
    args = parser.parse_args(argv)
    try:
        found, only_one = differences(*args.reports)
    except UserError as err:
        parser.exit(2, f"{parser.prog}: error: {err}\n")
    print("\n".join(table(found, only_one, *args.reports)))
    return 1 if any(d.disagrees for d in found) else 0


if __name__ == "__main__":
    raise SystemExit(main())
