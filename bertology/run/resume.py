"""A resume never mixes two configs.

A run dir that holds training state (a `checkpoints/` dir anywhere under it, nested runs'
included) continues only under the config it was started with: a key that changes the result
(say `trainer.lr`) is refused in one line that names it with both values, before Hydra or the
run writes anything. The keys in RESULT_NEUTRAL may change (where the run is logged, how often
it logs, evaluates or saves, a larger budget to extend it); `resume=force` continues under any
change and records it in `resume_changes.json`.

The config a run dir was made under is `run_config.json` (the resolved config, written at
each start), or for a dir from before it existed, Hydra's `.hydra/config.yaml`. The CLI checks
twice: before Hydra makes the run dir (a single run: nothing in the dir is touched when it
refuses), and at the start of the job (a sweep's jobs, whose dirs Hydra fills first).
"""

from __future__ import annotations

import fnmatch
import json
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from bertology.errors import UserError
from bertology.run.atomic import read_json, write_json_atomic
from bertology.run.rundir import HYDRA_DIR

log = logging.getLogger(__name__)

SNAPSHOT = "run_config.json"
CHANGES = "resume_changes.json"

# Keys whose change leaves a resumed run's result as it would have been: the one list of them
# (docs/reliability.md repeats it). A pattern matches the key at the top or in a nested run's
# block (teacher., downstream., ...).
RESULT_NEUTRAL = (
    "resume",  # how this very command treats the dir
    "logger.*",  # which tracker sees the metrics; metrics.jsonl is written either way
    "paths.*",  # where the data sets and tokenizer caches are found (their checksums hold)
    "trainer.log_every",  # how often train/* is logged
    "trainer.eval_every",  # how often eval/* is computed (it draws no training randomness)
    "trainer.save_every",  # how often checkpoints are written (a resume is exact)
    "trainer.keep_checkpoints",
    "trainer.prefetch_batches",  # batches collated ahead in a thread: the same batches
)
# Keys added after runs were made, with the value that reproduces those runs: a run dir whose
# config lacks one was made under that value (so it resumes under it, and is refused under another).
ADDED = {"trainer.dropout_masks": "torch"}
# Budgets a resumed run may raise (to extend it), never lower; None is no budget (unbounded).
EXTENDABLE = ("trainer.max_steps", "trainer.max_flops", "trainer.max_time_s", "trainer.epochs")


@dataclass(frozen=True)
class Change:
    key: str
    saved: Any
    new: Any

    @property
    def allowed(self) -> bool:
        if _matches(self.key, RESULT_NEUTRAL):
            return True
        return _matches(self.key, EXTENDABLE) and _budget(self.new) >= _budget(self.saved)

    def __str__(self) -> str:
        return f"{self.key}: {_show(self.saved)} -> {_show(self.new)}"


def _matches(key: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(key, p) or fnmatch.fnmatchcase(key, f"*.{p}")
               for p in patterns)


def _budget(value: Any) -> float:
    return math.inf if value is None else float(value)


def _show(value: Any) -> str:
    return "(absent)" if value is _ABSENT else json.dumps(value)


_ABSENT = object()


def _flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted keys to leaf values (a list, or an empty block, is one value)."""
    if not isinstance(tree, dict) or not tree:
        return {prefix: tree}
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        flat.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return flat


def _with_added(old: dict[str, Any], cur: dict[str, Any]) -> dict[str, Any]:
    """old, with each ADDED key (at the top or in a nested run's block) that cur has and old
    lacks set to the value runs had before it existed, where old has the key's section (a run
    from before the key, not a config without that section)."""
    filled = dict(old)
    for key in cur.keys() - old.keys():
        added = next((a for a in ADDED if key == a or key.endswith(f".{a}")), None)
        section = key.rpartition(".")[0] + "."
        if added is not None and any(o.startswith(section) for o in old):
            filled[key] = ADDED[added]
    return filled


def compute_changes(saved: dict, new: dict) -> list[Change]:
    """Every key whose value differs between two resolved configs, in key order."""
    old, cur = _flatten(saved), _flatten(new)
    old = _with_added(old, cur)
    return [Change(key, old.get(key, _ABSENT), cur.get(key, _ABSENT))
            for key in sorted(old.keys() | cur.keys())
            if old.get(key, _ABSENT) != cur.get(key, _ABSENT)]


def resolved(cfg: DictConfig) -> dict:
    container = OmegaConf.to_container(cfg, resolve=True)
    container.pop("hydra", None)
    return container


def holds_training_state(run_dir: Path) -> bool:
    """A checkpoints/ dir in the run dir or a nested run's dir: a rerun would resume."""
    return run_dir.is_dir() and any(p.is_dir() for p in run_dir.rglob("checkpoints"))


