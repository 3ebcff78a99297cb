"""Decodable vs used (analysis=erasure_use): the readout's change under an erasure agrees with a
forward pass written here, layer by layer, without the intervention engine (to 1e-6); LEACE
leaves the checking probe at the majority baseline; a concept the states do not carry changes
the readout no more than its controls; and the analysis runs end to end through the CLI on a
tiny fine-tuned classifier, writing its metrics, replicates and figure."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import transformers
from conftest import run_cli
from intervention_cases import HEADS, HIDDEN, VOCAB, planted
from reading_models import tiny_config

from bertology.analysis.erasure import compute_random_erasure, compute_shuffled_concept, fit_leace
from bertology.analysis.erasure_use import (
    ERASURES,
    compute_probe_check,
    fit_conditions,
    summarize_effects,
    summarize_probe_check,
)
from bertology.analysis.interventions import Site
from bertology.analysis.readouts import Readout, cache_original, compute_readout_effects
from bertology.config.analysis_settings import ErasureUseSettings
from bertology.run.replicates import bootstrap_indices, compute_item_ids

pytestmark = pytest.mark.usefixtures("one_thread")

CLASSES = 3


def tiny_classifier(layers: int = 2) -> transformers.PreTrainedModel:
    """A random BERT sequence classifier, eager attention, weights large enough that an edit
    at a layer shows in its predictions."""
    torch.manual_seed(0)
    config = tiny_config("bert", VOCAB, 0, layers=layers, heads=HEADS, hidden=HIDDEN,
                         initializer_range=0.2, num_labels=CLASSES)
    config._attn_implementation = "eager"
    return transformers.BertForSequenceClassification(config).eval()


def tiny_readout(model, examples: int = 40, batch: int = 8, seed: int = 0) -> Readout:
    """Random token ids of uneven lengths, padded per batch (id 0), random labels."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, 12, size=examples)
    batches, targets, texts = [], [], []
    for start in range(0, examples, batch):
        chunk = lengths[start: start + batch]
        ids = torch.zeros((len(chunk), int(chunk.max())), dtype=torch.long)  # (batch, tokens)
        mask = torch.zeros_like(ids)
        for row, n in enumerate(chunk):
            ids[row, :n] = torch.as_tensor(rng.integers(1, VOCAB, size=n))
            mask[row, :n] = 1
            texts.append(ids[row, :n].tolist())
        batches.append({"input_ids": ids, "attention_mask": mask})
        targets.append(torch.as_tensor(rng.integers(0, CLASSES, size=len(chunk))))
    return cache_original(Readout("task", model, batches, targets, compute_item_ids(texts),
                                  examples))


def states_at(model, readout: Readout, layer: int) -> np.ndarray:
    """(tokens, hidden) every non-padding token's hidden state `layer`."""
    rows = []
    with torch.no_grad():
        for inputs in readout.batches:
            hidden = model(**inputs, output_hidden_states=True).hidden_states[layer]
            rows.append(hidden[inputs["attention_mask"].bool()].double().numpy())
    return np.concatenate(rows)


def logits_by_hand(model, inputs: dict, layer: int, erasure) -> torch.Tensor:
    """The classifier's logits with hidden state `layer` replaced by x A + b at the non-padding
    tokens: the states below from output_hidden_states, the layers above called one by one on
    the edited states, then the pooler and the classifier; no hook."""
    with torch.no_grad():
        hidden = model(**inputs, output_hidden_states=True).hidden_states[layer]
        keep = inputs["attention_mask"].bool()[..., None]  # (batch, tokens, 1)
        edited = hidden.double() @ torch.as_tensor(erasure.matrix) + torch.as_tensor(
            erasure.offset)
        hidden = torch.where(keep, edited.float(), hidden)  # (batch, tokens, hidden)
        # BERT's additive mask: 0 where a key is a token, the dtype's minimum at padding
        padding = 1.0 - inputs["attention_mask"][:, None, None, :].float()  # (batch, 1, 1, keys)
        extended = padding * torch.finfo(torch.float32).min
        for block in model.bert.encoder.layer[layer:]:
            out = block(hidden, attention_mask=extended)
            hidden = out[0] if isinstance(out, tuple) else out
        return model.classifier(model.bert.pooler(hidden))


