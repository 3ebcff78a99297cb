"""RoBERTa's four input formats (Liu et al., 2019, §4.2), built from tokenised documents.

An example is a dict of numpy arrays plus ids:
  input_ids (seq,) int32, word_starts (seq,) bool (True where a word begins; special tokens are
  words of their own), token_type_ids (seq,) int8 for pairs, sentence_label int (0 = B follows A
  in order, 1 = B is random (NSP) or swapped (SOP); -1 without a pair task), id int.

Sequences are packed with whole sentences up to max_seq_length wherever the format allows;
only sentence_pair inputs stay short (the reason RoBERTa found it worse).
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import islice, tee, zip_longest

import numpy as np
from transformers import PreTrainedTokenizerBase

from bertology.config.groups import INPUT_FORMATS, PAIR_FORMATS
from bertology.errors import UserError
from bertology.run.cache_notes import count

SHORT_SEQ_PROB = 0.1  # BERT create_pretraining_data.py: 10% of pairs get a shorter target length
RANDOM_DOC_BUFFER = 256  # documents kept to draw NSP negatives from while streaming


@dataclass(frozen=True)
class TokenizedSentence:
    ids: np.ndarray  # (tokens,) int32
    starts: np.ndarray  # (tokens,) bool: the token begins a word


@dataclass(frozen=True)
class Specials:
    cls: int
    sep: int
    pad: int
    mask: int
    unk: int
    all: frozenset[int]

    @classmethod
    def of(cls, tokenizer: PreTrainedTokenizerBase) -> Specials:
        ids = [tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id,
               tokenizer.mask_token_id, tokenizer.unk_token_id]
        if any(i is None for i in ids):
            raise UserError("the tokenizer lacks one of [CLS] [SEP] [PAD] [MASK] [UNK]; "
                            "use a BERT- or RoBERTa-style tokenizer")
        return cls(*ids, all=frozenset(tokenizer.all_special_ids))


def tokenize_documents(
    documents: Iterable[list[str]], tokenizer: PreTrainedTokenizerBase, batch_docs: int = 64
) -> Iterator[list[TokenizedSentence]]:
    """Tokenise documents in batches (the fast tokenizer is much quicker on batches)."""
    it = iter(documents)
    while chunk := list(islice(it, batch_docs)):
        flat = [sentence for doc in chunk for sentence in doc]
        encoding = tokenizer(flat, add_special_tokens=False)
        sentences = []
        for i, ids in enumerate(encoding["input_ids"]):
            words = np.array([-1 if w is None else w for w in encoding.word_ids(i)])
            starts = np.ones(len(ids), dtype=bool)
            starts[1:] = words[1:] != words[:-1]
            sentences.append(TokenizedSentence(np.asarray(ids, dtype=np.int32), starts))
        position = 0
        for doc in chunk:
            tokenized = [s for s in sentences[position: position + len(doc)] if len(s.ids)]
            position += len(doc)
            if tokenized:
                yield tokenized


def _concat(parts: list[TokenizedSentence]) -> TokenizedSentence:
    if not parts:
        return TokenizedSentence(np.zeros(0, np.int32), np.zeros(0, bool))
    return TokenizedSentence(np.concatenate([p.ids for p in parts]),
                    np.concatenate([p.starts for p in parts]))


def _word_start_first(starts: np.ndarray) -> np.ndarray:
    """A segment begins a word: truncation or chunking may have cut into its first word, whose
    rest would otherwise join the special token before it (whole-word masking reads words)."""
    starts = starts.copy()
    starts[:1] = True
    return starts


def _wrap(specials: Specials, a: TokenizedSentence, b: TokenizedSentence | None = None) -> dict:
    """[CLS] A [SEP] (B [SEP]); RoBERTa's tokenizer uses <s> and </s> in the same slots."""
    one = np.ones(1, bool)
    ids = [np.array([specials.cls], np.int32), a.ids, np.array([specials.sep], np.int32)]
    starts = [one, _word_start_first(a.starts), one]
    types = [np.zeros(len(a.ids) + 2, np.int8)]
    if b is not None:
        ids += [b.ids, np.array([specials.sep], np.int32)]
        starts += [_word_start_first(b.starts), one]
        types.append(np.ones(len(b.ids) + 1, np.int8))
    return {"input_ids": np.concatenate(ids), "word_starts": np.concatenate(starts),
            "token_type_ids": np.concatenate(types), "sentence_label": -1}


