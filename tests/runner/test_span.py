"""Tests for SpanBERT (Joshi et al., 2020): geometric span masking of whole words (§3.1), the
span-boundary targets and head (§3.2), saving the head beside a model plain transformers loads,
the FLOP count, config checks, and an end-to-end run whose MLM and SBO losses fall.

Rates are compared with a tolerance of Z binomial standard errors, as in test_masking.py.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import random
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import compose_config
from safetensors.torch import load_file, load_model
from scipy.stats import chisquare
from torch.utils.flop_counter import FlopCounterMode
from transformers import AutoModelForMaskedLM

from bertology.config.groups import DataConfig, ModelConfig, ObjectiveConfig, SizeConfig
from bertology.config.pretrain_config import load_pretrain_config
from bertology.data.corpora import build_corpus
from bertology.data.formats import Specials, build_examples, count_tokens
from bertology.errors import UserError
from bertology.models.build import build_model, load_checkpoint_family
from bertology.models.spanbert import SpanBoundaryHead, load_sbo_head
from bertology.objectives import OBJECTIVES, span
from bertology.objectives.mlm import IGNORE, MaskingSpec
from bertology.objectives.span import compute_length_pmf, compute_runs, compute_span_mask
from bertology.pipelines import pretrain
from bertology.run.tracking import without_wall_clock
from bertology.training.checkpoint import WEIGHTS

SEED = 11
Z = 5.0
DRAWS = 3
SPAN = ObjectiveConfig(name="span_sbo")
SMOKE = ["model=spanbert", "logger=none", "trainer=smoke", "data.num_sentences=800",
         "data.eval_docs=20"]


def binomial_tolerance(p: float, n: int) -> float:
    return Z * float(np.sqrt(p * (1 - p) / n))


def long_word_documents(num_sentences: int) -> list[list[str]]:
    """Synthetic documents with a made-up long word in every sentence ("chefpianoization"),
    which WordPiece splits into several sub-words: spans must take such words whole."""
    cfg = DataConfig(num_sentences=num_sentences, sentences_per_doc=[3, 8])
    documents = list(build_corpus(cfg, Path(os.environ["BERTOLOGY_DATA_DIR"])).iter_documents())
    words = sorted({w.strip(".,").lower() for doc in documents for s in doc for w in s.split()})
    rng = random.Random(SEED)
    out = []
    for document in documents:
        sentences = []
        for sentence in document:
            tokens = sentence.split()
            rare = "".join(rng.sample(words, 2)) + rng.choice(["ness", "ization", "ologist"])
            tokens.insert(rng.randrange(len(tokens)), rare)
            sentences.append(" ".join(tokens))
        out.append(sentences)
    return out


@pytest.fixture(scope="module")
def examples(synthetic_tokenizer) -> list[dict]:
    """DOC-SENTENCES sequences ([CLS] sentences [SEP]), SpanBERT's input."""
    return list(build_examples(long_word_documents(1500), synthetic_tokenizer, "doc_sentences",
                               128, None, SEED))


@pytest.fixture(scope="module")
def draws(synthetic_tokenizer, examples):
    """Every example masked DRAWS times through the objective's collate, as training does, with
    the spans drawn (recomputed from the same seeded generator) alongside."""
    objective = OBJECTIVES["span_sbo"](SPAN, synthetic_tokenizer, "spanbert", SEED)
    pmf = compute_length_pmf(SPAN.span_geometric_p, SPAN.max_span_words)
    spec = MaskingSpec.build(SPAN, synthetic_tokenizer, SEED)
    keyed = [{**e, "mask_key": (e["id"], d)} for d in range(DRAWS) for e in examples]
    out = []
    for start in range(0, len(keyed), 128):
        chunk = keyed[start: start + 128]
        batch = objective.collate(chunk)
        for row, example in enumerate(chunk):
            n = len(example["input_ids"])
            assert (batch["attention_mask"][row, n:] == 0).all()
            assert (batch["labels"][row, n:] == IGNORE).all()
            arrays = {k: v[row, :n].numpy() for k, v in batch.items()}
            rng = np.random.default_rng([SEED, *example["mask_key"]])
            direct = compute_span_mask(example["input_ids"], example["word_starts"], spec,
                                       pmf, rng)
            for key, values in direct.arrays.items():  # collate = the per-sequence function
                assert np.array_equal(values, arrays[key]), key
            out.append((example["input_ids"].astype(np.int64), arrays, direct))
    return out