@pytest.mark.parametrize("layer", [0, 1, 2])
def test_the_readout_change_matches_a_forward_pass_by_hand(layer):
    model = tiny_classifier()
    readout = tiny_readout(model)
    x = states_at(model, readout, layer)
    labels = np.arange(len(x)) % CLASSES
    conditions = {"concept": fit_leace(x, labels),
                  "subspace": compute_random_erasure(HIDDEN, 2, seed=1)}
    counts = compute_readout_effects(readout, layer, conditions, desc="test")
    flips, kl, correct = [], [], []
    for inputs, targets in zip(readout.batches, readout.targets):
        with torch.no_grad():
            original = model(**inputs).logits.double()
        p = torch.log_softmax(original, -1)
        per_condition = []
        for name in ("concept", "subspace"):
            erased = logits_by_hand(model, inputs, layer, conditions[name]).double()
            q = torch.log_softmax(erased, -1)
            per_condition.append(((p.exp() * (p - q)).sum(-1).numpy(),
                                  (erased.argmax(-1) != original.argmax(-1)).numpy(),
                                  (erased.argmax(-1) == targets).numpy()))
        kl.append(np.stack([c[0] for c in per_condition]))
        flips.append(np.stack([c[1] for c in per_condition]))
        correct.append(np.stack([c[2] for c in per_condition]))
    kl, flips, correct = (np.concatenate(v, axis=1) for v in (kl, flips, correct))
    for i, name in enumerate(("concept", "subspace")):
        np.testing.assert_allclose(counts[name]["kl"], kl[i], atol=1e-6)
        np.testing.assert_array_equal(counts[name]["flips"], flips[i])
        np.testing.assert_array_equal(counts[name]["correct"], correct[i])
        assert np.all(counts[name]["scored"] == 1)
    assert counts["concept"]["kl"].sum() > 1e-3  # the erasure did change the predictions
    assert np.all(counts["original"]["flips"] == 0) and np.all(counts["original"]["kl"] == 0)


def test_summaries_are_ratios_of_sums_over_items():
    rng = np.random.default_rng(0)
    counts = {c: {"scored": np.full(50, 2.0), "flips": rng.integers(0, 3, 50).astype(float),
                  "kl": rng.random(50), "correct": rng.integers(0, 3, 50).astype(float)}
              for c in ("original", *ERASURES)}
    metrics, replicates = summarize_effects(counts, "p")
    assert metrics["p/concept/flip"] == pytest.approx(counts["concept"]["flips"].sum() / 100)
    assert metrics["p/excess"] == pytest.approx(
        metrics["p/concept/flip"] - metrics["p/subspace/flip"])
    assert metrics["p/shuffled/drop"] == pytest.approx(
        (counts["original"]["correct"].sum() - counts["shuffled"]["correct"].sum()) / 100)
    assert set(metrics) == set(replicates) and len(replicates["p/excess"]) == 400


def test_leace_leaves_the_checking_probe_at_the_majority_baseline():
    """The check each layer records: decodable before (far above the majority tag), at the
    majority baseline after, within 4 binomial standard errors of the eval words."""
    x, labels = planted(3000, 32, seed=3, classes=4, separation=0.8)
    train, evaluation = (x[:2000], labels[:2000]), (x[2000:], labels[2000:])
    settings = ErasureUseSettings(max_probe_words=None)
    correct = compute_probe_check(train, evaluation, fit_leace(*train), settings, seed=0)
    check = {name: right.mean() for name, right in correct.items()}
    band = 4 * np.sqrt(check["probe_majority"] * (1 - check["probe_majority"]) / 1000)
    assert check["probe_before"] > 0.9
    assert abs(check["probe_after"] - check["probe_majority"]) <= band


