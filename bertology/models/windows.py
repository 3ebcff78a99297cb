"""Local attention windows: where a head-level attention statistic does not apply.

ModernBERT (Warner et al., 2024, §2.1.1) alternates global attention (every third layer) with
local attention over a 128-token sliding window: a token of a local layer attends only to the
tokens at most 64 positions away (transformers' config.sliding_window; its mask allows
|i − j| ≤ sliding_window). Where a whole sequence lies inside that reach, a local layer's map is
a whole map, and a head statistic means what it means on a global layer. Where it does not,
a token more than 64 positions past [CLS] has no [CLS] column to put mass on, so "attention to
[CLS]" there would measure the window, not the head, and an entropy or a maximum weight is
taken over fewer keys than a global head's.

So the analyses that read attention maps read every layer from the sequences that fit inside
the narrowest window, and say so in one line (`fitting`); a model without local layers is read
as before.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from transformers import PretrainedConfig


def local_reach(config: PretrainedConfig) -> list[int | None]:
    """Per layer, how many tokens either side a token can attend to: None for global
    attention, config.sliding_window for a sliding-window layer (transformers' layer_types)."""
    kinds = getattr(config, "layer_types", None) or ["full_attention"] * config.num_hidden_layers
    window = getattr(config, "sliding_window", None)
    return [window if kind == "sliding_attention" and window is not None else None
            for kind in kinds]


def narrowest_reach(config: PretrainedConfig) -> int | None:
    """The smallest reach of any layer; None: every layer attends globally."""
    reaches = [r for r in local_reach(config) if r is not None]
    return min(reaches) if reaches else None


def fits_window(length: int, reach: int | None) -> bool:
    """Whether a sequence of `length` tokens lies inside the window: its farthest pair of
    tokens is length − 1 apart."""
    return reach is None or length - 1 <= reach


def fitting(config: PretrainedConfig, lengths: Sequence[int], what: str, analysis: str
            ) -> tuple[list[int] | None, str | None]:
    """(indices of the sequences every layer sees whole, or None where all are read; the one
    line that says what was done, or None for a model without local layers). `lengths`:
    tokens per sequence, [CLS] and [SEP] included; `what`: "sentences", "examples", ...;
    `analysis`: what is read or skipped, e.g. "the attention analysis"."""
    reach = narrowest_reach(config)
    if reach is None:
        return None, None
    local = ", ".join(str(i + 1) for i, r in enumerate(local_reach(config)) if r is not None)
    keep = [i for i, n in enumerate(lengths) if fits_window(n, reach)]
    head = f"{analysis}: local layers {local} attend within ±{reach} tokens"
    if len(keep) == len(lengths):
        return None, (f"{head}; all {len(lengths)} {what} fit (at most "
                      f"{max(lengths, default=0)} tokens), so their maps are whole maps, read "
                      "as the global layers'")
    outcome = (f"every layer is read from the {len(keep)} {what} that fit" if keep else
               f"no {what[:-1] if what.endswith('s') else what} fits, so it is skipped")
    return keep, (f"{head} and {len(lengths) - len(keep)} of {len(lengths)} {what} are longer "
                  f"(up to {max(lengths)} tokens), where a head statistic would measure the "
                  f"window, not the head: {outcome}")


def log_fitting(logger: logging.Logger, keep: list[int] | None, line: str | None) -> None:
    """Log what `fitting` said: a note where every sequence was read, a warning where some
    (or all) were left out."""
    if line is not None:
        logger.log(logging.INFO if keep is None else logging.WARNING, line)


def matched_reaches(student: PretrainedConfig, teacher: PretrainedConfig, layer_map: list[int]
                    ) -> tuple[list[int | None], str | None]:
    """For attention-map distillation (TinyBERT Eq. 7): per student layer m ≥ 1 (index m − 1),
    the window its map and that of teacher layer layer_map[m] share, the narrower of the two
    (None: both global); and the one line that says where a local window limits the
    comparison (None where no pair has one)."""
    student_reach, teacher_reach = local_reach(student), local_reach(teacher)
    reaches = []
    for student_layer, teacher_layer in enumerate(layer_map[1:], start=1):
        pair = [r for r in (student_reach[student_layer - 1], teacher_reach[teacher_layer - 1])
                if r is not None]
        reaches.append(min(pair) if pair else None)
    local = [f"{m}->{layer_map[m]} (±{r})" for m, r in enumerate(reaches, start=1)
             if r is not None]
    if not local:
        return reaches, None
    return reaches, ("kd.attention_weight: the attention maps of student->teacher layers "
                     f"{', '.join(local)} are matched only on keys within that many tokens of "
                     "the query: beyond a local layer's window its map is zero by construction")