def _chunks(sentence: TokenizedSentence, size: int) -> Iterator[TokenizedSentence]:
    """A sentence longer than a whole sequence is cut into sequence-sized pieces (counted in
    metrics.json as data/split_long/sentences, and said in the log once)."""
    if len(sentence.ids) > size:
        count("data/split_long/sentences", f"split: a sentence of {len(sentence.ids)} tokens "
              f"is longer than a sequence's {size}; it is cut into sequence-sized pieces "
              "(each such sentence counted in metrics.json: data/split_long/sentences)")
    for start in range(0, len(sentence.ids), size):
        yield TokenizedSentence(sentence.ids[start: start + size],
                                sentence.starts[start: start + size])


def pack_sentences(
    documents: Iterable[list[TokenizedSentence]], specials: Specials, max_len: int,
    cross_documents: bool,
) -> Iterator[dict]:
    """FULL-SENTENCES (cross_documents, with an extra separator at each document boundary) or
    DOC-SENTENCES: contiguous whole sentences packed up to max_len tokens."""
    budget = max_len - 2
    separator = TokenizedSentence(np.array([specials.sep], np.int32), np.ones(1, bool))
    current: list[TokenizedSentence] = []
    used = 0
    for document in documents:
        if current and cross_documents:
            if used + 1 > budget:  # no room for the separator: the boundary ends the sequence
                yield _wrap(specials, _concat(current))
                current, used = [], 0
            else:
                current.append(separator)
                used += 1
        for sentence in document:
            for piece in _chunks(sentence, budget):
                if used + len(piece.ids) > budget and current:
                    yield _wrap(specials, _concat(current))
                    current, used = [], 0
                current.append(piece)
                used += len(piece.ids)
        if not cross_documents and current:
            yield _wrap(specials, _concat(current))
            current, used = [], 0
    if current:
        yield _wrap(specials, _concat(current))


def _truncate_pair(a: list[int], b: list[int], budget: int, rng: random.Random) -> None:
    """BERT's truncate_seq_pair: trim the longer side, from a random end, until both fit."""
    while len(a) + len(b) > budget:
        longer = a if len(a) > len(b) else b
        del longer[0 if rng.random() < 0.5 else -1]


def _pair_example(specials: Specials, a: TokenizedSentence, b: TokenizedSentence, budget: int,
                  rng: random.Random) -> dict:
    keep_a, keep_b = list(range(len(a.ids))), list(range(len(b.ids)))
    _truncate_pair(keep_a, keep_b, budget, rng)
    trimmed_a = TokenizedSentence(a.ids[keep_a], a.starts[keep_a])
    trimmed_b = TokenizedSentence(b.ids[keep_b], b.starts[keep_b])
    return _wrap(specials, trimmed_a, trimmed_b)


def _random_segment(pool: deque, target: int, rng: random.Random) -> list[TokenizedSentence]:
    """Sentences from a random other document, from a random start, up to target tokens."""
    document = pool[rng.randrange(len(pool))]
    return _take_segment(document, rng.randrange(len(document)), target)


