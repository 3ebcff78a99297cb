"""The front page's findings block, written by the run rather than by hand: verdict counts per
kind of claim (about pretraining, about one checkpoint, about the method: study/judge/scope.py), raw
and Holm-corrected, with the findings behind each Holm-corrected count, read from the report's
tables/findings.csv. The headline is about the pretraining procedure; claims about one
checkpoint are counted apart and never as claims about BERT. A population's report adds how
well its members pretrained (tables/members.csv), how many of its pretraining claims resolve
after Holm, and a row per finding with its intervals.

    python -m bertology.study.pages.summary outputs/reproduce/<stamp>/report

prints it and writes it to <report>/SUMMARY.md (README.md and docs/reproduce.md quote it).
"""

from __future__ import annotations

import argparse
import csv
import math
from pathlib import Path

from bertology.errors import UserError, require
from bertology.study.judge.scale import SCALE_TABLE, Shortfall, smoke_line
from bertology.study.judge.scope import KINDS, kind_of
from bertology.study.judge.selection import MEMBERS_TABLE, Selection
from bertology.study.judge.verdicts import VERDICTS


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
    kinds = [kind for kind in KINDS if any(row_kind(r) == kind for r in rows)]
    method = {r["finding"] for r in rows if r["about"] == "method"}
    header = ["verdict"] + [f"{kind}: raw / Holm" for kind in kinds] + ["findings (Holm)"]
    lines = ["| " + " | ".join(header) + " |", "|---" + "|---:" * len(kinds) + "|---|"]
    for verdict in VERDICTS:
        cells = []
        for kind in kinds:
            of_kind = [r for r in rows if row_kind(r) == kind]
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
    """A findings.csv row marked fragile (suite.py: a resolved verdict that is not firm; a
    report before the fragile column: none)."""
    return row.get("fragile", "False") == "True"


def row_kind(row: dict[str, str]) -> str:
    """pretraining, checkpoint or method; a report from before units: a model claim is read as
    a checkpoint's (nothing showed it replicated over pretraining)."""
    return kind_of(row["about"], row.get("unit") or "checkpoint")


def checkpoint_names(rows: list[dict[str, str]]) -> str:
    """The checkpoints the checkpoint claims read, from findings.csv's scope column."""
    names = {name for r in rows for name in r.get("scope", "").removeprefix("checkpoint: ")
             .split(", ") if r.get("scope", "").startswith("checkpoint: ")} - {"not recorded"}
    return ", ".join(sorted(names)) or "one checkpoint"


NOT_FIRM = (" (not firm: firm needs a Holm-adjusted p below α/10, 4 or more replicates and "
            "none that carries it alone)")


def holds_phrase(rows: list[dict[str, str]], explain: bool = False) -> str:
    """"k of the n hold firmly**, and m more hold but are fragile; d do not hold (f firmly)"
    after Holm: resolutions in each direction ("none of the n hold**" or no fragile clause
    where there is nothing to count)."""
    held = [r for r in rows if r["corrected_verdict"] == "holds"]
    firm = sum(not is_fragile(r) for r in held)
    fragile = len(held) - firm
    if not held:
        return f"none of the {len(rows)} hold**{against(rows)}"
    if not fragile:
        return f"{firm} of the {len(rows)} hold firmly**{against(rows)}"
    more = f"{fragile} more holds but is" if fragile == 1 else f"{fragile} more hold but are"
    return (f"{firm} of the {len(rows)} hold firmly**, and {more} fragile"
            f"{NOT_FIRM if explain else ''}{against(rows)}")


def against(rows: list[dict[str, str]]) -> str:
    """The other direction's count beside the holds: "; 6 do not hold (4 firmly)"."""
    refuted = [r for r in rows if r["corrected_verdict"] == "does not hold"]
    if not refuted:
        return "; none does not hold"
    firm = sum(not is_fragile(r) for r in refuted)
    verb = "does" if len(refuted) == 1 else "do"
    return f"; {len(refuted)} {verb} not hold ({firm} firmly)"


def summary(rows: list[dict[str, str]], selection: Selection | None = None) -> list[str]:
    kinds = {kind: [r for r in rows if row_kind(r) == kind] for kind in KINDS}
    pretraining, checkpoint = kinds["pretraining"], kinds["checkpoint"]
    scope = selection.words() if selection else population_words(pretraining)
    # the first phrase that names fragile holds says once what "firm" needs
    first_fragile = any(r["corrected_verdict"] == "holds" and is_fragile(r) for r in pretraining)
    lines = [(f"**Pretraining claims, across {scope}: "
              + holds_phrase(pretraining, explain=first_fragile)) if pretraining
             else "**Pretraining claims: none judged**"]
    if checkpoint or not pretraining:  # a population's report judges no checkpoint claim
        lines.append((f"**checkpoint claims ({checkpoint_names(checkpoint)}): "
                      + holds_phrase(checkpoint, explain=not first_fragile)) if checkpoint
                     else "**checkpoint claims: none judged**")
    method = f"{len(kinds['method'])} claims about the method, marked *, are reported apart"
    scope = (f"A checkpoint claim holds for that trained model, not for BERT: its seeds "
             f"resample sentences, probes or fine-tuning, not pretraining ({method})."
             if checkpoint else f"{method}.")
    return [f"{'; '.join(lines)}, after Holm's correction over all {len(rows)} "
            f"findings. {scope}", "", *counts_table(rows)]


