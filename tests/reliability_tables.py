"""Copy the tables the reliability tests wrote (outputs/reliability/*.md) into
docs/reliability.md, so the page shows what the last test run measured rather than text typed
by hand. `.ci/run` calls it after `make test` and `make test-slow` and prints what changed.

    python tests/reliability_tables.py [--commit SHA]

A table in the page is found by its header row; it is replaced whole (header, rule and rows)
by the file's. A file that is missing leaves its table as it was, and says so.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "reliability.md"
TABLES = REPO / "outputs" / "reliability"
FILES = ("schema_inputs.md", "bad_inputs.md", "faults.md", "degenerate.md")
STAMP = re.compile(r"^\*Tables written by the tests at .*\*$", re.M)


def table_span(lines: list[str], header: str) -> tuple[int, int] | None:
    """[start, end) of the table whose first line is `header`, or None."""
    if header not in lines:
        return None
    start = lines.index(header)
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return start, end


def splice(page: list[str], table: list[str]) -> tuple[list[str], bool]:
    span = table_span(page, table[0])
    if span is None:
        raise SystemExit(f"{PAGE}: no table with the header {table[0]!r}; add it by hand once")
    start, end = span
    return page[:start] + table + page[end:], page[start:end] != table


def head_commit() -> str:
    result = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                            capture_output=True, text=True)
    return result.stdout.strip() or "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commit", default=None, help="the commit the tests ran at (HEAD)")
    args = parser.parse_args(argv)
    page = PAGE.read_text().splitlines()
    for name in FILES:
        path = TABLES / name
        if not path.exists():
            print(f"{name}: not written by this run; its table is unchanged")
            continue
        page, changed = splice(page, path.read_text().splitlines())
        print(f"{name}: {'updated' if changed else 'unchanged'}")
    stamp = f"*Tables written by the tests at {args.commit or head_commit()}, {date.today()}.*"
    PAGE.write_text(STAMP.sub(stamp, "\n".join(page) + "\n"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
