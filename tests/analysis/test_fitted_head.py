"""The masked-LM head fitted on a frozen encoder (analysis/fitted_head.py): the encoder's
weights stay bit for bit, the head's change and its loss falls; the masking and the batch are
checked by hand; a checkpoint without a head is refused under head=own and fitted under auto."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import BertConfig, BertForMaskedLM

from bertology.analysis.fitted_head import (
    collate_masked,
    encoder_parameters,
    fit_head,
    head_parameters,
    mask_words,
)
from bertology.config.groups import TaskConfig
from bertology.data.probe_sentences import load_synthetic_sentences


@pytest.fixture(scope="module")
def sentences():
    task = TaskConfig(name="synthetic_agreement", format="synthetic", label_field="agreement",
                      num_sentences=300, eval_fraction=0.2, max_seq_length=64)
    return load_synthetic_sentences(task).train


def small_mlm(vocab: int) -> BertForMaskedLM:
    torch.manual_seed(0)
    return BertForMaskedLM(BertConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=2,
                                      num_attention_heads=2, intermediate_size=64)).eval()


def test_the_head_learns_and_the_encoder_stays_bit_for_bit(synthetic_tokenizer, sentences):
    model = small_mlm(len(synthetic_tokenizer))
    encoder = {k: v.clone() for k, v in model.base_model.state_dict().items()}
    head = [p.detach().clone() for p in head_parameters(model)]
    fit = fit_head(model, synthetic_tokenizer, sentences, seed=0, steps=200)
    assert all(torch.equal(v, model.base_model.state_dict()[k]) for k, v in encoder.items())
    assert any(not torch.equal(a, b) for a, b in zip(head, head_parameters(model)))
    assert fit.last_loss < fit.first_loss - 0.5  # the transform and bias learn the words
    assert all(p.requires_grad for p in model.parameters())  # left as it was found
    # the decoder is tied to the word embeddings: frozen with the encoder, not in the head
    decoder = model.get_output_embeddings().weight
    assert id(decoder) in encoder_parameters(model)
    assert all(p is not decoder for p in head_parameters(model))


def test_a_sentence_gets_its_share_of_one_sub_word_words_masked(synthetic_tokenizer,
                                                                sentences):
    rng = np.random.default_rng(0)
    rows = mask_words(synthetic_tokenizer, sentences[:40], 0.15, 64, rng)
    for (ids, targets), sentence in zip(rows, sentences[:40]):
        original = synthetic_tokenizer(list(sentence.words), is_split_into_words=True)["input_ids"]
        masked = [i for i, t in enumerate(targets) if t != -100]
        assert 1 <= len(masked) <= max(1, round(0.15 * len(sentence.words)))
        assert all(ids[i] == synthetic_tokenizer.mask_token_id and targets[i] == original[i]
                   for i in masked)
        assert all(ids[i] == original[i] for i in range(len(ids)) if i not in masked)
    batch = collate_masked(rows[:2], synthetic_tokenizer.pad_token_id)
    width = max(len(rows[0][0]), len(rows[1][0]))
    assert batch["input_ids"].shape == (2, width)
    assert batch["attention_mask"].sum(dim=1).tolist() == [len(rows[0][0]), len(rows[1][0])]
    assert (batch["labels"] != -100).sum() == sum(t != -100 for _, ts in rows[:2] for t in ts)


def test_the_reset_draws_the_head_afresh_and_leaves_the_encoder(synthetic_tokenizer):
    """transformers marks a loaded head initialised, so its initialiser would leave a
    trained head in place: the reset draws it explicitly."""
    from bertology.analysis.fitted_head import reset_head

    model = small_mlm(len(synthetic_tokenizer))
    transform = model.cls.predictions.transform
    with torch.no_grad():  # a "trained" head: far from any initialisation
        transform.dense.weight.fill_(0.5)
        transform.LayerNorm.weight.fill_(3.0)
        model.cls.predictions.bias.fill_(2.0)
    encoder = {k: v.clone() for k, v in model.base_model.state_dict().items()}
    reset_head(model)
    assert abs(float(transform.dense.weight.std()) - model.config.initializer_range) < 0.005
    assert torch.all(transform.LayerNorm.weight == 1) and torch.all(model.cls.predictions.bias == 0)
    assert all(torch.equal(v, model.base_model.state_dict()[k]) for k, v in encoder.items())
