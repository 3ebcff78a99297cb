"""Tests for MLM masking (Devlin et al., 2019, §3.1 and Table 8; RoBERTa §4.1 static vs dynamic
masking; whole-word masking): rates over many draws, special tokens, labels, the [UNK] ablation,
whole words with WordPiece and byte-level BPE, per-epoch masks, resumption and config checks.

Rates are compared with a tolerance of Z binomial standard errors (plus, for the selection
rate, the rounding of the exact per-sequence count), so a correct implementation fails with
probability well under 1e-5 while a wrong ratio (e.g. 0.15 vs 0.2, 0.8 vs 0.7) fails surely.
"""

from __future__ import annotations

import os
import random
from collections import defaultdict
from dataclasses import dataclass
from itertools import islice, takewhile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import compose_config

from bertology.config.groups import DataConfig, ModelConfig, ObjectiveConfig
from bertology.config.pretrain_config import load_pretrain_config
from bertology.data.corpora import build_corpus
from bertology.data.formats import Specials, build_examples
from bertology.data.stream import Cursor, PretrainData
from bertology.errors import UserError
from bertology.objectives import OBJECTIVES
from bertology.objectives.mlm import IGNORE, MaskingSpec, compute_mask

SEED = 7
Z = 5.0  # standard errors of tolerance: a false failure has probability ~6e-7 per comparison
DRAWS = 4  # masks drawn per example: ~550 segment-pair examples give ~2200 sequences


def data_dir() -> Path:
    return Path(os.environ["BERTOLOGY_DATA_DIR"])  # set by conftest.py


def synthetic_documents(num_sentences: int) -> list[list[str]]:
    # Short documents (3-8 sentences) give many examples from few sentences.
    cfg = DataConfig(num_sentences=num_sentences, sentences_per_doc=[3, 8])
    return list(build_corpus(cfg, data_dir()).iter_documents())


def binomial_tolerance(p: float, n: int) -> float:
    return Z * float(np.sqrt(p * (1 - p) / n))


@dataclass
class Draws:
    """Masked sequences, concatenated over every draw (padding removed)."""

    original: np.ndarray  # (tokens,)
    corrupted: np.ndarray  # (tokens,)
    labels: np.ndarray  # (tokens,)
    sequences: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]  # per sequence

    @property
    def selected(self) -> np.ndarray:
        return self.labels != IGNORE


def draw_masks(tokenizer, examples: list[dict], cfg: ObjectiveConfig, draws: int = DRAWS,
               family: str = "bert") -> Draws:
    """Mask `draws` copies of every example through the objective's collate, as training does,
    and check the padding on the way."""
    collate = OBJECTIVES[cfg.name](cfg, tokenizer, family, SEED).collate
    keyed = [{**e, "mask_key": (e["id"], d)} for d in range(draws) for e in examples]
    sequences = []
    for start in range(0, len(keyed), 128):
        chunk = keyed[start: start + 128]
        batch = collate(chunk)
        for row, example in enumerate(chunk):
            n = len(example["input_ids"])
            assert (batch["attention_mask"][row, :n] == 1).all()
            assert (batch["attention_mask"][row, n:] == 0).all()
            assert (batch["input_ids"][row, n:] == tokenizer.pad_token_id).all()
            assert (batch["labels"][row, n:] == IGNORE).all()
            assert np.array_equal(batch["token_type_ids"][row, :n], example["token_type_ids"])
            sequences.append((example["input_ids"].astype(np.int64),
                              batch["input_ids"][row, :n].numpy(),
                              batch["labels"][row, :n].numpy(), example["word_starts"]))
    original, corrupted, labels, _ = (np.concatenate(column) for column in zip(*sequences))
    return Draws(original, corrupted, labels, sequences)


@pytest.fixture(scope="module")
def examples(synthetic_tokenizer) -> list[dict]:
    """Real segment-pair examples of the synthetic corpus ([CLS] A [SEP] B [SEP])."""
    return list(build_examples(synthetic_documents(2000), synthetic_tokenizer, "segment_pair",
                               128, None, SEED))


