"""Task models: the saved fine-tuned model reproduces predictions in plain transformers, a
frozen encoder gets no gradient, freezing and layer-wise decay touch the layers they name,
and every Table 7 feature choice gives the right width."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForSequenceClassification, BertConfig

from bertology.config.groups import FEATURES, HeadConfig
from bertology.models.task_model import (
    TaskModel,
    build_task_model,
    layer_lr_scale,
    save_task_model,
    select_features,
)

LABELS = ["neg", "pos"]


def tiny_config() -> BertConfig:
    return BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=4, num_attention_heads=2,
                      intermediate_size=64)


def batch() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    ids = torch.randint(5, 120, (3, 9))
    mask = torch.ones_like(ids)
    mask[2, 6:] = 0
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids),
            "labels": torch.tensor([0, 1, 1])}


def build(kind: str = "classification", **head) -> TaskModel:
    torch.manual_seed(0)
    return build_task_model(None, tiny_config(), kind, LABELS, HeadConfig(**head),
                            random_init=True, attn_implementation="sdpa")


def test_the_saved_model_reproduces_logits_in_plain_transformers(tmp_path):
    model = build().eval()
    save_task_model(model, tmp_path)
    plain = AutoModelForSequenceClassification.from_pretrained(tmp_path).eval()
    inputs = {k: v for k, v in batch().items() if k != "labels"}
    with torch.no_grad():
        assert torch.allclose(model(batch()), plain(**inputs).logits, atol=1e-5)
    assert plain.config.id2label == {0: "neg", 1: "pos"}
    assert not (tmp_path / "head.safetensors").exists()


def test_other_heads_are_saved_beside_the_model(tmp_path):
    model = build(pooling="mean")
    save_task_model(model, tmp_path)
    assert (tmp_path / "head.safetensors").exists() and (tmp_path / "head.json").exists()


def test_feature_mode_trains_the_head_only():
    model = build(mode="feature", features="scalar_mix").train()
    assert not model.model.base_model.training  # no dropout on fixed features
    logits = model(batch())
    torch.nn.functional.cross_entropy(logits, batch()["labels"]).backward()
    encoder_grads = [p.grad for p in model.model.base_model.parameters()]
    assert all(g is None for g in encoder_grads)
    assert model.head.mix.weights.grad is not None
    assert model.head.classifier.weight.grad.abs().sum() > 0


def test_freeze_layers_stops_the_embeddings_and_the_lowest_layers():
    model = build(freeze_layers=2)
    encoder = model.model.base_model
    assert not any(p.requires_grad for p in encoder.embeddings.parameters())
    assert not any(p.requires_grad for layer in encoder.encoder.layer[:2]
                   for p in layer.parameters())
    assert all(p.requires_grad for layer in encoder.encoder.layer[2:]
               for p in layer.parameters())


def test_layer_lr_decay_scales_by_depth_from_the_top():
    assert layer_lr_scale("model.bert.embeddings.word_embeddings.weight", 4, 0.5) == 0.5 ** 5
    assert layer_lr_scale("model.bert.encoder.layer.0.output.dense.weight", 4, 0.5) == 0.5 ** 4
    assert layer_lr_scale("model.bert.encoder.layer.3.output.dense.weight", 4, 0.5) == 0.5
    assert layer_lr_scale("model.classifier.weight", 4, 0.5) == 1.0
    assert layer_lr_scale("model.bert.encoder.layer.0.output.dense.weight", 4, 1.0) == 1.0


@pytest.mark.parametrize("features", FEATURES)
def test_every_table7_feature_choice_runs(features):
    hidden = tuple(torch.full((2, 5, 8), float(layer)) for layer in range(5))  # layers 0..4
    from bertology.models.task_model import ScalarMix

    out = select_features(hidden, features, ScalarMix(5))
    expected = {"embeddings": 0.0, "last": 4.0, "second_to_last": 3.0, "sum_last_four": 10.0,
                "concat_last_four": 1.0, "scalar_mix": 2.0}  # scalar mix starts uniform: mean
    width = 32 if features == "concat_last_four" else 8
    assert out.shape == (2, 5, width)
    if features == "concat_last_four":
        assert out[0, 0, ::8].tolist() == [1.0, 2.0, 3.0, 4.0]
    else:
        assert torch.allclose(out, torch.full_like(out, expected[features]))
    model = build("tagging", mode="feature", features=features, lstm_hidden=4)
    assert model(batch()).shape == (3, 9, 2)


@pytest.mark.parametrize("features", ["sum_last_four", "concat_last_four"])
def test_the_last_four_layers_need_four_hidden_states(features):
    """A 2-layer model has 3 hidden states: refused in one line, not a shape error mid-run."""
    from bertology.errors import UserError
    from bertology.models.task_model import FeatureHead

    with pytest.raises(UserError, match=f"head.features={features} reads the last four"):
        FeatureHead(HeadConfig(mode="feature", features=features), "tagging", 3, 8, 2)
    assert FeatureHead(HeadConfig(mode="feature", features=features), "tagging", 4, 8, 2)
