"""trainer.dropout_masks=bits (training/dropout.py): the masks are Bernoulli(1 - p) with every
16-bit lane of a 64-bit draw unbiased and independent of its neighbours, the expectation is kept,
backward applies the forward's mask, the attention path equals SDPA where nothing is dropped,
the swap leaves the checkpoint's keys alone, and runs made before the key resume under torch's
masks."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import BertConfig, BertForMaskedLM

from bertology.config.groups import TrainerConfig
from bertology.errors import UserError
from bertology.run.resume import compute_changes
from bertology.training.dropout import (
    ATTENTION,
    LEVELS,
    BitsDropout,
    bits_dropout,
    keep_mask,
    restore_sdpa,
    use_bits_dropout,
    uses_bits,
)

CPU = torch.device("cpu")


def within(observed: float, expected: float, count: int, sds: float = 5.0) -> bool:
    """observed share within `sds` binomial standard errors of expected."""
    return abs(observed - expected) < sds * math.sqrt(expected * (1 - expected) / count)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.013])
def test_the_mask_keeps_one_minus_p_in_every_lane_and_the_expectation(p):
    torch.manual_seed(0)
    count = 4_000_000
    keep, scale = keep_mask(torch.Size([count]), p, CPU)
    dropped = round(p * LEVELS) / LEVELS  # p at 1/65536 resolution
    assert abs(dropped - p) <= 0.5 / LEVELS
    assert scale == pytest.approx(1 / (1 - dropped), rel=1e-12)
    lanes = keep.view(-1, 4).double()  # (draws, 4): the four 16-bit lanes of one int64 draw
    for lane in range(4):  # a draw with its top bit fixed would bias lane 3 by a factor of 2
        assert within(lanes[:, lane].mean().item(), 1 - dropped, count // 4)
    # neighbours within a draw and across draws are uncorrelated (|r| < 5 / sqrt(n))
    flat = keep.double()
    for shift in (1, 2, 3, 4):
        r = torch.corrcoef(torch.stack([flat[:-shift], flat[shift:]]))[0, 1].item()
        assert abs(r) < 5 / math.sqrt(count), (shift, r)
    ones = bits_dropout(torch.ones(count), p)
    assert abs(ones.mean().item() - 1) < 5 * math.sqrt(dropped / (1 - dropped) / count)


def test_backward_applies_the_forward_mask_and_eval_is_the_identity():
    torch.manual_seed(1)
    x = torch.randn(64, 33, requires_grad=True)  # 2,112 elements: not a multiple of 4 draws
    out = bits_dropout(x, 0.3)
    out.backward(torch.full_like(out, 2.0))
    kept = out != 0
    scale = LEVELS / (LEVELS - round(0.3 * LEVELS))
    assert torch.allclose(out[kept], x[kept] * scale)
    assert torch.equal(x.grad, 2.0 * scale * kept)
    assert torch.equal(bits_dropout(x, 0.3, training=False), x)
    assert torch.equal(bits_dropout(x, 1.0), torch.zeros_like(x))
    assert torch.equal(BitsDropout(0.3).eval()(x), x)


def test_the_same_seed_draws_the_same_masks():
    def mask_after(seed: int) -> torch.Tensor:
        torch.manual_seed(seed)  # the loop seeds the generator per step: resume is exact
        return keep_mask(torch.Size([999]), 0.1, CPU)[0]

    assert torch.equal(mask_after(7), mask_after(7))
    assert not torch.equal(mask_after(7), mask_after(8))


def tiny_bert(p: float) -> BertForMaskedLM:
    torch.manual_seed(0)
    config = BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=64, hidden_dropout_prob=p,
                        attention_probs_dropout_prob=p)
    return BertForMaskedLM._from_config(config, attn_implementation="sdpa")


def test_the_attention_path_equals_sdpa_where_nothing_is_dropped():
    """p = 1e-9 rounds to 0 of 65,536: the bits path runs (dropout > 0) and keeps every unit,
    so its math attention under a padding mask must equal SDPA's fused kernel in eval."""
    model = tiny_bert(1e-9)
    ids = torch.randint(5, 120, (3, 11))
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    mask[2, 3:] = 0
    expected = model.eval()(input_ids=ids, attention_mask=mask).logits
    keys = set(model.state_dict())
    assert use_bits_dropout(model) == 7  # embeddings + 3 per layer
    assert model.config._attn_implementation == ATTENTION
    assert set(model.state_dict()) == keys
    got = model.train()(input_ids=ids, attention_mask=mask).logits
    real = mask.bool()
    assert torch.allclose(got[real], expected[real], atol=1e-5)
    restore_sdpa(model)
    assert model.config._attn_implementation == "sdpa"


def test_a_training_forward_drops_what_dropout_should():
    """With p = 0.5 the training forward differs from eval and from another seed's, and the
    loss still has gradients everywhere the model has weights."""
    model = tiny_bert(0.5)
    use_bits_dropout(model)
    ids = torch.randint(5, 120, (2, 9))
    evaluated = model.eval()(input_ids=ids).logits
    model.train()
    torch.manual_seed(3)
    first = model(input_ids=ids).logits
    torch.manual_seed(4)
    second = model(input_ids=ids).logits
    assert not torch.allclose(first, evaluated) and not torch.allclose(first, second)
    first.sum().backward()
    assert all(p.grad is not None for n, p in model.named_parameters()
               if p.requires_grad and "token_type" not in n and "pooler" not in n)


def test_auto_is_bits_on_cpu_only_and_a_bad_setting_is_refused():
    assert uses_bits("auto", CPU) and uses_bits("bits", CPU)
    assert not uses_bits("torch", CPU)
    assert not uses_bits("auto", torch.device("cuda"))
    assert uses_bits("bits", torch.device("cuda"))
    with pytest.raises(UserError, match="trainer.dropout_masks"):
        TrainerConfig(dropout_masks="fast")


def test_a_run_from_before_the_key_resumes_under_torch_masks_only():
    saved = {"trainer": {"lr": 1e-3}, "teacher": {"trainer": {"lr": 1e-3}}}
    same = {"trainer": {"lr": 1e-3, "dropout_masks": "torch"},
            "teacher": {"trainer": {"lr": 1e-3, "dropout_masks": "torch"}}}
    assert compute_changes(saved, same) == []
    changed = compute_changes(saved, {"trainer": {"lr": 1e-3, "dropout_masks": "auto"}})
    assert [str(c) for c in changed if c.key == "trainer.dropout_masks"] == [
        'trainer.dropout_masks: "torch" -> "auto"']
    # a config without a trainer section gains no trainer key
    assert [c.key for c in compute_changes({"probe": {}}, {"probe": {}, "x": 1})] == ["x"]
