"""Amnesic probing: INLP removes exactly the linearly decodable labels, its projection is a
projection of the right rank, the control removes k random directions, the hook changes the
MLM head's input and nothing else; the last layer is projected after the MLM head's transform;
the masked setting fits on [MASK] states; D_KL is the hand-computed sum, larger for INLP than
for its control when the property is used, and the two are measured alike; the pipeline runs
end to end on a checkpoint with an MLM head (and refuses one without)."""

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

from bertology.analysis import amnesic
from bertology.analysis.amnesic import (
    build_setting_batches,
    compute_kl_divergence,
    extract_mlm_effects,
    extract_site_states,
    layer_module,
    project_hidden,
    projection_site,
    summarize,
)
from bertology.analysis.features import word_spans
from bertology.analysis.inlp import (
    compute_majority_accuracy,
    compute_nullspace_projection,
    compute_rowspace_projection,
    fit_inlp,
    fit_linear_probe,
    random_projection,
)
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


def test_the_last_layer_site_reads_the_mlm_transform_of_hidden_state_l(mlm, synthetic_tokenizer):
    """Below the last layer the site is hidden layer l; at the last, BERT's
    cls.predictions.transform, whose output is transform(h_L) and the decoder's input."""
    ids = synthetic_tokenizer(["The chef cooks the soup ."], return_tensors="pt")["input_ids"]
    assert projection_site(mlm, 1) is layer_module(mlm, 1)
    with torch.no_grad():
        hidden = mlm(input_ids=ids, output_hidden_states=True).hidden_states
        output = module_output(mlm, projection_site(mlm, 2), ids)  # (1, tokens, dim)
        by_hand = mlm.cls.predictions.transform(hidden[2])
        logits = mlm.cls.predictions.decoder(output)
    torch.testing.assert_close(output, by_hand)
    torch.testing.assert_close(logits, mlm(input_ids=ids).logits)


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


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_zeroing_the_last_layer_site_leaves_the_decoder_bias(family):
    """The last layer is projected after the MLM head's transform, directly before the decoder
    (Elazar et al.): zeroing it there leaves each position's logits at the decoder's bias. Had
    the hook sat before the transform, its LayerNorm's bias would still reach the decoder."""
    torch.manual_seed(0)
    model = FAMILIES[family](100).eval()
    for name, parameter in model.named_parameters():
        if name.endswith("bias"):  # not the zeros of a fresh model: LayerNorm's must show
            torch.nn.init.normal_(parameter)
    decoder = model.get_output_embeddings()
    site, dim = projection_site(model, 2), decoder.in_features  # ELECTRA: the embedding size
    ids = torch.randint(5, 100, (2, 7))
    with torch.no_grad():
        plain = model(input_ids=ids).logits
        with project_hidden(site, np.eye(dim)):
            torch.testing.assert_close(model(input_ids=ids).logits, plain)
        with project_hidden(site, np.zeros((dim, dim))):
            zeroed = model(input_ids=ids).logits  # (batch, tokens, vocab)
        with project_hidden(layer_module(model, 2), np.zeros((32, 32))):
            before_transform = model(input_ids=ids).logits
    torch.testing.assert_close(zeroed, decoder.bias.expand_as(zeroed))
    assert not torch.allclose(before_transform, zeroed, atol=1e-3)


def labelled(*words: str, unlabelled: tuple[int, ...] = ()) -> ProbeSentence:
    return ProbeSentence(words, tuple(None if i in unlabelled else f"L{i}"
                                      for i in range(len(words))))


