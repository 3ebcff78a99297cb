"""MDL probing (Voita & Titov, 2020, "Information-Theoretic Probing with Minimum Description
Length", §3.2): the online code length of a probe's labels.

The training units, in a seeded random order, are cut at 0.1%, 0.2%, 0.4%, …, 25%, 50%, 100%;
the first block is sent with the uniform code, log2 K bits a label; every later block costs
−log2 p(y|x) bits a label under a probe fit on all the blocks before it. Compression = uniform
code (n·log2 K) / online code. Their probe is a softmax over all K classes, so a label absent
from the prefix still gets the finite probability the probe gives it: the linear kind uses a
torch K-way softmax with L2 on weights and bias (fit_softmax: scikit-learn models only the
classes it saw, and an unseen class got p = 0); the MLP probe already has K outputs. With the
control task on, the control labels get an online code too, and the gap (control − task, in
kbits) is Voita & Titov's comparison of the two.
"""

from __future__ import annotations

import math
from contextlib import contextmanager

import numpy as np
import torch
from sklearn.preprocessing import StandardScaler
from torch import nn

from bertology.config.analysis_settings import LinearSettings

# Voita & Titov (2020) §3.2: the online code's block boundaries, as shares of the train set
MDL_FRACTIONS = (0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.0625, 0.125, 0.25, 0.5, 1.0)


@contextmanager
def one_torch_thread():
    """One intra-op thread while a small probe fits, as fit_logistic's one BLAS thread: more
    threads contend and slow the online code's many small fits (docs/probing.md, "One thread
    per probe fit")."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def fit_softmax(x: np.ndarray, y: np.ndarray, classes: int, settings: LinearSettings,
                seed: int):
    """The online code's linear probe (Voita & Titov, 2020): a softmax over all K classes on
    standardised features, returns predict_proba. Minimises sum of cross-entropies +
    ||[W; b]||² / (2C), scikit-learn's objective for C (its lbfgs leaves the bias unpenalised;
    here the bias is penalised too, so that a class absent from the fit keeps a bounded logit
    instead of drifting to −∞). The objective is strictly convex and starts from zero, so
    L-BFGS finds the same optimum for every seed (the seed is unused)."""
    scaler = StandardScaler().fit(x)
    inputs = torch.from_numpy(np.asarray(scaler.transform(x), dtype=np.float64))
    targets = torch.from_numpy(np.asarray(y, dtype=np.int64))
    probe = nn.Linear(x.shape[1], classes, dtype=torch.float64)
    nn.init.zeros_(probe.weight)
    nn.init.zeros_(probe.bias)
    # tolerances below torch's defaults: a few more iterations reach the optimum to ~1e-6 in p
    optimizer = torch.optim.LBFGS(probe.parameters(), max_iter=settings.max_iter,
                                  tolerance_grad=1e-9, tolerance_change=1e-12,
                                  line_search_fn="strong_wolfe")
    strength = 1.0 / (2.0 * settings.c * len(y))  # the 1/(2C) above, over a mean loss

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        penalty = probe.weight.square().sum() + probe.bias.square().sum()
        loss = nn.functional.cross_entropy(probe(inputs), targets) + strength * penalty
        loss.backward()
        return loss

    with one_torch_thread():
        optimizer.step(closure)

    @torch.no_grad()
    def predict_proba(features: np.ndarray) -> np.ndarray:
        """(n, classes), float64: every class, seen or not, gets p > 0."""
        scaled = torch.from_numpy(np.asarray(scaler.transform(features), dtype=np.float64))
        return torch.softmax(probe(scaled), dim=-1).numpy()

    return predict_proba


def compute_block_ends(n: int) -> list[int]:
    """Voita & Titov (2020) §3.2: the blocks end at MDL_FRACTIONS of the n units (at least
    one unit in the first block; shares that round to the same unit merge)."""
    return sorted({max(1, int(round(f * n))) for f in MDL_FRACTIONS})


def compute_block_bits(x: np.ndarray, y: np.ndarray, classes: int, fit) -> np.ndarray:
    """Bits per block for units already in transmission order: the first block costs
    log2(K) a label (uniform code), each next block −log2 p(y|x) under fit(prefix), which
    must give all K classes p > 0 (MDL_FITS), so an unseen label costs finite bits."""
    ends = compute_block_ends(len(y))
    bits = [ends[0] * math.log2(classes)]
    for start, end in zip(ends, ends[1:]):
        proba = fit(x[:start], y[:start])(x[start:end])  # (block, classes)
        bits.append(float(-np.log2(proba[np.arange(end - start), y[start:end]]).sum()))
    return np.array(bits)


def compute_online_codelength(x: np.ndarray, y: np.ndarray, classes: int, fit, seed: int
                              ) -> tuple[float, float]:
    """Voita & Titov (2020) §3.2: the online code of the labels in a seeded random order.
    fit(x, y, seed) returns predict_proba over all K classes. Returns (online code length in
    bits, compression = uniform code n·log2 K / online code)."""
    order = np.random.default_rng(seed).permutation(len(y))
    bits = float(compute_block_bits(x[order], y[order], classes,
                                    lambda xs, ys: fit(xs, ys, seed)).sum())
    return bits, len(y) * math.log2(classes) / bits


def compute_mdl_metrics(fit, x: np.ndarray, labels: np.ndarray,
                        control_labels: np.ndarray | None, classes: int, seed: int
                        ) -> dict[str, float]:
    """The task's online code (kbits) and compression; with control labels, the control
    task's too and the gap control − task, Voita & Titov's (2020) comparison of the two."""
    bits, compression = compute_online_codelength(x, labels, classes, fit, seed)
    row = {"codelength_kbits": bits / 1000, "compression": compression}
    if control_labels is not None:
        control_bits, control_compression = compute_online_codelength(
            x, control_labels, classes, fit, seed)
        row.update(control_codelength_kbits=control_bits / 1000,
                   control_compression=control_compression,
                   codelength_gap_kbits=(control_bits - bits) / 1000)
    return row
