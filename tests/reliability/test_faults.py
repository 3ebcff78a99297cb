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
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import write_markdown_table
from safetensors.torch import load_file

from bertology.cli import entry as cli
from bertology.run import tracking
from bertology.run.rundir import is_finished, read_status, run_status
from bertology.run.tracking import without_wall_clock
from bertology.run.write_errors import FIXES, describe_write_error, errno_of
from bertology.study.judge.results import find_runs
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
    """Every checkpoint dir of the run, the nested teacher's and seeds' included. os.walk, not
    rglob: this polls a live run, which renames its `.tmp-step_*` dirs while we walk, and
    os.walk passes over a dir that is gone by the time it is listed (rglob raised on one)."""
    return sorted(Path(root, name) for root, dirs, _ in os.walk(run_dir)
                  if Path(root).name == "checkpoints" for name in dirs
                  if name.startswith("step_"))


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


@pytest.mark.slow
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
           f"exit 1, one line ({lines[0].split('error: ', 1)[1][:60]}…); {len(kept)} earlier "
           "checkpoints kept, status failed, no metrics.json")


# ---------------------------------------------------------------- failed writes


@pytest.mark.slow
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
           f"exit 1, one line ({os.strerror(code)}: <the checkpoint's dir>; "
           f"{FIXES[code]}, then rerun "
           "… to resume from …); the 2 earlier checkpoints intact, no partial dir, status failed")


# ---------------------------------------------------------------- W&B failures


@pytest.mark.slow
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
        find_runs([tmp_path])


@pytest.mark.slow
@pytest.mark.parametrize("args", [PRETRAIN, FINETUNE], ids=["pretrain", "finetune"])
def test_same_seed_same_metrics_other_seed_other_metrics(args, tmp_path):
    runs = {}
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        # Each run learns its own tokenizer (its own cache dir): the vocabulary is part of what
        # must come out the same (tests/runner/test_wordpiece.py has the bug this caught).
        cache = f"paths.cache_dir={tmp_path / f'cache_{name}'}"
        # one precision for all three: trainer.mixed_precision=auto times bf16 against fp32 and
        # keeps the choice in the cache dir, which each run here has its own of, so each times
        # anew, and two runs on a loaded CPU can decide differently (the log says which)
        fp32 = "trainer.mixed_precision=no"
        assert main([*args, f"seed={seed}", cache, fp32], tmp_path / name) == 0
        runs[name] = final_metrics(tmp_path / name)
    assert runs["a"] == runs["b"]
    changed = [k for k in runs["a"] if runs["a"][k] != runs["c"].get(k)]
    assert any(k.startswith(("train/loss", "eval/")) for k in changed), changed
    record("the same config and seed twice; another seed", args[0],
           f"identical metrics.json ({len(runs['a'])} keys, wall-clock aside, each run with its "
           f"own tokenizer cache); seed 1 changed "
           f"{len(changed)} of them")


# ---------------------------------------------------------------- secrets


@pytest.mark.slow
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


# ---------------------------------------------------------------- every kind of write (issue 31)

PROBE = ["probe", "logger=none", "init=random", "seeds=[0]", "max_train_sentences=120",
         "max_eval_sentences=40", "analysis.linear.max_iter=50"]


@dataclass(frozen=True)
class Write:
    """A kind of write a run makes, where it fails and how (the errnos rotate over kinds)."""

    kind: str
    args: list[str]
    target: str  # a fragment of the path of the write that fails
    nth: int  # fail at the nth write to a matching path (earlier ones go through)
    code: int
    via: str = "open"  # open: Python's open(); safetensors: a Rust writer (its own error type)


WRITES = [
    Write("checkpoint", PRETRAIN, "checkpoints/.tmp-step_", 3, errno.ENOSPC, "safetensors"),
    Write("metrics.jsonl", PRETRAIN, "metrics.jsonl", 3, errno.EIO),
    Write("metrics.json", PRETRAIN, ".metrics.json.tmp", 1, errno.EACCES),
    Write("model/", PRETRAIN, ".tmp-model", 1, errno.ENOSPC, "safetensors"),
    Write("tables", PROBE, "tables/.", 1, errno.ENOENT),
    Write("figures", PROBE, "plots/.", 1, errno.ENOSPC),
    Write("replicates", PROBE, "replicates/.", 1, errno.EIO),
]


def fail_writes(monkeypatch, write: Write) -> None:
    """Make the nth write to a path containing write.target fail with write.code: through
    open() (Path.open, write_text, matplotlib) or, for weights, through safetensors, which
    reports its own SafetensorError carrying the OS error's number, as on a real full disk."""
    import builtins
    import io

    from safetensors import SafetensorError
    from transformers import modeling_utils

    seen = []

    def hit(path) -> bool:
        if write.target in str(path):
            seen.append(path)
        return len(seen) >= write.nth and write.target in str(path)

    if write.via == "safetensors":
        def failing(real):
            def save(obj, path, *args, **kwargs):
                if hit(path):
                    raise SafetensorError(f"Error while serializing: I/O error: "
                                          f"{os.strerror(write.code)} (os error {write.code})")
                return real(obj, path, *args, **kwargs)
            return save
        monkeypatch.setattr(checkpoint, "save_model", failing(checkpoint.save_model))
        monkeypatch.setattr(modeling_utils, "safe_save_file",
                            failing(modeling_utils.safe_save_file))
        return
    real_open = io.open

    def failing_open(file, mode="r", *args, **kwargs):
        if any(m in mode for m in "wax") and hit(file):
            raise OSError(write.code, os.strerror(write.code))  # as write() says it: no path
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(io, "open", failing_open)
    monkeypatch.setattr(builtins, "open", failing_open)


