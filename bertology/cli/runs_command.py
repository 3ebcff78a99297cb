"""`bertology runs [DIR ...]`: a table of runs, one row per run dir, with their status (finished,
interrupted, failed, running), when they started and how long they took, the overrides that
differ between them and their headline metrics, as Markdown (for a person, a README or a lab
notebook) or CSV (`--format csv`, for a spreadsheet), until `bertology report` turns them into
verdicts and figures. Report runs are listed apart, below the table.

    bertology runs outputs/pretrain/multirun/2026-11-22/10-00-00
    bertology runs outputs/finetune outputs/distill --format csv --out runs.csv
    bertology runs outputs/probe --metrics 'probe/layer_*/accuracy'

A column is an override (a key given on the command line, or a sweep's value) whose value
differs between the runs; each run's value is read from its composed config (a config group's
chosen option from Hydra's record), so a run that left the key at its default shows the
default. With one run, its overrides are shown.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import NoReturn

from omegaconf import OmegaConf

from bertology.errors import UserError
from bertology.run.atomic import write_text_atomic
from bertology.run.rundir import (
    HEADLINE,
    HYDRA_DIR,
    METRICS_FILE,
    STATUS,
    RunDir,
    is_finished,
    matches,
    read_status,
)

UNFINISHED = ("interrupted", "failed", "running", "unknown")


def show(value: object) -> str:
    if OmegaConf.is_config(value):
        value = OmegaConf.to_container(value)
    if isinstance(value, (list, dict)):
        return json.dumps(value, separators=(",", ":"))
    return "null" if value is None else str(value)


_ABSENT = object()


def value_of(run: RunDir, key: str) -> str:
    """The key's value in this run: a group's option, else the config's (its default when the
    run did not override it); empty where the run's pipeline has no such key."""
    if key in run.choices:
        return show(run.choices[key])
    value = run.select(key, default=_ABSENT)
    return "" if value is _ABSENT else show(value)


def differing_keys(runs: list[RunDir]) -> list[str]:
    keys = list(dict.fromkeys(key for run in runs for key in run.overrides))
    if len(runs) == 1:
        return keys
    return [key for key in keys if len({value_of(run, key) for run in runs}) > 1]


def metric_columns(runs: list[RunDir], patterns: Iterable[str]) -> list[str]:
    """Metrics any run has that match a pattern, in pattern order, then name order."""
    present = sorted({key for run in runs for key in run.metrics})
    return list(dict.fromkeys(key for pattern in patterns for key in present
                              if matches(key, pattern)))


def listed_runs(roots: list[Path]) -> list[Path]:
    """Run dirs under the roots whatever their status: a Hydra config, and a status record or
    metrics (a dir Hydra made for a refused start has neither)."""
    dirs = {p.parent.parent for root in roots for p in root.rglob("config.yaml")
            if p.parent.name == HYDRA_DIR}
    return sorted(d for d in dirs if (d / STATUS).exists() or (d / METRICS_FILE).exists())


def status_of(path: Path) -> tuple[str, str]:
    """(status, pipeline) from status.json; a run from before status files: finished."""
    record = read_status(path)
    if record is None and (path / STATUS).exists():  # listed, and said to be damaged
        return "damaged (status.json unreadable)", ""
    record = record or {}
    status = record.get("status") or ("finished" if is_finished(path) else "unknown")
    if status == "finished" and not (path / METRICS_FILE).is_file():
        status = "damaged (no metrics.json)"
    return str(status), str(record.get("pipeline", ""))


def when(path: Path) -> tuple[str, str]:
    """(started, duration) as text: local time to the minute, and 1h 02m / 3m 05s / 42s."""
    record = read_status(path) or {}
    started, updated = record.get("started"), record.get("updated")
    if not isinstance(started, (int, float)):
        return "", ""
    start = datetime.fromtimestamp(started).strftime("%Y-%m-%d %H:%M")
    if not isinstance(updated, (int, float)):
        return start, ""
    seconds = max(0, round(updated - started))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    duration = (f"{hours}h {minutes:02d}m" if hours else f"{minutes}m {seconds:02d}s" if minutes
                else f"{seconds}s")
    return start, duration


def read_run(path: Path) -> RunDir:
    """The run; one that did not finish has no metrics yet (its row shows none)."""
    return RunDir(path, metrics=None if is_finished(path) else {})


