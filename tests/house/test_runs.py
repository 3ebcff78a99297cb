"""`bertology runs`: a table of finished runs with the overrides that differ between them and
their headline metrics, as Markdown or CSV."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from bertology.cli import entry as cli
from bertology.cli.runs_command import matches

pytestmark = pytest.mark.usefixtures("fresh_logging")

TINY = ["pretrain", "logger=none", "trainer=smoke", "trainer.max_steps=4",
        "data.num_sentences=300", "data.eval_docs=10"]


def bertology(args: list[str]) -> int:
    try:
        return cli.main(args)
    except SystemExit as stop:
        return stop.code


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> Path:
    """Two tiny pretraining runs that differ in one override (trainer.lr given to one only)."""
    root = tmp_path_factory.mktemp("runs")
    assert bertology([*TINY, f"hydra.run.dir={root / 'a'}"]) == 0
    assert bertology([*TINY, "trainer.lr=0.001", f"hydra.run.dir={root / 'b'}"]) == 0
    return root


def test_markdown_shows_the_differing_override_and_the_headline_metrics(two_runs, capsys):
    assert cli.main(["runs", str(two_runs)]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    # trainer.lr differs (a: the default the config holds); logger, trainer and the data
    # keys are the same in both runs, so they are no columns
    default_lr = OmegaConf.load(two_runs / "a" / ".hydra" / "config.yaml").trainer.lr
    assert header[:5] == ["run", "status", "started", "duration", "trainer.lr"]
    assert "logger" not in header and "data.num_sentences" not in header
    assert {"eval/mlm_accuracy", "eval/perplexity", "train/loss"} <= set(header)
    assert not [h for h in header if h.startswith(("train/tokens", "eval/shuffled"))]
    rows = {row[0]: row for row in ([c.strip() for c in line.strip("|").split("|")]
                                    for line in lines[2:])}
    assert rows["a"][4] == str(default_lr) and rows["b"][4] == "0.001"
    assert rows["a"][1] == "finished" and rows["a"][3].endswith("s")
    for name in ("a", "b"):
        metrics = json.loads((two_runs / name / "metrics.json").read_text())
        column = header.index("eval/mlm_accuracy")
        assert rows[name][column] == f"{metrics['eval/mlm_accuracy']:.4g}"


def test_csv_holds_full_paths_and_exact_metrics(two_runs, capsys):
    assert cli.main(["runs", str(two_runs / "a"), str(two_runs / "b"), "--format", "csv",
                     "--metrics", "eval/*"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [row["run"] for row in rows] == [str(two_runs / "a"), str(two_runs / "b")]
    for row in rows:
        metrics = json.loads((Path(row["run"]) / "metrics.json").read_text())
        eval_metrics = {k: v for k, v in metrics.items() if matches(k, "eval/*")}
        assert {k: float(row[k]) for k in eval_metrics} == eval_metrics
        assert "train/loss" not in row  # --metrics chose eval/* only


def test_out_writes_the_table_to_a_file(two_runs, tmp_path, capsys):
    out = tmp_path / "runs.csv"
    assert cli.main(["runs", str(two_runs), "--format", "csv", "--out", str(out)]) == 0
    assert "2 runs ->" in capsys.readouterr().out
    assert len(list(csv.DictReader(out.open()))) == 2


def fake_run(path: Path, model: str, accuracy: float, finished: bool = True) -> None:
    """A run dir as Hydra and a pipeline leave it, without the training."""
    (path / ".hydra").mkdir(parents=True)
    OmegaConf.save(OmegaConf.create({"model": {"family": model}, "seed": 0}),
                   path / ".hydra" / "config.yaml")
    OmegaConf.save(OmegaConf.create({"hydra": {"runtime": {"choices": {"model": model}}}}),
                   path / ".hydra" / "hydra.yaml")
    OmegaConf.save(OmegaConf.create([f"model={model}", "hydra.run.dir=x"]),
                   path / ".hydra" / "overrides.yaml")
    if finished:
        (path / "metrics.json").write_text(json.dumps({"eval/accuracy": accuracy,
                                                       "probe/best_layer/accuracy": 0.5}))


def status(path: Path, state: str, pipeline: str = "pretrain", seconds: float = 84.0) -> None:
    (path / "status.json").write_text(json.dumps({
        "pipeline": pipeline, "pid": 1, "started": 1_795_800_000.0,
        "updated": 1_795_800_000.0 + seconds, "status": state}))


def test_a_group_override_shows_the_option_and_a_dir_with_no_run_stays_out(tmp_path, capsys):
    fake_run(tmp_path / "sweep" / "0", "bert", 0.4)
    fake_run(tmp_path / "sweep" / "1", "electra", 0.9)
    fake_run(tmp_path / "sweep" / "2", "roberta", 0.0, finished=False)  # no status, no metrics
    assert cli.main(["runs", str(tmp_path / "sweep"), "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [(r["model"], float(r["eval/accuracy"])) for r in rows] == [("bert", 0.4),
                                                                        ("electra", 0.9)]
    assert "hydra.run.dir" not in rows[0] and "probe/best_layer/accuracy" in rows[0]


def test_status_date_and_duration_with_unfinished_runs_marked_and_reports_apart(tmp_path,
                                                                                capsys):
    """Issue 42: interrupted and failed runs were hidden without a word, report runs mixed in,
    and no run said when it ran or for how long."""
    fake_run(tmp_path / "0", "bert", 0.4)
    status(tmp_path / "0", "finished", seconds=84.0)
    fake_run(tmp_path / "1", "electra", 0.0, finished=False)
    status(tmp_path / "1", "interrupted", seconds=3725.0)
    fake_run(tmp_path / "2", "roberta", 0.0, finished=False)
    status(tmp_path / "2", "failed", seconds=5.0)
    fake_run(tmp_path / "3", "bert", 0.0)
    status(tmp_path / "3", "finished", pipeline="report")
    assert cli.main(["runs", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    rows = {line.split(" | ")[0].strip("| "): line for line in out.splitlines()[2:]
            if line.startswith("| ")}
    assert sorted(rows) == ["0", "1", "2"]  # the report run is not a row
    assert "| finished | " in rows["0"] and "| 1m 24s |" in rows["0"]
    assert "| **interrupted** | " in rows["1"] and "| 1h 02m |" in rows["1"]
    assert "| **failed** | " in rows["2"] and "| 5s |" in rows["2"]
    assert "report runs:\n- " in out and str(tmp_path / "3") in out.split("report runs:")[1]


def test_segment_globs_stay_within_one_level():
    assert matches("eval/accuracy", "eval/*")
    assert not matches("eval/shuffled/accuracy", "eval/*")
    assert matches("probe/random/best_layer/accuracy", "*/*/best_layer/*")


@pytest.mark.parametrize("args, message", [
    ([], "no run (a run dir with .hydra/config.yaml, and status.json or metrics.json)"),
    (["--format", "xml"], "invalid choice"),
    (["missing-dir"], "no such dir"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "outputs").mkdir()  # the default dir, empty
    assert cli.main(["runs", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
