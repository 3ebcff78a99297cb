"""Tracking: metric files always written, finite floats only, W&B failures are warnings."""

from __future__ import annotations

import json
import logging
import math

import pytest

from bertology.config.groups import LoggerConfig
from bertology.run import tracking


def test_metric_files_and_truncate_on_resume(tmp_path):
    tracker = tracking.build_tracker(LoggerConfig(name="none"), tmp_path, {}, "t")
    for step in (10, 20, 30):
        tracker.log({"train/loss": 1.0 / step, "train/nan": math.nan}, step)
    tracker.truncate_after(20)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [10, 20] and "train/nan" not in rows[0]
    summary = tracker.finish({"eval/accuracy": 0.5, "eval/inf": math.inf})
    assert json.loads((tmp_path / "metrics.json").read_text()) == summary == {"eval/accuracy": 0.5}


def test_wandb_that_cannot_start_is_a_warning(tmp_path, monkeypatch, caplog):
    import wandb

    def broken_init(**kwargs):
        raise RuntimeError("no network")

    monkeypatch.setattr(wandb, "init", broken_init)
    with caplog.at_level(logging.WARNING):
        tracker = tracking.build_tracker(LoggerConfig(name="wandb"), tmp_path, {}, "t")
    assert isinstance(tracker.run, tracking.NullRun)
    assert "could not start" in caplog.text and "metrics.jsonl only" in caplog.text
    tracker.log({"train/loss": 1.0}, 1)
    assert (tmp_path / "metrics.jsonl").exists()


def test_wandb_that_fails_to_log_is_a_warning(tmp_path, caplog):
    class FailingRun:
        def log(self, metrics, step):
            raise OSError("disk full")

    run = tracking.WandbRun(FailingRun())
    tracker = tracking.Tracker(tmp_path, run)
    with caplog.at_level(logging.WARNING):
        tracker.log({"train/loss": 1.0}, 1)
        tracker.log({"train/loss": 0.5}, 2)
    assert caplog.text.count("wandb log failed") == 1  # then W&B is dropped, the run goes on
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 2


@pytest.mark.parametrize("env,netrc,expected", [
    ({"WANDB_API_KEY": "x"}, "", "online"),
    ({}, "machine api.wandb.ai login user password key", "online"),
    ({}, "", "offline"),
    ({"WANDB_MODE": "disabled"}, "", "disabled"),
])
def test_auto_mode_is_offline_unless_logged_in(tmp_path, monkeypatch, env, netrc, expected):
    for key in ("WANDB_API_KEY", "WANDB_MODE"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    (tmp_path / "netrc").write_text(netrc)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    assert tracking._wandb_mode(LoggerConfig(name="wandb")) == expected


@pytest.mark.slow
def test_sweep_jobs_are_grouped_and_tagged_in_wandb(tmp_path, monkeypatch, fresh_logging,
                                                    fake_wandb):
    """Each job of a multirun is its own W&B run, in a group named by the sweep dir and tagged
    with the overrides it was launched with; each run is finished."""
    from bertology.cli import entry as cli

    calls = fake_wandb.calls
    monkeypatch.chdir(tmp_path)
    status = cli.main(["pretrain", "-m", "trainer=smoke", "trainer.max_steps=4",
                       "data.num_sentences=300", "data.eval_docs=5", "seed=0,1",
                       f"hydra.sweep.dir={tmp_path / 'sweep' / 'day' / 'time'}"])
    assert status == 0 and len(calls) == 2 and fake_wandb.finished == 2
    assert {c["group"] for c in calls} == {"sweep/day/time"}
    assert [c["tags"] for c in calls] == [["trainer=smoke", "trainer.max_steps=4",
                                          "data.num_sentences=300", "data.eval_docs=5",
                                          f"seed={seed}"] for seed in (0, 1)]


def test_a_resumed_run_continues_its_wandb_run_and_says_where_it_is(tmp_path, caplog):
    """Issue 42: an interrupted, resumed run was a new offline W&B run per start, and W&B's
    own hint was silenced. Two starts in one run dir are one W&B run id; each start and end
    logs one line naming it and the `wandb sync` command that uploads every dir of it."""
    cfg = LoggerConfig(name="wandb", mode="offline")
    ids = []
    for start in range(2):
        with caplog.at_level(logging.INFO):
            tracker = tracking.build_tracker(cfg, tmp_path, {"seed": 0}, "t")
            tracker.log({"train/loss": 1.0 / (start + 1)}, start)
            tracker.finish({"eval/accuracy": 0.5})
        ids.append(tracker.run._run.id)
    assert ids[0] == ids[1] == tracking.read_run_id(tmp_path)
    offline = sorted(p.name for p in (tmp_path / "wandb").glob("offline-run-*"))
    assert len(offline) == 2 and all(f"-{ids[0]}" in name for name in offline)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("W&B")]
    pattern = tmp_path / "wandb" / f"offline-run-*-{ids[0]}*"
    assert len(list(pattern.parent.glob(pattern.name))) == 2  # the command uploads both
    sync = f"wandb sync {pattern}"
    assert len(lines) == 4 and all(f"offline run {ids[0]}" in x and sync in x for x in lines)


def test_a_run_stopped_early_closes_its_wandb_run_and_names_it(tmp_path, caplog):
    """Issue 42: the W&B line at the end came only from a finished run; a Ctrl-C'd one left
    its W&B run open and said nothing. Stopped inside `ending_early`, the run is closed as
    failed (exit code 1), its line names it with the reason, and the stop goes on up."""
    from bertology.errors import Interrupted

    cfg = LoggerConfig(name="wandb", mode="offline")
    with caplog.at_level(logging.INFO):
        tracker = tracking.build_tracker(cfg, tmp_path, {"seed": 0}, "t")
        run_id = tracker.run._run.id
        with pytest.raises(Interrupted), tracker.ending_early():
            tracker.log({"train/loss": 1.0}, 1)
            raise Interrupted("stopped by Ctrl-C: checkpoint written at step 1")
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("W&B")]
    assert len(lines) == 2 and f"offline run {run_id}" in lines[1]
    assert "stopped early: stopped by Ctrl-C" in lines[1] and "wandb sync" in lines[1]
