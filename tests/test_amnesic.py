"""Amnesic probing: INLP removes exactly the linearly decodable labels, its projection is a
projection of the right rank, the control removes k random directions, the hook changes the
MLM head's input and nothing else, and the pipeline runs end to end on a checkpoint with an
MLM head (and refuses one without)."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest
import torch
from conftest import compose_config
from transformers import (
    BertConfig,
    BertForMaskedLM,
    BertModel,
    ElectraConfig,
    ElectraForMaskedLM,
    RobertaConfig,
    RobertaForMaskedLM,
)

from bertology.analysis.amnesic import (
    build_masked_batches,
    compute_majority_accuracy,
    compute_nullspace_projection,
    compute_rowspace_projection,
    fit_inlp,
    fit_linear_probe,
    layer_module,
    project_hidden,
    random_projection,
)
from bertology.analysis.features import word_spans
from bertology.data.probe_sentences import ProbeSentence
from bertology.errors import UserError
from bertology.pipelines import probe

DIM = 30
DIRECTIONS = np.linalg.qr(np.random.default_rng(99).standard_normal((DIM, 2)))[0]  # (dim, 2)


def synthetic_words(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Three imbalanced classes (majority 0.5) whose means differ in two fixed directions,
    plus isotropic noise: linearly decodable, and only in those directions."""
    rng = np.random.default_rng(seed)
    y = rng.choice(3, size=n, p=[0.5, 0.3, 0.2])
    centers = np.array([[0.0, 0.0], [8.0, 0.0], [0.0, 8.0]])
    x = rng.standard_normal((n, DIM)) + centers[y] @ DIRECTIONS.T  # (n, dim)
    return x, np.array([f"C{label}" for label in y])


@pytest.fixture(scope="module")
def words():
    return synthetic_words(3000, seed=0), synthetic_words(2000, seed=1)


@pytest.fixture(scope="module")
def inlp(words):
    (x, y), dev = words
    return fit_inlp(x, y, iterations=5, seed=0, dev=dev)


def test_inlp_leaves_a_retrained_probe_at_the_majority_baseline(words):
    (x, y), (x_eval, y_eval) = words
    (x_dev, y_dev) = synthetic_words(1000, seed=2)
    majority = compute_majority_accuracy(y, y_eval)
    assert 0.45 < majority < 0.55
    assert fit_linear_probe(x, y, 0).score(x_eval, y_eval) > 0.98
    inlp = fit_inlp(x, y, iterations=20, seed=0, dev=(x_dev, y_dev),
                    min_accuracy=compute_majority_accuracy(y, y_dev) + 0.01)
    projection = inlp.projection
    after = fit_linear_probe(x @ projection, y, 0).score(x_eval @ projection, y_eval)
    assert abs(after - majority) < 0.02, (after, majority)
    # it stopped once the labels were gone: a few rounds of two directions, not 20
    assert inlp.accuracies[0] > 0.98 and len(inlp.accuracies) < 5
    assert inlp.ranks[-1] == inlp.ranks[-2] == inlp.directions_removed <= 6


def test_inlp_projection_is_symmetric_idempotent_of_the_removed_rank(inlp):
    projection = inlp.projection
    np.testing.assert_allclose(projection, projection.T, atol=1e-10)
    np.testing.assert_allclose(projection @ projection, projection, atol=1e-10)
    assert np.linalg.matrix_rank(projection) == DIM - inlp.directions_removed
    # a 3-class softmax has a 2-dimensional row space: each round removes two directions
    assert inlp.ranks == [2, 4, 6, 8, 10]
    # the label directions are gone
    np.testing.assert_allclose(projection @ DIRECTIONS, 0.0, atol=0.05)


