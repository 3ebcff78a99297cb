"""Damaged cache entries: a cache entry that does not read back whole (a tokenizer
under <cache>/tokenizers/, features under <cache>/features/) is never served. It is removed
and made again, with a warning naming it, and the run's metrics.json counts it as
`cache/recomputed/<kind>`: Tracker.finish adds what this process recomputed since the run
began (the CLI clears the count when a run starts). A data path that changes the input it was
given (pretraining splits a sentence longer than a sequence) is counted the same way."""

from __future__ import annotations

import logging
import shutil
from collections import Counter
from pathlib import Path

log = logging.getLogger(__name__)

_RECOMPUTED: Counter[str] = Counter()
_COUNTED: Counter[str] = Counter()  # what a data path did to the input (count), by metric key


def recompute(kind: str, entry: Path, why: str) -> None:
    """Say that the cache entry is damaged and remove it; the caller makes it again."""
    log.warning("recomputed: the cached %s %s is damaged (%s); it is made again, not served",
                kind, entry, why)
    if entry.is_dir() and not entry.is_symlink():
        shutil.rmtree(entry, ignore_errors=True)
    elif entry.exists() or entry.is_symlink():
        entry.unlink()
    _RECOMPUTED[kind] += 1


def count(key: str, message: str) -> None:
    """A data path changed what the user gave (a sentence split into pieces): counted under
    `key` in the run's metrics.json, and said in the log the first time it happens in a run."""
    if not _COUNTED[key]:
        log.warning(message)
    _COUNTED[key] += 1


def take_recomputed() -> dict[str, float]:
    """cache/recomputed/<kind> -> entries remade, and each count()'s key -> its count, since
    the last call (then cleared)."""
    counts = {f"cache/recomputed/{kind}": float(n) for kind, n in sorted(_RECOMPUTED.items())}
    counts.update({key: float(n) for key, n in sorted(_COUNTED.items())})
    _RECOMPUTED.clear()
    _COUNTED.clear()
    return counts
