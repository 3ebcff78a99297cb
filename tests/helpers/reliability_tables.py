"""Run the measuring tests and put the tables they measured into their pages of docs/
(PAGES: reliability.md, bad-input.md, damaged-files.md), so each page shows what a test run
measured rather than text typed by hand. `make tables` runs it, and `make test-slow` (so CI)
ends with it.

    python tests/helpers/reliability_tables.py [--commit SHA] [-- pytest options]

The measuring tests (MEASURING: every test of those files, fast and slow) run in one pytest
session with BERTOLOGY_RELIABILITY_TABLES naming a fresh outputs/reliability/; only then do
they write their tables (tests/conftest.py write_markdown_table), so `make test` or a `-k` run
never writes a partial one. A table in the page is found by its header row and replaced whole
(header, rule and rows) by the file's, with the machine's home folder written as ~ (an error
line may name a path under it, such as the Hugging Face cache), and each page's stamp line names
the commit and date. The exit status is pytest's: a failing measuring test fails the run, and
the pages are left as they were.
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

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
TABLES = REPO / "outputs" / "reliability"
# each table the measuring tests write, and the page of docs/ that shows it
PAGES = {"schema_inputs.md": DOCS / "bad-input.md", "bad_inputs.md": DOCS / "bad-input.md",
         "faults.md": DOCS / "reliability.md", "degenerate.md": DOCS / "bad-input.md",
         "damage_walk.md": DOCS / "damaged-files.md"}
FILES = tuple(PAGES)
MEASURING = ("tests/reliability/test_schema_inputs.py", "tests/reliability/test_bad_inputs.py",
             "tests/reliability/test_faults.py", "tests/reliability/test_resume.py",
             "tests/analysis/test_degenerate.py", "tests/reliability/test_damage_walk.py")
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


def splice(page: list[str], table: list[str], where: Path | str = "the page"
           ) -> tuple[list[str], bool]:
    span = table_span(page, table[0])
    if span is None:
        raise SystemExit(f"{where}: no table with the header {table[0]!r}; add it by hand once")
    start, end = span
    return page[:start] + table + page[end:], page[start:end] != table


def scrub(text: str, home: str | None = None) -> str:
    """A measured table as its page shows it: the home folder of the machine that ran the tests
    written as ~, so that no page names one machine's paths."""
    home = str(Path.home()) if home is None else home
    return text.replace(home.rstrip("/") + "/", "~/") if home.strip("/") else text


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
        print(f"the measuring tests failed (pytest exit {status}); the pages left as they were")
        return status
    pages: dict[Path, list[str]] = {}
    for name, page in PAGES.items():
        lines = pages.setdefault(page, page.read_text().splitlines())
        path = TABLES / name
        if not path.exists():
            print(f"{name}: not written by this run; its table is unchanged")
            continue
        pages[page], changed = splice(lines, scrub(path.read_text()).splitlines(), page)
        print(f"{name}: {'updated' if changed else 'unchanged'} ({page.relative_to(REPO)})")
    stamp = f"*Tables written by the tests at {args.commit or head_commit()}, {date.today()}.*"
    for page, lines in pages.items():
        page.write_text(STAMP.sub(stamp, "\n".join(lines) + "\n"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
