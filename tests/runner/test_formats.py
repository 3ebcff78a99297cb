"""Tests for RoBERTa's input formats (Liu et al., 2019, §4.2) and the sentence-pair tasks
(BERT's NSP, ALBERT's SOP): labels are balanced and true to the source documents, packing fills
sequences without splitting sentences or (doc_sentences) crossing documents, and every example
is well formed.

Faithfulness to the source is checked on marker documents: every token of sentence s of
document d is one vocabulary word m(d, s), so an example's runs of equal ids name the sentences
it holds, even after truncation has trimmed their ends.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from bertology.config.groups import INPUT_FORMATS, PAIR_FORMATS, DataConfig
from bertology.data.corpora import build_corpus
from bertology.data.formats import (
    Specials,
    build_examples,
    make_pairs,
    pack_sentences,
    tokenize_documents,
)
from bertology.errors import UserError

SEED = 11
Z = 5.0  # binomial standard errors of tolerance: a false failure has probability ~6e-7


def data_dir() -> Path:
    return Path(os.environ["BERTOLOGY_DATA_DIR"])  # set by conftest.py


def synthetic_documents(num_sentences: int) -> list[list[str]]:
    # Short documents (3-8 sentences) give many examples from few sentences.
    cfg = DataConfig(num_sentences=num_sentences, sentences_per_doc=[3, 8])
    return list(build_corpus(cfg, data_dir()).iter_documents())


# ----------------------------------------------------------------------------- marker documents


@dataclass(frozen=True)
class MarkerCorpus:
    documents: list[list[str]]
    sentence_of: dict[int, tuple[int, int]]  # token id -> (document, sentence)
    lengths: list[list[int]]  # tokens of every sentence, by document


def marker_corpus(tokenizer, lengths: list[list[int]]) -> MarkerCorpus:
    """Documents whose sentence s of document d is the word m(d, s) repeated lengths[d][s] times;
    m runs over vocabulary words that the (WordPiece) tokenizer keeps whole."""
    vocab = tokenizer.get_vocab()
    words = sorted(w for w in vocab if w.isalpha() and w.islower() and len(w) >= 3)
    needed = sum(len(doc) for doc in lengths)
    assert len(words) >= needed, "the tokenizer has too few whole words for the markers"
    words = iter(random.Random(SEED).sample(words, needed))
    documents, sentence_of = [], {}
    for d, doc in enumerate(lengths):
        sentences = []
        for s, length in enumerate(doc):
            word = next(words)
            sentence_of[vocab[word]] = (d, s)
            sentences.append(" ".join([word] * length))
        documents.append(sentences)
    corpus = MarkerCorpus(documents, sentence_of, lengths)
    tokenized = list(tokenize_documents(documents, tokenizer))  # every word is one token
    assert [[len(s.ids) for s in doc] for doc in tokenized] == lengths
    return corpus


def runs(ids: np.ndarray, corpus: MarkerCorpus, sep: int) -> list[tuple]:
    """The sentences a span holds, in order: ((document, sentence), tokens) per run of equal
    ids; an inner separator reads as ("SEP", 1)."""
    out = []
    for token in ids.tolist():
        key = "SEP" if token == sep else corpus.sentence_of[token]
        if out and out[-1][0] == key and key != "SEP":
            out[-1] = (key, out[-1][1] + 1)
        else:
            out.append((key, 1))
    return out


def split_pair(example: dict, specials: Specials) -> tuple[np.ndarray, np.ndarray]:
    """Checks [CLS] A [SEP] B [SEP] with token types 0 for [CLS] A [SEP], 1 for B [SEP]."""
    ids, types = example["input_ids"], example["token_type_ids"]
    assert ids[0] == specials.cls and ids[-1] == specials.sep
    first_sep = int(np.flatnonzero(ids == specials.sep)[0])
    assert 1 < first_sep < len(ids) - 2  # both segments non-empty
    assert len(types) == len(ids)
    assert (types[: first_sep + 1] == 0).all() and (types[first_sep + 1:] == 1).all()
    return ids[1:first_sep], ids[first_sep + 1: -1]


def consecutive(keys: list[tuple[int, int]]) -> bool:
    """Sentences s, s+1, s+2, ... of one document."""
    return all(b == (a[0], a[1] + 1) for a, b in zip(keys, keys[1:]))


SENTENCE_LENGTH, PAIR_MAX_LEN = 6, 40  # chunks of ~6 sentences: long documents give several


def pair_corpus(tokenizer) -> MarkerCorpus:
    """Documents of 1-9 sentences of SENTENCE_LENGTH tokens each. With equal sentences,
    truncation (which removes fewer tokens than the last sentence of a chunk holds) can trim a
    sentence but never remove one, so adjacency stays visible."""
    rng = random.Random(SEED)
    return marker_corpus(tokenizer, [[SENTENCE_LENGTH] * rng.randint(1, 9) for _ in range(120)])


def pair_examples(tokenizer, corpus: MarkerCorpus, input_format: str, task: str) -> list[dict]:
    examples = []
    for seed in range(3):
        examples += build_examples(corpus.documents, tokenizer, input_format, PAIR_MAX_LEN,
                                   task, seed)
    return examples


def parse_pair(example: dict, specials: Specials, corpus: MarkerCorpus):
    a, b = split_pair(example, specials)
    a_runs, b_runs = runs(a, corpus, specials.sep), runs(b, corpus, specials.sep)
    for key, count in a_runs + b_runs:
        assert count <= corpus.lengths[key[0]][key[1]]
    return [key for key, _ in a_runs], [key for key, _ in b_runs], b_runs


@pytest.mark.parametrize("input_format", PAIR_FORMATS)
def test_nsp_pairs_follow_the_source_documents(synthetic_tokenizer, input_format):
    corpus = pair_corpus(synthetic_tokenizer)
    specials = Specials.of(synthetic_tokenizer)
    examples = pair_examples(synthetic_tokenizer, corpus, input_format, "nsp")
    labels = np.array([e["sentence_label"] for e in examples])
    assert set(labels.tolist()) == {0, 1}
    assert 0.35 < labels.mean() < 0.65  # both kinds in number (balance: the real-corpus test)
    for example in examples:
        assert len(example["input_ids"]) <= PAIR_MAX_LEN
        a, b, b_runs = parse_pair(example, specials, corpus)
        assert consecutive(a) and consecutive(b)
        if input_format == "sentence_pair":  # one sentence a side, whole: no truncation
            assert len(a) == len(b) == 1 and b_runs[0][1] == SENTENCE_LENGTH
        if example["sentence_label"] == 0:  # B is what follows A in A's document
            assert consecutive(a + b)
        else:  # B is text of another document
            assert a[0][0] != b[0][0]


@pytest.mark.parametrize("input_format", PAIR_FORMATS)
def test_sop_pairs_are_consecutive_segments_in_order_or_swapped(synthetic_tokenizer,
                                                                input_format):
    corpus = pair_corpus(synthetic_tokenizer)
    specials = Specials.of(synthetic_tokenizer)
    examples = pair_examples(synthetic_tokenizer, corpus, input_format, "sop")
    labels = np.array([e["sentence_label"] for e in examples])
    assert 0.35 < labels.mean() < 0.65
    for example in examples:
        assert len(example["input_ids"]) <= PAIR_MAX_LEN
        a, b, _ = parse_pair(example, specials, corpus)
        if input_format == "sentence_pair":
            assert len(a) == len(b) == 1
        assert {key[0] for key in a + b} == {a[0][0]}  # one document
        assert consecutive(a + b) if example["sentence_label"] == 0 else consecutive(b + a)


# ----------------------------------------------------------------------------- real corpus


@pytest.fixture(scope="module")
def tokenized(synthetic_tokenizer) -> list:
    """~1450 documents of the synthetic corpus, tokenised once for the format builders."""
    return list(tokenize_documents(synthetic_documents(8000), synthetic_tokenizer))


def real_pairs(tokenizer, tokenized, input_format: str, task: str, max_len: int = 128):
    specials = Specials.of(tokenizer)
    examples = []
    for seed in range(2):
        examples += make_pairs(tokenized, specials, max_len, task,
                               whole_segments=input_format == "segment_pair",
                               rng=random.Random(seed))
    return examples


@pytest.mark.slow
@pytest.mark.parametrize("task", ["nsp", "sop"])
@pytest.mark.parametrize("input_format", PAIR_FORMATS)
def test_pair_labels_are_balanced_on_the_corpus(synthetic_tokenizer, tokenized, input_format,
                                                task):
    specials = Specials.of(synthetic_tokenizer)
    examples = real_pairs(synthetic_tokenizer, tokenized, input_format, task)
    labels = np.array([e["sentence_label"] for e in examples])
    assert len(labels) > 1500
    assert set(labels.tolist()) == {0, 1}
    assert abs(labels.mean() - 0.5) <= Z * np.sqrt(0.25 / len(labels))
    for example in examples:
        assert len(example["input_ids"]) <= 128
        split_pair(example, specials)


def test_sentence_pair_negatives_are_as_long_as_positives(synthetic_tokenizer, tokenized):
    """NSP negatives of SENTENCE-PAIR are single sentences too: B's length gives nothing away."""
    specials = Specials.of(synthetic_tokenizer)
    lengths = {0: [], 1: []}
    for example in real_pairs(synthetic_tokenizer, tokenized, "sentence_pair", "nsp"):
        lengths[example["sentence_label"]].append(len(split_pair(example, specials)[1]))
    positive, negative = np.array(lengths[0]), np.array(lengths[1])
    standard_error = np.sqrt(positive.var() / len(positive) + negative.var() / len(negative))
    assert abs(positive.mean() - negative.mean()) <= Z * standard_error


