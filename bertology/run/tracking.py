"""Experiment tracking. The only module that imports wandb.

`metrics.jsonl` (one object per logged step) and `metrics.json` (the final flat summary) are
always written; Weights & Biases mirrors them when logger=wandb. W&B runs offline unless the
user is logged in (the run dir then holds an offline run that `wandb sync` uploads), and any W&B
failure is a warning: tracking never crashes a run.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bertology.config.groups import LoggerConfig
from bertology.run.atomic import write_json_atomic, write_text_atomic
from bertology.run.cache_notes import take_recomputed
from bertology.run.rundir import METRICS_FILE
from bertology.run.write_errors import writing

log = logging.getLogger(__name__)


# Metric-name fragments that measure the machine, not the model: they differ between two runs
# of the same config and seed, and everything else must not (the determinism check:
# docs/reliability.md, "Faults").
WALL_CLOCK = ("per_s", "latency", "speedup", "_ms", "data_wait")


def without_wall_clock(metrics: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in metrics.items() if not any(part in k for part in WALL_CLOCK)}


def finite_floats(metrics: dict[str, Any]) -> dict[str, float]:
    """The summary keeps finite floats only (DESIGN §5)."""
    out = {}
    for key, value in metrics.items():
        value = float(value)
        if math.isfinite(value):
            out[key] = value
    return out


class NullRun:
    """logger=none: nothing beyond the metric files."""

    def log(self, metrics: dict[str, float], step: int) -> None:
        pass

    def summary(self, metrics: dict[str, float]) -> None:
        pass

    def finish(self) -> None:
        pass

    def stop(self, reason: str) -> None:
        pass


class WandbRun:
    def __init__(self, run: Any, mode: str = "offline", out_dir: Path | None = None):
        self._run, self.mode, self.out_dir = run, mode, out_dir
        self.where = self.describe()  # read now: after finish the run object may be gone

    def describe(self) -> str:
        """Where the W&B run is and, offline, the command that uploads it: every offline dir
        of this run id (a resumed run adds one per start; W&B merges them into one run)."""
        run_id = getattr(self._run, "id", None)
        if run_id is None or self.mode == "disabled":
            return ""
        if self.mode == "online":
            return f"W&B online run {run_id}: {getattr(self._run, 'url', '') or 'no url'}"
        # W&B names each start's dir offline-run-<time>-<id>, with -1, -2 … for starts within
        # one second
        dirs = Path(self.out_dir or ".") / "wandb" / f"offline-run-*-{run_id}*"
        return f"W&B offline run {run_id}; upload it with: wandb sync {dirs}"

    def _guard(self, action: str, fn, *args) -> None:
        try:
            fn(*args)
        except Exception as err:  # W&B must never take a run down with it
            log.warning("wandb %s failed (%s); continuing without it", action, err)
            self._run = None

    def log(self, metrics: dict[str, float], step: int) -> None:
        if self._run is not None:
            self._guard("log", lambda: self._run.log(metrics, step=step))

    def summary(self, metrics: dict[str, float]) -> None:
        if self._run is not None:
            self._guard("summary", lambda: self._run.summary.update(metrics))

    def finish(self) -> None:
        if self._run is not None:
            self._guard("finish", self._run.finish)
            if self._run is not None and self.where:
                log.info("%s", self.where)

    def stop(self, reason: str) -> None:
        """The run stopped early: its W&B run is closed as failed (exit code 1), and the line
        says where it is; a resume continues the same W&B run (same id, resume="allow")."""
        if self._run is not None:
            self._guard("finish", lambda: self._run.finish(exit_code=1))
            if self.where:
                log.info("%s (stopped early: %s; a resume continues this W&B run)",
                         self.where, reason)


def _logged_in() -> bool:
    """An API key in the environment or in ~/.netrc (where `wandb login` puts it)."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    netrc = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    try:
        return "api.wandb.ai" in netrc.read_text()
    except OSError:
        return False


def _wandb_mode(cfg: LoggerConfig) -> str:
    """auto: online only when the user is logged in, so nothing waits on a network."""
    if cfg.mode != "auto":
        return cfg.mode
    return os.environ.get("WANDB_MODE") or ("online" if _logged_in() else "offline")


