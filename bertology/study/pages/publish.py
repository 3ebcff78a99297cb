"""The results pages, written from a run's own files rather than typed beside them.

    python -m bertology.study.pages.publish <out>/report --name minilm

copies what a `make reproduce` run wrote (its SUMMARY.md, tables/findings.csv less the run
dirs, and a header read from the runs: the command, the commits, the CPU, the date and the
wall time) into docs/results/<name>/, then renders docs/results.md and the README's block for
that run from every folder under docs/results/. tests/house/test_docs.py renders them again from
those files and checks that the pages equal them, so no number on either page is typed by
hand.
"""

from __future__ import annotations

import argparse
import csv
import re
import shlex
import sys
import time
from datetime import datetime, timezone
from io import StringIO
from pathlib import Path

from bertology.errors import UserError, require
from bertology.run.atomic import read_json, write_json_atomic, write_text_atomic
from bertology.run.rundir import finished_runs, read_status

RUN_RECORD = "reproduce.json"  # written by `python -m bertology.reproduce` into its --out
HEADER = "run.json"
PUBLISHED_COLUMNS = ("finding", "about", "unit", "claim", "source", "effect", "ci_low",
                     "ci_high", "seeds", "members", "raw_verdict", "corrected_verdict",
                     "fragile", "p_holm", "p_replication", "note")
TITLES = {"minilm": "One checkpoint: all-MiniLM-L6-v2 (`make reproduce`)",
          "population": "Across pretraining: a population of BERTs (`make reproduce-population`)"}


# ------------------------------------------------------------------ what the run recorded


def record_run(out: Path, argv: list[str] | None, started: float, status: int) -> None:
    """reproduce.json in out: the command (its --out left as <dir>: a machine's path), when it
    ran and its exit status, for the results page's header."""
    if not out.is_dir():
        return
    args = list(sys.argv[1:] if argv is None else argv)
    for i, arg in enumerate(args[:-1]):
        if arg == "--out":
            args[i + 1] = "<dir>"
    finished = time.time()
    write_json_atomic(out / RUN_RECORD, {
        "command": shlex.join(["python", "-m", "bertology.reproduce", *args]),
        "started": stamp(started), "finished": stamp(finished),
        "wall_minutes": round((finished - started) / 60, 1), "exit": status})