def make_pairs(
    documents: Iterable[list[TokenizedSentence]], specials: Specials, max_len: int, pair_task: str,
    whole_segments: bool, rng: random.Random,
) -> Iterator[dict]:
    """SEGMENT-PAIR (whole_segments: each side several sentences, BERT's
    create_instances_from_document) or SENTENCE-PAIR (each side one sentence).
    pair_task "nsp": B is the true continuation or, half the time, text from another document;
    "sop" (ALBERT): B is the continuation, and half the time A and B are swapped."""
    budget = max_len - 3
    pool: deque = deque(maxlen=RANDOM_DOC_BUFFER)
    for document in documents:
        count_long(document, budget)
        yield from _document_pairs(document, pool, specials, budget, pair_task,
                                   whole_segments, rng)
        pool.append(document)


def count_long(document: list[TokenizedSentence], budget: int) -> None:
    """A sentence longer than a pair's whole budget, which truncate_seq_pair will trim (counted
    in metrics.json as data/truncated_long/sentences, and said in the log once)."""
    for sentence in document:
        if len(sentence.ids) > budget:
            count("data/truncated_long/sentences", f"truncated: a sentence of "
                  f"{len(sentence.ids)} tokens is longer than a pair's {budget}; BERT's "
                  "truncate_seq_pair trims it (each such sentence counted in metrics.json: "
                  "data/truncated_long/sentences)")


def _take_segment(document: list[TokenizedSentence], start: int, target: int
                  ) -> list[TokenizedSentence]:
    """Consecutive sentences from `start` until they reach `target` tokens or the document ends."""
    chunk, length = [], 0
    for sentence in document[start:]:
        chunk.append(sentence)
        length += len(sentence.ids)
        if length >= target:
            break
    return chunk


def _document_pairs(document, pool, specials, budget, pair_task, whole_segments, rng):
    target = budget if rng.random() >= SHORT_SEQ_PROB else rng.randint(2, budget)
    i = 0
    while i < len(document):
        chunk = _take_segment(document, i, target) if whole_segments else document[i: i + 2]
        if len(chunk) == 1:  # a pair needs two sentences, even when the first reaches the target
            chunk = document[i: i + 2]
        example, unused = _split_chunk(chunk, pool, specials, budget, target, pair_task,
                                       whole_segments, rng)
        if example is not None:
            yield example
        i += len(chunk) - unused


def _split_chunk(chunk, pool, specials, budget, target, pair_task, whole_segments, rng):
    """One pair from a chunk of consecutive sentences; returns (example, sentences unused)."""
    a_end = 1 if len(chunk) < 2 or not whole_segments else rng.randint(1, len(chunk) - 1)
    a, b_true = chunk[:a_end], chunk[a_end:]
    label, unused = 0, 0
    if pair_task == "sop":
        if not b_true:  # a single sentence has no order to predict
            return None, 0
        if rng.random() < 0.5:
            a, b_true, label = b_true, a, 1
        b = b_true
    elif not b_true:
        # A document's last sentence has no continuation. BERT then always draws a random B,
        # which tips the labels towards "random" on short documents; it is skipped instead, so
        # every label is a fair coin (Devlin et al. §3.1: 50% IsNext).
        return None, 0
    elif rng.random() < 0.5:
        if not pool:  # the first document has nothing to contrast with yet
            return None, 0
        # SENTENCE-PAIR negatives are one sentence too: a longer B would give the label away.
        length = max(1, target - len(_concat(a).ids)) if whole_segments else 1
        b, label = _random_segment(pool, length, rng), 1
        unused = len(b_true)  # put the skipped true continuation back (BERT does the same)
    else:
        b = b_true
    example = _pair_example(specials, _concat(a), _concat(b), budget, rng)
    example["sentence_label"] = label
    return example, unused


