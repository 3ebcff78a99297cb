"""Fault injection (issue 9): kills, preemption, damaged checkpoints, non-finite losses, failed
writes and a failing W&B; run integrity (status, a refused second run, determinism) and no
secret in a run dir.

Each test records what it measured in outputs/reliability/faults.md, the table docs/reliability.md
shows.
"""

from __future__ import annotations

import errno
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import write_markdown_table

from bertology import cli
from bertology.pipelines import report
from bertology.run import tracking
from bertology.run.rundir import is_finished, read_status, run_status
from bertology.run.tracking import without_wall_clock
from bertology.training import checkpoint
from bertology.training.checkpoint import find_damage, list_checkpoints

ROWS: list[tuple[str, str, str]] = []
pytestmark = pytest.mark.usefixtures("fresh_logging")

PRETRAIN = ["pretrain", "logger=none", "trainer=smoke", "data.num_sentences=400",
            "data.eval_docs=10", "trainer.max_steps=40", "trainer.save_every=5",
            "trainer.log_every=5", "trainer.eval_every=20"]
FINETUNE = ["finetune", "logger=none", "task=synthetic_negation", "task.num_sentences=600",
            "trainer=finetune_tiny", "trainer.save_every=5", "trainer.log_every=5"]
DISTILL = ["distill", "logger=none", "task=synthetic_negation", "task.num_sentences=600",
           "trainer=finetune_tiny", "trainer.save_every=5", "trainer.log_every=5",
           "teacher.trainer.save_every=5"]


def record(fault: str, pipeline: str, outcome: str) -> None:
    ROWS.append((fault, pipeline, outcome))


@pytest.fixture(scope="module", autouse=True)
def _write_table():
    yield
    write_markdown_table("faults.md", ["fault", "pipeline", "outcome (measured)"],
                         [list(row) for row in ROWS])


def main(args: list[str], run_dir: Path) -> int:
    """`bertology <args> hydra.run.dir=<run_dir>` in this process; its exit status."""
    try:
        return cli.main([*args, f"hydra.run.dir={run_dir}"])
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else 1


def spawn(args: list[str], run_dir: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "bertology", *args, f"hydra.run.dir={run_dir}"],
                            cwd=run_dir.parent, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def final_metrics(run_dir: Path) -> dict[str, float]:
    return without_wall_clock(json.loads((run_dir / "metrics.json").read_text()))


def logged_metrics(run_dir: Path) -> dict[str, list[dict]]:
    """Every metrics.jsonl of the run (nested runs' too), wall-clock keys aside: a resumed
    run must log the same steps with the same values, none twice."""
    return {str(path.relative_to(run_dir)): [without_wall_clock(json.loads(line))
                                             for line in path.read_text().splitlines()]
            for path in sorted(run_dir.rglob("metrics.jsonl"))}


def all_checkpoints(run_dir: Path) -> list[Path]:
    """Every checkpoint dir of the run, the nested teacher's and seeds' included."""
    return sorted(p for p in run_dir.rglob("step_*") if p.parent.name == "checkpoints")


# ---------------------------------------------------------------- SIGKILL at random points


def progress(run_dir: Path) -> int:
    """Steps saved so far: the newest checkpoint's step, summed over the run's checkpoint
    dirs (a distill run has the teacher's and the student's)."""
    newest: dict[Path, int] = {}
    for path in all_checkpoints(run_dir):
        newest[path.parent] = max(newest.get(path.parent, 0), int(path.name.split("_")[1]))
    return sum(newest.values())


def wait_for_progress(process: subprocess.Popen, run_dir: Path, steps: int) -> None:
    """Until `steps` saved steps, or the process ends."""
    deadline = time.time() + 600
    while progress(run_dir) < steps and process.poll() is None and time.time() < deadline:
        time.sleep(0.02)


@pytest.mark.slow
@pytest.mark.parametrize("args", [PRETRAIN, FINETUNE, DISTILL], ids=["pretrain", "finetune",
                                                                     "distill"])
def test_sigkill_at_three_random_points_resumes_to_the_same_metrics(args, tmp_path):
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    assert spawn(args, straight).wait(timeout=900) == 0
    total = progress(straight)
    rng = random.Random(f"kill:{args[0]}")
    points = sorted(rng.sample(range(5, total - 5, 5), 3))  # saved-step counts to kill after
    kills = []
    for point in points:
        process = spawn(args, killed)
        wait_for_progress(process, killed, point)
        time.sleep(rng.uniform(0.0, 0.3))  # and a random moment into the steps after it
        if process.poll() is not None:
            break
        process.send_signal(signal.SIGKILL)
        process.wait()
        kills.append(progress(killed))
        assert not is_finished(killed), f"kill at {point} left a run that looks finished"
    assert len(kills) == 3, f"the run finished before the kills at {points}"
    process = spawn(args, killed)
    assert process.wait(timeout=900) == 0, process.stderr.read()
    assert final_metrics(killed) == final_metrics(straight)
    assert logged_metrics(killed) == logged_metrics(straight)
    assert read_status(killed)["status"] == "finished"
    record("SIGKILL ×3 at random steps, then rerun", args[0],
           f"killed with {', '.join(map(str, kills))} of {total} steps saved; the resumed "
           "run's metrics.json identical to an uninterrupted run's (wall-clock keys aside)")


