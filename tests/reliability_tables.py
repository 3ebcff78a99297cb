"""Run the measuring tests and put the tables they measured into docs/reliability.md, so the
page shows what a test run measured rather than text typed by hand. `make tables` runs it, and
`make test-slow` (so CI) ends with it.

    python tests/reliability_tables.py [--commit SHA] [-- pytest options]

The measuring tests (MEASURING: every test of those files, fast and slow) run in one pytest
session with BERTOLOGY_RELIABILITY_TABLES naming a fresh outputs/reliability/; only then do
they write their tables (tests/conftest.py write_markdown_table), so `make test` or a `-k` run
never writes a partial one. A table in the page is found by its header row and replaced whole
(header, rule and rows) by the file's. The exit status is pytest's: a failing measuring test
fails the run, and the page is left as it was.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "reliability.md"
TABLES = REPO / "outputs" / "reliability"
FILES = ("schema_inputs.md", "bad_inputs.md", "faults.md", "degenerate.md", "damage_walk.md")
MEASURING = ("tests/test_schema_inputs.py", "tests/test_bad_inputs.py", "tests/test_faults.py",
             "tests/test_resume.py", "tests/test_degenerate.py", "tests/test_damage_walk.py")
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


def run_measuring_tests(pytest_args: list[str]) -> int:
    """Every test of MEASURING, tables written into a fresh TABLES; pytest's exit status."""
    shutil.rmtree(TABLES, ignore_errors=True)
    TABLES.mkdir(parents=True)
    env = {**os.environ, "BERTOLOGY_RELIABILITY_TABLES": str(TABLES)}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *pytest_args, *MEASURING], cwd=REPO, env=env).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commit", default=None, help="the commit the tests ran at (HEAD)")
    parser.add_argument("--list", action="store_true", help="print the measuring test files")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = parser.parse_args(argv)
    if args.list:
        print(" ".join(MEASURING))
        return 0
    status = run_measuring_tests(args.pytest_args)
    if status != 0:
        print(f"the measuring tests failed (pytest exit {status}); {PAGE} left as it was")
        return status
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
