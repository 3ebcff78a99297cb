"""The intervention tests' cases: tiny random masked-LMs of a family row, planted linear
concepts (Gaussian states whose mean depends on a class), and LEACE computed by a road of the
tests' own."""

from __future__ import annotations

import numpy as np
import scipy.linalg
import torch
import transformers
from reading_models import tiny_config

from bertology.families import every_family

VOCAB, HEADS, HIDDEN = 100, 4, 32


def tiny_mlm(name: str = "bert", layers: int = 2, dtype=torch.float32) -> torch.nn.Module:
    """A random masked-LM of the family row's class, eager attention, in eval mode."""
    torch.manual_seed(0)
    row = every_family()[name]
    config = tiny_config(row.model_type, VOCAB, 1, layers=layers, heads=HEADS, hidden=HIDDEN,
                         initializer_range=0.2)  # larger weights: a site's edit shows
    config._attn_implementation = "eager"
    return getattr(transformers, row.mlm_class)(config).to(dtype).eval()


def planted(n: int, dim: int, seed: int, classes: int = 3, separation: float = 2.0
            ) -> tuple[np.ndarray, np.ndarray]:
    """(n, dim) anisotropic Gaussian states (standard deviations 0.3 to 3 along a random
    basis) whose mean depends on a concept of `classes` balanced classes, and the labels."""
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % classes
    scales = np.logspace(-0.5, 0.5, dim)
    rotation, _ = np.linalg.qr(rng.standard_normal((dim, dim)))
    means = separation * rng.standard_normal((classes, dim))
    return rng.standard_normal((n, dim)) * scales @ rotation + means[labels], labels


def leace_by_hand(x: np.ndarray, labels: np.ndarray):
    """Belrose et al.'s formula by another road than the engine's: scipy's matrix square root
    and pseudo-inverses, Bessel-corrected covariances, P = A A⁺."""
    z = np.eye(labels.max() + 1)[labels]
    mu = x.mean(axis=0)
    sigma_xz = (x - mu).T @ (z - z.mean(axis=0)) / (len(x) - 1)
    w = np.linalg.pinv(scipy.linalg.sqrtm(np.cov(x, rowvar=False)).real)
    a = w @ sigma_xz
    # the one-hot columns of Σ_XZ sum to zero: rank k − 1, its last singular value a rounding
    # error that pinv's default cut-off can keep
    m = np.linalg.pinv(w) @ (a @ np.linalg.pinv(a, rcond=1e-10)) @ w
    return lambda v: v - (v - mu) @ m.T