def test_the_probe_check_is_resampled_over_sentences_on_shared_resamples():
    """Worked by hand: 3 sentences of 2, 1 and 3 labelled words. The accuracies are over the
    6 words (before 5/6, majority 3/6); each replicate is a ratio of sums over the resampled
    sentences, every column on the same resamples; a probe right on exactly the majority
    tag's words differs from it by 0 on every resample (the guard's exact zero)."""
    sentence_of = np.array([0, 0, 1, 2, 2, 2])
    correct = {"probe_before": np.array([1, 1, 0, 1, 1, 1], dtype=bool),
               "probe_majority": np.array([1, 0, 0, 1, 0, 1], dtype=bool)}
    correct["probe_after"] = correct["probe_majority"].copy()
    metrics, replicates = summarize_probe_check(correct, sentence_of, 3, "p")
    assert metrics == {"p/probe_before": 5 / 6, "p/probe_majority": 0.5, "p/probe_after": 0.5}
    indices = bootstrap_indices(3)
    right, words = np.array([1.0, 0, 2]), np.array([2.0, 1, 3])
    expected = right[indices].sum(axis=1) / words[indices].sum(axis=1)
    np.testing.assert_allclose(replicates["p/probe_majority"], expected, rtol=1e-12)
    assert np.array_equal(replicates["p/probe_after"] - replicates["p/probe_majority"],
                          np.zeros(len(indices)))


def test_a_concept_the_states_do_not_carry_changes_no_more_than_its_controls():
    """Noise: labels drawn at random, independent of the states. LEACE of them and of their
    shuffle are the same kind of erasure, so excess_shuffled's 95% interval over items covers
    0; the subspace control removes as many directions, and the concept's excess over it stays
    small beside the effect itself."""
    model = tiny_classifier()
    readout = tiny_readout(model, examples=400, batch=50, seed=5)
    x = states_at(model, readout, 1)
    labels = np.random.default_rng(9).integers(0, 8, size=len(x))
    conditions = fit_conditions(x, labels, seed=0)
    assert conditions["concept"].rank == conditions["subspace"].rank == 7
    metrics, replicates = summarize_effects(
        compute_readout_effects(readout, 1, conditions, desc="noise"), "n")
    low, high = np.percentile(replicates["n/excess_shuffled"], [2.5, 97.5])
    assert low <= 0 <= high, (low, high)
    # pos_used's contrast on noise: no excess over the random subspace that the items resolve
    assert np.percentile(replicates["n/excess"], 2.5) <= 0 < metrics["n/concept/flip"]


def test_the_mlm_readout_scores_the_masked_words_of_each_sentence():
    """Elazar et al.'s readout: every masked word is scored, item by item (a sentence); the
    unperturbed condition changes nothing; an erasure's counts per sentence add up to the
    masked words whose top-1 changed, computed here from the logits."""
    from conftest import tiny_tokenizer
    from intervention_cases import tiny_mlm

    from bertology.analysis.readouts import build_mlm_readout, run_readout
    from bertology.data.probe_sentences import ProbeSentence

    words = ["the", "dog", "cat", "runs", "sleeps", "."]
    rng = np.random.default_rng(0)
    sentences = [ProbeSentence(tuple(rng.choice(words, size=rng.integers(3, 8))), ())
                 for _ in range(30)]
    model = tiny_mlm()
    readout = build_mlm_readout(model, tiny_tokenizer(), sentences, 0.3, 0, 8, 32)
    masked = [int((t != -100).sum(dim=1)[i]) for t in readout.targets for i in range(len(t))]
    erasure = compute_random_erasure(HIDDEN, 4, seed=0)
    counts = compute_readout_effects(readout, 1, {"subspace": erasure}, desc="mlm")
    np.testing.assert_array_equal(counts["original"]["scored"], masked)
    assert counts["original"]["flips"].sum() == 0 and sum(masked) > 0
    flips = []
    for index, targets in enumerate(readout.targets):
        erased = run_readout(readout, index, Site(1), erasure)[targets != -100]
        changed = erased.argmax(-1) != readout.original[index].argmax(-1)
        rows = (targets != -100).nonzero()[:, 0]
        flips += [int(changed[rows == i].sum()) for i in range(len(targets))]
    np.testing.assert_array_equal(counts["subspace"]["flips"], flips)


