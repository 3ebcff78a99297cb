"""A report whose runs are smaller than their study states (study/judge/scale.py) says so in the
first line of REPORT.md, REPORT.html and SUMMARY.md, and lists the shortfalls; runs at the
stated sizes, or larger, or reading everything (null), make a report that says nothing of the
kind; the method sentence says one thing."""

from __future__ import annotations

import csv

import pytest
from test_report import FINDING, run_report, write_run

from bertology.study.judge.catalog import load_studies
from bertology.study.judge.results import find_runs
from bertology.study.judge.scale import SMOKE, find_shortfalls, stated_sizes
from bertology.study.pages.summary import write_summary

POS = {**FINDING, "id": "demo_pos", "study": "probe_pos"}  # a real study's label and sizes


def make_runs(tmp_path, **sizes):
    for seed in range(3):
        write_run(tmp_path / "runs" / str(seed), {"eval/a": 0.8 + seed / 100, "eval/b": 0.7},
                  seed, POS, **sizes)
    return tmp_path / "runs"


def test_the_stated_sizes_are_the_bundle_under_the_reproduce_overrides():
    """probe_pos' bundle says 1000 / 300 sentences; make reproduce's overrides 250 / 200."""
    sizes = stated_sizes(load_studies()["probe_pos"])
    assert sizes == {"max_train_sentences": 250.0, "max_eval_sentences": 200.0}


def test_a_smoke_sized_report_says_so_first(tmp_path):
    runs = make_runs(tmp_path, max_train_sentences=24, max_eval_sentences=16)
    metrics = run_report(runs, tmp_path / "report", POS)
    first = (tmp_path / "report" / "REPORT.md").read_text().splitlines()[0]
    assert SMOKE in first
    assert "probe_pos max_eval_sentences=16 (stated 200)" in first
    assert SMOKE in (tmp_path / "report" / "REPORT.html").read_text().split("</h1>")[0]
    assert metrics["report/smoke_sized"] == 1.0
    with (tmp_path / "report" / "tables" / "scale.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert {(r["key"], float(r["runs"]), float(r["stated"])) for r in rows} == {
        ("max_train_sentences", 24.0, 250.0), ("max_eval_sentences", 16.0, 200.0)}
    assert SMOKE in write_summary(tmp_path / "report").splitlines()[0]


@pytest.mark.parametrize("sizes", [{"max_train_sentences": 250, "max_eval_sentences": 200},
                                   {"max_train_sentences": None, "max_eval_sentences": 500}])
def test_a_report_at_the_stated_sizes_says_nothing_of_the_kind(tmp_path, sizes):
    runs = make_runs(tmp_path, **sizes)
    metrics = run_report(runs, tmp_path / "report", POS)
    text = (tmp_path / "report" / "REPORT.md").read_text()
    assert text.splitlines()[0] == "# bertology report" and SMOKE not in text
    assert metrics["report/smoke_sized"] == 0.0
    assert SMOKE not in write_summary(tmp_path / "report")


def test_the_smallest_run_is_named_and_unlabelled_runs_are_not_judged(tmp_path):
    make_runs(tmp_path, max_train_sentences=300, max_eval_sentences=200)
    write_run(tmp_path / "runs" / "small", {"eval/a": 0.8, "eval/b": 0.7}, 3, POS,
              max_train_sentences=300, max_eval_sentences=40)
    write_run(tmp_path / "runs" / "other", {"eval/a": 0.8}, 4, max_eval_sentences=1)
    shortfalls = find_shortfalls(find_runs([tmp_path / "runs"]))
    assert [(s.study, s.key, s.value) for s in shortfalls] == [
        ("probe_pos", "max_eval_sentences", 40.0)]


def test_the_method_sentence_says_one_thing(tmp_path):
    run_report(make_runs(tmp_path, max_train_sentences=250, max_eval_sentences=200),
               tmp_path / "report", POS)
    for name in ("REPORT.md", "REPORT.html"):
        text = (tmp_path / "report" / name).read_text()
        assert "one-sided at level 0.025" in text and "α = 0.05 two-sided" not in text
