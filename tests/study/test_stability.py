"""Two runs of the findings compared (bertology/study/pages/stability.py): the tool on hand-made
findings tables, and on a simulated replication of the project's design in which 8 of 20
verdicts changed, which must fail it."""

from __future__ import annotations

import csv

import numpy as np
import pytest
from test_firm import simulated_suite

from bertology.study.pages import stability
from bertology.study.pages.reporting import FINDING_COLUMNS, finding_rows

COLUMNS = ["finding", "corrected_verdict", "fragile", "p_holm", "effect", "se"]


def write_report(report, rows):
    """rows: (finding, Holm verdict, fragile, p_holm[, effect, se]); a finding's second
    comparison row repeats its verdict, as the report writes it."""
    (report / "tables").mkdir(parents=True)
    with (report / "tables" / "findings.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, COLUMNS)
        writer.writeheader()
        for finding, verdict, fragile, p, *effect in rows:
            effect, se = effect or (0.1, 0.05)
            for _ in range(2):
                writer.writerow({"finding": finding, "corrected_verdict": verdict,
                                 "fragile": fragile, "p_holm": p, "effect": effect, "se": se})


def test_a_fragile_resolved_side_excuses_a_change_and_nothing_excuses_a_reversal(tmp_path,
                                                                                  capsys):
    a, b = tmp_path / "amd", tmp_path / "intel"
    write_report(a, [("same", "holds", False, 0.001),
                     ("near", "underpowered", False, 0.06),
                     ("only_a", "holds", False, 0.01)])
    write_report(b, [("same", "holds", False, 0.002),
                     ("near", "holds", True, 0.04)])  # resolved but not firm
    assert stability.main([str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "1 verdict(s) differ" in out and "0 finding(s) disagree" in out
    assert ("| near | underpowered, p_holm 0.06 | holds (fragile), p_holm 0.04 | excused: a "
            "fragile side | no |") in out
    assert "judged in one run only (not compared): only_a" in out
    # a reversal, even with a fragile side
    write_report(tmp_path / "flip", [("same", "does not hold", True, 0.04),
                                     ("near", "holds", True, 0.04)])
    assert stability.main([str(a), str(tmp_path / "flip")]) == 1
    assert "| same | holds, p_holm 0.001 | does not hold (fragile), p_holm 0.04 | reversal | " \
        "yes |" in capsys.readouterr().out


def test_unresolved_verdicts_carry_no_excuse_and_effects_are_compared(tmp_path, capsys):
    """underpowered ↔ inconclusive is a change no mark excuses (an unresolved verdict is never
    fragile); the same verdict with an effect 4 combined SE away is a disagreement too."""
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    write_report(a, [("x", "underpowered", True, 0.2), ("y", "holds", False, 0.001, 0.5, 0.03)])
    write_report(b, [("x", "inconclusive", False, 0.4), ("y", "holds", False, 0.001, 0.5, 0.04)])
    assert stability.main([str(a), str(b)]) == 1
    assert "| x | underpowered, p_holm 0.2 | inconclusive, p_holm 0.4 | changed | yes |" in \
        capsys.readouterr().out
    write_report(c, [("x", "underpowered", False, 0.2), ("y", "holds", False, 0.001, 0.7, 0.04)])
    assert stability.main([str(a), str(c)]) == 1  # 0.2 / √(0.03² + 0.04²) = 4 SE
    assert "| y | holds, p_holm 0.001 | holds, p_holm 0.001 | effect moved 4.0 SE | yes |" in \
        capsys.readouterr().out


def test_a_replication_where_8_of_20_verdicts_changed_fails_the_check(tmp_path, capsys):
    """The project's design (effects N(0, 1), seed SD U(0.2, 2), suites of 20) at 3 seeds, a
    world and its independent replication: the first pair of draws in which 8 of 20 Holm
    verdicts changed fails the check (the budget-fragile mark once excused most of such
    changes)."""
    rng = np.random.default_rng(56)
    for _ in range(200):
        effects, spreads = rng.normal(0, 1, 20), rng.uniform(0.2, 2, 20)
        first = simulated_suite(effects, spreads, 3, rng)
        second = simulated_suite(effects, spreads, 3, rng)
        if sum(x.corrected.label != y.corrected.label for x, y in zip(first, second)) == 8:
            break
    else:
        pytest.fail("no replication with 8 of 20 changed verdicts in 200 worlds")
    for name, results in (("a", first), ("b", second)):
        (tmp_path / name / "tables").mkdir(parents=True)
        with (tmp_path / name / "tables" / "findings.csv").open("w", newline="") as handle:
            writer = csv.DictWriter(handle, FINDING_COLUMNS)
            writer.writeheader()
            writer.writerows(finding_rows(results))
    assert stability.main([str(tmp_path / "a"), str(tmp_path / "b")]) == 1
    assert "8 verdict(s) differ" in capsys.readouterr().out


def test_a_dir_without_a_findings_table_is_a_one_line_error(tmp_path, capsys):
    write_report(tmp_path / "a", [("x", "holds", False, 0.01)])
    with pytest.raises(SystemExit) as exit_:
        stability.main([str(tmp_path / "a"), str(tmp_path / "nowhere")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "nowhere/tables/findings.csv not found" in err and len(err.splitlines()) == 1
