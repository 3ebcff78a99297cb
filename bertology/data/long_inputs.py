"""Inputs longer than the model can read: a task's max_seq_length is held to the
checkpoint's positions, and what is cut or left out is said in the log and in metrics.json.

- task.max_seq_length above the checkpoint's position embeddings would index past them (an
  IndexError mid-run on the first long input); it is lowered to the positions with a warning,
  as HF run_glue / run_ner do (min(max_seq_length, tokenizer.model_max_length)).
- Fine-tuning truncates a long example (run_glue, run_ner); the share of train and eval
  examples cut is `data/truncated/<split>_example_share`.
- Probes need every word of a sentence (trees, word pairs), so a sentence longer than the
  positions is left out, as Hewitt & Manning (2019) drop over-long sentences; the share of
  words left out is `data/left_out_long/<split>_word_share`.
"""

from __future__ import annotations

import logging

from bertology.config.groups import TaskConfig
from bertology.errors import require

log = logging.getLogger(__name__)


def usable_positions(model_config) -> int | None:
    """How many tokens one sequence of this checkpoint can hold; None if it does not say."""
    from bertology.families import family_of_checkpoint

    positions = getattr(model_config, "max_position_embeddings", None)
    if not isinstance(positions, int):
        return None
    return positions - family_of_checkpoint(model_config.model_type).position_offset


def fit_to_positions(task: TaskConfig, model_config, where: str) -> None:
    """task.max_seq_length held to the checkpoint's positions (a warning when lowered); a QA
    window that then has no room for context is refused."""
    limit = usable_positions(model_config)
    if limit is None or task.max_seq_length <= limit:
        return
    log.warning("task.max_seq_length=%d exceeds the %d positions of %s: inputs are cut to %d "
                "tokens (as HF run_glue / run_ner do)", task.max_seq_length, limit, where, limit)
    task.max_seq_length = limit
    if task.kind == "qa":
        room = limit - task.max_query_length - 3
        require(room > task.doc_stride, f"{where} has {limit} positions: a window then holds "
                f"{room} context tokens, not more than task.doc_stride={task.doc_stride}; "
                "lower task.max_query_length and task.doc_stride")


def truncation_metrics(task: TaskConfig, splits: dict[str, list[dict]]) -> dict[str, float]:
    """data/truncated/<split>_example_share for the splits with a truncated example, and one
    warning line saying how many were cut; QA: data/windowed/<split>_example_share, the
    contexts read in several windows (BERT §4.2's doc_stride), none cut."""
    if task.kind == "qa":
        return window_metrics(task, splits)
    metrics = {}
    for split, features in splits.items():
        cut = sum(bool(f.get("truncated")) for f in features)
        if cut:
            log.warning("truncated: %d of %d %s examples exceed task.max_seq_length=%d tokens "
                        "and are cut to it", cut, len(features), split, task.max_seq_length)
            metrics[f"data/truncated/{split}_example_share"] = cut / len(features)
    return metrics


def left_out_metrics(split: str, kept: int, total: int, words_left: int, words: int,
                     max_length: int) -> dict[str, float]:
    """data/left_out_long/<split>_word_share where a probe split lost long sentences."""
    if kept == total:
        return {}
    log.warning("left out: %d of %d %s sentences (%d of %d words) exceed %d sub-words; probes "
                "need whole sentences (Hewitt & Manning, 2019, drop them too)", total - kept,
                total, split, words_left, words, max_length)
    return {f"data/left_out_long/{split}_word_share": words_left / max(words, 1)}


def window_metrics(task: TaskConfig, splits: dict[str, list[dict]]) -> dict[str, float]:
    metrics = {}
    for split, features in splits.items():
        examples = {f["example"] for f in features}
        windowed = len(features) - len(examples)
        if windowed:
            log.info("windowed: %d %s contexts longer than task.max_seq_length=%d are read in "
                     "%d extra windows (task.doc_stride=%d)", len({f["example"] for f in features
                     if sum(g["example"] == f["example"] for g in features) > 1}), split,
                     task.max_seq_length, windowed, task.doc_stride)
            metrics[f"data/windowed/{split}_extra_windows"] = float(windowed)
    return metrics