@pytest.mark.slow
@pytest.mark.parametrize("write", WRITES, ids=[w.kind for w in WRITES])
def test_a_failed_write_of_each_kind_is_one_line_exit_1(write, tmp_path, capsys, monkeypatch):
    fail_writes(monkeypatch, write)
    run_dir = tmp_path / "run"
    code = main(write.args, run_dir)
    monkeypatch.undo()
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert code == 1 and len(lines) == 1 and "Traceback" not in err, err
    line = lines[0]
    assert os.strerror(write.code) in line and str(run_dir) in line, line
    status = read_status(run_dir)
    assert status["status"] == "failed" and os.strerror(write.code) in status["reason"]
    kept = list_checkpoints(run_dir / "checkpoints")
    assert all(find_damage(c) is None for c in kept)
    for weights in (kept[-1].glob("*.safetensors") if kept else []):
        assert load_file(weights)  # loadable, not just listed
    assert not list(run_dir.rglob(".tmp-*")), "a partial dir remains"
    if kept:
        assert f"to resume from checkpoints/{kept[-1].name}" in line, line
    else:
        assert "no checkpoint was written" in line, line
    record(f"{errno.errorcode[write.code]} writing {write.kind}", write.args[0],
           f"exit 1, one line ({re.sub(r'/tmp/.*?/run', '<run>', line.split('error: ', 1)[1])}); "
           "status failed; "
           + (f"{len(kept)} checkpoints intact, newest loadable, resume hint" if kept
              else "no checkpoint to resume: the line says so"))


@pytest.mark.parametrize("code,path,expected", [
    (errno.ENOSPC, "x", "free disk space"),
    (errno.EDQUOT, "x", "quota"),
    (errno.EROFS, "x", "writable"),
    (errno.EACCES, "x", "writable"),
    (errno.EIO, "x", "I/O error"),
    (errno.ENOENT, "run/tables", "was removed"),
    (errno.ENOENT, "/elsewhere/input.txt", None),  # not the run dir's: not the environment's
    (errno.EINVAL, "x", None),
])
def test_describe_names_the_error_the_path_and_the_fix(code, path, expected, tmp_path):
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints" / "step_00000006").mkdir(parents=True)
    (run_dir / "checkpoints" / "step_00000006" / "state.json").write_text("{}")
    path = str(run_dir / path) if not path.startswith("/") else path
    line = describe_write_error(OSError(code, os.strerror(code), path), run_dir)
    if expected is None:
        assert line is None
        return
    assert line.startswith(f"{os.strerror(code)}: {path}; ") and expected in line
    assert line.endswith("to resume from checkpoints/step_00000006") and "\n" not in line


def test_library_errors_map_to_their_errno(tmp_path):
    from safetensors import SafetensorError

    rust = SafetensorError("Error while serializing: I/O error: No space left on device "
                           "(os error 28)")
    assert errno_of(rust, tmp_path) == errno.ENOSPC
    torch_zip = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 "
                             "vs 662")
    assert errno_of(torch_zip, tmp_path) == errno.EIO  # this disk has room: not a full one
    assert errno_of(ValueError("a bug"), tmp_path) is None


# ---------------------------------------------------------------- a real full file system


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 24 MiB tmpfs (root can mount one; elsewhere the test skips): room for two of the
    tiny run's 10 MB checkpoints, not for a third."""
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mount)],
                          capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.slow
def test_a_pretrain_into_a_full_file_system(small_tmpfs):
    """`bertology pretrain` (the real console script, its own process) into a file system that
    fills up mid-run: one line, exit 1, the last checkpoint loadable, and a rerun elsewhere
    could resume it."""
    run_dir = small_tmpfs / "run"
    args = [*PRETRAIN, "trainer.max_steps=60", "trainer.save_every=2", "trainer.log_every=1",
            "trainer.keep_checkpoints=100"]
    bertology = Path(sys.executable).parent / "bertology"
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([str(bertology), *args, f"hydra.run.dir={run_dir}"], env=env,
                          capture_output=True, text=True, timeout=600)
    lines = [line for line in done.stderr.splitlines() if "error:" in line]
    assert done.returncode == 1, done.stderr[-3000:]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert os.strerror(errno.ENOSPC) in lines[0] and str(run_dir) in lines[0], lines
    kept = list_checkpoints(run_dir / "checkpoints")
    assert kept and all(find_damage(c) is None for c in kept)
    for weights in kept[-1].glob("*.safetensors"):
        assert load_file(weights)
    status = read_status(run_dir)
    assert status["status"] == "failed" and os.strerror(errno.ENOSPC) in status["reason"]
    assert f"to resume from checkpoints/{kept[-1].name}" in lines[0]
    record("a pretrain into a 24 MiB tmpfs that fills up", "pretrain",
           f"exit 1 in {len(done.stderr.splitlines())} stderr line(s), one error line "
           f"({re.sub(r'/tmp/.*?/tmpfs', '<tmpfs>', lines[0].split('error: ', 1)[1])}); "
           f"{len(kept)} checkpoints intact, the newest "
           f"({kept[-1].name}) loadable; status failed")
