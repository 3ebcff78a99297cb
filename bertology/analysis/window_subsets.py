"""The attention analysis on models with local-window layers (ModernBERT): which probe
sentences every layer sees whole (models/windows.py says why it matters), and a view of the
extracted features restricted to them."""

from __future__ import annotations

from collections.abc import Sequence

from transformers import PretrainedConfig, PreTrainedTokenizerBase

from bertology.data.probe_sentences import ProbeSentence
from bertology.models.windows import fitting


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
    counts = [token_count(tokenizer, s, max_length) for s in sentences]
    return fitting(config, counts, "sentences", "attention")


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