# ----------------------------------------------------------------------------- span lengths


def test_length_pmf_is_geometric_clipped_at_ten_with_mean_3_8():
    pmf = compute_length_pmf(0.2, 10)
    assert pmf.shape == (10,) and pmf.sum() == pytest.approx(1.0)
    assert np.allclose(pmf[1:] / pmf[:-1], 0.8)  # geometric
    assert float(np.arange(1, 11) @ pmf) == pytest.approx(3.8, abs=0.01)  # Joshi et al. §3.1


def test_drawn_span_lengths_follow_the_clipped_geometric(draws):
    lengths = np.array([length for *_, direct in draws for _, _, length in direct.spans])
    pmf = compute_length_pmf(0.2, 10)
    assert len(lengths) > 3000 and lengths.min() >= 1 and lengths.max() <= 10
    counts = np.bincount(lengths, minlength=11)[1:]
    for k, p in enumerate(pmf):
        assert abs(counts[k] / len(lengths) - p) <= binomial_tolerance(p, len(lengths)), k + 1
    values = np.arange(1, 11)
    sd = float(np.sqrt(pmf @ (values - values @ pmf) ** 2))
    assert abs(lengths.mean() - 3.8) <= 0.01 + Z * sd / np.sqrt(len(lengths))


def test_spans_take_their_drawn_length_unless_blocked(draws):
    """A span is shorter than drawn only where the budget ran out (the last span), or the next
    word is special, already masked, or past the end."""
    shorter = 0
    for *_, direct in draws:
        words = direct.words
        taken = ~words.maskable
        for index, (first, count, length) in enumerate(direct.spans):
            assert 1 <= count <= length and not taken[first: first + count].any()
            taken[first: first + count] = True
            end = first + count
            if count < length:
                shorter += 1
                last = index == len(direct.spans) - 1
                assert last or end == len(taken) or taken[end]
    assert shorter > 0


# ----------------------------------------------------------------------------- what is masked


def test_spans_are_whole_words_and_never_special(synthetic_tokenizer, draws):
    special_ids = sorted(synthetic_tokenizer.all_special_ids)
    multi_token_spans = 0
    for original, arrays, direct in draws:
        masked = arrays["labels"] != IGNORE
        assert np.array_equal(arrays["labels"][masked], original[masked])
        assert not masked[np.isin(original, special_ids)].any()
        word = direct.words.of_token
        for w in np.unique(word[masked]):
            assert masked[word == w].all(), "a word is only partly masked"
        starts, ends = compute_runs(masked)
        assert np.isin(starts, direct.words.first).all()  # a span begins a word
        assert np.isin(ends + 1, direct.words.first).all()  # and the token after it another
        sizes = direct.words.size[word]  # (seq,) size of each token's word
        multi_token_spans += sum(int((sizes[s: e + 1] > 1).any()) for s, e in zip(starts, ends))
    assert multi_token_spans > 500  # the sample has spans over words split into sub-words


def test_coverage_is_mask_prob_of_non_special_tokens(synthetic_tokenizer, draws):
    """The exact per-sequence budget of mlm.py, met to the nearest whole word: off by at most
    half the longest word (or one word, when the first word alone overshoots)."""
    special_ids = sorted(synthetic_tokenizer.all_special_ids)
    candidates = covered = off = 0
    for original, arrays, direct in draws:
        maskable = int((~np.isin(original, special_ids)).sum())
        budget = max(1, round(maskable * SPAN.mask_prob))
        count = int((arrays["labels"] != IGNORE).sum())
        longest = int(direct.words.size[direct.words.maskable].max())
        assert count >= 1
        assert abs(count - budget) <= longest / 2 or direct.spans[0][1] == 1 == len(direct.spans)
        candidates, covered, off = candidates + maskable, covered + count, off + (count != budget)
    assert off > 0.1 * len(draws)  # the sample has budgets whole words cannot meet exactly
    assert abs(covered / candidates - SPAN.mask_prob) < 0.003


