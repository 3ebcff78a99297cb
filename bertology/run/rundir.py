"""A run directory: the one reader of a finished run dir (RunDir), its status file, and a lock so
two runs never share a dir.

`status.json` says running / finished / failed / interrupted (with the pid, the times and, for
a stop, the one-line reason). `metrics.json` is written by the pipeline as its last act, and
the status turns to finished only after it, so a dir whose status is not finished never counts
as a result (`finished_runs`). Dirs from before the status file existed count when they hold
metrics.json.

RunDir reads what a run wrote, each file once and only when asked: the composed config, Hydra's
group choices and the override keys, the metrics, the item replicates and the status. The
runner's `runs` table, the study's report and the pipelines that reuse a nested run all read
run dirs through it.

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
from fnmatch import fnmatchcase
from functools import cached_property
from pathlib import Path

import numpy as np
from omegaconf import DictConfig, OmegaConf

from bertology.errors import Interrupted, UserError
from bertology.run.atomic import read_json, write_json_atomic
from bertology.run.replicates import FOLDER, read_item_ids, read_item_pools, read_replicates

STATUS = "status.json"
# the run's results, written last (run/tracking.py, and the pipelines that aggregate their own)
METRICS_FILE = "metrics.json"
HYDRA_DIR = ".hydra"  # Hydra's record of the run: config.yaml, hydra.yaml, overrides.yaml
LOCK = ".lock"
FINISHED = "finished"


# The numbers a run is about, whatever its pipeline (segment-wise globs: `*` stays within one
# `/` level): scores on held-out data, the best probe layer, what pruning and distillation kept,
# the training loss. `bertology runs` and the report's runs table show these.
HEADLINE = ("eval/*", "downstream/eval/*", "*/best_layer/*", "*/*/best_layer/*",
            "prune/original/*", "prune/heads_remaining", "distill/retained", "distill/speedup",
            "train/loss")


def matches(key: str, pattern: str) -> bool:
    """fnmatch per `/`-separated segment, so `eval/*` is eval/accuracy but not
    eval/shuffled/accuracy."""
    parts, globs = key.split("/"), pattern.split("/")
    return len(parts) == len(globs) and all(map(fnmatchcase, parts, globs))


def headline_keys(metrics) -> list[str]:
    """The run's headline metric keys (HEADLINE), sorted."""
    return sorted(k for k in metrics if any(matches(k, p) for p in HEADLINE))


class RunInUse(UserError):
    """Another live process holds the run dir; its files must not be touched."""


def read_status(run_dir: Path) -> dict | None:
    """The run's status record, or None when it has none (or an unreadable one)."""
    try:
        status = read_json(run_dir / STATUS)
    except (OSError, ValueError):
        return None
    return status if isinstance(status, dict) else None


def is_finished(run_dir: Path) -> bool:
    """metrics.json and, where a status is recorded, status finished."""
    if not (run_dir / METRICS_FILE).exists():
        return False
    status = read_status(run_dir)
    if status is None:  # a dir from before status files, or one whose status is damaged
        return not (run_dir / STATUS).exists()
    return status.get("status") == FINISHED


def finished_runs(roots: list[Path]) -> list[Path]:
    """Finished run dirs with their Hydra config under the roots (a root may be a run itself),
    in path order: what `bertology report` and `bertology runs` read."""
    runs = {m.parent for root in roots for m in root.rglob(METRICS_FILE)
            if (m.parent / HYDRA_DIR / "config.yaml").exists()}
    for run in runs:  # a damaged status must not pass for "not finished" without a word
        if (run / STATUS).exists() and read_status(run) is None:
            raise UserError(f"{run / STATUS}: unreadable (not a JSON status record); rerun "
                            "the run, or remove its dir")
    return sorted(run for run in runs if is_finished(run))