def test_sentence_pairs_are_much_shorter_than_segment_pairs(synthetic_tokenizer, tokenized):
    """The reason RoBERTa found SENTENCE-PAIR worse (§4.2): far fewer tokens per sequence."""
    for task in ("nsp", "sop"):
        mean = {fmt: np.mean([len(e["input_ids"]) for e in real_pairs(
            synthetic_tokenizer, tokenized, fmt, task)]) for fmt in PAIR_FORMATS}
        assert mean["sentence_pair"] < 0.6 * mean["segment_pair"]


@pytest.mark.parametrize("max_len", [64, 128])
def test_full_sentences_fill_the_sequences(synthetic_tokenizer, tokenized, max_len):
    specials = Specials.of(synthetic_tokenizer)
    longest = max(len(sentence.ids) for doc in tokenized for sentence in doc)
    assert longest < max_len - 2  # no sentence is cut here
    for cross in (True, False):
        lengths = np.array([len(e["input_ids"]) for e in pack_sentences(
            tokenized, specials, max_len, cross_documents=cross)])
        assert lengths.max() <= max_len
        if cross:  # a sequence stops short only by less than the sentence that did not fit
            assert lengths.mean() > 0.85 * max_len
            assert lengths[:-1].min() > max_len - longest - 1


# ----------------------------------------------------------------------------- packing