def test_replacement_is_decided_per_span(synthetic_tokenizer, draws):
    """All tokens of a (merged) span share [MASK] / random / unchanged; shares 0.8/0.1/0.1."""
    mask_id = Specials.of(synthetic_tokenizer).mask
    kinds = {"mask": 0, "random": 0, "keep": 0}
    for original, arrays, _ in draws:
        ids = arrays["input_ids"]
        for start, end in zip(*compute_runs(arrays["labels"] != IGNORE)):
            span, source = ids[start: end + 1], original[start: end + 1]
            if (span == mask_id).all():
                kinds["mask"] += 1
            elif np.array_equal(span, source):
                kinds["keep"] += 1
            else:
                assert not (span == mask_id).any(), "a span mixes [MASK] and other tokens"
                kinds["random"] += 1
    spans = sum(kinds.values())
    for kind, share in (("mask", 0.8), ("random", 0.1), ("keep", 0.1)):
        assert abs(kinds[kind] / spans - share) <= binomial_tolerance(share, spans), kinds


# ----------------------------------------------------------------------------- SBO targets


def test_boundaries_are_the_tokens_just_outside_each_span(draws):
    for original, arrays, _ in draws:
        masked = arrays["labels"] != IGNORE
        assert not arrays["sbo_position"][~masked].any()
        for start, end in zip(*compute_runs(masked)):
            inside = slice(start, end + 1)
            assert (arrays["sbo_left"][inside] == start - 1).all()
            assert (arrays["sbo_right"][inside] == end + 1).all()
            assert start >= 1 and end + 1 < len(original)
            assert not masked[start - 1] and not masked[end + 1]  # never inside a span
            assert arrays["sbo_position"][inside].tolist() == list(range(1, end - start + 2))


def test_masks_are_a_function_of_seed_and_mask_key(synthetic_tokenizer, examples):
    batch = [{**e, "mask_key": (e["id"], 0)} for e in examples[:32]]
    objective = OBJECTIVES["span_sbo"](SPAN, synthetic_tokenizer, "spanbert", SEED)
    first, again = objective.collate(batch), objective.collate(batch)
    assert all(torch.equal(first[k], again[k]) for k in first)
    next_epoch = objective.collate([{**e, "mask_key": (e["id"], 0, 1)} for e in examples[:32]])
    assert not torch.equal(first["labels"], next_epoch["labels"])


# ----------------------------------------------------------------------------- the head


def test_head_clips_positions_past_its_last_embedding():
    head = SpanBoundaryHead(hidden_size=16, vocab_size=50, position_embeddings=4)
    left, right, embeddings = torch.randn(3, 16), torch.randn(3, 16), torch.randn(50, 16)
    logits = head(left, right, torch.tensor([4, 5, 30]), embeddings)
    assert logits.shape == (3, 50)
    same = head(left, right, torch.tensor([4, 4, 4]), embeddings)
    assert torch.allclose(logits, same)
    assert not torch.allclose(head(left, right, torch.tensor([1, 1, 1]), embeddings), same)