def rare_word_documents(num_sentences: int) -> list[list[str]]:
    """Synthetic documents with two made-up long words per sentence ("pianochefization"):
    words that both tokenizers split into several sub-words."""
    documents = synthetic_documents(num_sentences)
    words = sorted({w.strip(".,").lower() for doc in documents for s in doc for w in s.split()})
    rng = random.Random(SEED)
    out = []
    for document in documents:
        sentences = []
        for sentence in document:
            tokens = sentence.split()
            for _ in range(2):
                rare = "".join(rng.sample(words, 2)) + rng.choice(["ness", "ization", "ologist"])
                tokens.insert(rng.randrange(len(tokens)), rare)
            sentences.append(" ".join(tokens))
        out.append(sentences)
    return out


# ----------------------------------------------------------------------------- rates and labels


@pytest.mark.parametrize("mask_prob", [0.15, 0.4])
def test_selection_rate_is_mask_prob_of_non_special_tokens(synthetic_tokenizer, examples,
                                                           mask_prob):
    draws = draw_masks(synthetic_tokenizer, examples, ObjectiveConfig(mask_prob=mask_prob))
    special_ids = sorted(synthetic_tokenizer.all_special_ids)
    assert len(draws.sequences) >= 2000
    for original, _, labels, _ in draws.sequences:  # an exact count per sequence, like BERT
        candidates = int((~np.isin(original, special_ids)).sum())
        count = int((labels != IGNORE).sum())
        assert count >= 1
        assert abs(count - candidates * mask_prob) <= 0.5 + 1e-9
    candidates = ~np.isin(draws.original, special_ids)
    rate = draws.selected.sum() / candidates.sum()
    rounding = 0.5 * len(draws.sequences) / candidates.sum()
    assert abs(rate - mask_prob) <= binomial_tolerance(mask_prob, candidates.sum()) + rounding


# Rows of BERT's Table 8 (MASK / SAME / RND as mask, keep, random ratios).
TABLE_8 = [(0.8, 0.1, 0.1), (1.0, 0.0, 0.0), (0.8, 0.2, 0.0), (0.8, 0.0, 0.2), (0.0, 0.2, 0.8),
           (0.0, 1.0, 0.0)]


@pytest.mark.parametrize(("mask_ratio", "keep_ratio", "random_ratio"), TABLE_8)
def test_selected_tokens_split_into_mask_random_keep(synthetic_tokenizer, examples, mask_ratio,
                                                     keep_ratio, random_ratio):
    cfg = ObjectiveConfig(mask_token_ratio=mask_ratio, keep_ratio=keep_ratio,
                          random_token_ratio=random_ratio)
    draws = draw_masks(synthetic_tokenizer, examples, cfg)
    specials = Specials.of(synthetic_tokenizer)
    special_ids = sorted(specials.all)
    selected = draws.selected
    original, corrupted = draws.original[selected], draws.corrupted[selected]
    is_mask = corrupted == specials.mask
    is_random = ~is_mask & (corrupted != original)
    # A random token equals the original one time in |pool|; that case reads as "kept".
    pool = len(synthetic_tokenizer) - len(special_ids)
    expected = {"mask": (mask_ratio, is_mask.mean()),
                "random": (random_ratio * (1 - 1 / pool), is_random.mean()),
                "keep": (keep_ratio + random_ratio / pool, (corrupted == original).mean())}
    for name, (want, got) in expected.items():
        if want in (0.0, 1.0):
            assert got == want, name
        else:
            assert abs(got - want) <= binomial_tolerance(want, selected.sum()), name
    assert not np.isin(corrupted[is_random], special_ids).any()
    if random_ratio:  # replacements are drawn across the vocabulary, not from a few ids
        assert len(np.unique(corrupted[is_random])) > 0.5 * pool


def test_special_tokens_are_never_selected_or_changed_and_labels_hold_originals(
        synthetic_tokenizer, examples):
    draws = draw_masks(synthetic_tokenizer, examples, ObjectiveConfig(mask_prob=0.4))
    specials = Specials.of(synthetic_tokenizer)
    is_special = np.isin(draws.original, sorted(specials.all))
    assert {specials.cls, specials.sep} <= set(draws.original[is_special].tolist())
    assert not draws.selected[is_special].any()
    assert np.array_equal(draws.corrupted[is_special], draws.original[is_special])
    selected = draws.selected
    assert np.array_equal(draws.labels[selected], draws.original[selected])
    assert (draws.labels[~selected] == IGNORE).all()
    assert np.array_equal(draws.corrupted[~selected], draws.original[~selected])  # untouched