def build_table(runs: list[RunDir], patterns: Iterable[str], labels: list[str]
                ) -> tuple[list[str], list[list[object]]]:
    keys = differing_keys(runs)
    metrics = metric_columns(runs, patterns)
    rows = [[label, status_of(run.path)[0], *when(run.path),
             *(value_of(run, k) for k in keys), *(run.metrics.get(m) for m in metrics)]
            for label, run in zip(labels, runs)]
    return ["run", "status", "started", "duration", *keys, *metrics], rows


def format_markdown(header: list[str], rows: list[list[object]]) -> str:
    def cell(value: object) -> str:
        text = f"{value:.4g}" if isinstance(value, float) else "" if value is None else str(value)
        if value in UNFINISHED or str(value).startswith("damaged"):  # marked, not hidden
            text = f"**{text}**"
        return text.replace("|", "\\|")

    lines = ["| " + " | ".join(map(cell, header)) + " |",
             "|" + "|".join("---:" if i >= 1 and all(isinstance(r[i], (float, type(None)))
                                                      for r in rows) else "---"
                            for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(map(cell, row)) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def format_csv(header: list[str], rows: list[list[object]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows([["" if v is None else v for v in row] for row in rows])
    return out.getvalue()


def labels_for(paths: list[Path], full: bool) -> list[str]:
    """The run column: full paths for CSV; for Markdown, paths below the runs' common dir."""
    if full or len(paths) < 2:
        return [str(p) for p in paths]
    common = Path(os.path.commonpath([p.resolve() for p in paths]))
    return [str(p.resolve().relative_to(common)) for p in paths]


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2, like every other bad input
        raise UserError(f"{message} (bertology runs --help)")


def build_parser() -> Parser:
    parser = Parser(prog="bertology runs", description=__doc__.split("\n\n")[0])
    parser.add_argument("dirs", nargs="*", type=Path, default=[Path("outputs")],
                        help="run or sweep dirs, searched recursively (default: outputs)")
    parser.add_argument("--format", choices=("markdown", "csv"), default="markdown")
    parser.add_argument("--metrics", default=",".join(HEADLINE),
                        help="comma-separated metric globs, `*` within one `/` level "
                             "(default: %(default)s)")
    parser.add_argument("--out", type=Path, help="write the table to this file, not stdout")
    return parser


RUNS_FLAGS = ("--format", "--metrics", "--out", "--help")  # build_parser's options
RUNS_FORMATS = ("--format=markdown", "--format=csv")


def complete_runs(current: str, args: list[str]) -> tuple[str, ...]:
    """Its flags; the run dirs are paths, which bash completes itself."""
    if not current.startswith("-"):
        return ()
    return RUNS_FORMATS if "=" in current else RUNS_FLAGS


def main(argv: list[str] | None = None) -> int:
    """Print (or write) the table; raises UserError on bad input."""
    args = build_parser().parse_args(argv)
    missing = [str(d) for d in args.dirs if not d.is_dir()]
    if missing:
        raise UserError(f"{', '.join(missing)}: no such dir; give run or sweep dirs "
                        "(e.g. outputs/pretrain/multirun/<date>/<time>)")
    every = listed_runs(args.dirs)
    reports = [p for p in every if status_of(p)[1] == "report"]
    paths = [p for p in every if p not in reports]
    if not paths:
        raise UserError(f"no run (a run dir with .hydra/config.yaml, and status.json or "
                        f"metrics.json) under {', '.join(map(str, args.dirs))}; point it at run "
                        "or sweep dirs")
    runs = [read_run(path) for path in paths]
    csv_format = args.format == "csv"
    header, rows = build_table(runs, [p.strip() for p in args.metrics.split(",") if p.strip()],
                               labels_for(paths, full=csv_format))
    text = (format_csv if csv_format else format_markdown)(header, rows)
    if reports and not csv_format:  # apart: a report reads runs, it is not one of them
        text += "\nreport runs:\n" + "".join(f"- {p} ({status_of(p)[0]}, {when(p)[0]})\n"
                                             for p in reports)
    if args.out is None:
        print(text, end="")
        return 0
    if not args.out.parent.is_dir():
        raise UserError(f"--out {args.out}: {args.out.parent} does not exist; create it first")
    write_text_atomic(args.out, text)
    print(f"{len(runs)} runs -> {args.out}")
    return 0


if __name__ == "__main__":  # python -m bertology.cli.runs_command, as `bertology runs`
    import sys

    from bertology.errors import EXIT_USER_ERROR

    try:
        raise SystemExit(main())
    except UserError as err:
        print(f"bertology runs: error: {err}", file=sys.stderr)
        raise SystemExit(EXIT_USER_ERROR) from None