def test_sbo_loss_through_static_slots_is_the_boolean_mask_loss(synthetic_tokenizer):
    """sbo_step gathers through the collate's fixed slots (mlm.masked_slots, no graph break);
    its loss and counts are those of the boolean-mask indexing it replaced, computed here by
    hand on a hand-built batch: row 0 masks the span 2-3 and the span 5, row 1 the span 1."""
    model = spanbert(synthetic_tokenizer)
    labels = torch.full((2, 8), IGNORE)
    labels[0, [2, 3, 5]] = torch.tensor([11, 12, 13])
    labels[1, 1] = 14
    batch = {"labels": labels, "sbo_left": torch.zeros(2, 8, dtype=torch.long),
             "sbo_right": torch.zeros(2, 8, dtype=torch.long),
             "sbo_position": torch.zeros(2, 8, dtype=torch.long)}
    for row, position, left, right, index in [(0, 2, 1, 4, 1), (0, 3, 1, 4, 2), (0, 5, 4, 6, 1),
                                              (1, 1, 0, 2, 1)]:
        batch["sbo_left"][row, position] = left
        batch["sbo_right"][row, position] = right
        batch["sbo_position"][row, position] = index
    batch["mlm_positions"] = torch.from_numpy(span.mlm.list_positions(labels.numpy(), 5))
    hidden = torch.randn(2, 8, model.config.hidden_size)
    head, embeddings = model.sbo_head, model.get_input_embeddings().weight
    lefts = torch.stack([hidden[0, 1], hidden[0, 1], hidden[0, 4], hidden[1, 0]])  # (4, hidden)
    rights = torch.stack([hidden[0, 4], hidden[0, 4], hidden[0, 6], hidden[1, 2]])
    logits = head(lefts, rights, torch.tensor([1, 2, 1, 1]), embeddings)  # (4, vocab)
    targets = torch.tensor([11, 12, 13, 14])
    expected = torch.nn.functional.cross_entropy(logits, targets).detach()
    model.train()
    loss, logs = span.sbo_step(model, hidden, batch)
    assert float(loss.detach()) == pytest.approx(float(expected), abs=1e-6)
    assert set(logs) == {"sbo_loss"}
    model.eval()
    loss, logs = span.sbo_step(model, hidden, batch)
    correct = logits.argmax(-1) == targets
    assert float(loss.detach()) == pytest.approx(float(expected), abs=1e-6)
    assert int(logs["sbo_count"]) == 4 and int(logs["sbo_correct"]) == int(correct.sum())
    assert logs["seq_sbo_count"].tolist() == [3, 1]
    assert logs["seq_sbo_correct"].tolist() == [float(correct[:3].sum()), float(correct[3])]


def test_collate_lists_every_masked_token_in_static_slots(synthetic_tokenizer, examples):
    objective = OBJECTIVES["span_sbo"](SPAN, synthetic_tokenizer, "spanbert", SEED)
    batch = objective.collate([{**e, "mask_key": (e["id"], 0)} for e in examples[:64]])
    seq = batch["labels"].shape[1]
    assert batch["mlm_positions"].shape == (64, min(seq, max(1, round(seq * 0.15)) + 8))
    for row in range(64):
        masked = torch.nonzero(batch["labels"][row] != IGNORE).flatten().tolist()
        listed = batch["mlm_positions"][row].tolist()
        assert listed == masked + [-1] * (len(listed) - len(masked))


def spanbert(tokenizer, name_or_path=None):
    model = ModelConfig(family="spanbert", name_or_path=name_or_path, masking="dynamic",
                        input_format="doc_sentences", attn_implementation="eager")
    return build_model(model, SizeConfig(hidden_size=64, num_attention_heads=4,
                                         intermediate_size=256), tokenizer, False, SEED)


def test_flop_estimate_matches_counted_matmuls(synthetic_tokenizer, examples):
    model = spanbert(synthetic_tokenizer)
    objective = OBJECTIVES["span_sbo"](SPAN, synthetic_tokenizer, "spanbert", SEED)
    batch = objective.collate([{**e, "mask_key": (e["id"], 0)} for e in examples[:4]])
    batch["attention_mask"][:] = 1  # padded positions are computed too: count them
    del batch["mlm_positions"]  # and the heads' spare slots (ignored targets): run none
    with FlopCounterMode(display=False) as counter:
        loss, _ = objective.loss(model, batch)
        loss.backward()
    assert objective.flops(model, batch) == pytest.approx(counter.get_total_flops(), rel=0.02)