def test_pad_tokens_are_never_selected_or_changed(synthetic_tokenizer, examples):
    """[PAD] inside an input (not padding) is a special token like the others."""
    specials = Specials.of(synthetic_tokenizer)
    spec = MaskingSpec.build(ObjectiveConfig(mask_prob=0.4, mask_token_ratio=0.0,
                                             random_token_ratio=1.0, keep_ratio=0.0),
                             synthetic_tokenizer, SEED)
    rng = np.random.default_rng(SEED)
    for example in examples[:200]:
        ids = example["input_ids"].astype(np.int64).copy()
        ids[rng.random(len(ids)) < 0.2] = specials.pad
        corrupted, labels = compute_mask(ids, example["word_starts"], spec, rng)
        is_special = np.isin(ids, sorted(specials.all))
        assert (labels[is_special] == IGNORE).all()
        assert np.array_equal(corrupted[is_special], ids[is_special])
        assert not np.isin(corrupted[~is_special], sorted(specials.all)).any()
        assert (labels[~is_special] != IGNORE).sum() >= 1


def test_mask_with_unk_puts_unk_where_mask_would_go(synthetic_tokenizer, examples):
    draws = draw_masks(synthetic_tokenizer, examples, ObjectiveConfig(mask_with="unk"))
    specials = Specials.of(synthetic_tokenizer)
    assert not (draws.original == specials.unk).any()  # so every [UNK] below is a mask
    assert not (draws.corrupted == specials.mask).any()
    is_unk = draws.corrupted == specials.unk
    assert not is_unk[~draws.selected].any()
    share = is_unk[draws.selected].mean()
    assert abs(share - 0.8) <= binomial_tolerance(0.8, draws.selected.sum())


# ----------------------------------------------------------------------------- whole words


@pytest.mark.parametrize(("tokenizer_fixture", "family"),
                         [("synthetic_tokenizer", "bert"), ("bpe_tokenizer", "roberta")])
def test_whole_word_masking_selects_entire_words(request, tokenizer_fixture, family):
    tokenizer = request.getfixturevalue(tokenizer_fixture)
    # Short segment pairs: truncation cuts into words too, which must still mask whole.
    rare = list(build_examples(rare_word_documents(1000), tokenizer, "segment_pair", 64, None,
                               SEED))
    cfg = ObjectiveConfig(whole_word=True)
    draws = draw_masks(tokenizer, rare, cfg, draws=2, family=family)
    special_ids = sorted(tokenizer.all_special_ids)
    multi_token_words = selected_multi_token_words = words = 0
    for original, _, labels, starts in draws.sequences:
        selected = labels != IGNORE
        word = np.cumsum(starts) - 1  # (seq,) word number of every token
        sizes = np.bincount(word)
        words += len(sizes)
        multi_token_words += int((sizes > 1).sum())
        for w in np.unique(word[selected]):
            assert selected[word == w].all(), "a word is only partly masked"
        selected_multi_token_words += int((sizes[np.unique(word[selected])] > 1).sum())
        candidates = int((~np.isin(original, special_ids)).sum())
        assert 1 <= selected.sum() <= candidates * cfg.mask_prob + 0.5  # never overshoots
    assert multi_token_words / words > 0.05  # the sample has words split into sub-words
    assert selected_multi_token_words > 200
    candidates = ~np.isin(draws.original, special_ids)
    assert not draws.selected[~candidates].any()
    rate = draws.selected.sum() / candidates.sum()
    rounding = 0.5 * len(draws.sequences) / candidates.sum()
    assert abs(rate - cfg.mask_prob) <= binomial_tolerance(cfg.mask_prob, candidates.sum()) \
        + rounding


# ----------------------------------------------------------------------------- epochs


def pretrain_data(tokenizer, masking: str, dupe_factor: int, streaming: bool = False,
                  input_format: str = "segment_pair"):
    cfg = DataConfig(num_sentences=600, eval_docs=5, streaming=streaming, shuffle_buffer=40)
    model = ModelConfig(masking=masking, dupe_factor=dupe_factor, input_format=input_format)
    # the three parts of a pretraining config PretrainData reads
    config = SimpleNamespace(data=cfg, model=model, seed=SEED)
    return PretrainData(build_corpus(cfg, data_dir()), tokenizer, config, None)


def epoch_masks(data: PretrainData, collate, epoch: int) -> dict[int, list[bytes]]:
    """Every mask drawn in one epoch, by example id (sorted per id: copies are unordered)."""
    stream = takewhile(lambda item: item[1].epoch == epoch, data.iter_train(Cursor(epoch, 0)))
    masks = defaultdict(list)
    for example, _ in stream:
        batch = collate([example])
        masks[example["id"]].append(batch["input_ids"].numpy().tobytes()
                                    + batch["labels"].numpy().tobytes())
    return {key: sorted(value) for key, value in masks.items()}