class RunDir:
    """One run dir, read lazily: each file at most once, and only when asked. `metrics` and
    `config` may be given (a table of runs made in memory, as tests do); otherwise they are
    read from metrics.json and .hydra/config.yaml. An unreadable file is a UserError naming
    it."""

    def __init__(self, path: Path, metrics: dict[str, float] | None = None,
                 config: dict | None = None):
        self.path = Path(path)
        if metrics is not None:
            self.metrics = metrics
        if config is not None:
            self.config = config

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    def _read(self, name: str, read):
        try:
            return read(self.path / name)
        except (OSError, ValueError) as err:
            raise UserError(f"{self.path / name}: unreadable ({str(err).splitlines()[0]}); "
                            "remove the run or rerun it") from err

    @cached_property
    def metrics(self) -> dict[str, float]:
        metrics = self._read(METRICS_FILE, lambda p: json.loads(p.read_text()))
        return {key: float(value) for key, value in metrics.items()}

    @cached_property
    def config(self) -> dict:
        """The composed config as plain containers (.hydra/config.yaml)."""
        config = self._read(f"{HYDRA_DIR}/config.yaml",
                            lambda p: OmegaConf.to_container(OmegaConf.load(p)))
        if not isinstance(config, dict):  # an empty file, or a page saved in its place
            raise UserError(f"{self.path / HYDRA_DIR / 'config.yaml'}: not a YAML mapping of the "
                            "run's config; remove the run or rerun it")
        return config

    @cached_property
    def choices(self) -> dict[str, object]:
        """Config group -> the option the run composed (`model` -> `electra`), from Hydra's
        record; {} where there is none."""
        path = self.path / HYDRA_DIR / "hydra.yaml"
        if not path.exists():
            return {}
        found = OmegaConf.select(self._read(f"{HYDRA_DIR}/hydra.yaml", OmegaConf.load),
                                 "hydra.runtime.choices")
        return {} if found is None else dict(OmegaConf.to_container(found))

    @cached_property
    def recorded_overrides(self) -> list[str]:
        """The overrides the run was started with, as Hydra recorded them
        (.hydra/overrides.yaml); [] where there is no record."""
        if not (self.path / HYDRA_DIR / "overrides.yaml").exists():
            return []
        return [str(o) for o in self._read(f"{HYDRA_DIR}/overrides.yaml",
                                           lambda p: OmegaConf.to_container(OmegaConf.load(p)))]

    @cached_property
    def overrides(self) -> list[str]:
        """The override keys the run was started with (hydra.* left out), in order."""
        keys: list[str] = []
        for override in self.recorded_overrides:
            key = override.split("=", 1)[0].lstrip("+~")
            if not key.startswith("hydra.") and key not in keys:
                keys.append(key)
        return keys

    @cached_property
    def replicates(self) -> dict[str, np.ndarray]:
        return read_replicates(self.path)

    @cached_property
    def item_ids(self) -> dict[str, list[str]]:
        """The ids of the items each replicate column resamples, by metric key ({} for a run
        made before runs recorded them: run/replicates.py)."""
        return self._read(FOLDER, lambda _: read_item_ids(self.path))

    @cached_property
    def item_pools(self) -> dict[str, int]:
        """The size of the set each replicate column's items were drawn from, by metric key
        (where the run recorded it)."""
        return self._read(FOLDER, lambda _: read_item_pools(self.path))

    @property
    def finished(self) -> bool:
        return is_finished(self.path)

    @property
    def seed(self) -> int | None:
        seed = self.config.get("seed")
        return int(seed) if isinstance(seed, int) and not isinstance(seed, bool) else None

    @property
    def label(self) -> str | None:
        """The label the run was filed under (`label=`; a study bundle sets its study's name).
        The runner records it and never reads it; the study wing groups runs by it. A run
        made before labels carries its study's name in a `study:` block instead."""
        label = self.config.get("label")
        if label is None and isinstance(self.config.get("study"), dict):
            label = self.config["study"].get("name")
        return label

    @cached_property
    def _config_node(self) -> DictConfig:
        return OmegaConf.create(self.config)

    def select(self, key: str, default=None):
        """The config's value at a dotted key with its interpolations resolved (a key left at
        its default shows the default), or `default` where the run has no such key."""
        return OmegaConf.select(self._config_node, key, default=default,
                                throw_on_resolution_failure=False)

    def choice(self, key: str):
        """The config's value at a dotted key as saved, or None where the run has no such
        key."""
        node = self.config
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return node


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