PACK_MAX_LEN = 48  # budget 46: sentences of 1-20 tokens, a few longer than the budget


@pytest.fixture(scope="module")
def pack_corpus(synthetic_tokenizer) -> MarkerCorpus:
    rng = random.Random(SEED + 1)
    lengths = [[rng.choice([rng.randint(1, 20)] * 30 + [rng.randint(47, 100)])
                for _ in range(rng.randint(1, 6))] for _ in range(120)]
    assert any(length > PACK_MAX_LEN - 2 for doc in lengths for length in doc)
    return marker_corpus(synthetic_tokenizer, lengths)


def packed(tokenizer, corpus: MarkerCorpus, input_format: str) -> list[list[tuple]]:
    """Each example's runs (checks [CLS] ... [SEP], types 0, lengths and the label on the way)."""
    specials = Specials.of(tokenizer)
    out = []
    for example in build_examples(corpus.documents, tokenizer, input_format, PACK_MAX_LEN,
                                  None, SEED):
        ids = example["input_ids"]
        assert 3 <= len(ids) <= PACK_MAX_LEN
        assert ids[0] == specials.cls and ids[-1] == specials.sep
        assert (example["token_type_ids"] == 0).all() and example["sentence_label"] == -1
        out.append(runs(ids[1:-1], corpus, specials.sep))
    return out


def check_sentences_whole_and_in_order(examples: list[list[tuple]], corpus: MarkerCorpus):
    """Every token of the corpus once, in order; a sentence spans sequences only when it is
    longer than a whole sequence, and then every piece but the last fills one."""
    budget = PACK_MAX_LEN - 2
    stream = [(key, n) for example in examples for key, n in example if key != "SEP"]
    tokens = [key for key, n in stream for _ in range(n)]
    assert tokens == [(d, s) for d, doc in enumerate(corpus.lengths)
                      for s, length in enumerate(doc) for _ in range(length)]
    pieces: dict[tuple, list[int]] = {}
    for key, n in stream:
        pieces.setdefault(key, []).append(n)
    for (d, s), sizes in pieces.items():
        if corpus.lengths[d][s] <= budget:
            assert len(sizes) == 1
        else:
            assert sizes[:-1] == [budget] * (len(sizes) - 1)


def used(example: list[tuple]) -> int:
    return sum(n for _, n in example)


def test_doc_sentences_packs_whole_sentences_of_one_document(synthetic_tokenizer, pack_corpus):
    examples = packed(synthetic_tokenizer, pack_corpus, "doc_sentences")
    check_sentences_whole_and_in_order(examples, pack_corpus)
    for example in examples:
        assert all(key != "SEP" for key, _ in example)
        assert len({key[0] for key, _ in example}) == 1  # never crosses documents
    budget = PACK_MAX_LEN - 2
    for example, following in zip(examples, examples[1:]):
        (d, s), _ = following[0]
        if d == example[-1][0][0]:  # packed greedily: the next sentence did not fit
            assert used(example) + pack_corpus.lengths[d][s] > budget