@pytest.fixture(scope="module")
def collate(synthetic_tokenizer):
    return OBJECTIVES["mlm"](ObjectiveConfig(), synthetic_tokenizer, "bert", SEED).collate


def test_static_masks_repeat_every_epoch(synthetic_tokenizer, collate):
    data = pretrain_data(synthetic_tokenizer, "static", 1)
    first, second = epoch_masks(data, collate, 0), epoch_masks(data, collate, 1)
    assert len(first) >= 100
    assert all(len(masks) == 1 for masks in first.values())
    assert first == second


def test_dynamic_masks_change_every_epoch(synthetic_tokenizer, collate):
    data = pretrain_data(synthetic_tokenizer, "dynamic", 1)
    first, second = epoch_masks(data, collate, 0), epoch_masks(data, collate, 1)
    assert first.keys() == second.keys() and len(first) >= 100
    assert all(len(masks) == 1 for masks in first.values())
    changed = sum(first[i] != second[i] for i in first)
    assert changed >= 0.95 * len(first)


def test_static_dupe_factor_gives_distinct_copies_that_repeat(synthetic_tokenizer, collate):
    # packed sequences: the copies are one example (pair formats rebuild theirs, below)
    data = pretrain_data(synthetic_tokenizer, "static", 3, input_format="doc_sentences")
    first, second = epoch_masks(data, collate, 0), epoch_masks(data, collate, 1)
    assert len(first) >= 50  # 77 documents
    assert all(len(masks) == 3 for masks in first.values())
    distinct = sum(len(set(masks)) == 3 for masks in first.values())
    assert distinct >= 0.95 * len(first)  # a copy may coincide only on a very short example
    assert first == second


def copies_of(data: PretrainData) -> dict[int, list[dict]]:
    """One epoch's examples by copy, in id order."""
    stream = takewhile(lambda item: item[1].epoch == 0, data.iter_train(Cursor()))
    copies = defaultdict(list)
    for example, _ in stream:
        copies[example["mask_key"][1]].append(example)
    return {copy: sorted(examples, key=lambda e: e["id"]) for copy, examples in copies.items()}


@pytest.mark.parametrize("streaming", [False, True])
def test_static_copies_rebuild_the_sentence_pairs(synthetic_tokenizer, streaming):
    """BERT's create_pretraining_data.py builds its instances dupe_factor times: each copy has
    its own segment pairs and random next segments, not only its own masks. Copy 0 is the
    single build (dupe_factor 1), so a run with one copy is unchanged."""
    copies = copies_of(pretrain_data(synthetic_tokenizer, "static", 2, streaming))
    single = copies_of(pretrain_data(synthetic_tokenizer, "static", 1, streaming))[0]
    assert [e["input_ids"].tobytes() for e in copies[0]] == \
        [e["input_ids"].tobytes() for e in single]
    pairs = [{e["input_ids"].tobytes() for e in copies[copy]} for copy in (0, 1)]
    shared = len(pairs[0] & pairs[1]) / len(pairs[1])
    assert len(copies[1]) >= 100 and shared < 0.5, shared
    for copy in (0, 1):  # each copy's NSP labels are a fair coin
        labels = np.array([e["sentence_label"] for e in copies[copy]])
        assert abs(labels.mean() - 0.5) <= binomial_tolerance(0.5, len(labels))


