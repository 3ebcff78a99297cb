"""Two runs of the findings compared (issue 38: no verdict that is not fragile may differ
between the last two full runs on different CPUs): the tool on hand-made findings tables."""

from __future__ import annotations

import csv

import pytest

from bertology.study import stability


def write_report(report, rows):
    """rows: (finding, Holm verdict, fragile, p_holm); a finding's second comparison row
    repeats its verdict, as the report writes it."""
    (report / "tables").mkdir(parents=True)
    with (report / "tables" / "findings.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, ["finding", "corrected_verdict", "fragile", "p_holm"])
        writer.writeheader()
        for finding, verdict, fragile, p in rows:
            for _ in range(2):
                writer.writerow({"finding": finding, "corrected_verdict": verdict,
                                 "fragile": fragile, "p_holm": p})


def test_only_a_flip_fragile_in_neither_run_fails_the_check(tmp_path, capsys):
    a, b = tmp_path / "amd", tmp_path / "intel"
    write_report(a, [("same", "holds", False, 0.001),
                     ("near", "underpowered", False, 0.06),  # p 0.06: within 2x of 0.05
                     ("only_a", "holds", False, 0.01)])
    write_report(b, [("same", "holds", False, 0.002),
                     ("near", "holds", True, 0.04)])
    assert stability.main([str(a), str(b)]) == 0  # the one flip is fragile in run B
    out = capsys.readouterr().out
    assert "1 verdict(s) differ" in out and "0 of them fragile in neither run" in out
    assert "| near | underpowered, p_holm 0.06 | holds (fragile), p_holm 0.04 | no |" in out
    assert "judged in one run only (not compared): only_a" in out
    write_report(tmp_path / "flip", [("same", "does not hold", False, 0.001),
                                     ("near", "holds", True, 0.04)])
    assert stability.main([str(a), str(tmp_path / "flip")]) == 1
    assert "| same | holds, p_holm 0.001 | does not hold, p_holm 0.001 | yes |" in (
        capsys.readouterr().out)


def test_a_dir_without_a_findings_table_is_a_one_line_error(tmp_path, capsys):
    write_report(tmp_path / "a", [("x", "holds", False, 0.01)])
    with pytest.raises(SystemExit) as exit_:
        stability.main([str(tmp_path / "a"), str(tmp_path / "nowhere")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "nowhere/tables/findings.csv not found" in err and len(err.splitlines()) == 1
