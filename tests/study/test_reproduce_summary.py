"""The front page's findings block is written from the report's findings.csv (issue 28: the
README's counts are the ones the run wrote, not edited by hand)."""

from __future__ import annotations

import csv
import subprocess
import sys

from bertology.study.pages.summary import write_summary

FIELDS = ["finding", "about", "unit", "scope", "raw_verdict", "corrected_verdict", "fragile"]
MINILM = "checkpoint: all-MiniLM-L6-v2"
PRE = "pretraining: 6 encoders"
ROWS = [("a", "model", "checkpoint", MINILM, "holds", "holds", False),
        ("b", "model", "checkpoint", MINILM, "holds", "underpowered", False),
        ("c", "model", "pretraining", PRE, "does not hold", "does not hold", False),
        ("d", "method", "checkpoint", MINILM, "holds", "holds", False),
        ("e", "model", "checkpoint", MINILM, "uninformative", "uninformative", False),
        ("f", "model", "checkpoint", MINILM, "holds", "holds", True),  # resolved, not firm
        ("g", "model", "pretraining", PRE, "does not hold", "leans against", False),
        ("a", "model", "checkpoint", MINILM, "holds", "holds", False)]  # a second comparison


def write_table(report, fields=FIELDS, rows=ROWS):
    (report / "tables").mkdir(parents=True)
    with (report / "tables" / "findings.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(fields)
        writer.writerows([[row[FIELDS.index(f)] for f in fields] for row in rows])


def test_counts_per_kind_raw_and_holm_and_the_findings_behind_them(tmp_path):
    write_table(tmp_path)
    text = write_summary(tmp_path)
    assert (tmp_path / "SUMMARY.md").read_text() == text
    # the headline is about pretraining (c, g: neither holds; c does not hold, firmly); the 4
    # checkpoint claims (a's two rows are one claim) are counted apart, named by their scope:
    # two hold after Holm, one of them fragile and counted apart, none the other way; each kind
    # counts its resolutions in both directions; the method claim is counted apart and starred
    assert text.startswith("**Pretraining claims, across independently pretrained encoders: "
                           "none of the 2 hold**; 1 does not hold (1 firmly); **checkpoint "
                           "claims (all-MiniLM-L6-v2): 1 of the 4 hold firmly**, and 1 more "
                           "holds but is fragile (not firm: firm needs a Holm-adjusted p below "
                           "α/10, 4 or more replicates and none that carries it alone); none "
                           "does not hold, after Holm's")
    assert "A checkpoint claim holds for that trained model, not for BERT" in text
    lines = {line.split(" | ")[0]: line for line in text.splitlines() if line.startswith("| ")}
    assert lines["| verdict"] == ("| verdict | pretraining: raw / Holm | checkpoint: raw / Holm "
                                  "| method: raw / Holm | findings (Holm) |")
    assert lines["| holds"] == "| holds | 0 / 0 | 3 / 2 | 1 / 1 | a, d*, f (fragile) |"
    assert lines["| underpowered"] == "| underpowered | 0 / 0 | 0 / 1 | 0 / 0 | b |"
    assert lines["| does not hold"] == "| does not hold | 2 / 1 | 0 / 0 | 0 / 0 | c |"
    assert lines["| leans against"] == "| leans against | 0 / 1 | 0 / 0 | 0 / 0 | g |"
    assert lines["| uninformative"] == "| uninformative | 0 / 0 | 1 / 1 | 0 / 0 | e |"


def test_a_report_from_before_units_counts_no_claim_as_about_pretraining(tmp_path):
    """A findings.csv without unit and scope columns: nothing showed a model claim replicated
    over pretraining, so each is read as one checkpoint's, and none is named."""
    write_table(tmp_path, ["finding", "about", "raw_verdict", "corrected_verdict", "fragile"])
    text = write_summary(tmp_path)
    assert text.startswith("**Pretraining claims: none judged**; **checkpoint claims (one "
                           "checkpoint): 1 of the 6 hold firmly**, and 1 more holds but is "
                           "fragile")
    assert "| verdict | checkpoint: raw / Holm | method: raw / Holm |" in text


def test_a_population_report_has_no_fragile_clause_where_none_is_fragile(tmp_path):
    """make reproduce-population's report: pretraining claims only, none fragile: the headline
    defines no fragility it does not use (it followed "none judged" before)."""
    rows = [r for r in ROWS if r[2] == "pretraining"]
    write_table(tmp_path, rows=rows)
    text = write_summary(tmp_path)
    assert text.startswith("**Pretraining claims, across independently pretrained encoders: "
                           "none of the 2 hold**; 1 does not hold (1 firmly), after Holm's "
                           "correction over all 2 findings. 0 claims about the method")
    assert "not firm" not in text and "checkpoint claim" not in text
    with (tmp_path / "tables" / "findings.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([*FIELDS, "members"])
        writer.writerows([(*r, "12") for r in rows])
    assert write_summary(tmp_path).startswith(
        "**Pretraining claims, across 12 independently pretrained encoders: none of the 2")


POPULATION_FIELDS = ["finding", "about", "unit", "scope", "members", "effect", "ci_low",
                     "ci_high", "multibootstrap_low", "multibootstrap_high", "raw_verdict",
                     "corrected_verdict", "fragile", "note"]


def test_a_population_report_counts_what_resolves_and_tables_each_finding(tmp_path):
    """The front page's procedure-level table: how many pretraining claims resolve after Holm
    (holds or does not hold; the method claim apart), then a row per finding whose cells hold a
    part per comparison: the effect with its two-level interval, the multi-bootstrap beside
    it, both verdicts, the note."""
    rows = [("anisotropy", "model", "pretraining", PRE, 6, 0.0508, 0.0111, 0.0905, 0.0175,
             0.0847, "holds", "underpowered", False, "≈ 24 checkpoints would resolve it"),
            ("heads", "model", "pretraining", PRE, 6, -0.25, -0.25, -0.25, -0.25, -0.25,
             "does not hold", "does not hold", False, ""),
            ("heads", "model", "pretraining", PRE, 6, 0.0, "", "", "", "", "does not hold",
             "does not hold", False, ""),
            ("order", "model", "pretraining", PRE, 6, 0.0985, 0.0749, 0.122, 0.075, 0.12,
             "holds", "holds", True, "fragile: Holm-adjusted p = 0.04"),
            ("control", "method", "pretraining", PRE, 6, 0.497, 0.481, 0.513, 0.481, 0.513,
             "holds", "holds", False, "")]
    (tmp_path / "tables").mkdir()
    with (tmp_path / "tables" / "findings.csv").open("w", newline="") as handle:
        csv.writer(handle).writerows([POPULATION_FIELDS, *rows])
    lines = write_summary(tmp_path).splitlines()
    assert "2 of the 3 pretraining claims resolve after Holm (hold or do not hold), 1 of them " \
           "fragile." in lines
    table = {line.split(" | ")[0]: line for line in lines if line.startswith("| ")}
    assert table["| anisotropy"] == ("| anisotropy | +0.0508 [+0.0111, +0.0905] | "
                                     "[+0.0175, +0.0847] | holds | underpowered | "
                                     "≈ 24 checkpoints would resolve it |")
    assert table["| heads"] == ("| heads | -0.25 [-0.25, -0.25]; +0 – | [-0.25, -0.25]; – | "
                                "does not hold | does not hold |  |")
    assert table["| order"].endswith("| holds | holds (fragile) | fragile: Holm-adjusted "
                                     "p = 0.04 |")
    assert table["| control*"].startswith("| control* | +0.497 [+0.481, +0.513] |")


def test_a_population_summary_says_how_well_its_members_pretrained(tmp_path):
    """The members table the run wrote (members.csv): how many of those pretrained learned,
    their accuracies against their floors, and those at their floor by name; a member whose
    pretraining crashed (blank) is not counted as pretrained."""
    write_table(tmp_path, rows=[r for r in ROWS if r[2] == "pretraining"])
    with (tmp_path / "tables" / "members.csv").open("w", newline="") as handle:
        csv.writer(handle).writerows([
            ["member", "mlm_accuracy", "mlm_floor", "learned"], [100, 0.0974, 0.0579, True],
            [101, 0.0531, 0.0541, False], [102, 0.0861, 0.0620, True], [103, "", "", ""]])
    assert ("Members: 2 of the 3 pretrained learned: held-out MLM accuracy 0.086–0.097, "
            "against floors of 0.058–0.062; at or below their floor: 101 (0.053).") \
        in write_summary(tmp_path).splitlines()
    # a run from before the floor was recorded: its `learned` reads its first evaluation, and
    # it is no failed run by the verdicts' rule
    with (tmp_path / "tables" / "members.csv").open("w", newline="") as handle:
        csv.writer(handle).writerows([["member", "mlm_accuracy", "mlm_floor", "learned"],
                                      [0, 0.099, "", True], [7, 0.046, "", False]])
    assert ("Members: 1 of the 2 pretrained learned: held-out MLM accuracy 0.099–0.099; 2 "
            "with no floor recorded (run before it was; the verdicts keep them).") \
        in write_summary(tmp_path).splitlines()


def test_a_checkpoint_report_has_no_population_table(tmp_path):
    write_table(tmp_path)
    assert "resolve after Holm" not in write_summary(tmp_path)


def test_a_dir_without_a_report_is_one_line_and_exit_2(tmp_path):
    done = subprocess.run([sys.executable, "-m", "bertology.study.pages.summary", str(tmp_path)],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "findings.csv not found" in done.stderr
    assert not (tmp_path / "SUMMARY.md").exists()
