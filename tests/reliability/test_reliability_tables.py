"""tests/helpers/reliability_tables.py puts the tables the tests wrote into their pages of docs/."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "helpers"))
from reliability_tables import FILES, PAGES, STAMP, scrub, splice, table_span  # noqa: E402

PAGE_LINES = ["# Reliability", "", "| fault | pipeline | outcome |", "|---|---|---|",
              "| old | pretrain | typed by hand |", "", "text after"]


def test_a_table_is_replaced_whole_by_its_header_and_the_rest_kept():
    table = ["| fault | pipeline | outcome |", "|---|---|---|", "| a | pretrain | exit 1 |",
             "| b | probe | exit 1 |"]
    page, changed = splice(PAGE_LINES, table)
    assert changed and page == PAGE_LINES[:2] + table + PAGE_LINES[5:]
    assert splice(page, table) == (page, False)  # the same table twice: unchanged


def test_a_table_whose_header_the_page_lacks_is_refused():
    assert table_span(PAGE_LINES, "| data | analysis |") is None
    with pytest.raises(SystemExit, match="bad-input.md: no table with the header"):
        splice(PAGE_LINES, ["| data | analysis |", "|---|---|"], "docs/bad-input.md")


def test_the_machines_home_folder_is_written_as_a_tilde():
    line = "| x | not in the local cache (/home/ci/.cache/huggingface/hub) |"
    assert scrub(line, "/home/ci") == "| x | not in the local cache (~/.cache/huggingface/hub) |"
    assert scrub("/root/.cache and /rooted/x", "/root/") == "~/.cache and /rooted/x"
    assert scrub("/a/b", "/") == "/a/b"


def test_every_table_the_tests_write_has_its_place_in_its_page():
    """The header each test writes (its first call's) is in the page PAGES names, and each of
    those pages has the stamp line that says when its tables were written."""
    headers = {"schema_inputs.md": "| pipeline | leaf keys | generated cases | refused (exit 2) "
                                   "| accepted on purpose |",
               "bad_inputs.md": "| pipeline | bad input | exit | the error line |",
               "faults.md": "| fault | pipeline | outcome (measured) |",
               "degenerate.md": "| data | analysis | outcome (measured) |",
               "damage_walk.md": "| file | damage | outcome (measured) |"}
    assert set(headers) == set(FILES)
    for name, header in headers.items():
        assert table_span(PAGES[name].read_text().splitlines(), header) is not None, name
    for page in set(PAGES.values()):
        assert len(STAMP.findall(page.read_text())) == 1, page.name