def load_saved_config(run_dir: Path) -> dict | None:
    """The resolved config the run dir was made under, or None when it has none readable."""
    try:
        if (run_dir / SNAPSHOT).exists():
            return read_json(run_dir / SNAPSHOT)
        hydra_config = run_dir / HYDRA_DIR / "config.yaml"
        if hydra_config.exists():
            return resolved(OmegaConf.load(hydra_config))
    except (OSError, ValueError, Exception) as err:  # noqa: BLE001 - any damage: no check
        log.warning("cannot read the config %s was made under (%s); resume not checked",
                    run_dir, err)
    return None


def resume_mode(cfg: DictConfig | dict) -> str:
    return str(cfg.get("resume", "auto")).lower()


def refuse_fresh_start(run_dir: Path, mode: str) -> None:
    """resume=false into a dir that holds training state (its own checkpoints or a nested
    run's) is refused: by the CLI before Hydra writes its .hydra/ files and the run its status,
    env.json and run_config.json, and again by the pipeline for a sweep's job, whose dir
    Hydra fills first."""
    if str(mode).lower() == "false" and holds_training_state(run_dir):
        raise UserError(f"{run_dir} already holds checkpoints and resume=false; pick another "
                        "hydra.run.dir or drop resume=false to continue that run")


def check_resume_config(run_dir: Path, cfg: DictConfig) -> list[Change]:
    """The changes against the config the run dir's training state was made under; raises
    UserError naming those that change the result, unless resume=force."""
    if not holds_training_state(run_dir):
        return []
    saved = load_saved_config(run_dir)
    if saved is None:
        return []
    changes = compute_changes(saved, resolved(cfg))
    refused = [c for c in changes if not c.allowed]
    if refused and resume_mode(cfg) != "force":
        raise UserError(
            f"{run_dir} holds a run made under another config; resuming would mix two "
            f"experiments: {'; '.join(map(str, refused))}. Rerun with the saved values, pick "
            "another hydra.run.dir, or add resume=force to continue and record the change")
    return changes


def record_start(run_dir: Path, cfg: DictConfig, changes: list[Change]) -> None:
    """Write the config this start runs under and, when it differs from the saved one, what
    changed (appended to resume_changes.json, which a report reader can check)."""
    if changes:
        entry = {"time": time.time(), "resume": resume_mode(cfg),
                 "changes": [{"key": c.key, "saved": None if c.saved is _ABSENT else c.saved,
                              "new": None if c.new is _ABSENT else c.new,
                              "result_neutral": c.allowed} for c in changes]}
        history = read_json(run_dir / CHANGES) if (run_dir / CHANGES).exists() else []
        write_json_atomic(run_dir / CHANGES, [*history, entry])
        forced = [c for c in changes if not c.allowed]
        # a plain resume (resume=true, logger=none, a larger budget) says nothing: only a
        # change that moves the result (resume=force) is worth a warning
        if forced:
            log.warning("resumed with %d result-changing key(s) (resume=force), recorded in "
                        "%s: %s", len(forced), CHANGES, "; ".join(map(str, forced)))
    write_json_atomic(run_dir / SNAPSHOT, resolved(cfg))