def test_the_shuffled_concept_keeps_the_label_counts():
    labels = np.repeat(np.arange(5), [1, 2, 3, 4, 5])
    shuffled = compute_shuffled_concept(labels, seed=0)
    assert sorted(shuffled) == sorted(labels) and not np.array_equal(shuffled, labels)


@pytest.mark.slow
def test_the_analysis_runs_through_the_cli_on_a_tiny_classifier(tmp_path, negation_model):
    """probe task=synthetic_pos with compare_to a tiny BERT fine-tuned on synthetic negation:
    per layer the three conditions, the probe check and the twin arm (the same model standing
    in for its twin), with replicates over the negation task's eval examples and the figure."""
    result = run_cli("probe", "task=synthetic_pos", "analysis=erasure_use", "logger=none",
                     f"model.name_or_path={negation_model}", f"compare_to={negation_model}",
                     "analysis.erasure_use.task=synthetic_negation",
                     "analysis.erasure_use.max_examples=60", "max_train_sentences=120",
                     "max_eval_sentences=40", f"hydra.run.dir={tmp_path / 'run'}",
                     f"paths.cache_dir={tmp_path / 'cache'}", cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    run = tmp_path / "run"
    metrics = json.loads((run / "metrics.json").read_text())
    layers = 1 + max(int(k.split("layer_")[1][:2]) for k in metrics if "layer_" in k)
    for layer in range(layers):
        key = f"erasure_use/task/layer_{layer:02d}"
        for condition in ERASURES:
            assert 0 <= metrics[f"{key}/{condition}/flip"] <= 1
        assert metrics[f"{key}/probe_before"] > metrics[f"{key}/probe_majority"]
        assert metrics[f"{key}/probe_after"] <= metrics[f"{key}/probe_majority"] + 0.05
    assert (run / "plots" / "erasure_use_synthetic_pos_task.png").exists()
    replicates = (run / "replicates" / "erasure_use_synthetic_pos_erasure_use_task.csv")
    assert "erasure_use/task/layer_00/excess" in replicates.read_text().splitlines()[0]


@pytest.mark.slow
def test_pos_used_does_not_hold_when_the_twin_is_the_model(tmp_path, negation_model):
    """The twin null through the report's own code: three seeds of the probe study whose
    compare_to_twin is compare_to itself (a model that training gave nothing its twin lacks),
    so the contrast with the twin is 0 on every seed and resample; pos_used must not hold."""
    import shutil

    from conftest import compose_config
    from omegaconf import OmegaConf

    from bertology.pipelines import probe
    from bertology.study.judge.catalog import load_catalog
    from bertology.study.judge.results import find_runs
    from bertology.study.judge.verdicts import judge

    twin = tmp_path / "twin" / "model"  # the same weights, with no finetune run recorded
    shutil.copytree(negation_model, twin)
    for seed in (0, 1, 2):
        cfg = compose_config("probe", [
            "task=synthetic_pos", "analysis=erasure_use", "logger=none", f"seed={seed}",
            "+label=probe_pos", f"model.name_or_path={negation_model}",
            f"compare_to={negation_model}", f"compare_to_twin={twin}",
            "analysis.erasure_use.max_examples=40", "max_train_sentences=120",
            "max_eval_sentences=30", f"paths.cache_dir={tmp_path / 'cache'}"])
        run_dir = tmp_path / "runs" / str(seed)
        (run_dir / ".hydra").mkdir(parents=True)
        OmegaConf.save(cfg, run_dir / ".hydra" / "config.yaml")
        probe.run(cfg, run_dir)
    runs = find_runs([tmp_path / "runs"])
    result = judge(load_catalog()["pos_used"], runs)
    twin_part = result.tests[1].estimate
    assert twin_part.mean == pytest.approx(0.0, abs=1e-12)
    assert result.raw != "holds", result.raw_note