def population_words(rows: list[dict[str, str]]) -> str:
    """"12 independently pretrained encoders" where every row of a population report names its
    size (findings.csv's `members`); else without the number."""
    sizes = {r.get("members") or "" for r in rows}
    size = sizes.pop() if len(sizes) == 1 else ""
    return f"{size} independently pretrained encoders" if size.isdigit() else \
        "independently pretrained encoders"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bertology.study.pages.summary",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, help="the report dir of a make reproduce run")
    args = parser.parse_args(argv)
    try:
        print(write_summary(args.report), end="")
    except UserError as err:
        parser.exit(2, f"{parser.prog}: error: {err}\n")
    return 0


def population_table(comparisons: dict[str, list[dict[str, str]]]) -> list[str]:
    """A population report's findings one by one (the front page's procedure-level
    table): how many of its pretraining claims resolve after Holm, then each finding's effect
    with its two-level interval and Sellam et al.'s multi-bootstrap beside it, a cell part per
    comparison, both verdicts and the note (what would resolve an open one). Empty for a
    report that judged no population."""
    firsts = [rows[0] for rows in comparisons.values()]
    if not any(r.get("members") for r in firsts):
        return []
    claims = [r for r in firsts if row_kind(r) == "pretraining"]
    settled = [r for r in claims if r["corrected_verdict"] in ("holds", "does not hold")]
    fragile = sum(is_fragile(r) for r in settled)
    lines = ["", f"{len(settled)} of the {len(claims)} pretraining claims resolve after Holm "
             f"(hold or do not hold){f', {fragile} of them fragile' if fragile else ''}.", "",
             "| finding | effect [95% two-level interval] | multi-bootstrap 95% | raw | Holm "
             "| note |", "|---|---|---|---|---|---|"]
    for finding, rows in comparisons.items():
        first = rows[0]
        star = "*" if first["about"] == "method" else ""
        holm = first["corrected_verdict"] + (" (fragile)" if is_fragile(first) else "")
        effects = "; ".join(f"{format_number(r.get('effect', ''))} {bounds(r, 'ci')}" for r in rows)
        boots = "; ".join(bounds(r, "multibootstrap") for r in rows)
        lines.append(f"| {finding}{star} | {effects} | {boots} | {first['raw_verdict']} | "
                     f"{holm} | {first.get('note', '').replace('|', '/')} |")
    return lines


def format_number(text: str) -> str:
    value = float(text) if text else float("nan")
    return f"{value:+.3g}" if math.isfinite(value) else "–"


def bounds(row: dict[str, str], prefix: str) -> str:
    """"[low, high]" from a findings.csv row's <prefix>_low and <prefix>_high; "–" where the
    runs gave none (one member, a sign test's bootstrap)."""
    low, high = (format_number(row.get(f"{prefix}_{end}", "")) for end in ("low", "high"))
    return "–" if "–" in (low, high) else f"[{low}, {high}]"


def members_line(report: Path) -> list[str]:
    """How well a population's members pretrained, from the members table its run wrote
    (members.write_members_table): how many of those that finished learned, their held-out
    MLM accuracy against their floors, those at their floor by name, and how many ran before
    the floor was recorded (the verdicts keep those). Empty without the table, and for
    checkpoints pretrained elsewhere (their scope names them)."""
    table = report / "tables" / "members.csv"
    selection = Selection.read(table)
    if selection is None or selection.external:
        return []
    with table.open(newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if r["mlm_accuracy"]]  # blank: crashed
    learned = [r for r in rows if r["learned"] == "True"]
    floored = [r for r in learned if r["mlm_floor"]]
    at_floor = [r for r in rows if r["mlm_floor"] and r["learned"] == "False"]
    unfloored = sum(not r["mlm_floor"] for r in rows)
    parts = [f"Members: {len(learned)} of the {len(rows)} pretrained learned"
             + (f": held-out MLM accuracy {value_range(learned, 'mlm_accuracy')}"
                if learned else "")
             + (f", against floors of {value_range(floored, 'mlm_floor')}" if floored else "")]
    if at_floor:
        parts.append("at or below their floor: " + ", ".join(
            f"{r['member']} ({float(r['mlm_accuracy']):.3f})" for r in at_floor))
    if unfloored:
        parts.append(f"{unfloored} with no floor recorded (run before it was; the verdicts "
                     "keep them)")
    return ["", "; ".join(parts) + "."]


def value_range(rows: list[dict[str, str]], key: str) -> str:
    values = [float(r[key]) for r in rows]
    return f"{min(values):.3f}–{max(values):.3f}"


def scale_line(report: Path) -> list[str]:
    """Where the report's runs are smaller than their studies state (tables/scale.csv,
    study/judge/scale.py), the first line says so."""
    path = report / "tables" / f"{SCALE_TABLE}.csv"
    if not path.is_file():
        return []
    with path.open() as handle:
        rows = list(csv.DictReader(handle))
    if not rows:
        return []
    shortfalls = [Shortfall(r["study"], r["key"], float(r["runs"]), float(r["stated"]))
                  for r in rows]
    return [f"**{smoke_line(shortfalls)}**", ""]


def write_summary(report: Path) -> str:
    """SUMMARY.md in the report dir; its text."""
    comparisons = read_comparisons(report)
    selection = Selection.read(report / "tables" / f"{MEMBERS_TABLE}.csv")
    lines = [*scale_line(report),
             *summary([rows[0] for rows in comparisons.values()], selection),
             *members_line(report), *population_table(comparisons)]
    text = "\n".join(lines) + "\n"
    encoders = report / "ENCODERS.md"  # a run over several encoders: the matrix (matrix.py)
    if encoders.is_file():
        text += "\n" + encoders.read_text()
    (report / "SUMMARY.md").write_text(text)
    return text


if __name__ == "__main__":
    raise SystemExit(main())