def test_masked_setting_masks_one_sub_word_words_and_evaluates_the_labelled(
        synthetic_tokenizer):
    sentence = labelled("the", "chef", "cooks", "the", "soup", ".", unlabelled=(4,))
    build = lambda setting: build_setting_batches(  # noqa: E731
        synthetic_tokenizer, [sentence] * 200, setting, 0.3, seed=0, batch_size=64,
        max_length=32)
    batches, again = build("masked"), build("masked")
    assert all(torch.equal(a.targets, b.targets) for a, b in zip(batches, again))
    encoded = synthetic_tokenizer(list(sentence.words), is_split_into_words=True)
    spans = word_spans(encoded.word_ids(), len(sentence.words))
    single = {start for start, end in spans if end - start == 1}
    ids = torch.cat([b.inputs["input_ids"] for b in batches])  # (sentences, tokens)
    masked = ids == synthetic_tokenizer.mask_token_id
    assert set(masked.any(dim=0).nonzero().flatten().tolist()) <= single
    assert abs(masked.sum().item() / (200 * len(single)) - 0.3) < 0.05
    targets = torch.cat([b.targets for b in batches])
    soup = spans[4][0]
    assert masked[:, soup].any() and (targets[:, soup] == -100).all()  # masked, not labelled
    assert torch.equal(targets != -100, masked & (torch.arange(ids.shape[1]) != soup))
    original = torch.tensor(encoded["input_ids"])
    assert (targets[targets != -100] == original.expand_as(targets)[targets != -100]).all()
    # labels in row-major order of the evaluated positions
    word_of = {start: i for i, (start, _) in enumerate(spans)}
    expected = [f"L{word_of[int(p)]}" for p in (targets != -100).nonzero()[:, 1]]
    assert np.concatenate([b.labels for b in batches]).tolist() == expected

    normal = build("normal")
    assert all(torch.equal(b.inputs["input_ids"][row], original) for b in normal
               for row in range(len(b.targets)))
    evaluated = set(torch.cat([b.targets for b in normal]).ne(-100).any(0).nonzero()
                    .flatten().tolist())
    assert evaluated == single - {soup}


def test_masked_setting_states_are_read_at_mask_positions(mlm, synthetic_tokenizer):
    """The states INLP is fit on in the masked setting are layer l's states at [MASK] tokens of
    the masked input, computed here by a plain forward pass with output_hidden_states."""
    sentences = [labelled("the", "chef", "cooks", "the", "soup", "."),
                 labelled("a", "farmer", "sings", ".")] * 20
    batches = build_setting_batches(synthetic_tokenizer, sentences, "masked", 0.3, seed=1,
                                    batch_size=8, max_length=32)
    x, y = extract_site_states(mlm, projection_site(mlm, 1), batches, desc="test")
    with torch.no_grad():
        expected = []
        for batch in batches:
            hidden = mlm(**batch.inputs, output_hidden_states=True).hidden_states[1]
            expected.append(hidden[batch.inputs["input_ids"] == synthetic_tokenizer.mask_token_id])
    torch.testing.assert_close(torch.as_tensor(x), torch.cat(expected))  # (positions, dim)
    assert len(y) == len(x) > 20


def test_kl_divergence_is_the_hand_computed_sum():
    """D_KL(p ‖ q) = Σ p log(p / q) on two small distributions, from logits that are their
    logs shifted by a constant (the softmax removes it)."""
    p = np.array([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]])
    q = np.array([[0.2, 0.5, 0.3], [1 / 3, 1 / 3, 1 / 3]])
    by_hand = [0.5 * np.log(0.5 / 0.2) + 0.3 * np.log(0.3 / 0.5) + 0.2 * np.log(0.2 / 0.3),
               0.1 * np.log(0.3) * 2 + 0.8 * np.log(2.4)]
    kl = compute_kl_divergence(torch.tensor(np.log(p) + 3.0), torch.tensor(np.log(q) - 1.0))
    np.testing.assert_allclose(kl.numpy(), by_hand, rtol=1e-12)
    assert abs(by_hand[0] - 0.2238) < 1e-4
    reverse = compute_kl_divergence(torch.tensor(np.log(q)), torch.tensor(np.log(p)))
    assert not np.allclose(reverse.numpy(), by_hand)  # the original distribution comes first
    np.testing.assert_allclose(compute_kl_divergence(torch.tensor(p), torch.tensor(p)), 0.0)


def random_sentences(tokenizer, n: int = 60) -> list[ProbeSentence]:
    """n sentences of 8 whole-word vocabulary entries drawn at random (seeded)."""
    vocab = sorted(t for t in tokenizer.get_vocab() if t.isalpha() and t.islower())
    rng = np.random.default_rng(0)
    return [labelled(*rng.choice(vocab, size=8)) for _ in range(n)]