def build_examples(
    documents: Iterable[list[str]], tokenizer: PreTrainedTokenizerBase, input_format: str,
    max_len: int, pair_task: str | None, seed: int,
) -> Iterator[dict]:
    """Examples in the given input format, numbered in creation order (the id keys the masks).
    Deterministic for a seed: the same documents give the same examples every epoch."""
    if input_format not in INPUT_FORMATS:
        raise UserError(f"input format {input_format!r} is unknown; use one of: "
                        f"{', '.join(INPUT_FORMATS)}")
    specials = Specials.of(tokenizer)
    tokenized = tokenize_documents(documents, tokenizer)
    if input_format in ("full_sentences", "doc_sentences"):
        examples = pack_sentences(tokenized, specials, max_len,
                                  cross_documents=input_format == "full_sentences")
    else:
        examples = make_pairs(tokenized, specials, max_len, pair_task or "nsp",
                              whole_segments=input_format == "segment_pair",
                              rng=copy_rng(seed, 0))
    yield from _numbered(examples)


def copy_rng(seed: int, copy: int) -> random.Random:
    """The pairing generator of static copy `copy`: copy 0 draws as a single build does."""
    return random.Random(seed if copy == 0 else f"{seed}:{copy}")


def build_copies(
    documents: Iterable[list[str]], tokenizer: PreTrainedTokenizerBase, input_format: str,
    max_len: int, pair_task: str | None, seed: int, copies: int,
) -> Iterator[tuple[int, dict]]:
    """(copy, example) for `copies` static copies of the examples (model.dupe_factor). As in
    BERT's create_pretraining_data.py, which builds its instances dupe_factor times, each
    copy of a pair format draws its own pairs (segment lengths, random next segments, NSP/SOP
    labels) from a generator seeded by (seed, copy); the packed formats draw nothing, so their
    copies are one example repeated. The documents are read and tokenised once; the copies are
    built side by side, a few documents apart, so memory does not grow with the corpus."""
    if input_format not in PAIR_FORMATS or copies == 1:
        for example in build_examples(documents, tokenizer, input_format, max_len, pair_task,
                                      seed):
            for copy in range(copies):
                yield copy, example
        return
    specials = Specials.of(tokenizer)
    streams = tee(tokenize_documents(documents, tokenizer), copies)
    built = [_numbered(make_pairs(stream, specials, max_len, pair_task or "nsp",
                                  whole_segments=input_format == "segment_pair",
                                  rng=copy_rng(seed, copy)))
             for copy, stream in enumerate(streams)]
    for row in zip_longest(*built):
        for copy, example in enumerate(row):
            if example is not None:
                yield copy, example


def _numbered(examples: Iterable[dict]) -> Iterator[dict]:
    for number, example in enumerate(examples):
        example["id"] = number
        yield example


UNIGRAM_MAX_TOKENS = 50_000_000  # enough for every share above 1e-6 to within a few percent


def count_tokens(documents: Iterable[list[str]], tokenizer: PreTrainedTokenizerBase,
                 max_tokens: int = UNIGRAM_MAX_TOKENS) -> np.ndarray:
    """(len(tokenizer),) how often each id occurs in the tokenised documents, special tokens
    0: the unigram distribution SpanBERT draws its random replacement tokens from. Counting
    stops after the document that passes max_tokens (a large corpus is estimated by its head)."""
    counts = np.zeros(len(tokenizer), dtype=np.int64)
    total = 0
    for document in tokenize_documents(documents, tokenizer):
        for sentence in document:
            counts += np.bincount(sentence.ids, minlength=len(counts))
            total += len(sentence.ids)
        if total >= max_tokens:
            break
    counts[sorted(tokenizer.all_special_ids)] = 0
    return counts


def compute_tokens_per_sequence(documents: list[list[str]], tokenizer: PreTrainedTokenizerBase,
                                max_len: int) -> dict[str, float]:
    """Mean tokens (specials included) per FULL-SENTENCES and per DOC-SENTENCES sequence of the
    same documents: DOC-SENTENCES ends a sequence at every document end, so its are shorter."""
    out = {}
    for input_format in ("full_sentences", "doc_sentences"):
        lengths = [len(e["input_ids"]) for e in build_examples(documents, tokenizer,
                                                                input_format, max_len, None, 0)]
        out[input_format] = float(np.mean(lengths)) if lengths else 0.0
    return out
