"""analysis=position: the linear position probe (Lin et al., 2019) of the model and of its
random-init twin, whose paired contrast (model − twin) is the null for what pretraining adds.
The analysis runs end to end through the probe pipeline on a tiny random BERT; where the
features are made by hand (extraction replaced), the answer is known in advance."""

from __future__ import annotations

import csv
import hashlib

import numpy as np
import pytest
from conftest import compose_config

from bertology.analysis import probe_context as context
from bertology.analysis.features import Features
from bertology.analysis.position import correct_by_sentence
from bertology.run.replicates import REPLICATES, read_replicates
from bertology.study.judge.evidence import reduce_slope

QUIET = ["analysis=position", "logger=none", "init=random", "seeds=[0,1]",
         "max_train_sentences=200", "max_eval_sentences=80"]
LAYERS = np.arange(3)  # size=tiny: embeddings + 2 layers

pytestmark = pytest.mark.usefixtures("one_thread")


def probe(tmp_path, overrides: list[str] = ()):
    from bertology.pipelines.probe import run

    out = tmp_path / "run"
    cfg = compose_config("probe", [*QUIET, f"paths.cache_dir={tmp_path / 'cache'}",
                                   *overrides])
    return run(cfg, out), out


def read_table(path) -> list[dict]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def curves(replicates: dict, prefix: str) -> np.ndarray:
    """(replicates, layers) of one encoder's accuracy curve."""
    return np.stack([replicates[f"{prefix}/layer_{layer:02d}/accuracy"] for layer in LAYERS],
                    axis=-1)


def contrast_interval(out) -> tuple[float, float]:
    """The 95% percentile interval of the paired slope contrast, model − twin, over the
    run's sentence resamples."""
    replicates = read_replicates(out)
    contrast = (reduce_slope(LAYERS, curves(replicates, "position"))
                - reduce_slope(LAYERS, curves(replicates, "position/random")))
    low, high = np.quantile(contrast, [0.025, 0.975])
    return float(low), float(high)


def test_sentence_counts_by_hand():
    correct = np.array([1.0, 0.0, 1.0, 1.0, 0.0])
    hits, words = correct_by_sentence(correct, np.array([0, 0, 2, 2, 2]), sentences=3)
    assert hits.tolist() == [1.0, 0.0, 2.0] and words.tolist() == [2.0, 0.0, 3.0]


def test_the_twin_is_probed_beside_the_model(tmp_path):
    metrics, out = probe(tmp_path)
    rows = read_table(out / "tables" / "position_synthetic_pos.csv")
    assert {(row["model"], int(row["layer"])) for row in rows} == {
        (which, layer) for which in ("model", "random") for layer in LAYERS}
    replicates = read_replicates(out)
    for prefix, which in (("position", "model"), ("position/random", "random")):
        for layer in LAYERS:
            key = f"{prefix}/layer_{layer:02d}/accuracy"
            seeds = [float(r["accuracy"]) for r in rows
                     if r["model"] == which and int(r["layer"]) == layer]
            assert len(seeds) == 2 and metrics[key] == pytest.approx(np.mean(seeds))
            assert replicates[key].shape == (REPLICATES,)
            # the seeds' mean accuracy on resampled sentences scatters around the point value
            assert abs(np.mean(replicates[key]) - metrics[key]) < 3 * np.std(replicates[key])
    assert (out / "plots" / "position_synthetic_pos.png").exists()


def test_the_twin_shares_the_models_word_samples_and_resamples(tmp_path, monkeypatch):
    """With the twin drawn with the model's very weights, model − twin is exactly zero on
    every resample: both probes saw the same training words and every replicate scored the
    same sentences (other resamples would differ by the sampling error, ~0.01 here)."""
    same_weights = context.random_like
    monkeypatch.setattr(context, "random_like", lambda model, seed: same_weights(model, 0))
    metrics, out = probe(tmp_path)
    replicates = read_replicates(out)
    for layer in LAYERS:
        model = replicates[f"position/layer_{layer:02d}/accuracy"]
        twin = replicates[f"position/random/layer_{layer:02d}/accuracy"]
        assert np.std(model) > 0 and np.array_equal(model, twin)
        assert (metrics[f"position/layer_{layer:02d}/accuracy"]
                == metrics[f"position/random/layer_{layer:02d}/accuracy"])


def made_features(signal):
    """extract_or_load's stand-in: Gaussian states (seeded by which encoder and split is
    extracted) plus, in the first 16 dimensions, signal(encoder, layer) × the one-hot of the
    word's index in its sentence (capped at 15, the probe's last class)."""

    def extract(model, model_fingerprint, tokenizer, sentences, cache_dir, pooling, attention,
                batch_size, max_length, desc) -> Features:
        which = desc.split()[-1].split("/")[0]  # "extract random/eval" → random
        rng = np.random.default_rng(list(hashlib.sha256(desc.encode()).digest()[:8]))
        index = np.concatenate([np.arange(len(s.words)) for s in sentences]).clip(max=15)
        hidden = rng.normal(size=(len(LAYERS), len(index), model.config.hidden_size))
        for layer in LAYERS:
            hidden[layer, np.arange(len(index)), index] += signal(which, layer)
        offsets = np.concatenate([[0], np.cumsum([len(s.words) for s in sentences])])
        return Features(hidden.astype(np.float16), offsets.astype(np.int64), num_heads=2)

    return extract


def test_on_random_features_the_contrast_covers_zero(tmp_path, monkeypatch):
    monkeypatch.setattr(context, "extract_or_load", made_features(lambda which, layer: 0.0))
    metrics, out = probe(tmp_path)
    low, high = contrast_interval(out)
    assert low < 0 < high
    assert all(metrics[f"position/random/layer_{layer:02d}/accuracy"] < 0.35
               for layer in LAYERS)  # noise: near the majority class, far from the signal's


def test_position_that_fades_in_the_model_only_is_a_contrast_with_the_twin(tmp_path,
                                                                          monkeypatch):
    """The model's position signal fades over depth (3, 1.5, 0), the twin's stays at 1.5:
    the contrast of slopes is negative and its interval leaves out zero."""
    fading = made_features(lambda which, layer: 1.5 if which == "random" else 3.0 - 1.5 * layer)
    monkeypatch.setattr(context, "extract_or_load", fading)
    metrics, out = probe(tmp_path)
    low, high = contrast_interval(out)
    assert high < 0
    accuracy = [metrics[f"position/layer_{layer:02d}/accuracy"] for layer in LAYERS]
    assert accuracy[0] > accuracy[1] > accuracy[2]