@pytest.mark.parametrize("streaming", [False, True])
def test_resumed_stream_continues_exactly(synthetic_tokenizer, collate, streaming):
    data = pretrain_data(synthetic_tokenizer, "dynamic", 2, streaming=streaming)
    full = list(islice(data.iter_train(Cursor()), 700))  # more than one epoch
    epoch_size = sum(cursor.epoch == 0 for _, cursor in full)
    assert 100 < epoch_size < 650
    for stop in (1, epoch_size // 3, epoch_size - 1, epoch_size, epoch_size + 17):
        resumed = islice(data.iter_train(full[stop - 1][1]), len(full) - stop)
        got = [(e["id"], e["mask_key"], cursor) for e, cursor in resumed]
        want = [(e["id"], e["mask_key"], cursor) for e, cursor in full[stop:]]
        assert got == want
    tail = [e for e, _ in full[epoch_size // 3: epoch_size // 3 + 16]]
    resumed = [e for e, _ in islice(data.iter_train(full[epoch_size // 3 - 1][1]), 16)]
    for key, value in collate(tail).items():
        assert torch.equal(value, collate(resumed)[key])


def test_pad_batch_is_deterministic(synthetic_tokenizer, examples, collate):
    batch = [{**e, "mask_key": (e["id"], 0)} for e in examples[:32]]
    first, again = collate(batch), collate(batch)
    rebuilt = OBJECTIVES["mlm"](ObjectiveConfig(), synthetic_tokenizer, "bert", SEED).collate(batch)
    other_seed = OBJECTIVES["mlm"](ObjectiveConfig(), synthetic_tokenizer, "bert", SEED + 1)
    assert first.keys() == again.keys() == rebuilt.keys()
    for key in first:
        assert torch.equal(first[key], again[key]) and torch.equal(first[key], rebuilt[key])
    assert not torch.equal(first["labels"], other_seed.collate(batch)["labels"])


# ----------------------------------------------------------------------------- config checks


@pytest.mark.parametrize("overrides", [
    {"mask_prob": 0.0}, {"mask_prob": 1.0}, {"mask_prob": 1.5}, {"mask_prob": -0.1},
    {"mask_token_ratio": 0.7, "random_token_ratio": 0.1, "keep_ratio": 0.1},  # sums to 0.9
    {"mask_token_ratio": 0.8, "random_token_ratio": 0.2, "keep_ratio": 0.1},  # sums to 1.1
    {"mask_token_ratio": 1.1, "random_token_ratio": -0.1, "keep_ratio": 0.0},  # negative
    {"mask_with": "pad"},
])
def test_bad_masking_config_raises_user_error(overrides):
    key = next(iter(overrides))
    with pytest.raises(UserError, match=f"objective.{key}"):
        ObjectiveConfig(**overrides)


@pytest.mark.parametrize(("mask_ratio", "keep_ratio", "random_ratio"), TABLE_8)
def test_table_8_rows_are_valid_configs(mask_ratio, keep_ratio, random_ratio):
    ObjectiveConfig(mask_token_ratio=mask_ratio, keep_ratio=keep_ratio,
                    random_token_ratio=random_ratio)


def test_electra_masks_as_its_official_code(synthetic_tokenizer, examples):
    """`model=electra`'s objective masks as google-research/electra's pretrain_helpers.mask:
    of the selected tokens 85% become [MASK] and 15% keep the original; none is random. With
    [MASK] everywhere the generator sat on the unigram plateau for the whole sanity budget."""
    cfg = load_pretrain_config(compose_config("pretrain", ["model=electra"])).objective
    draws = draw_masks(synthetic_tokenizer, examples, cfg)
    selected = draws.selected
    original, corrupted = draws.original[selected], draws.corrupted[selected]
    is_mask = corrupted == Specials.of(synthetic_tokenizer).mask
    assert abs(is_mask.mean() - 0.85) <= binomial_tolerance(0.85, selected.sum())
    assert np.array_equal(~is_mask, corrupted == original)  # the rest is the original token


def test_the_mlm_floor_is_the_most_frequent_masked_targets_share(synthetic_tokenizer, examples):
    """eval/mlm_majority_accuracy (training/evaluate.HeldOut.majority_floor): the share of the
    held-out masked targets equal to their most frequent one, counted over every batch,
    whatever the batch size; the count here is a Counter over the targets one by one."""
    from collections import Counter

    from bertology.config.groups import TrainerConfig
    from bertology.training.evaluate import HeldOut

    cfg = ObjectiveConfig(name="mlm")
    objective = OBJECTIVES["mlm"](cfg, synthetic_tokenizer, "bert", SEED)
    held = [{**e, "mask_key": (e["id"], 0)} for e in examples[:40]]
    targets = Counter()
    for example in held:
        labels = objective.collate([example])["labels"]
        targets.update(labels[labels != IGNORE].tolist())
    expected = max(targets.values()) / sum(targets.values())
    floors = {size: HeldOut(objective, None, TrainerConfig(batch_size=size), None)
              .majority_floor(held) for size in (3, 16)}
    assert floors[3] == pytest.approx(expected, abs=1e-12)
    assert floors[16] == pytest.approx(expected, abs=1e-12)
    assert 0.0 < expected < 0.5  # the synthetic corpus's most frequent token is no majority
