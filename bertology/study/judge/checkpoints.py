"""Which pretrained checkpoint a run reads: the unit a checkpoint-level verdict is about, and
the member of a checkpoint population a run belongs to (population.py)."""

from __future__ import annotations

from contextlib import suppress
from functools import cache
from pathlib import Path

from bertology.config.suites import load_suite
from bertology.errors import UserError
from bertology.run.rundir import HYDRA_DIR, RunDir

TEACHER_MODEL_KEYS = ("teacher.name_or_path", "teacher.model.name_or_path")  # a distill run's model
MAX_TRACE = 3  # fine-tuned from a fine-tuned model: how far back a local dir is followed


def short_name(name: str) -> str:
    """A hub id's model name (sentence-transformers/all-MiniLM-L6-v2 → all-MiniLM-L6-v2); a
    local dir as given."""
    local = name.startswith((".", "/", "~")) or name.count("/") > 1 or Path(name).exists()
    return name if local else name.rsplit("/", 1)[-1]


def checkpoint_of(run: RunDir, depth: int = 0) -> str | None:
    """The pretrained checkpoint the run reads, from its recorded config (a distill run: its
    teacher's). A local dir that is a run's model/ (a fine-tuned copy) is followed back to the
    checkpoint that run started from. None where the run records none (random init)."""
    keys = TEACHER_MODEL_KEYS if run.choice("teacher") is not None else ("model.name_or_path",)
    value = next((v for v in map(run.select, keys) if v not in (None, "")), None)
    revision = run.select("model.revision") if value == run.select("model.name_or_path") else None
    if value is None and run.select("model.suite") is not None:  # a suite's (seed, step)
        value, revision = load_suite(str(run.select("model.suite"))).checkpoint(
            run.select("model.suite_seed"), run.select("model.suite_step"))
    if value is None:
        return None
    name = traced_checkpoint(str(value), depth)
    return f"{name}@{revision}" if revision else name


@cache
def traced_checkpoint(value: str, depth: int) -> str:
    """checkpoint_of's name for a recorded model.name_or_path: a run's model/ dir followed back
    to what that run started from. Cached: many runs (every seed of every finding, each read by
    several tables of the report) read the same few fine-tuned dirs, whose configs would be
    read again each time."""
    origin = Path(value).parent
    if depth < MAX_TRACE and (origin / HYDRA_DIR / "config.yaml").is_file():
        with suppress(UserError):
            base = checkpoint_of(RunDir(origin), depth + 1)
            if base is not None:
                return base
    return short_name(value)
