"""Head importance: the gate gradient is the derivative a finite difference measures, the
scores are normalised as Michel et al. do, attention confidence / entropy match a head whose
attention is uniform by construction, and a head that does nothing scores 0 under ablation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from transformers import AutoModelForSequenceClassification, BertConfig

from bertology.errors import UserError
from bertology.pruning.heads import HeadGates, build_gates, encoder_layers, prune_heads
from bertology.pruning.importance import (
    compute_ablation_importance,
    compute_entropy_importance,
    compute_gate_gradients,
    compute_gradient_importance,
    compute_max_weight,
    compute_random_importance,
    split_examples,
)

HEADS = 4


def tiny_model(dtype=torch.float32, attn_implementation="sdpa"):
    torch.manual_seed(0)
    config = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=HEADS,
                        intermediate_size=64, vocab_size=100, num_labels=2,
                        initializer_range=0.2)  # larger weights: heads matter visibly
    model = AutoModelForSequenceClassification.from_config(
        config, attn_implementation=attn_implementation)
    return model.to(dtype).eval()


def make_batches(count: int = 2) -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    batches = []
    for _ in range(count):
        ids = torch.randint(5, 100, (3, 7), generator=generator)
        mask = torch.ones_like(ids)
        mask[1, 4:] = 0
        labels = torch.randint(0, 2, (3,), generator=generator)
        batches.append({"input_ids": ids, "attention_mask": mask, "labels": labels})
    return batches


def loss_fn(model, batch):
    return model(**batch).loss


def accuracy(model, batch):
    predictions = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    return float((predictions.logits.argmax(-1) == batch["labels"]).float().mean())


def negative_loss(model, batch):
    return -float(model(**batch).loss)


def gated_loss(model, batch, gates):
    with torch.no_grad(), HeadGates(model, gates):
        return float(loss_fn(model, batch))


@pytest.mark.parametrize("start", ["ones", "mixed"])
def test_gate_gradient_matches_finite_differences(start):
    model = tiny_model(torch.float64)
    batch = make_batches(1)[0]
    gates = build_gates(model).double()
    if start == "mixed":  # a partly masked model, as in iterative pruning
        gates[0, 1] = 0.0
        gates[1, 2] = 0.5
    grad = compute_gate_gradients(model, batch, loss_fn, gates)
    eps = 1e-6
    for layer in range(2):
        for head in range(HEADS):
            up, down = gates.clone(), gates.clone()
            up[layer, head] += eps
            down[layer, head] -= eps
            estimate = (gated_loss(model, batch, up) - gated_loss(model, batch, down)) / (2 * eps)
            assert grad[layer, head].item() == pytest.approx(estimate, rel=1e-5, abs=1e-9)
    assert grad.abs().sum() > 0


def one_example(batch: dict, i: int) -> dict:
    """Example i alone, cut to its real tokens (an independent slicing of the batch)."""
    n = int(batch["attention_mask"][i].sum())
    return {"input_ids": batch["input_ids"][i: i + 1, :n],
            "attention_mask": batch["attention_mask"][i: i + 1, :n],
            "labels": batch["labels"][i: i + 1]}


def test_gradient_importance_is_the_mean_absolute_gradient_per_example():
    """Michel et al.'s E_x |∂L(x)/∂ξ|: the absolute value of each example's own gradient."""
    model = tiny_model()
    batches = make_batches(3)
    per_example = [compute_gate_gradients(model, one_example(b, i), loss_fn).numpy()
                   for b in batches for i in range(len(b["labels"]))]
    expected = np.mean(np.abs(per_example), axis=0)
    raw = compute_gradient_importance(model, batches, loss_fn, normalize=False)
    np.testing.assert_allclose(raw, expected, rtol=1e-5)
    # per batch, examples whose gradients disagree in sign cancel: a smaller, other score
    per_batch = np.mean([compute_gate_gradients(model, b, loss_fn).abs().numpy()
                         for b in batches], axis=0)
    assert np.all(per_batch <= raw + 1e-7) and not np.allclose(per_batch, raw, rtol=1e-3)
    normalized = compute_gradient_importance(model, batches, loss_fn)
    np.testing.assert_allclose(np.linalg.norm(normalized, axis=1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(normalized, raw / np.linalg.norm(raw, axis=1, keepdims=True),
                               rtol=1e-6)


def test_importance_restores_the_model():
    model = tiny_model()
    model.train()
    compute_gradient_importance(model, make_batches(1), loss_fn)
    compute_entropy_importance(model, make_batches(1))
    assert model.training
    assert model.config._attn_implementation == "sdpa"
    assert all(p.grad is None for p in model.parameters())
    assert not any(layer.attention.output.dense._forward_pre_hooks
                   for layer in encoder_layers(model))


def test_ablation_of_a_head_gated_off_already_is_zero():
    model = tiny_model()
    gates = build_gates(model)
    gates[1, 2] = 0.0
    scores = compute_ablation_importance(model, make_batches(), negative_loss, gates)
    assert scores[1, 2] == 0.0
    assert np.count_nonzero(scores) == 2 * HEADS - 1


def test_ablation_of_a_head_without_values_is_zero():
    """A head whose values are zero outputs nothing: gating it off loses nothing."""
    model = tiny_model()
    value = encoder_layers(model)[0].attention.self.value
    with torch.no_grad():
        value.weight[8:16] = 0.0
        value.bias[8:16] = 0.0
    scores = compute_ablation_importance(model, make_batches(), negative_loss)
    assert scores[0, 1] == pytest.approx(0.0, abs=1e-7)
    assert np.abs(scores).max() > 1e-4
    assert compute_ablation_importance(model, make_batches(), accuracy).shape == (2, HEADS)


def uniform_head(model, layer: int, head: int) -> None:
    """Zero query rows: every score is 0, so the head attends uniformly to the real tokens."""
    query = encoder_layers(model)[layer].attention.self.query
    with torch.no_grad():
        query.weight[head * 8:(head + 1) * 8] = 0.0
        query.bias[head * 8:(head + 1) * 8] = 0.0


def test_attention_scores_of_a_uniform_head():
    model = tiny_model()
    uniform_head(model, 1, 3)
    batches = make_batches()
    lengths = torch.cat([b["attention_mask"].sum(-1) for b in batches]).double()  # real tokens
    # every query token of a sentence of n real tokens has max weight 1/n and entropy log n
    confidence = float((lengths * (1 / lengths)).sum() / lengths.sum())
    entropy = float((lengths * torch.log(lengths)).sum() / lengths.sum())
    scores = compute_entropy_importance(model, batches)
    assert scores[1, 3] == pytest.approx(confidence, rel=1e-6)
    assert np.all((scores > 1 / 7 - 1e-9) & (scores <= 1.0))
    negative_entropy = compute_entropy_importance(model, batches, score="entropy")
    assert negative_entropy[1, 3] == pytest.approx(-entropy, rel=1e-6)
    assert np.all(negative_entropy <= 0) and np.all(negative_entropy >= -math.log(7) - 1e-9)


def test_max_weight_leaves_out_the_end_of_sentence_key():
    weights = torch.tensor([[[[0.1, 0.2, 0.7], [0.5, 0.3, 0.2]]]], dtype=torch.float64)
    is_end = torch.tensor([[False, False, True]])
    assert compute_max_weight(weights, is_end).tolist() == [[[0.2, 0.5]]]


def test_confidence_matches_the_attention_maps_without_the_end_token():
    """Voita et al.'s confidence from output_attentions by hand: per real query token, the
    largest weight on any key that is not the end-of-sentence token, averaged."""
    model = tiny_model(attn_implementation="eager")
    batches = make_batches(2)
    end = int(batches[0]["input_ids"][0, 2])  # a token that occurs: call it [SEP]
    total, tokens = np.zeros((2, HEADS)), 0
    for batch in batches:
        with torch.no_grad():
            maps = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                         output_attentions=True).attentions
        for b in range(len(batch["input_ids"])):
            n = int(batch["attention_mask"][b].sum())
            keys = [k for k in range(n) if int(batch["input_ids"][b, k]) != end]
            for layer, weights in enumerate(maps):  # (batch, heads, q, k)
                total[layer] += weights[b, :, :n][:, :, keys].amax(-1).sum(-1).numpy()
            tokens += n
    scores = compute_entropy_importance(model, batches, end_token_id=end)
    np.testing.assert_allclose(scores, total / tokens, rtol=1e-5)
    assert not np.allclose(scores, compute_entropy_importance(model, batches), rtol=1e-3)


def test_removed_heads_are_nan():
    model = tiny_model()
    prune_heads(model, {0: [1], 1: list(range(HEADS))})
    batches = make_batches(1)
    for scores in (compute_gradient_importance(model, batches, loss_fn),
                   compute_entropy_importance(model, batches),
                   compute_ablation_importance(model, batches, negative_loss)):
        assert scores.shape == (2, HEADS)
        assert np.isnan(scores[0, 1]) and np.isnan(scores[1]).all()
        assert np.isfinite(scores[0, [0, 2, 3]]).all()


def test_random_importance_is_reproducible():
    first = compute_random_importance((2, HEADS), seed=3)
    assert first.shape == (2, HEADS)
    np.testing.assert_array_equal(first, compute_random_importance((2, HEADS), seed=3))
    assert not np.array_equal(first, compute_random_importance((2, HEADS), seed=4))


def test_unknown_attention_score_is_a_user_error():
    with pytest.raises(UserError, match="valid: confidence, entropy"):
        compute_entropy_importance(tiny_model(), make_batches(1), score="kurtosis")


def test_a_tagging_example_with_no_scored_token_is_left_out():
    """Its loss is 0/0: kept, it would turn every head's score into NaN."""
    batch = {"input_ids": torch.tensor([[1, 5, 6, 2], [1, 2, 0, 0]]),
             "attention_mask": torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]]),
             "labels": torch.tensor([[-100, 3, 4, -100], [-100, -100, -100, -100]])}
    examples = list(split_examples(batch))
    assert len(examples) == 1 and examples[0]["labels"].tolist() == [[-100, 3, 4, -100]]
    classification = {**batch, "labels": torch.tensor([0, 1])}
    assert [e["input_ids"].shape[1] for e in split_examples(classification)] == [4, 2]
