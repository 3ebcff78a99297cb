"""Run-directory integrity: a status file, and a lock so two runs never share a dir.

`status.json` says running / finished / failed / interrupted (with the pid, the times and, for
a stop, the one-line reason). `metrics.json` is written by the pipeline as its last act, and
the status turns to finished only after it, so a dir whose status is not finished never counts
as a result (report.find_runs and runs.find_runs ask `is_finished`). Dirs from before the
status file existed count when they hold metrics.json.

The lock is an flock on `<run dir>/.lock`, held while the job runs: the kernel drops it when
the process dies, even by SIGKILL, so a killed run never leaves a stale lock behind.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from bertology.errors import Interrupted, UserError
from bertology.run.files import read_json, write_json_atomic

STATUS = "status.json"
LOCK = ".lock"
FINISHED = "finished"


class RunInUse(UserError):
    """Another live process holds the run dir; its files must not be touched."""


def read_status(run_dir: Path) -> dict | None:
    """The run's status record, or None when it has none (or an unreadable one)."""
    try:
        return read_json(run_dir / STATUS)
    except (OSError, ValueError):
        return None


def is_finished(run_dir: Path) -> bool:
    """metrics.json and, where a status is recorded, status finished."""
    if not (run_dir / "metrics.json").exists():
        return False
    status = read_status(run_dir)
    if status is None:  # a dir from before status files, or one whose status is damaged
        return not (run_dir / STATUS).exists()
    return status.get("status") == FINISHED


def finished_runs(roots: list[Path]) -> list[Path]:
    """Finished run dirs with their Hydra config under the roots (a root may be a run itself),
    in path order: what `bertology report` and `bertology runs` read."""
    runs = {m.parent for root in roots for m in root.rglob("metrics.json")
            if (m.parent / ".hydra" / "config.yaml").exists() and is_finished(m.parent)}
    return sorted(runs)


def _try_lock(run_dir: Path) -> int | None:
    """An fd holding the dir's exclusive lock, or None when another process holds it."""
    fd = os.open(run_dir / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _in_use_error(run_dir: Path) -> RunInUse:
    pid = (read_status(run_dir) or {}).get("pid", "?")
    return RunInUse(f"{run_dir} is in use by a running bertology process (pid {pid}); wait "
                    "for it to finish or pick another hydra.run.dir")


def check_not_in_use(run_dir: Path) -> None:
    """Refuse, before Hydra writes into it, a run dir another live process holds."""
    if not (run_dir / LOCK).exists():
        return
    fd = _try_lock(run_dir)
    if fd is None:
        raise _in_use_error(run_dir)
    os.close(fd)


def _write(run_dir: Path, record: dict, status: str, **extra) -> None:
    record.update(status=status, updated=time.time(), **extra)
    try:
        write_json_atomic(run_dir / STATUS, record)
    except OSError:
        # A full disk has no room for the temporary copy; overwritten in place, the file's own
        # blocks are freed first and hold the new record (a stale "running" would be worse).
        with suppress(OSError):
            (run_dir / f".{STATUS}.tmp").unlink()
        (run_dir / STATUS).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")


@contextmanager
def run_status(run_dir: Path, pipeline: str) -> Iterator[None]:
    """Hold the dir's lock and keep status.json current while the job runs."""
    run_dir.mkdir(parents=True, exist_ok=True)
    fd = _try_lock(run_dir)
    if fd is None:
        raise _in_use_error(run_dir)
    record = {"pipeline": pipeline, "pid": os.getpid(), "started": time.time()}
    try:
        _write(run_dir, record, "running")
        try:
            yield
        except (Interrupted, KeyboardInterrupt) as err:  # a second Ctrl-C: no new checkpoint
            with suppress(OSError):
                _write(run_dir, record, "interrupted", reason=str(err) or "Ctrl-C twice: "
                       "stopped at once; a rerun resumes from the last saved checkpoint")
            raise
        except BaseException as err:  # the status must say so, whatever stopped the run
            reason = str(err).splitlines()[0] if str(err) else type(err).__name__
            with suppress(OSError):  # a full disk must not hide the first error
                _write(run_dir, record, "failed", reason=reason)
            raise
        _write(run_dir, record, FINISHED)
    finally:
        os.close(fd)