def test_inlp_changes_the_output_more_than_its_control_when_the_property_is_used(
        synthetic_tokenizer):
    """A decoder that reads direction u strongly. A property linearly encoded along u (which
    side of the median a state lies): removing it moves the MLM's distribution far more than
    removing as many random directions. D_KL is never negative."""
    torch.manual_seed(0)
    model = BertForMaskedLM(BertConfig(**SMALL, vocab_size=len(synthetic_tokenizer))).eval()
    u = np.linalg.qr(np.random.default_rng(7).standard_normal((32, 1)))[0][:, 0]  # (dim,)
    decoder = model.get_output_embeddings()
    with torch.no_grad():  # every token's logit gets a random multiple of h·u
        boost = torch.randn(len(synthetic_tokenizer), 1) * torch.as_tensor(u, dtype=torch.float32)
        decoder.weight.add_(boost)  # (vocab, dim)
    site = projection_site(model, 2)
    batches = build_setting_batches(synthetic_tokenizer, random_sentences(synthetic_tokenizer),
                                    "normal", 0.15, seed=0, batch_size=16, max_length=32)
    x, _ = extract_site_states(model, site, batches, desc="test")
    y = np.where(x @ u > np.median(x @ u), "high", "low")
    inlp = fit_inlp(x, y, iterations=1, seed=0)
    assert inlp.directions_removed == 1
    effects = extract_mlm_effects(model, site, batches, {
        "inlp": inlp.projection, "random": random_projection(32, 1, seed=0)})
    kl = {c: effects[c]["kl"] for c in effects}
    assert kl["original"] == 0.0 and kl["random"] >= 0.0
    assert kl["inlp"] > 20 * kl["random"] > 0, kl


def test_inlp_and_its_control_are_measured_alike(mlm, synthetic_tokenizer):
    """The same projection as both conditions gives the same accuracy, D_KL and drop: the
    statistics cannot tell INLP from its control by how they are computed."""
    batches = build_setting_batches(synthetic_tokenizer, random_sentences(synthetic_tokenizer, 20),
                                    "masked", 0.3, seed=0, batch_size=8, max_length=32)
    projection = random_projection(32, 4, seed=3)
    effects = extract_mlm_effects(mlm, projection_site(mlm, 2), batches,
                                  {"inlp": projection, "random": projection})
    assert effects["inlp"] == effects["random"] and effects["inlp"]["kl"] > 0
    rows = [{"setting": s, "condition": c, "directions_removed": 4, "probe_accuracy": 0.5,
             "majority_accuracy": 0.5, **effects[c]} for s in amnesic.SETTINGS for c in effects]
    metrics = summarize(rows)
    for s in amnesic.SETTINGS:
        for key in ("drop", "kl", "mlm_accuracy"):
            assert metrics[f"amnesic/{s}/inlp/{key}"] == metrics[f"amnesic/{s}/random/{key}"]


# ---------------------------------------------------------------- end to end


def run_probe(model_dir, tmp_path, extra=()):
    cfg = compose_config("probe", [
        "analysis=amnesic", "task=synthetic_pos", f"model.name_or_path={model_dir}",
        "logger=none", "seeds=[0]", "max_train_sentences=150", "max_eval_sentences=40",
        "analysis.amnesic.iterations=2", "analysis.amnesic.mask_prob=0.3",
        f"paths.cache_dir={tmp_path / 'cache'}", *extra])
    return probe.run(cfg, tmp_path / "run")


def save_bert(tmp_path, tokenizer, hidden: int = 64) -> BertForMaskedLM:
    torch.manual_seed(0)
    config = BertConfig(hidden_size=hidden, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=2 * hidden, vocab_size=len(tokenizer))
    model = BertForMaskedLM(config).eval()
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    return model


def read_table(path) -> list[dict]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


