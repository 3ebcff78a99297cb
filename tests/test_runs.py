"""The run table: one CSV row per finished run dir, with its choices and final metrics."""

from __future__ import annotations

import csv
import json

from omegaconf import OmegaConf

from bertology.runs import main


def fake_run(path, family, accuracy, finished=True):
    (path / ".hydra").mkdir(parents=True)
    OmegaConf.save(OmegaConf.create({"model": {"family": family}, "seed": 0}),
                   path / ".hydra" / "config.yaml")
    if finished:
        (path / "metrics.json").write_text(json.dumps({"eval/mlm_accuracy": accuracy}))


def test_rows_hold_choices_and_metrics_of_finished_runs(tmp_path):
    fake_run(tmp_path / "sweep" / "0", "bert", 0.4)
    fake_run(tmp_path / "sweep" / "1", "electra", 0.9)
    fake_run(tmp_path / "sweep" / "2", "roberta", 0.0, finished=False)
    out = tmp_path / "runs.csv"
    assert main([str(tmp_path / "sweep"), "--out", str(out)]) == 0
    rows = list(csv.DictReader(out.open()))
    assert [(r["model.family"], float(r["eval/mlm_accuracy"])) for r in rows] == [
        ("bert", 0.4), ("electra", 0.9)]


def test_no_finished_run_is_exit_2(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    assert "no finished run" in capsys.readouterr().err