def test_model_dir_loads_in_plain_transformers_and_keeps_the_head(synthetic_tokenizer,
                                                                   tmp_path):
    model = spanbert(synthetic_tokenizer).eval()
    torch.nn.init.normal_(model.sbo_head.bias)  # not the initial zeros: a real round trip
    pretrain.save_models(model, synthetic_tokenizer, tmp_path)  # model/, as a run writes it
    files = {p.name for p in (tmp_path / "model").iterdir()}
    assert {"model.safetensors", "sbo_head.safetensors", "sbo_head.json"} <= files
    assert not [k for k in load_file(tmp_path / "model" / "model.safetensors") if "sbo" in k]
    plain, info = AutoModelForMaskedLM.from_pretrained(
        tmp_path / "model", output_loading_info=True, attn_implementation="eager")
    assert type(plain).__name__ == "BertForMaskedLM"
    assert not info["missing_keys"] and not info["unexpected_keys"]
    inputs = synthetic_tokenizer(["The chef cooks the soup."], return_tensors="pt")
    with torch.no_grad():
        assert torch.equal(plain.eval()(**inputs).logits, model(**inputs).logits)
    continued = spanbert(synthetic_tokenizer, str(tmp_path / "model"))
    saved, restored = model.sbo_head.state_dict(), continued.sbo_head.state_dict()
    assert saved.keys() == restored.keys()
    assert all(torch.equal(saved[k], restored[k]) for k in saved)


def test_a_bert_checkpoint_continues_as_spanbert_with_a_new_head(synthetic_tokenizer, tmp_path):
    model = spanbert(synthetic_tokenizer)
    del model.sbo_head
    model.save_pretrained(tmp_path)  # a plain BertForMaskedLM
    assert load_checkpoint_family(str(tmp_path), "spanbert") == "spanbert"
    assert load_checkpoint_family(str(tmp_path), "bert") == "bert"
    assert load_checkpoint_family(str(tmp_path), "roberta") == "bert"  # the checkpoint decides
    assert isinstance(spanbert(synthetic_tokenizer, str(tmp_path)).sbo_head, SpanBoundaryHead)


# ----------------------------------------------------------------------------- config


@pytest.mark.parametrize("overrides", [
    {"span_geometric_p": 0.0}, {"span_geometric_p": 1.0}, {"max_span_words": 0},
    {"sbo_weight": -0.5},
])
def test_bad_span_config_raises_user_error(overrides):
    key = next(iter(overrides))
    with pytest.raises(UserError, match=f"objective.{key}"):
        ObjectiveConfig(name="span_sbo", **overrides)


# ----------------------------------------------------------------------------- random tokens


def test_token_counts_are_the_corpus_unigram_counts_without_specials(synthetic_tokenizer):
    documents = long_word_documents(300)
    counts = count_tokens(documents, synthetic_tokenizer)
    expected = Counter(token for document in documents for sentence in document
                       for token in synthetic_tokenizer(sentence, add_special_tokens=False)
                       ["input_ids"])
    for special in synthetic_tokenizer.all_special_ids:
        expected.pop(special, None)
    assert {i: int(c) for i, c in enumerate(counts) if c} == dict(expected)
    assert counts.sum() > 1000


@pytest.mark.slow
def test_random_replacements_follow_the_corpus_unigram(synthetic_tokenizer, examples):
    """SpanBERT's code draws its random tokens from the corpus, not uniformly over the
    vocabulary. With every span replaced by random tokens (ratios 0/1/0), the masked positions
    of many collated batches are all draws: a chi-square test against the corpus's counts
    accepts them, and rejects uniform draws."""
    counts = count_tokens(long_word_documents(1500), synthetic_tokenizer)
    shares = counts / counts.sum()
    cfg = ObjectiveConfig(name="span_sbo", random_tokens="unigram", mask_token_ratio=0.0,
                          random_token_ratio=1.0, keep_ratio=0.0)
    draws = []
    for random_tokens, weights in (("unigram", counts), ("uniform", None)):
        config = dataclasses.replace(cfg, random_tokens=random_tokens)
        objective = span.build(config, synthetic_tokenizer, "spanbert", SEED, weights)
        batch = objective.collate([{**e, "mask_key": (e["id"], d)} for d in range(8)
                                   for e in examples])
        draws.append(batch["input_ids"][batch["labels"] != IGNORE].numpy())
    assert len(draws[0]) > 10_000
    frequent = np.flatnonzero(shares * len(draws[0]) >= 5)  # cells of >= 5 expected draws
    for drawn, accepted in zip(draws, (True, False)):
        observed = np.bincount(drawn, minlength=len(counts))
        cells = np.append(observed[frequent], len(drawn) - observed[frequent].sum())
        expected = np.append(shares[frequent], 1 - shares[frequent].sum()) * len(drawn)
        p_value = chisquare(cells, expected).pvalue
        assert (p_value > 1e-4) if accepted else (p_value < 1e-12), p_value
    assert not np.isin(draws[0], synthetic_tokenizer.all_special_ids).any()


