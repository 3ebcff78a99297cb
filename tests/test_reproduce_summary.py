"""The front page's findings block is written from the report's findings.csv (issue 28: the
README's counts are the ones the run wrote, not edited by hand)."""

from __future__ import annotations

import csv
import subprocess
import sys

from bertology.study.summary import write_summary

FIELDS = ["finding", "about", "raw_verdict", "corrected_verdict", "fragile"]
ROWS = [("a", "model", "holds", "holds", False), ("b", "model", "holds", "underpowered", False),
        ("c", "model", "does not hold", "does not hold", False),
        ("d", "method", "holds", "holds", False),
        ("e", "model", "uninformative", "uninformative", False),
        ("f", "model", "holds", "holds", True),  # Holm-adjusted p within 2× of α
        ("g", "model", "does not hold", "leans against", False),
        ("a", "model", "holds", "holds", False)]  # a finding of two comparisons: a row each


def write_table(report):
    (report / "tables").mkdir(parents=True)
    with (report / "tables" / "findings.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(FIELDS)
        writer.writerows(ROWS)


def test_counts_per_kind_raw_and_holm_and_the_findings_behind_them(tmp_path):
    write_table(tmp_path)
    text = write_summary(tmp_path)
    assert (tmp_path / "SUMMARY.md").read_text() == text
    # 6 model claims (a's two rows are one claim), two holding after Holm, one of them
    # fragile and counted apart; the method claim is counted apart and starred
    assert text.startswith("**1 of the 6 claims about the model hold firmly**, and 1 more "
                           "holds but is fragile")
    lines = {line.split(" | ")[0]: line for line in text.splitlines() if line.startswith("| ")}
    assert lines["| holds"] == "| holds | 3 / 2 | 1 / 1 | a, d*, f (fragile) |"
    assert lines["| underpowered"] == "| underpowered | 0 / 1 | 0 / 0 | b |"
    assert lines["| does not hold"] == "| does not hold | 2 / 1 | 0 / 0 | c |"
    assert lines["| leans against"] == "| leans against | 0 / 1 | 0 / 0 | g |"
    assert lines["| uninformative"] == "| uninformative | 1 / 1 | 0 / 0 | e |"


def test_a_dir_without_a_report_is_one_line_and_exit_2(tmp_path):
    done = subprocess.run([sys.executable, "-m", "bertology.study.summary", str(tmp_path)],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "findings.csv not found" in done.stderr
    assert not (tmp_path / "SUMMARY.md").exists()
