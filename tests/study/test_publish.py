"""The results pages come from a run's own files (study/pages/publish.py): the header from what its
runs recorded, the tables from its SUMMARY.md and findings.csv, the README's block likewise;
a run without its record, or a README without its block, is refused in one line."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest

from bertology.study.pages.publish import block_markers, publish, read_header, write_pages
from bertology.study.pages.summary import write_summary

EPYC = {"cores": 2, "model": "AMD EPYC", "flags": "avx2 avx512f avx512_bf16"}
XEON = {"cores": 2, "model": "Intel Xeon", "flags": "avx512_bf16 amx_bf16 amx_tile"}
FIELDS = ["finding", "about", "unit", "scope", "claim", "effect", "ci_low", "ci_high",
          "raw_verdict", "corrected_verdict", "fragile", "p_replication", "note", "runs"]
ROWS = [["pos_layers", "model", "checkpoint", "checkpoint: all-MiniLM-L6-v2", "POS is lower",
         "0.125", "0.05", "0.2", "holds", "holds", "False", "0.93", "", "/tmp/a/seed_0"],
        ["pos_layers", "model", "checkpoint", "checkpoint: all-MiniLM-L6-v2", "POS is lower",
         "-0.5", "-0.75", "-0.25", "holds", "holds", "False", "0.93", "", "/tmp/a/seed_1"],
        ["no_nsp", "model", "pretraining", "pretraining: 3 encoders", "NSP is not needed",
         "0.01", "-0.02", "0.04", "underpowered", "underpowered", "True", "", "n/a", "/tmp/b"]]


def make_run(path, env: dict, started: float, updated: float) -> None:
    (path / ".hydra").mkdir(parents=True)
    (path / ".hydra" / "config.yaml").write_text("seed: 0\n")
    (path / "metrics.json").write_text("{}")
    (path / "env.json").write_text(json.dumps(env))
    (path / "status.json").write_text(json.dumps({"status": "finished", "started": started,
                                                  "updated": updated}))


def make_reproduce(out, record: bool = True):
    """A make reproduce output: two study runs on two commits, a report judged at a third."""
    git = {"commit": "a" * 40, "dirty": False}
    make_run(out / "probe_pos" / "0", {"cpu": EPYC, "git": git}, 1_800_000_000.0,
             1_800_000_600.0)
    make_run(out / "pretrain_nsp" / "0", {"cpu": XEON, "git": {"commit": "b" * 40,
                                                               "dirty": True}},
             1_800_000_300.0, 1_800_001_500.0)
    make_run(out / "report-earlier", {"cpu": XEON, "git": git}, 1_700_000_000.0,
             1_900_000_000.0)  # another report over these runs: not a study run
    (out / "report-earlier" / "status.json").write_text(json.dumps({
        "status": "finished", "pipeline": "report", "started": 1.7e9, "updated": 1.9e9}))
    report = out / "report"
    (report / "tables").mkdir(parents=True)
    (report / "env.json").write_text(json.dumps({"git": {"commit": "c" * 40, "dirty": False}}))
    with (report / "tables" / "findings.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(FIELDS)
        writer.writerows(ROWS)
    write_summary(report)
    if record:
        (out / "reproduce.json").write_text(json.dumps({
            "command": "python -m bertology.reproduce --out '<dir>'", "exit": 0}))
    return report


def test_the_header_is_read_from_the_runs(tmp_path):
    header = read_header(make_reproduce(tmp_path), None)
    # the first run started at 0 s, the last ended at 1,500 s: 25 minutes
    assert header["wall_minutes"] == 25.0
    assert header["runs_at"] == ["aaaaaaa", "bbbbbbb (with changes)"]
    assert header["judged_at"] == "ccccccc"
    assert header["cpu"] == ["2 cores of an AMD EPYC (avx512_bf16, no AMX)",
                             "2 cores of an Intel Xeon (amx_bf16, avx512_bf16)"]
    assert header["started"] == "2027-01-15 08:00 UTC"  # 1.8e9 s after the epoch
    assert header["runs"] == 2 and header["exit"] == 0


def test_the_pages_are_written_from_the_published_files(tmp_path):
    report = make_reproduce(tmp_path / "out")
    docs, readme = tmp_path / "docs", tmp_path / "README.md"
    begin, end = block_markers("minilm")
    readme.write_text(f"# x\n\n{begin}\nold numbers\n{end}\n\nafter\n")
    folder = publish(report, "minilm", docs)
    write_pages(docs, readme)
    published = (folder / "findings.csv").read_text()
    assert "/tmp/" not in published and "runs" not in published.splitlines()[0]
    page = (docs / "results.md").read_text()
    summary = (report / "SUMMARY.md").read_text().rstrip()
    assert summary in page and summary in readme.read_text()
    assert "old numbers" not in readme.read_text() and readme.read_text().endswith("after\n")
    # one row a finding, each comparison's effect and interval in it, to 3 significant digits
    assert ("| pos_layers | POS is lower | holds | +0.125 [+0.05, +0.2]; -0.5 [-0.75, -0.25] "
            "| 0.93 |") in page
    assert "| no_nsp | NSP is not needed | underpowered | +0.01 [-0.02, +0.04] | – |" in page
    assert "| wall time | 25.0 minutes from the first run's start" in page
    # rendering again from the published files changes nothing
    before = (page, readme.read_text())
    write_pages(docs, readme)
    assert ((docs / "results.md").read_text(), readme.read_text()) == before


def cli(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bertology.study.pages.publish", *map(str, args)],
                          cwd=cwd, capture_output=True, text=True)


@pytest.mark.parametrize("case", ["no record", "no block", "no report"])
def test_what_cannot_be_published_is_refused_in_one_line(tmp_path, case):
    report = make_reproduce(tmp_path / "out", record=case != "no record")
    (tmp_path / "README.md").write_text("# x\n" if case == "no block" else
                                        "\n".join(block_markers("minilm")) + "\n")
    target = tmp_path / "elsewhere" if case == "no report" else report
    done = cli(target, "--docs", tmp_path / "docs", "--readme", tmp_path / "README.md",
               cwd=tmp_path)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr
    fix = {"no record": "--command", "no block": "add the two lines",
           "no report": "give the report dir"}[case]
    assert fix in done.stderr
    assert not (tmp_path / "docs").exists()  # refused before anything was written


def test_reproduce_records_its_command_without_the_machines_path(tmp_path, monkeypatch):
    from bertology.study.schedule import command as schedule

    out = tmp_path / "out"
    monkeypatch.setattr(schedule, "dispatch", lambda args: out.mkdir() or 3)
    assert schedule.main(["--out", str(out), "--only", "pos_layers"]) == 3
    record = json.loads((out / "reproduce.json").read_text())
    assert record["command"] == "python -m bertology.reproduce --out '<dir>' --only pos_layers"
    assert record["exit"] == 3 and 0 <= record["wall_minutes"] < 1
    assert str(tmp_path) not in json.dumps(record)