def sweep_context() -> tuple[str | None, list[str]]:
    """(group, tags) of a sweep job. A Hydra multirun groups its jobs by the sweep dir; a W&B
    agent's run (WANDB_SWEEP_ID set) is grouped by W&B's own sweep. Either way the job is
    tagged with the overrides that make it differ (`model=electra`, `seed=1`; W&B caps a tag
    at 64 characters). (None, []) outside a sweep."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        return None, []
    hydra_cfg = HydraConfig.get()
    tags = [o.lstrip("+~")[:64] for o in hydra_cfg.overrides.task if not o.startswith("hydra")]
    if hydra_cfg.mode == RunMode.MULTIRUN:
        return "/".join(Path(hydra_cfg.sweep.dir).parts[-3:]), tags
    if os.environ.get("WANDB_SWEEP_ID"):
        return None, tags
    return None, []


RUN_ID_FILE = Path("wandb") / "run_id"  # in the run dir: a resumed run continues its W&B run


def read_run_id(out_dir: Path) -> str | None:
    """The W&B run id an earlier start of this run dir used, if any."""
    try:
        return (out_dir / RUN_ID_FILE).read_text().strip() or None
    except OSError:
        return None


def _init_wandb(cfg: LoggerConfig, mode: str, out_dir: Path, config: dict, name: str) -> Any:
    """W&B's own console output stays off (it would interleave with the progress bars); the
    start and end lines say where the run is instead (WandbRun.describe). A run dir that
    started a W&B run before (an interrupted run, resumed) continues it: the same id,
    resume="allow"."""
    import wandb

    group, sweep_tags = sweep_context()
    return wandb.init(project=cfg.project, entity=cfg.entity, mode=mode, dir=str(out_dir),
                      config=config, name=name, group=group, id=read_run_id(out_dir),
                      resume="allow", tags=list(dict.fromkeys([*cfg.tags, *sweep_tags])),
                      settings=wandb.Settings(silent=True, console="off"))


def remember_run_id(out_dir: Path, run: Any) -> None:
    run_id = getattr(run, "id", None)
    if isinstance(run_id, str) and run_id != read_run_id(out_dir):
        (out_dir / RUN_ID_FILE).parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(out_dir / RUN_ID_FILE, run_id + "\n")


def start_wandb(cfg: LoggerConfig, out_dir: Path, config: dict, name: str) -> NullRun | WandbRun:
    """An online run that cannot start (no network, a revoked key) falls back to an offline
    one; if that fails too, the run goes on with the metric files alone."""
    mode = _wandb_mode(cfg)
    modes = [mode, "offline"] if mode == "online" else [mode]
    for attempt in modes:
        try:
            run = _init_wandb(cfg, attempt, out_dir, config, name)
            remember_run_id(out_dir, run)
            wandb_run = WandbRun(run, attempt, out_dir)
            if wandb_run.where:
                log.info("%s", wandb_run.where)
            return wandb_run
        except Exception as err:  # W&B must never take a run down with it
            log.warning("wandb (%s) could not start (%s); %s", attempt,
                        str(err).splitlines()[0] if str(err) else type(err).__name__,
                        "trying offline" if attempt != modes[-1] else
                        "logging to metrics.jsonl only")
    return NullRun()


def _logged_step(line: str) -> float:
    """A metrics.jsonl line's step; a line cut short by a full disk counts as after any."""
    try:
        return json.loads(line)["step"]
    except (ValueError, KeyError, TypeError):
        return float("inf")


class Tracker:
    """metrics.jsonl + metrics.json, and the W&B run if any. Only the main process writes."""

    def __init__(self, out_dir: Path, run: NullRun | WandbRun, enabled: bool = True):
        self.out_dir, self.run, self.enabled = out_dir, run, enabled
        self._jsonl = out_dir / "metrics.jsonl"

    def log(self, metrics: dict[str, float], step: int) -> None:
        if not self.enabled:
            return
        record = {"step": step, **finite_floats(metrics)}
        with writing(self._jsonl), self._jsonl.open("a") as handle:
            handle.write(json.dumps(record) + "\n")
        self.run.log(metrics, step)

    @contextmanager
    def ending_early(self) -> Iterator[None]:
        """Around training: a run that stops early (Ctrl-C, a scheduler's signal, a failure)
        closes its W&B run and names it, as a finished run does."""
        try:
            yield
        except BaseException as err:
            if self.enabled:
                self.run.stop(str(err).splitlines()[0] if str(err) else type(err).__name__)
            raise

    def truncate_after(self, step: int) -> None:
        """On resume, drop lines logged after the checkpoint: they will be logged again."""
        if not (self.enabled and self._jsonl.exists()):
            return
        kept = [line for line in self._jsonl.read_text().splitlines()
                if line.strip() and _logged_step(line) <= step]
        tmp = self._jsonl.with_name(".metrics.jsonl.tmp")
        tmp.write_text("".join(line + "\n" for line in kept))
        os.replace(tmp, self._jsonl)

    def finish(self, summary: dict[str, float]) -> dict[str, float]:
        summary = finite_floats({**summary, **take_recomputed()})  # damaged caches remade
        if self.enabled:
            self.run.summary(summary)
            self.run.finish()
            write_json_atomic(self.out_dir / METRICS_FILE, summary)
        return summary


def build_tracker(cfg: LoggerConfig, out_dir: Path, config: dict, name: str,
                  main_process: bool = True) -> Tracker:
    run = start_wandb(cfg, out_dir, config, name) if cfg.name == "wandb" and main_process \
        else NullRun()
    return Tracker(out_dir, run, enabled=main_process)


def read_log(path: Path) -> list[dict]:
    """The records of a metrics.jsonl; a line cut short (a full disk, a kill) is skipped."""
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return [r for r in records if isinstance(r, dict) and "step" in r]