def test_nullspace_projection_is_of_the_union_of_overlapping_row_spaces():
    """Row spaces that share a direction: the product of per-round projections is not a
    projection; Ravfogel's formula gives the projection onto the intersection of nullspaces."""
    rng = np.random.default_rng(0)
    a, b, c = rng.standard_normal((3, 8))
    rounds = [compute_rowspace_projection(np.stack([a, b])),
              compute_rowspace_projection(np.stack([b + c, c]))]
    projection, removed = compute_nullspace_projection(rounds, 8)
    assert removed == 3
    np.testing.assert_allclose(projection @ projection, projection, atol=1e-10)
    np.testing.assert_allclose(projection @ np.stack([a, b, c]).T, 0.0, atol=1e-10)
    product = (np.eye(8) - rounds[1]) @ (np.eye(8) - rounds[0])
    assert not np.allclose(product @ product, product, atol=1e-6)


def test_random_projection_removes_exactly_k_directions():
    projection = random_projection(20, 7, seed=0)
    np.testing.assert_allclose(projection, projection.T, atol=1e-10)
    np.testing.assert_allclose(projection @ projection, projection, atol=1e-10)
    assert np.linalg.matrix_rank(np.eye(20) - projection) == 7
    assert np.isclose(np.trace(projection), 13)
    assert not np.allclose(projection, random_projection(20, 7, seed=1))
    np.testing.assert_allclose(random_projection(20, 0, seed=0), np.eye(20))
    with pytest.raises(UserError):
        random_projection(4, 5, seed=0)


# ---------------------------------------------------------------- the MLM side


@pytest.fixture(scope="module")
def mlm(synthetic_tokenizer):
    torch.manual_seed(0)
    config = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, vocab_size=len(synthetic_tokenizer))
    return BertForMaskedLM(config).eval()


def test_identity_hook_leaves_logits_unchanged_and_a_projection_reaches_the_head(
        mlm, synthetic_tokenizer):
    inputs = synthetic_tokenizer(["The chef cooks the soup .", "A farmer sings ."],
                                 padding=True, return_tensors="pt")
    with torch.no_grad():
        plain = mlm(**inputs)
        hidden = mlm(**inputs, output_hidden_states=True).hidden_states  # L + 1 of (b, t, d)
        for layer in range(3):
            with project_hidden(layer_module(mlm, layer), np.eye(32)):
                torch.testing.assert_close(mlm(**inputs).logits, plain.logits)
        projection = random_projection(32, 8, seed=0)
        with project_hidden(layer_module(mlm, 2), projection):
            projected = mlm(**inputs).logits
        by_hand = mlm.cls(hidden[2] @ torch.as_tensor(projection, dtype=torch.float32))
        with project_hidden(layer_module(mlm, 0), projection):
            from_embeddings = mlm(**inputs).logits
        after = mlm(**inputs).logits
    torch.testing.assert_close(projected, by_hand, rtol=1e-4, atol=1e-4)
    assert not torch.allclose(from_embeddings, plain.logits, atol=1e-3)
    torch.testing.assert_close(after, plain.logits)  # the hook is removed on exit


SMALL = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
         "intermediate_size": 64}
FAMILIES = {
    "bert": lambda v: BertForMaskedLM(BertConfig(**SMALL, vocab_size=v)),
    "roberta": lambda v: RobertaForMaskedLM(RobertaConfig(**SMALL, vocab_size=v)),
    # an ELECTRA generator with embedding_size < hidden_size: state 0 is after the projection
    "electra": lambda v: ElectraForMaskedLM(ElectraConfig(**SMALL, vocab_size=v,
                                                          embedding_size=16)),
}


def module_output(model, module, ids) -> torch.Tensor:
    seen = []
    handle = module.register_forward_hook(lambda _m, _i, output: seen.append(output))
    model(input_ids=ids)
    handle.remove()
    return seen[0][0] if isinstance(seen[0], tuple) else seen[0]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_layer_module_outputs_hidden_state_l(family):
    """The hooked module's output is hidden state l (0 = embeddings … L) in every family."""
    torch.manual_seed(0)
    model = FAMILIES[family](100).eval()
    ids = torch.randint(5, 100, (2, 7))
    with torch.no_grad():
        hidden = model(input_ids=ids, output_hidden_states=True).hidden_states
        for layer in range(3):
            output = module_output(model, layer_module(model, layer), ids)
            torch.testing.assert_close(output, hidden[layer])


