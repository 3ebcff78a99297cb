"""Int8 quantisation and CPU latency: int8 stores the linear weights in under 30% of fp32's bytes,
its logits stay close to fp32's, the original model is untouched, and latency gives finite
timings with median <= p90."""

from __future__ import annotations

import copy
import importlib.util
import math

import pytest
import torch
from torch import nn
from transformers import BertConfig, BertForSequenceClassification

from bertology.errors import UserError
from bertology.models.latency import (
    build_latency_batch,
    compare_latency,
    eval_latency_batch,
    measure_latency,
)
from bertology.pruning.heads import prune_heads
from bertology.pruning.quantize import linear_weight_bytes, quantize_int8, size_on_disk

BACKENDS = ["torch_ao", pytest.param("torchao", marks=pytest.mark.skipif(
    importlib.util.find_spec("torchao") is None, reason="torchao is optional, not installed"))]


def tiny_classifier() -> BertForSequenceClassification:
    """hidden 128: a row's per-channel scale and zero point (16 bytes) are small beside its
    128+ int8 weights, as in real models."""
    torch.manual_seed(0)
    config = BertConfig(vocab_size=100, hidden_size=128, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=512, num_labels=2)
    return BertForSequenceClassification(config).eval()


def inputs(n: int = 64) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 100, (n, 16), generator=generator)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}



@pytest.fixture(scope="module")
def model() -> BertForSequenceClassification:
    return tiny_classifier()


@pytest.mark.parametrize("backend", BACKENDS)
def test_int8_linear_weights_take_under_30_percent(model, backend):
    fp32 = linear_weight_bytes(model)
    expected = sum(4 * m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
    assert fp32 == expected
    assert linear_weight_bytes(quantize_int8(model, backend)) <= 0.30 * fp32


@pytest.mark.parametrize("backend", BACKENDS)
def test_int8_logits_stay_close_to_fp32(model, backend):
    batch = inputs()
    quantized = quantize_int8(model, backend)
    with torch.inference_mode():
        fp32, int8 = model(**batch).logits, quantized(**batch).logits
    agreement = (fp32.argmax(-1) == int8.argmax(-1)).float().mean().item()
    assert agreement >= 0.9
    assert (fp32 - int8).abs().max() <= 0.1 * fp32.abs().max()


def test_a_layer_without_heads_keeps_its_empty_projections(model):
    """Head pruning can empty a layer's attention (0-row q/k/v, 0-column output): nothing to
    quantise there, and the rest is still int8."""
    pruned = copy.deepcopy(model)
    prune_heads(pruned, {0: [0, 1, 2, 3], 1: [2]})
    quantized = quantize_int8(pruned, "torch_ao")
    batch = inputs(8)
    with torch.inference_mode():
        fp32, int8 = pruned(**batch).logits, quantized(**batch).logits
    assert (fp32 - int8).abs().max() <= 0.1 * fp32.abs().max()
    assert linear_weight_bytes(quantized) <= 0.30 * linear_weight_bytes(pruned)


def test_original_model_is_untouched():
    model = tiny_classifier().train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    quantize_int8(model)
    assert model.training
    assert all(type(m.weight) is nn.Parameter and m.weight.dtype == torch.float32
               for m in model.modules() if isinstance(m, nn.Linear))
    after = model.state_dict()
    assert after.keys() == before.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_int8_state_dict_is_smaller_on_disk(model, tmp_path):
    fp32 = size_on_disk(model, tmp_path)
    int8 = size_on_disk(quantize_int8(model), tmp_path)
    assert 0 < int8 < 0.5 * fp32
    assert list(tmp_path.iterdir()) == []


def test_unknown_backend_names_the_choices(model):
    with pytest.raises(UserError, match="torch_ao"):
        quantize_int8(model, "fp8")


def test_latency_is_finite_and_median_below_p90(model, one_thread):
    model.train()
    timings = measure_latency(quantize_int8(model), inputs(4), warmup=1, repeats=5)
    fp32 = measure_latency(model, inputs(4), warmup=1, repeats=5)
    assert model.training  # mode restored after timing in eval
    for result in (timings, fp32):
        assert set(result) == {"median_ms", "p90_ms"}
        assert all(math.isfinite(v) and v > 0 for v in result.values())
        assert result["median_ms"] <= result["p90_ms"]
    model.eval()


def test_latency_batch_cycles_texts_and_truncates(synthetic_tokenizer):
    texts = ["the cat sat", " ".join(["the dog ran"] * 20)]
    batch = build_latency_batch(synthetic_tokenizer, texts, batch_size=5, max_length=8)
    assert batch["input_ids"].shape == (5, 8)
    assert torch.equal(batch["input_ids"][0], batch["input_ids"][2])
    assert batch["attention_mask"][0].sum() < 8


class CallLog(torch.nn.Module):
    """A model that records which name ran each forward pass."""

    def __init__(self, name: str, calls: list[str]):
        super().__init__()
        self.name, self.calls = name, calls

    def forward(self, input_ids):
        self.calls.append(self.name)
        return input_ids


def test_compare_latency_interleaves_the_models_round_by_round():
    """Each round times every model once in turn (warmup 3 + repeats), so a slowdown of the
    machine during the comparison falls on all of them."""
    calls: list[str] = []
    models = {"teacher": CallLog("teacher", calls), "student": CallLog("student", calls)}
    timings = compare_latency(models, {"input_ids": torch.zeros(2, 3)}, rounds=2, repeats=2)
    per_turn = 3 + 2
    assert calls == (["teacher"] * per_turn + ["student"] * per_turn) * 2
    for result in timings.values():
        assert set(result) == {"median_ms", "p90_ms"}
        assert 0 < result["median_ms"] <= result["p90_ms"]


def test_eval_latency_batch_pads_the_first_examples_to_the_longest():
    features = [{"input_ids": [2, 5, 6, 3], "labels": 0}, {"input_ids": [2, 7, 3], "labels": 1},
                {"input_ids": [2, 9, 9, 9, 9, 3], "labels": 0}]
    batch = eval_latency_batch(features, pad_token_id=0, size=2)
    assert batch["input_ids"].tolist() == [[2, 5, 6, 3], [2, 7, 3, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 1, 0]]
    assert "labels" not in batch  # only what the model's forward takes