def first_unit_length(corpus: MarkerCorpus, example: list[tuple]) -> int:
    """Tokens of the first unit packed into a sequence: its first sentence, or the piece of a
    sentence longer than a sequence."""
    (d, s), tokens = example[0]
    return max(tokens, min(corpus.lengths[d][s], PACK_MAX_LEN - 2))


def test_full_sentences_crosses_documents_with_a_separator(synthetic_tokenizer, pack_corpus):
    examples = packed(synthetic_tokenizer, pack_corpus, "full_sentences")
    check_sentences_whole_and_in_order(examples, pack_corpus)
    assert len(examples) < 0.8 * len(packed(synthetic_tokenizer, pack_corpus, "doc_sentences"))
    budget = PACK_MAX_LEN - 2
    crossing = 0
    for example in examples:
        keys = [key for key, _ in example]
        crossing += len({key[0] for key in keys if key != "SEP"}) > 1
        assert keys[0] != "SEP"
        for before, key in zip(keys, keys[1:]):
            assert (before, key) != ("SEP", "SEP")
            assert "SEP" in (before, key) or before[0] == key[0]  # no separator: one document
        for before, key, after in zip(keys, keys[1:], keys[2:]):
            if key == "SEP":  # an inner separator: between two documents (or at the end)
                assert before[0] + 1 == after[0]
    assert crossing > 10
    for example, following in zip(examples, examples[1:]):
        (d, s), _ = following[0]
        last = example[-1][0]
        if last != "SEP" and last[0] != d:  # the boundary ends a sequence: no room for [SEP]
            assert used(example) == budget
        else:  # packed greedily: the next sentence did not fit
            assert used(example) + first_unit_length(pack_corpus, following) > budget



# ----------------------------------------------------------------------------- every example


@pytest.mark.parametrize("input_format", INPUT_FORMATS)
@pytest.mark.parametrize("tokenizer_fixture", ["synthetic_tokenizer", "bpe_tokenizer"])
def test_examples_are_well_formed(request, tokenizer_fixture, input_format):
    tokenizer = request.getfixturevalue(tokenizer_fixture)
    specials = Specials.of(tokenizer)
    # The corpus's own words are whole tokens; made-up ones are split into several.
    documents = [[f"{doc[0]} Quixotically xylophonistic zebrafication.", *doc[1:]]
                 for doc in synthetic_documents(1000)]
    task = "sop" if input_format == "sentence_pair" else "nsp"
    examples = list(build_examples(documents, tokenizer, input_format, 64, task, SEED))
    again = list(build_examples(documents, tokenizer, input_format, 64, task, SEED))
    assert [e["id"] for e in examples] == list(range(len(examples)))
    assert len(examples) > 100
    not_starts = 0
    for example, same in zip(examples, again, strict=True):
        ids, starts = example["input_ids"], example["word_starts"]
        assert ids.dtype == np.int32 and starts.dtype == bool
        assert len(starts) == len(ids) == len(example["token_type_ids"]) <= 64
        is_special = np.isin(ids, sorted(specials.all))
        assert starts[is_special].all()
        assert starts[np.flatnonzero(is_special[:-1]) + 1].all()  # a segment begins a word
        assert set(ids.tolist()) <= set(range(len(tokenizer)))
        not_starts += int((~starts).sum())
        for key in ("input_ids", "word_starts", "token_type_ids"):
            assert np.array_equal(example[key], same[key])  # deterministic for a seed
        assert example["sentence_label"] == same["sentence_label"]
    assert not_starts > 0  # some words are several tokens


def test_unknown_input_format_raises_user_error(synthetic_tokenizer):
    with pytest.raises(UserError, match="input format"):
        list(build_examples([["A sentence."]], synthetic_tokenizer, "sentences", 64, None, 0))


@pytest.mark.parametrize("input_format, key", [
    ("full_sentences", "data/split_long/sentences"),
    ("segment_pair", "data/truncated_long/sentences")])
def test_a_sentence_longer_than_a_sequence_is_counted(synthetic_tokenizer, input_format, key):
    """A 300-word sentence among short ones, at 64 tokens a sequence: packing splits it into
    pieces, pairs truncate it; either way the run's metrics count it once (and its log says
    so), and the short sentences are not counted."""
    from bertology.run.cache_notes import take_recomputed

    take_recomputed()
    short = "the dog runs ."
    documents = [[short, " ".join(["the"] * 300), short, short], [short, short, short]]
    examples = list(build_examples(iter(documents), synthetic_tokenizer, input_format, 64,
                                   "nsp", seed=0))
    assert examples and all(len(e["input_ids"]) <= 64 for e in examples)
    assert take_recomputed() == {key: 1.0}
