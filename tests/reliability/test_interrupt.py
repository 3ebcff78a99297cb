"""Ctrl-C (issue 30.4): SIGINT is handled as SIGTERM is (test_faults.py): the step finishes, a
checkpoint is written, the status says interrupted, one line says how to resume, exit 130,
no traceback; the rerun ends with the metrics of a run never interrupted."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bertology.run.rundir import read_status
from bertology.run.tracking import without_wall_clock
from bertology.training.checkpoint import find_damage, list_checkpoints

# Only the Ctrl-C writes a checkpoint (save_every beyond max_steps).
PRETRAIN = ["pretrain", "logger=none", "trainer=smoke", "data.num_sentences=400",
            "data.eval_docs=10", "trainer.max_steps=30", "trainer.save_every=1000",
            "trainer.log_every=5", "trainer.eval_every=10"]


def spawn(run_dir: Path) -> subprocess.Popen:
    """`python -m bertology pretrain` as a shell starts it: SIGINT at its default (a harness
    that runs the tests in the background may have the parent ignore it)."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "bertology", *PRETRAIN, f"hydra.run.dir={run_dir}"],
        cwd=run_dir.parent, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def final_metrics(run_dir: Path) -> dict[str, float]:
    return without_wall_clock(json.loads((run_dir / "metrics.json").read_text()))


@pytest.mark.slow  # three pretraining runs in fresh processes, as test_faults' SIGTERM test
def test_ctrl_c_checkpoints_exits_130_and_the_rerun_equals_an_uninterrupted_run(tmp_path):
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    process = spawn(straight)
    assert process.wait(timeout=600) == 0, process.stderr.read()

    process = spawn(stopped)
    deadline = time.time() + 300
    while not (stopped / "metrics.jsonl").exists():  # training has begun
        assert process.poll() is None and time.time() < deadline, process.stderr.read()
        time.sleep(0.02)
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=300) == 130
    err = process.stderr.read()
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    hints = [line for line in err.splitlines() if line.startswith("bertology pretrain:")]
    assert hints == [f"bertology pretrain: stopped by Ctrl-C: checkpoint written at step "
                     f"{int(list_checkpoints(stopped / 'checkpoints')[0].name.split('_')[1])}; "
                     f"to resume, rerun: bertology {shlex.join(PRETRAIN)} "
                     f"hydra.run.dir={stopped}"], err
    written = list_checkpoints(stopped / "checkpoints")
    assert len(written) == 1 and find_damage(written[0]) is None
    assert read_status(stopped)["status"] == "interrupted"
    assert not (stopped / "metrics.json").exists()

    process = spawn(stopped)
    assert process.wait(timeout=600) == 0, process.stderr.read()
    assert read_status(stopped)["status"] == "finished"
    assert "resumed from" in (stopped / "pretrain.log").read_text()
    assert final_metrics(stopped) == final_metrics(straight)
