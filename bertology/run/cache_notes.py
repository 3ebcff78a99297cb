"""Damaged cache entries (issue 41): a cache entry that does not read back whole (a tokenizer
under <cache>/tokenizers/, features under <cache>/features/) is never served. It is removed
and made again, with a warning naming it, and the run's metrics.json counts it as
`cache/recomputed/<kind>`: Tracker.finish adds what this process recomputed since the run
began (the CLI clears the count when a run starts)."""

from __future__ import annotations

import logging
import shutil
from collections import Counter
from pathlib import Path

log = logging.getLogger(__name__)

_RECOMPUTED: Counter[str] = Counter()


def recompute(kind: str, entry: Path, why: str) -> None:
    """Say that the cache entry is damaged and remove it; the caller makes it again."""
    log.warning("recomputed: the cached %s %s is damaged (%s); it is made again, not served",
                kind, entry, why)
    if entry.is_dir() and not entry.is_symlink():
        shutil.rmtree(entry, ignore_errors=True)
    elif entry.exists() or entry.is_symlink():
        entry.unlink()
    _RECOMPUTED[kind] += 1


def take_recomputed() -> dict[str, float]:
    """cache/recomputed/<kind> -> entries remade since the last call (then cleared)."""
    counts = {f"cache/recomputed/{kind}": float(n) for kind, n in sorted(_RECOMPUTED.items())}
    _RECOMPUTED.clear()
    return counts