@pytest.mark.slow
def test_pipeline_on_a_checkpoint_with_an_mlm_head(tmp_path, synthetic_tokenizer):
    save_bert(tmp_path, synthetic_tokenizer)
    metrics = run_probe(tmp_path / "model", tmp_path)
    for s in ("normal", "masked"):
        for key in ("mlm_accuracy", "inlp/mlm_accuracy", "random/mlm_accuracy",
                    "probe_accuracy_before", "probe_accuracy_after", "random/probe_accuracy",
                    "majority_accuracy"):
            assert 0.0 <= metrics[f"amnesic/{s}/{key}"] <= 1.0, (s, key)
        for key in ("inlp/drop", "random/drop"):
            assert -1.0 <= metrics[f"amnesic/{s}/{key}"] <= 1.0, (s, key)
        for key in ("inlp/kl", "random/kl"):
            assert 0.0 <= metrics[f"amnesic/{s}/{key}"] < math.inf, (s, key)
        assert 0 <= metrics[f"amnesic/{s}/directions_removed"] <= 64
    assert len(metrics) == 2 * 12
    assert metrics["amnesic/normal/directions_removed"] > 0
    assert (metrics["amnesic/normal/probe_accuracy_after"]
            < metrics["amnesic/normal/probe_accuracy_before"])
    rows = read_table(tmp_path / "run" / "tables" / "amnesic_synthetic_pos.csv")
    assert [(r["setting"], r["condition"]) for r in rows] == [
        (s, c) for s in ("normal", "masked") for c in ("original", "inlp", "random")]
    assert {r["layer"] for r in rows} == {"2"}
    for s in ("normal", "masked"):
        original, inlp, random = (r for r in rows if r["setting"] == s)
        assert inlp["directions_removed"] == random["directions_removed"]
        assert float(original["kl"]) == 0.0
    assert rows[1]["directions_removed"] != "0"
    assert (tmp_path / "run" / "plots" / "amnesic_synthetic_pos.png").stat().st_size > 0
    rounds = read_table(tmp_path / "run" / "tables" / "amnesic_rounds_synthetic_pos.csv")
    assert [r["round"] for r in rounds if r["setting"] == "normal"] == ["1", "2"]
    for s in ("normal", "masked"):
        last = [r for r in rounds if r["setting"] == s][-1]
        assert last["directions_removed"] == next(
            r["directions_removed"] for r in rows if r["setting"] == s and r["condition"] == "inlp")


@pytest.mark.slow
def test_the_masked_setting_fits_inlp_on_mask_states(tmp_path, synthetic_tokenizer, monkeypatch):
    """At layer 0 of a BERT without position embeddings, a token's state is
    LayerNorm(word embedding + segment-A embedding): the masked setting's INLP must see only
    the [MASK] token's, the normal setting's only words' (computed here by hand)."""
    model = BertForMaskedLM(BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                       intermediate_size=64, vocab_size=len(synthetic_tokenizer)))
    model.bert.embeddings.position_embeddings.weight.data.zero_()
    model.save_pretrained(tmp_path / "model")
    synthetic_tokenizer.save_pretrained(tmp_path / "model")
    seen = []
    real_fit = amnesic.fit_inlp
    monkeypatch.setattr(amnesic, "fit_inlp",
                        lambda x, *args, **kwargs: seen.append(x) or real_fit(x, *args, **kwargs))
    metrics = run_probe(tmp_path / "model", tmp_path, ["analysis.amnesic.layer=0"])
    embeddings = model.bert.embeddings
    with torch.no_grad():
        states = embeddings.LayerNorm(embeddings.word_embeddings.weight
                                      + embeddings.token_type_embeddings.weight[0])  # (vocab, dim)
    distances = [torch.cdist(torch.as_tensor(x), states,  # exact: no matrix-product shortcut
                             compute_mode="donot_use_mm_for_euclid_dist") for x in seen]
    nearest = [d.argmin(dim=1) for d in distances]  # the token each fitted state is of
    assert len(seen) == 2 and all(d.min(dim=1).values.max() < 1e-4 for d in distances)
    normal, masked = nearest
    assert (masked == synthetic_tokenizer.mask_token_id).all()
    assert not (normal == synthetic_tokenizer.mask_token_id).any()
    assert len(set(normal.tolist())) > 10  # many words
    assert metrics["amnesic/masked/directions_removed"] == 0  # nothing to tell apart
    assert metrics["amnesic/masked/inlp/kl"] == metrics["amnesic/masked/random/kl"] == 0.0


def test_a_checkpoint_without_an_mlm_head_is_a_user_error(tmp_path, synthetic_tokenizer):
    config = BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, vocab_size=len(synthetic_tokenizer))
    BertModel(config).save_pretrained(tmp_path / "encoder")
    synthetic_tokenizer.save_pretrained(tmp_path / "encoder")
    with pytest.raises(UserError, match="masked-LM head"):
        run_probe(tmp_path / "encoder", tmp_path)
