"""Data an estimator cannot use: checked before the expensive step, from the sentences alone,
so a run refuses in one line (UserError) or skips the part it cannot estimate with a note,
instead of failing in scikit-learn after minutes of extraction.

A skip is a warning in the log that starts "skipped:" and a metric `<scope>/skipped/<part>`
= 1.0 in metrics.json, so a report reader sees what is missing and why.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace

import numpy as np

from bertology.data.probe_sentences import ProbeSentence
from bertology.errors import require

log = logging.getLogger(__name__)


def skipped(key: str, reason: str) -> dict[str, float]:
    """The note of a skipped part: one log line and the metric `key` = 1.0."""
    log.warning("skipped: %s: %s", key, reason)
    return {key: 1.0}


def word_offsets(sentences: list[ProbeSentence]) -> SimpleNamespace:
    """The (sentences + 1,) word offsets extracted features will have: units built on them
    index the same words, before any extraction."""
    return SimpleNamespace(offsets=np.concatenate(
        [[0], np.cumsum([len(s.words) for s in sentences])]).astype(np.int64))


def require_classes(labels: np.ndarray, names: list[str], what: str, fix: str) -> None:
    """At least two classes among `labels` (ids into names): a classifier needs them."""
    present = sorted({names[i] for i in np.unique(labels)})
    require(len(present) >= 2, f"{what} carry {len(present)} class"
            f"{'' if len(present) == 1 else 'es'} ({', '.join(present) or 'none'}); a probe "
            f"needs at least two: {fix}")


def require_units(count: int, what: str, fix: str) -> None:
    require(count > 0, f"{what} is empty; {fix}")