# ---------------------------------------------------------------- SIGTERM (SLURM preemption)


@pytest.mark.slow
def test_sigterm_writes_a_checkpoint_exits_143_and_resumes(tmp_path):
    run_dir = tmp_path / "run"
    args = [*PRETRAIN, "trainer.save_every=1000"]  # only the SIGTERM writes a checkpoint
    process = spawn(args, run_dir)
    deadline = time.time() + 300
    while not (run_dir / "metrics.jsonl").exists():  # training has begun
        assert process.poll() is None and time.time() < deadline
        time.sleep(0.02)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=300) == 143, process.stderr.read()
    written = list_checkpoints(run_dir / "checkpoints")
    assert len(written) == 1 and find_damage(written[0]) is None
    assert read_status(run_dir)["status"] == "interrupted"
    assert not (run_dir / "metrics.json").exists()
    assert spawn(args, run_dir).wait(timeout=300) == 0
    assert read_status(run_dir)["status"] == "finished"
    assert "resumed from" in (run_dir / "pretrain.log").read_text()
    record("SIGTERM mid-training", "pretrain",
           f"exit 143, checkpoint {written[0].name} written, status interrupted; the rerun "
           "resumed from it and finished")


# ---------------------------------------------------------------- damaged checkpoint


def test_a_damaged_newest_checkpoint_falls_back_to_the_one_before(tmp_path):
    run_dir = tmp_path / "run"
    assert main(PRETRAIN, run_dir) == 0
    straight = final_metrics(run_dir)
    newest = list_checkpoints(run_dir / "checkpoints")[-1]
    weights = newest / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte: the file still parses, the sum fails
    weights.write_bytes(bytes(data))
    assert find_damage(newest) == "model.safetensors does not match its checksum"
    (run_dir / "metrics.json").unlink()  # as if the run had been killed after that save
    assert main(PRETRAIN, run_dir) == 0
    assert "is damaged" in (run_dir / "pretrain.log").read_text()
    assert (run_dir / "checkpoints" / f"damaged-{newest.name}").exists()
    assert final_metrics(run_dir) == straight
    record("newest checkpoint corrupted (one byte flipped)", "pretrain",
           "checksum mismatch found; warning; resumed from the checkpoint before it and "
           "ended with identical metrics; the damaged one kept aside")


# ---------------------------------------------------------------- non-finite loss


def test_a_non_finite_loss_stops_with_a_clear_message(tmp_path, capsys):
    run_dir = tmp_path / "run"
    args = [*PRETRAIN, "trainer.lr=1e30", "trainer.save_every=1"]
    assert main(args, run_dir) == 1
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1 and "non-finite training loss" in lines[0], err
    assert "Traceback" not in err
    kept = list_checkpoints(run_dir / "checkpoints")
    assert kept and all(find_damage(c) is None for c in kept)
    assert read_status(run_dir)["status"] == "failed" and not is_finished(run_dir)
    record("trainer.lr=1e30 (the loss overflows)", "pretrain",
           f"exit 1, one line ({lines[0].split('error: ')[1][:60]}…); {len(kept)} earlier "
           "checkpoints kept, status failed, no metrics.json")


# ---------------------------------------------------------------- failed writes


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS], ids=["disk-full", "read-only"])
def test_a_failed_checkpoint_write_is_one_line_and_keeps_earlier_ones(code, tmp_path, capsys,
                                                                     monkeypatch):
    real_save, calls = checkpoint.save_model, []

    def save_then_fail(model, path):
        calls.append(path)
        if len(calls) >= 3:
            raise OSError(code, os.strerror(code), path)
        real_save(model, path)

    monkeypatch.setattr(checkpoint, "save_model", save_then_fail)
    run_dir = tmp_path / "run"
    assert main(PRETRAIN, run_dir) == 1
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1 and os.strerror(code) in lines[0] and "Traceback" not in err, err
    kept = list_checkpoints(run_dir / "checkpoints")
    assert len(kept) == 2 and all(find_damage(c) is None for c in kept)
    assert not list((run_dir / "checkpoints").glob(".tmp-*")), "a partial checkpoint remains"
    assert read_status(run_dir)["status"] == "failed" and not is_finished(run_dir)
    record(f"{errno.errorcode[code]} on the third checkpoint write", "pretrain",
           f"exit 1, one line ({os.strerror(code)} … free disk space or make the run dir "
           "writable); the 2 earlier checkpoints intact, no partial dir, status failed")