def test_unigram_random_tokens_are_spanberts_only():
    cfg = load_pretrain_config(compose_config("pretrain", ["model=spanbert"]))
    assert cfg.objective.random_tokens == "unigram"
    with pytest.raises(UserError, match="objective.random_tokens=unigram is SpanBERT's"):
        ObjectiveConfig(name="mlm", random_tokens="unigram")
    with pytest.raises(UserError, match="objective.random_tokens='zipf' is not an option"):
        ObjectiveConfig(name="span_sbo", random_tokens="zipf")


# ----------------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def span_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("spanbert")
    overrides = ["trainer.max_steps=30", "trainer.log_every=5", "trainer.save_every=30"]
    return out, pretrain.run(compose_config("pretrain", SMOKE + overrides), out)


def test_spanbert_run_learns_mlm_and_sbo(span_run):
    out, metrics = span_run
    for key in ("train/mlm_loss", "train/sbo_loss", "train/flops", "eval/mlm_accuracy",
                "eval/sbo_accuracy", "eval/sbo_loss"):
        assert math.isfinite(metrics[key]), key
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    for key in ("train/mlm_loss", "train/sbo_loss"):
        losses = [r[key] for r in rows if key in r]
        assert len(losses) == 6 and losses[-1] < losses[0] - 0.5, (key, losses)


def test_run_saves_the_trained_head_and_a_plain_masked_lm(span_run, synthetic_tokenizer):
    """model/ equals the last training checkpoint: the head file holds its SBO weights, and
    plain transformers gives the encoder + MLM head's logits."""
    out, _ = span_run
    checkpoint = load_file(out / "checkpoints" / "step_00000030" / WEIGHTS)
    head = load_sbo_head(out / "model")
    for key, value in head.state_dict().items():
        assert torch.equal(value, checkpoint[f"sbo_head.{key}"]), key
    plain = AutoModelForMaskedLM.from_pretrained(out / "model").eval()
    trained = spanbert_like(plain.config, head)
    load_model(trained, str(out / "checkpoints" / "step_00000030" / WEIGHTS))
    inputs = synthetic_tokenizer(["The chef cooks the soup.", "A farmer sings."],
                                 return_tensors="pt", padding=True)
    with torch.no_grad():
        assert torch.equal(plain(**inputs).logits, trained.eval()(**inputs).logits)


@pytest.mark.slow
def test_resumed_run_restores_the_head_and_ends_the_same(tmp_path, caplog):
    """Checkpoints hold the SBO head with the model: a run resumed from step 6 ends exactly
    as the run that went straight through."""
    overrides = SMOKE + ["trainer.max_steps=12", "trainer.save_every=6"]
    (tmp_path / "straight").mkdir()
    straight = pretrain.run(compose_config("pretrain", overrides), tmp_path / "straight")
    shutil.copytree(tmp_path / "straight", tmp_path / "resumed")
    shutil.rmtree(tmp_path / "resumed" / "checkpoints" / "step_00000012")
    with caplog.at_level(logging.INFO, logger="bertology.training.checkpoint"):
        resumed = pretrain.run(compose_config("pretrain", overrides), tmp_path / "resumed")
    assert "step_00000006" in caplog.text  # it continued, rather than starting over
    assert without_wall_clock(straight) == without_wall_clock(resumed)


def spanbert_like(config, head: SpanBoundaryHead):
    """A fresh BertForMaskedLM of the run's shape with an SBO head, to restore a checkpoint."""
    model = AutoModelForMaskedLM.from_config(config)
    model.sbo_head = SpanBoundaryHead(**head.config)
    return model
