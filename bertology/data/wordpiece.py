"""A deterministic WordPiece vocabulary learner.

The `tokenizers` library learns a WordPiece vocabulary with BPE merges (as BERT's own
vocabulary was built, Wu et al. 2016 §4.1), but it numbers the `##` continuation pieces in
hash-map order, and ties between equally frequent pairs are broken by those numbers
(huggingface/tokenizers#1794). Two runs on the same corpus then learn different vocabularies,
so a model's initial weights and every number downstream change from one process to the next.
This learner runs the same merges with every tie broken by the pieces' text, so one corpus
always gives one vocabulary.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable

PREFIX = "##"  # BERT's continuation marker: "playing" -> "play", "##ing"

Pair = tuple[str, str]


def word_counts(texts: Iterable[list[str]], normalize, pre_tokenize) -> Counter[str]:
    """Words of every sentence after the tokenizer's own normaliser and pre-tokeniser."""
    counts: Counter[str] = Counter()
    for batch in texts:
        # One call per batch, not per sentence: the pre-tokeniser splits on whitespace anyway,
        # and each call into the Rust library costs more than the splitting itself.
        counts.update(word for word, _ in pre_tokenize(normalize(" ".join(batch))))
    return counts


def _join(left: str, right: str) -> str:
    return left + right.removeprefix(PREFIX)


def _merge_word(symbols: list[str], pair: Pair, joined: str) -> list[str]:
    merged, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair:
            merged.append(joined)
            i += 2
        else:
            merged.append(symbols[i])
            i += 1
    return merged


class _Merger:
    """BPE over word types, with pair counts kept up to date after each merge (only the words
    that hold the merged pair are recounted) and a heap of (-count, pair) whose stale entries
    are skipped. Popping the smallest (-count, left, right) picks the most frequent pair and,
    among equals, the first by text: the deterministic tie-break."""

    def __init__(self, counts: Counter[str]):
        self.words = [[w[0], *(PREFIX + c for c in w[1:])] for w in sorted(counts)]
        self.freq = [counts[w] for w in sorted(counts)]
        self.pair_count: Counter[Pair] = Counter()
        self.holders: dict[Pair, set[int]] = {}
        for index, symbols in enumerate(self.words):
            self._add(index, symbols, +1)
        self.heap = [(-n, pair) for pair, n in self.pair_count.items()]
        heapq.heapify(self.heap)

    def _add(self, index: int, symbols: list[str], sign: int) -> list[Pair]:
        pairs = list(zip(symbols, symbols[1:]))
        weight = sign * self.freq[index]
        counts = self.pair_count
        for pair in pairs:
            counts[pair] += weight
            if sign > 0:
                self.holders.setdefault(pair, set()).add(index)
        return pairs

    def best(self) -> Pair | None:
        while self.heap:
            negative, pair = heapq.heappop(self.heap)
            current = self.pair_count.get(pair, 0)
            if current == -negative and current > 0:
                return pair
            if current > 0:  # counts only fall, so a stale entry is re-queued at its true count
                heapq.heappush(self.heap, (-current, pair))
        return None

    def merge(self, pair: Pair) -> str:
        joined = _join(*pair)
        gained: set[Pair] = set()
        for index in sorted(self.holders.pop(pair, ())):
            symbols = self.words[index]
            merged = _merge_word(symbols, pair, joined)
            if merged == symbols:
                continue  # the pair left this word in an earlier merge
            self._add(index, symbols, -1)
            gained.update(p for p in self._add(index, merged, +1) if joined in p)
            self.words[index] = merged
        self.pair_count.pop(pair, None)
        for new in sorted(gained):  # only pairs with the new piece grew; the rest only fell
            heapq.heappush(self.heap, (-self.pair_count[new], new))
        return joined


def learn_vocabulary(counts: Counter[str], special_tokens: list[str], vocab_size: int
                     ) -> dict[str, int]:
    """Special tokens, then the characters that start words, then those that continue them
    (`##c`), each sorted, then one piece per merge until `vocab_size` or no pair is left."""
    starts = sorted({w[0] for w in counts})
    continuations = sorted({PREFIX + c for w in counts for c in w[1:]})
    pieces = list(dict.fromkeys([*special_tokens, *starts, *continuations]))
    merger = _Merger(counts)
    seen = set(pieces)
    while len(pieces) < vocab_size and (pair := merger.best()) is not None:
        joined = merger.merge(pair)
        if joined not in seen:  # "a"+"##b" and "ab" (from "a","##b" elsewhere) are one piece
            seen.add(joined)
            pieces.append(joined)
    return {piece: i for i, piece in enumerate(pieces)}
