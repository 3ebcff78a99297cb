"""MDL probing (Voita & Titov, 2020, §3.2), checked against computations made here
independently: the softmax probe's objective against scikit-learn's, the online code's blocks
against closed forms and a numpy/scipy fit, compression on noise and on an encoded label, and
the control task's code (Hewitt & Liang, 2019) against the task's."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import compose_config
from scipy.optimize import brentq, minimize
from scipy.special import logsumexp, softmax
from sklearn.linear_model import LogisticRegression

from bertology.analysis import mdl, probe_fits, probes
from bertology.config.analysis_settings import LinearSettings, MLPSettings
from bertology.pipelines import probe

LOG2_3 = math.log2(3)


def standardise(prefix: np.ndarray, x: np.ndarray) -> np.ndarray:
    """As StandardScaler: population std, a constant feature left at scale 1."""
    std = prefix.std(axis=0)
    return (x - prefix.mean(axis=0)) / np.where(std < 1e-12, 1.0, std)


def reference_proba(x_prefix, y_prefix, x_block, classes: int, c: float) -> np.ndarray:
    """argmin sum CE + ||[W; b]||² / (2C) over all `classes`, by scipy, with its gradient
    written out here: (block, classes) probabilities."""
    z = np.hstack([standardise(x_prefix, x_prefix), np.ones((len(y_prefix), 1))])
    onehot = np.eye(classes)[y_prefix]

    def objective(theta):
        weights = theta.reshape(z.shape[1], classes)  # (dim + 1, classes)
        logits = z @ weights
        loss = (logsumexp(logits, axis=1) - (logits * onehot).sum(axis=1)).sum()
        grad = z.T @ (softmax(logits, axis=1) - onehot) + weights / c
        return loss + (weights ** 2).sum() / (2 * c), grad.ravel()

    theta = minimize(objective, np.zeros(z.shape[1] * classes), jac=True, method="L-BFGS-B",
                     options={"gtol": 1e-10, "ftol": 1e-15, "maxiter": 2000}).x
    block = np.hstack([standardise(x_prefix, x_block), np.ones((len(x_block), 1))])
    return softmax(block @ theta.reshape(-1, classes), axis=1)


def linear_fit(c: float = 1.0):
    settings = LinearSettings(c=c)
    return lambda x, y: mdl.fit_softmax(x, y, 3, settings, seed=0)


def test_the_block_ends_are_voita_and_titovs_shares():
    assert mdl.compute_block_ends(10000) == [10, 20, 40, 80, 160, 320, 625, 1250, 2500,
                                                5000, 10000]
    assert mdl.compute_block_ends(40) == [1, 2, 5, 10, 20, 40]  # tiny: shares merge


def test_the_softmax_probe_minimises_scikit_learns_objective_with_the_bias_penalised():
    # scikit-learn without an intercept, on [standardised x; 1], penalises the bias column
    # too: the same objective, sum CE + ||[W; b]||² / (2C), solved by different code
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 300)
    x = rng.normal(size=(300, 5)) + 1.5 * np.eye(3, 5)[y]
    ours = mdl.fit_softmax(x, y, 3, LinearSettings(c=0.3), seed=0)(x)
    z = np.hstack([standardise(x, x), np.ones((300, 1))])
    sklearn = LogisticRegression(C=0.3, fit_intercept=False, tol=1e-10, max_iter=5000).fit(z, y)
    assert np.abs(ours - sklearn.predict_proba(z)).max() < 1e-5  # measured: 1.3e-6


def test_an_unseen_class_costs_the_closed_form_bits_and_the_first_block_is_uniform():
    # Constant features standardise to 0, so each probe is its bias alone. Its optimum
    # satisfies n·p_k − n_k + b_k / C = 0 and hence Σ b = 0. After one label of class 0
    # (n = 1): b = (2c, −c, −c) with p_1 = c / C = 1 / (e^{3c} + 2). After classes 0 and 1
    # (n = 2): b = (a, a, −2a) with p_2 = a / C = 1 / (2e^{3a} + 1).
    c_strength = 0.5
    y = np.array([0, 1, 2, 0, 1] + [0, 1, 2] * 12)[:40]
    x = np.ones((40, 2))
    bits = mdl.compute_block_bits(x, y, 3, linear_fit(c_strength))
    c = brentq(lambda c: c / c_strength - 1 / (math.exp(3 * c) + 2), 0, 1)
    a = brentq(lambda a: a / c_strength - 1 / (2 * math.exp(3 * a) + 1), 0, 1)
    p_unseen = a / c_strength
    assert bits[0] == pytest.approx(1 * LOG2_3, abs=1e-12)  # n0 = 1 unit, sent uniformly
    assert bits[1] == pytest.approx(-math.log2(c / c_strength), abs=1e-4)
    seen = -math.log2((1 - p_unseen) / 2)
    assert bits[2] == pytest.approx(-math.log2(p_unseen) + 2 * seen, abs=1e-4)
    # the unseen label is modest (~2 bits), nowhere near a clipped −log2(1e-12) = 39.9
    assert -math.log2(p_unseen) < 3 * LOG2_3


def test_every_block_costs_minus_log2_of_an_independently_fit_probe():
    rng = np.random.default_rng(1)
    # class 2 first shows up after unit 10, inside the block (10, 20]
    y = np.concatenate([rng.integers(0, 2, 10), [2, 0, 2, 1, 2, 0, 1, 2, 2, 0],
                        rng.integers(0, 3, 20)])
    x = rng.normal(size=(40, 2)) + np.array([[0.0, 0.0], [2.0, 0.0], [0.0, 2.0]])[y]  # (units, 2)
    bits = mdl.compute_block_bits(x, y, 3, linear_fit())
    ends = mdl.compute_block_ends(40)
    expected = [ends[0] * LOG2_3]
    for start, end in zip(ends, ends[1:]):
        proba = reference_proba(x[:start], y[:start], x[start:end], 3, c=1.0)
        expected.append(-np.log2(proba[np.arange(end - start), y[start:end]]).sum())
    assert bits == pytest.approx(expected, abs=1e-5)  # measured: 1.1e-6 bits
    unseen = reference_proba(x[:10], y[:10], x[10:20], 3, c=1.0)[y[10:20] == 2, 2]
    assert np.all(-np.log2(unseen) < 3 * LOG2_3)


@pytest.mark.parametrize("kind,settings", [
    ("linear", LinearSettings()),
    ("mlp", MLPSettings(hidden_size=32, epochs=20, lr=1e-2)),  # trains on tiny prefixes too
])
def test_compression_is_about_one_on_noise_and_well_above_on_an_encoded_label(kind, settings):
    rng = np.random.default_rng(0)
    y = rng.integers(0, 4, 2000)
    noise = rng.normal(size=(2000, 8))
    encoded = noise + 3.0 * np.eye(4, 8)[y]

    def fit(x, labels, seed):
        return probe_fits.MDL_FITS[kind](x, labels, 4, settings, seed)

    bits, compression = mdl.compute_online_codelength(encoded, y, 4, fit, seed=0)
    assert compression > 2 and bits == pytest.approx(2000 * 2 / compression)
    _, noise_compression = mdl.compute_online_codelength(noise, y, 4, fit, seed=0)
    assert noise_compression < 1.02  # nothing to learn: no better than the uniform code


def test_the_control_task_code_is_longer_than_the_task_code_when_only_the_label_is_encoded():
    # 300 word types, each with a task label; the features carry the label, not the type,
    # so the control task (a random label per type) has nothing to compress it with
    rng = np.random.default_rng(0)
    type_labels = rng.integers(0, 3, 300)
    tokens = rng.integers(0, 300, 3000)
    labels = type_labels[tokens]
    units = probes.Units(np.arange(3000), labels, [f"w{t}" for t in tokens])
    layer = rng.normal(size=(3000, 6)) + 2.5 * np.eye(3, 6)[labels]  # (units, dim)
    data = probes.ProbeData(units, units, 3, np.bincount(labels) / 3000)
    settings = LinearSettings(mdl=True, max_train_words=None)
    row = probes.probe_layer("linear", settings, data, layer, layer, seed=0, control=True)
    assert row["compression"] > 2 and row["control_compression"] < 1.05
    assert row["control_codelength_kbits"] > row["codelength_kbits"]
    assert row["codelength_gap_kbits"] == pytest.approx(
        row["control_codelength_kbits"] - row["codelength_kbits"])


@pytest.mark.slow
def test_a_run_with_mdl_reports_task_and_control_codes_per_layer(tmp_path):
    cfg = compose_config("probe", [
        "logger=none", "init=random", "seeds=[0]", "max_train_sentences=200",
        "max_eval_sentences=50", "analysis.linear.mdl=true", "analysis.linear.max_train_words=1000",
        f"paths.cache_dir={tmp_path / 'cache'}"])
    metrics = probe.run(cfg, tmp_path / "run")
    table = (tmp_path / "run" / "tables" / "linear_synthetic_pos.csv").read_text()
    assert {"codelength_kbits", "compression", "control_codelength_kbits",
            "control_compression", "codelength_gap_kbits"} <= set(table.splitlines()[0].split(","))
    for layer in range(3):
        key = f"probe/layer_{layer:02d}"
        assert metrics[f"{key}/compression"] > 1
        assert metrics[f"{key}/codelength_gap_kbits"] == pytest.approx(
            metrics[f"{key}/control_codelength_kbits"] - metrics[f"{key}/codelength_kbits"])
        assert f"probe/random/layer_{layer:02d}/compression" in metrics
        # the twin runs the control task too: selectivity's difference-in-differences
        # (mlp_less_selective) reads the twin's control code beside the model's
        twin = f"probe/random/layer_{layer:02d}"
        assert metrics[f"{twin}/codelength_gap_kbits"] == pytest.approx(
            metrics[f"{twin}/control_codelength_kbits"] - metrics[f"{twin}/codelength_kbits"])


def test_the_mlp_code_is_finite_when_the_first_block_is_one_unit():
    """n < 1,500: the first block is one unit, so the MLP is fit on one row, whose every
    feature is constant; it must still give every class p > 0 on the next block."""
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(800, 32)), rng.integers(0, 5, 800)
    settings = MLPSettings()
    row = mdl.compute_mdl_metrics(lambda a, b, s: probe_fits.fit_mlp(a, b, 5, settings, s),
                                  x, y, None, 5, seed=0)
    assert np.isfinite(row["codelength_kbits"]) and 0.5 < row["compression"] < 1.1