# ---------------------------------------------------------------- W&B failures


def test_wandb_online_failure_falls_back_offline(tmp_path, monkeypatch):
    real_init = tracking._init_wandb

    def offline_only(cfg, mode, *args):
        if mode == "online":
            raise ConnectionError("api.wandb.ai unreachable")
        return real_init(cfg, mode, *args)

    monkeypatch.setattr(tracking, "_init_wandb", offline_only)
    run_dir = tmp_path / "run"
    args = [a for a in PRETRAIN if a != "logger=none"] + ["logger.mode=online",
                                                          "trainer.max_steps=10"]
    assert main(args, run_dir) == 0
    assert "trying offline" in (run_dir / "pretrain.log").read_text()
    assert list((run_dir / "wandb").glob("offline-run-*")) and is_finished(run_dir)
    record("W&B cannot start online", "pretrain",
           "warning, an offline W&B run instead; the run finished")


def test_wandb_failing_to_log_leaves_the_run_going(tmp_path, monkeypatch):
    class BrokenRun:
        summary: dict = {}

        def log(self, *args, **kwargs):
            raise OSError("wandb: the service process died")

        def finish(self):
            pass

    monkeypatch.setattr(tracking, "_init_wandb", lambda *args: BrokenRun())
    run_dir = tmp_path / "run"
    args = [a for a in PRETRAIN if a != "logger=none"] + ["trainer.max_steps=10"]
    assert main(args, run_dir) == 0
    assert "wandb log failed" in (run_dir / "pretrain.log").read_text()
    logged = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert len(logged) >= 3 and is_finished(run_dir)
    record("W&B fails to log mid-run", "pretrain",
           f"warning; metrics.jsonl kept all {len(logged)} records; the run finished")


# ---------------------------------------------------------------- run integrity


def test_a_second_run_into_a_live_dir_is_refused(tmp_path, capsys):
    run_dir = tmp_path / "run"
    with run_status(run_dir, "pretrain"):  # a live run holds the dir's lock
        before = sorted(p.name for p in run_dir.iterdir())
        assert main(PRETRAIN, run_dir) == 2
        assert sorted(p.name for p in run_dir.iterdir()) == before, "the live dir was touched"
    err = capsys.readouterr().err
    assert "is in use by a running bertology process" in err and "Traceback" not in err
    record("a second run started into a live run's dir", "pretrain",
           "exit 2 before Hydra wrote anything; the live dir untouched")


def test_metrics_json_and_finished_status_only_for_a_finished_run(tmp_path):
    run_dir = tmp_path / "run"
    assert main([*PRETRAIN, "trainer.max_steps=10"], run_dir) == 0
    assert read_status(run_dir)["status"] == "finished" and is_finished(run_dir)
    (run_dir / "status.json").write_text(json.dumps({"status": "running"}))
    assert not is_finished(run_dir)
    with pytest.raises(Exception, match="no finished runs"):
        report.find_runs([tmp_path])


@pytest.mark.slow
@pytest.mark.parametrize("args", [PRETRAIN, FINETUNE], ids=["pretrain", "finetune"])
def test_same_seed_same_metrics_other_seed_other_metrics(args, tmp_path):
    runs = {}
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        # Each run learns its own tokenizer (its own cache dir): the vocabulary is part of what
        # must come out the same (tests/test_wordpiece.py has the bug this caught).
        cache = f"paths.cache_dir={tmp_path / f'cache_{name}'}"
        assert main([*args, f"seed={seed}", cache], tmp_path / name) == 0
        runs[name] = final_metrics(tmp_path / name)
    assert runs["a"] == runs["b"]
    changed = [k for k in runs["a"] if runs["a"][k] != runs["c"].get(k)]
    assert any(k.startswith(("train/loss", "eval/")) for k in changed), changed
    record("the same config and seed twice; another seed", args[0],
           f"identical metrics.json ({len(runs['a'])} keys, wall-clock aside, each run with its "
           f"own tokenizer cache); seed 1 changed "
           f"{len(changed)} of them")


# ---------------------------------------------------------------- secrets


def test_no_secret_reaches_the_run_dir(tmp_path, monkeypatch, capsys):
    secret = "0123456789abcdef0123456789abcdef01234567"  # the shape of a W&B API key
    monkeypatch.setenv("WANDB_API_KEY", secret)
    monkeypatch.setenv("WANDB_MODE", "offline")
    run_dir = tmp_path / "run"
    args = [a for a in PRETRAIN if a != "logger=none"] + ["trainer.max_steps=10"]
    assert main(args, run_dir) == 0
    leaks = [p for p in run_dir.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    out = capsys.readouterr()
    assert not leaks and secret not in out.out + out.err, leaks
    files = sum(1 for p in run_dir.rglob("*") if p.is_file())
    record("WANDB_API_KEY set during a W&B run", "pretrain",
           f"the key is in none of the run dir's {files} files, nor in the console output")