def test_masks_hit_single_sub_word_words_at_about_mask_prob(synthetic_tokenizer):
    sentence = ProbeSentence(("the", "chef", "cooks", "the", "soup", "."), (None,) * 6)
    sentences = [sentence] * 200
    batches = build_masked_batches(synthetic_tokenizer, sentences, 0.3, seed=0, batch_size=64,
                                   max_length=32)
    again = build_masked_batches(synthetic_tokenizer, sentences, 0.3, seed=0, batch_size=64,
                                 max_length=32)
    assert all(torch.equal(a.targets, b.targets) for a, b in zip(batches, again))
    encoded = synthetic_tokenizer(list(sentence.words), is_split_into_words=True)
    spans = word_spans(encoded.word_ids(), len(sentence.words))
    single = {start for start, end in spans if end - start == 1}
    masked = torch.cat([b.targets for b in batches]) != -100  # (sentences, tokens)
    assert set(masked.any(dim=0).nonzero().flatten().tolist()) <= single
    assert abs(masked.sum().item() / (200 * len(single)) - 0.3) < 0.05
    ids = torch.cat([b.inputs["input_ids"] for b in batches])
    assert (ids[masked] == synthetic_tokenizer.mask_token_id).all()


# ---------------------------------------------------------------- end to end


def run_probe(model_dir, tmp_path, extra=()):
    cfg = compose_config("probe", [
        "analysis=amnesic", "task=synthetic_pos", f"model.name_or_path={model_dir}",
        "logger=none", "seeds=[0]", "max_train_sentences=150", "max_eval_sentences=40",
        "analysis.amnesic.iterations=2", "analysis.amnesic.mask_prob=0.3",
        f"paths.cache_dir={tmp_path / 'cache'}", *extra])
    return probe.run(cfg, tmp_path / "run")


def test_pipeline_on_a_checkpoint_with_an_mlm_head(tmp_path, synthetic_tokenizer):
    torch.manual_seed(0)
    config = BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=128, vocab_size=len(synthetic_tokenizer))
    BertForMaskedLM(config).save_pretrained(tmp_path / "model")
    synthetic_tokenizer.save_pretrained(tmp_path / "model")
    metrics = run_probe(tmp_path / "model", tmp_path)
    for key in ("mlm_accuracy", "inlp/mlm_accuracy", "random/mlm_accuracy",
                "probe_accuracy_before", "probe_accuracy_after", "majority_accuracy"):
        assert 0.0 <= metrics[f"amnesic/{key}"] <= 1.0, key
    for key in ("inlp/drop", "random/drop"):
        assert -1.0 <= metrics[f"amnesic/{key}"] <= 1.0 and math.isfinite(metrics[f"amnesic/{key}"])
    assert 0 < metrics["amnesic/directions_removed"] <= 64
    assert metrics["amnesic/probe_accuracy_after"] < metrics["amnesic/probe_accuracy_before"]
    with (tmp_path / "run" / "tables" / "amnesic_synthetic_pos.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [r["condition"] for r in rows] == ["original", "inlp", "random"]
    assert {r["layer"] for r in rows} == {"2"}
    assert rows[1]["directions_removed"] == rows[2]["directions_removed"] != "0"
    assert (tmp_path / "run" / "plots" / "amnesic_synthetic_pos.png").stat().st_size > 0
    with (tmp_path / "run" / "tables" / "amnesic_rounds_synthetic_pos.csv").open() as handle:
        rounds = list(csv.DictReader(handle))
    assert [r["round"] for r in rounds] == ["1", "2"]
    assert rounds[-1]["directions_removed"] == rows[1]["directions_removed"]


def test_a_checkpoint_without_an_mlm_head_is_a_user_error(tmp_path, synthetic_tokenizer):
    config = BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, vocab_size=len(synthetic_tokenizer))
    BertModel(config).save_pretrained(tmp_path / "encoder")
    synthetic_tokenizer.save_pretrained(tmp_path / "encoder")
    with pytest.raises(UserError, match="masked-LM head"):
        run_probe(tmp_path / "encoder", tmp_path)
