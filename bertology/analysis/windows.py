"""Local attention windows: where a head-level attention statistic does not apply.

ModernBERT (Warner et al., 2024, §2.1.1) alternates global attention (every third layer) with
local attention over a 128-token sliding window: a token of a local layer attends only to the
tokens at most 64 positions away (transformers' config.sliding_window; its mask allows
|i − j| ≤ sliding_window). Where a whole sentence lies inside that reach, a local layer's map is
a whole map and Clark et al.'s statistics mean what they mean on a global layer. Where it does
not, the map of a word more than 64 tokens past [CLS] has no column for [CLS] to put mass on,
so "attention to [CLS]" there would measure the window, not the head.

The attention analysis therefore reads every layer from the sentences that fit inside the
narrowest window, and says so in one line; a model without local layers is read as before.
"""

from __future__ import annotations

from collections.abc import Sequence

from transformers import PretrainedConfig, PreTrainedTokenizerBase

from bertology.data.probe_sentences import ProbeSentence


def local_reach(config: PretrainedConfig) -> list[int | None]:
    """Per layer, how many tokens either side a token can attend to: None for global
    attention, config.sliding_window for a sliding-window layer (transformers' layer_types)."""
    kinds = getattr(config, "layer_types", None) or ["full_attention"] * config.num_hidden_layers
    window = getattr(config, "sliding_window", None)
    return [window if kind == "sliding_attention" and window is not None else None
            for kind in kinds]


def token_count(tokenizer: PreTrainedTokenizerBase, sentence: ProbeSentence,
                max_length: int) -> int:
    """Word pieces with [CLS] and [SEP], truncated as features.py truncates."""
    return len(tokenizer(list(sentence.words), is_split_into_words=True, truncation=True,
                         max_length=max_length)["input_ids"])


def within_windows(config: PretrainedConfig, tokenizer: PreTrainedTokenizerBase,
                   sentences: Sequence[ProbeSentence], max_length: int
                   ) -> tuple[list[int] | None, str | None]:
    """(indices of the sentences every layer sees whole, or None where all are read; the one
    line that says what was done, or None for a model without local layers)."""
    reach = local_reach(config)
    local = [i + 1 for i, r in enumerate(reach) if r is not None]  # 1-based, as the tables
    if not local:
        return None, None
    narrowest = min(r for r in reach if r is not None)
    counts = [token_count(tokenizer, s, max_length) for s in sentences]
    # a sentence of t tokens lies inside the window when its farthest pair is t - 1 apart
    keep = [i for i, t in enumerate(counts) if t - 1 <= narrowest]
    layers = ", ".join(map(str, local))
    if len(keep) == len(sentences):
        return None, (f"attention: local layers {layers} attend within ±{narrowest} tokens; all "
                      f"{len(sentences)} sentences fit (at most {max(counts, default=0)} tokens), "
                      "so their maps are whole maps, read as the global layers'")
    what = (f"every layer is read from the {len(keep)} sentences that fit" if keep else
            "no sentence fits, so the attention analysis is skipped")
    return keep, (f"attention: local layers {layers} attend within ±{narrowest} tokens and "
                  f"{len(sentences) - len(keep)} of {len(sentences)} sentences are longer (up to "
                  f"{max(counts)} tokens), where a head statistic would measure the window, not "
                  f"the head: {what}")


class SentenceSubset:
    """Features (features.py) seen through a subset of their sentences: sentence i of the
    subset is sentence indices[i] of the features."""

    def __init__(self, features, indices: list[int]):
        self.features, self.indices = features, list(indices)
        self.num_layers, self.num_heads = features.num_layers, features.num_heads

    @property
    def num_sentences(self) -> int:
        return len(self.indices)

    def attention_map(self, index: int):
        return self.features.attention_map(self.indices[index])
