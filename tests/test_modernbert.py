"""ModernBERT (Warner et al., 2024), the fifth family: its recipe as configured, pretraining on
the embedded corpus into a checkpoint plain transformers loads, and the pipelines that read it."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import compose_config
from transformers import AutoModelForMaskedLM, AutoTokenizer

from bertology.models.build import build_random_twin
from bertology.pipelines import pretrain

SMOKE = ["logger=none", "trainer=smoke", "data.num_sentences=800", "data.eval_docs=20"]
STEPS = 40


@pytest.fixture(scope="module")
def modernbert_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("modernbert")
    metrics = pretrain.run(compose_config("pretrain", [
        "model=modernbert", "size=tiny", *SMOKE, f"trainer.max_steps={STEPS}",
        "trainer.log_every=5"]), out)
    return out, metrics


def test_the_recipe_is_modernberts():
    """§2.2: MLM at 30% with dynamic masks and no pair task; §2.1.1: global attention every
    third layer, a 128-token window between, no biases, GeGLU at ModernBERT-base's width."""
    cfg = compose_config("pretrain", ["model=modernbert", "size=base"])
    assert cfg.objective.name == "mlm" and cfg.objective.mask_prob == 0.3
    assert cfg.model.masking == "dynamic" and cfg.model.input_format == "doc_sentences"
    # the user's own rate still wins over the family's default
    assert compose_config("pretrain", ["model=modernbert", "objective.mask_prob=0.2"]
                          ).objective.mask_prob == 0.2
    from bertology.config.pretrain import load_pretrain_config
    from bertology.models.build import build_config

    config = load_pretrain_config(cfg)

    class Tok:  # the ids build_config reads from a tokenizer
        pad_token_id, cls_token_id, sep_token_id = 0, 2, 3

        def __len__(self):
            return 1000

    built = build_config(config.model, config.size, Tok())
    assert type(built).__name__ == "ModernBertConfig"
    assert built.layer_types[:6] == ["full_attention", "sliding_attention",
                                     "sliding_attention"] * 2
    assert built.local_attention == 128 and built.intermediate_size == 1152  # ModernBERT-base
    assert not built.attention_bias and not built.mlp_bias and not built.norm_bias
    assert (built.cls_token_id, built.sep_token_id, built.pad_token_id) == (2, 3, 0)
    assert not hasattr(built, "type_vocab_size")  # no segment embeddings


def test_pretraining_writes_a_checkpoint_transformers_loads(modernbert_run):
    out, metrics = modernbert_run
    losses = [json.loads(line)["train/loss"] for line in
              (out / "metrics.jsonl").read_text().splitlines() if "train/loss" in line]
    assert metrics["train/steps"] == STEPS
    assert losses[-1] < losses[0] - 0.5, losses  # MLM loss falls
    loaded = AutoModelForMaskedLM.from_pretrained(out / "model")
    assert type(loaded).__name__ == "ModernBertForMaskedLM"
    assert loaded.config.layer_types == ["full_attention", "sliding_attention"]


def masked_accuracy(model, tokenizer, sentences: list[str], seed: int) -> float:
    """Accuracy at 15% of the word pieces replaced by [MASK] (an independent evaluation: not
    the pipeline's collator), over the given held-out sentences."""
    generator = torch.Generator().manual_seed(seed)
    correct = total = 0
    with torch.no_grad():
        for text in sentences:
            ids = tokenizer(text, return_tensors="pt")["input_ids"]  # (1, seq)
            inner = torch.rand(ids.shape, generator=generator) < 0.15
            inner[:, 0] = inner[:, -1] = False  # never [CLS] / [SEP]
            if not inner.any():
                continue
            masked = ids.masked_fill(inner, tokenizer.mask_token_id)
            predicted = model(input_ids=masked).logits.argmax(-1)  # (1, seq)
            correct += int((predicted[inner] == ids[inner]).sum())
            total += int(inner.sum())
    return correct / total


def test_held_out_mlm_accuracy_beats_the_random_init_twin(modernbert_run):
    from conftest import DATA_DIR

    from bertology.config.groups import DataConfig
    from bertology.data.corpora import build_corpus

    out, metrics = modernbert_run
    tokenizer = AutoTokenizer.from_pretrained(out / "model")
    trained = AutoModelForMaskedLM.from_pretrained(out / "model").eval()
    twin = build_random_twin(out / "model", seed=1).eval()
    # another seed's synthetic sentences: held out from the training corpus
    corpus = build_corpus(DataConfig(num_sentences=200, seed=12345), DATA_DIR)
    sentences = [s for doc in corpus.iter_documents() for s in doc][:200]
    assert len(sentences) == 200
    ours = masked_accuracy(trained, tokenizer, sentences, seed=0)
    null = masked_accuracy(twin, tokenizer, sentences, seed=0)
    assert ours > null + 0.05, (ours, null)
    assert metrics["eval/mlm_accuracy"] > null