def stamp(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def describe_cpu(cpu: dict) -> str:
    """'2 cores of an <model> (avx512_bf16, no AMX)' from a run's env.json."""
    flags = set(cpu.get("flags", "").split())
    bf16 = [f for f in ("amx_bf16", "avx512_bf16") if f in flags]
    native = ", ".join(bf16) if bf16 else "no native bf16"
    amx = "" if "amx_bf16" in flags else ", no AMX"
    return f"{cpu.get('cores', '?')} cores of an {cpu.get('model', 'unknown CPU')} ({native}{amx})"


def read_header(report: Path, command: str | None, remark: str = "") -> dict:
    """The run's header from its runs' env.json and status.json, the report's env.json (the
    commit it was judged at) and reproduce.json where the run wrote one."""
    root = report.parent
    # the study runs: a report over them (this one, or another judging) is not one
    statuses = {p: read_status(p) or {} for p in finished_runs([root])
                if p.resolve() != report.resolve()}
    runs = [p for p, s in statuses.items() if s.get("pipeline") != "report"]
    require(bool(runs), f"{report}: no finished runs beside it; give the report dir of a "
            "make reproduce run (<out>/report)")
    envs = [read_json(p / "env.json") for p in runs if (p / "env.json").is_file()]
    status = [statuses[p] for p in runs if "updated" in statuses[p]]
    require(bool(envs) and bool(status), f"{root}: its runs wrote no env.json or status.json "
            "(made before runs did); the header cannot be read from them")
    record = read_json(root / RUN_RECORD) if (root / RUN_RECORD).is_file() else {}
    command = command or record.get("command")
    require(command is not None, f"{root / RUN_RECORD} is missing (a run made before runs "
            "wrote it): name the command that made it with --command")
    commits = sorted({commit_of(e) for e in envs})
    judged = commit_of(read_json(report / "env.json")) if (report / "env.json").is_file() \
        else "unknown"
    first, last = min(s["started"] for s in status), max(s["updated"] for s in status)
    return {"command": command, "runs_at": commits, "judged_at": judged,
            "cpu": sorted({describe_cpu(e["cpu"]) for e in envs}),
            "started": stamp(first), "finished": stamp(last),
            "wall_minutes": round((last - first) / 60, 1), "runs": len(runs),
            "exit": record.get("exit"), "remark": remark}


def commit_of(env: dict) -> str:
    git = env.get("git", {})
    commit = (git.get("commit") or "unknown")[:7]
    return f"{commit} (with changes)" if git.get("dirty") else commit


def publish(report: Path, name: str, docs: Path, command: str | None = None,
            remark: str = "") -> Path:
    """docs/results/<name>/ from the report's files; the folder."""
    require(re.fullmatch(r"[a-z0-9_-]+", name) is not None,
            f"--name {name!r}: use lower-case letters, digits, - and _ (a folder name)")
    for needed in ("SUMMARY.md", "tables/findings.csv"):
        require((report / needed).is_file(), f"{report / needed} is missing: give the report "
                "dir of a finished make reproduce run (<out>/report)")
    header = read_header(report, command, remark)
    folder = docs / "results" / name
    folder.mkdir(parents=True, exist_ok=True)
    with (report / "tables" / "findings.csv").open(newline="") as handle:
        rows = [{k: r.get(k, "") for k in PUBLISHED_COLUMNS} for r in csv.DictReader(handle)]
    write_text_atomic(folder / "findings.csv", csv_text(rows))
    write_text_atomic(folder / "SUMMARY.md", (report / "SUMMARY.md").read_text())
    write_json_atomic(folder / HEADER, header)
    return folder


def csv_text(rows: list[dict]) -> str:
    buffer = StringIO()
    writer = csv.DictWriter(buffer, fieldnames=PUBLISHED_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


# ------------------------------------------------------------------ the pages


def published(docs: Path) -> dict[str, Path]:
    return {p.name: p for p in sorted((docs / "results").iterdir()) if (p / HEADER).is_file()} \
        if (docs / "results").is_dir() else {}


def header_table(header: dict) -> list[str]:
    runs_at = ", ".join(header["runs_at"])
    exit_words = {None: "", 0: "; no step failed"}.get(header["exit"],
                                                        f"; exit status {header['exit']}")
    return ["| run header | |", "|---|---|",
            f"| date | {header['started']} to {header['finished']} |",
            f"| commit | the runs at {runs_at}; judged at {header['judged_at']} |",
            f"| CPU | {'; '.join(header['cpu'])} |",
            f"| command | `{header['command']}` |",
            f"| wall time | {header['wall_minutes']} minutes from the first run's start to the "
            f"last one's end, {header['runs']} runs{exit_words} |",
            *([f"| remark | {header['remark']} |"] if header.get("remark") else [])]


def every_finding_table(folder: Path) -> list[str]:
    with (folder / "findings.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    lines = ["| finding | claim | verdict (Holm) | effect [95% interval] | P(replication) |",
             "|---|---|---|---|---:|"]
    for finding in dict.fromkeys(r["finding"] for r in rows):
        parts = [r for r in rows if r["finding"] == finding]
        first = parts[0]
        fragile = " (fragile)" if first["fragile"] == "True" and first["corrected_verdict"] in (
            "holds", "does not hold") else ""
        effects = "; ".join(effect_cell(r) for r in parts)
        lines.append(f"| {finding} | {first['claim']} | {first['corrected_verdict']}{fragile} "
                     f"| {effects} | {two_places(first['p_replication'])} |")
    return lines


def two_places(text: str) -> str:
    return f"{float(text):.2f}" if text not in ("", "nan") else "–"


def effect_cell(row: dict) -> str:
    def short(text: str) -> str:
        return f"{float(text):+.3g}" if text not in ("", "nan") else "–"
    return f"{short(row['effect'])} [{short(row['ci_low'])}, {short(row['ci_high'])}]"


def render_results_page(docs: Path) -> str:
    lines = ["# Results", "",
             "Written by `make results` (`python -m bertology.study.pages.publish`) from the files "
             "each run wrote, kept under [results/](results/); not edited by hand "
             "(tests/house/test_docs.py renders it again and compares). Earlier runs: "
             "[history](history/README.md). What a verdict means: "
             "[findings.md](findings.md#the-verdicts-defined).", ""]
    for name, folder in published(docs).items():
        header = read_json(folder / HEADER)
        lines += [f"## {TITLES.get(name, name)}", "", *header_table(header), "",
                  (folder / "SUMMARY.md").read_text().rstrip(), "", "### Every finding", "",
                  *every_finding_table(folder), ""]
    return "\n".join(lines)


def readme_block(folder: Path) -> str:
    """The README's lines for one published run: where and how it ran, then its SUMMARY.md."""
    header = read_json(folder / HEADER)
    return (f"The last run: `{header['command']}`, {header['started'][:10]}, "
            f"{'; '.join(header['cpu'])}, {header['wall_minutes']} minutes "
            f"([every finding](docs/results.md)):\n\n"
            + (folder / "SUMMARY.md").read_text().rstrip() + "\n")


def block_markers(name: str) -> tuple[str, str]:
    return f"<!-- results:{name} (written by make results) -->", f"<!-- /results:{name} -->"


def check_block(text: str, name: str) -> None:
    begin, end = block_markers(name)
    require(begin in text and end in text, f"the README has no {begin} ... {end} block: add "
            "the two lines where the run's summary belongs")


def with_block(text: str, name: str, block: str) -> str:
    """text with the lines between the README's markers for name replaced by block."""
    check_block(text, name)
    begin, end = block_markers(name)
    head, rest = text.split(begin, 1)
    return f"{head}{begin}\n{block}{end}{rest.split(end, 1)[1]}"


def write_pages(docs: Path, readme: Path) -> None:
    write_text_atomic(docs / "results.md", render_results_page(docs))
    text = readme.read_text()
    for name, folder in published(docs).items():
        text = with_block(text, name, readme_block(folder))
    write_text_atomic(readme, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bertology.study.pages.publish",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, nargs="?",
                        help="the report dir of a make reproduce run (<out>/report); without "
                             "it, the pages are rendered again from docs/results/")
    parser.add_argument("--name", default="minilm", help="the run's folder under "
                        "docs/results/: minilm (make reproduce) or population")
    parser.add_argument("--command", help="the command that made the run, where it wrote no "
                        f"{RUN_RECORD}")
    parser.add_argument("--remark", default="", help="a line for the header that the files "
                        "cannot tell (e.g. 'other jobs ran beside it')")
    parser.add_argument("--docs", type=Path, default=Path("docs"))
    parser.add_argument("--readme", type=Path, default=Path("README.md"))
    args = parser.parse_args(argv)
    try:
        if args.report is not None:  # the README's block first: nothing half-written
            require(args.readme.is_file(), f"{args.readme} is missing: run from the checkout")
            check_block(args.readme.read_text(), args.name)
            publish(args.report, args.name, args.docs, args.command, args.remark)
        write_pages(args.docs, args.readme)
    except UserError as err:
        parser.exit(2, f"{parser.prog}: error: {err}\n")
    print(f"wrote {args.docs / 'results.md'} and the README's blocks")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
