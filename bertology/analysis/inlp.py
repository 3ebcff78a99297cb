"""Iterative nullspace projection (INLP; Ravfogel et al., 2020) and its control, k random
directions: the removal step of amnesic probing (amnesic.py), and the probes' words (a seeded
subsample, INLP's dev split, the majority baseline, a probe on projected states).

INLP fits a linear probe, removes the space its weights span, and repeats on the projected
states until a probe does no better than the majority baseline; what is left is the projection
onto the intersection of the probes' nullspaces.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import scipy.linalg
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from threadpoolctl import threadpool_limits
from tqdm.auto import tqdm

from bertology.errors import require

PROBE_MAX_ITER = 300  # lbfgs iterations; the projected problems converge in far fewer
RANK_TOLERANCE = 1e-8  # singular values below this share of the largest are numerical zeros
DEV_SHARE = 0.1  # of the train words: INLP's dev set, which decides when to stop


@dataclass(frozen=True)
class INLPResult:
    projection: np.ndarray  # (dim, dim) P: onto the intersection of the classifiers' nullspaces
    directions_removed: int  # rank of the removed space, dim - rank(P)
    accuracies: list[float]  # per round: the round's classifier on dev (or its train) words
    ranks: list[int]  # per round: directions removed after it


def fit_linear_probe(x: np.ndarray, y: np.ndarray, seed: int) -> LogisticRegression:
    """A multinomial logistic-regression probe (Ravfogel et al. allow any linear classifier;
    lbfgs is far faster than LinearSVC here). Convergence warnings are expected on the late
    INLP rounds, where nothing is left to separate. One BLAS thread: these matrices are small,
    and OpenBLAS threads contending with torch's slow a fit several times over (docs/probing.md,
    "One thread per probe fit")."""
    probe = LogisticRegression(max_iter=PROBE_MAX_ITER, random_state=seed)
    with warnings.catch_warnings(), threadpool_limits(1, user_api="blas"):
        warnings.simplefilter("ignore", ConvergenceWarning)
        return probe.fit(x, y)


def compute_rowspace_projection(w: np.ndarray) -> np.ndarray:
    """(rows, dim) → (dim, dim) orthogonal projection onto span(rows) (Ravfogel's
    get_rowspace_projection: an orthonormal basis B of Wᵀ, then B Bᵀ)."""
    basis = scipy.linalg.orth(w.T, rcond=RANK_TOLERANCE)  # (dim, rank)
    return basis @ basis.T


def compute_decision_rows(probe: LogisticRegression) -> np.ndarray:
    """(rows, dim) weights that span what the probe reads. A multinomial softmax only sees
    differences of its class rows, so they are centred: their mean is optimiser noise and
    would remove a direction that carries no label. Binary probes have one row."""
    w = probe.coef_  # (classes, dim), or (1, dim) for two classes
    return w - w.mean(axis=0, keepdims=True) if w.shape[0] > 2 else w


def compute_nullspace_projection(rowspace_projections: list[np.ndarray], dim: int
                                 ) -> tuple[np.ndarray, int]:
    """Ravfogel et al.'s final formula: P = I − P_R(Σ_i P_Ri), the projection onto the
    intersection of the nullspaces. The product of the per-round projections would not be a
    projection when the row spaces are not orthogonal. Returns P and the removed rank."""
    if not rowspace_projections:
        return np.eye(dim), 0
    summed = np.sum(rowspace_projections, axis=0)  # (dim, dim)
    basis = scipy.linalg.orth(summed, rcond=RANK_TOLERANCE)  # (dim, removed)
    return np.eye(dim) - basis @ basis.T, basis.shape[1]


def fit_inlp(x: np.ndarray, y: np.ndarray, iterations: int, seed: int,
             dev: tuple[np.ndarray, np.ndarray] | None = None,
             min_accuracy: float | None = None) -> INLPResult:
    """Iterative nullspace projection (Ravfogel et al., 2020, Alg. 1): each round fits a linear
    classifier on the projected x, adds its row space W (classes × dim) to the removed space
    and recomputes P from all of them. A round whose classifier scores no more than
    `min_accuracy` on dev (Ravfogel's min_accuracy; Elazar et al. go on until the probe is at
    the majority baseline) has found nothing: it removes nothing and ends INLP, as does
    removing the whole space."""
    x = np.asarray(x, dtype=np.float64)
    dev_x, dev_y = (np.asarray(dev[0], dtype=np.float64), dev[1]) if dev is not None else (x, y)
    dim = x.shape[1]
    projections: list[np.ndarray] = []
    projection, removed = np.eye(dim), 0
    accuracies, ranks = [], []
    for _ in tqdm(range(iterations), desc="INLP", leave=False):
        probe = fit_linear_probe(x @ projection, y, seed)
        accuracies.append(float(probe.score(dev_x @ projection, dev_y)))
        if min_accuracy is not None and accuracies[-1] <= min_accuracy:
            ranks.append(removed)
            break
        projections.append(compute_rowspace_projection(compute_decision_rows(probe)))
        projection, removed = compute_nullspace_projection(projections, dim)
        ranks.append(removed)
        if removed >= dim:
            break
    return INLPResult(projection, removed, accuracies, ranks)


def random_projection(dim: int, k: int, seed: int) -> np.ndarray:
    """Elazar et al.'s control: P = I − Q Qᵀ for k random orthonormal directions Q (dim × k),
    Haar-distributed as the QR factor of a Gaussian matrix."""
    require(0 <= k <= dim, f"cannot remove {k} directions from a {dim}-dimensional space")
    gaussian = np.random.default_rng(seed).standard_normal((dim, k))
    basis, _ = np.linalg.qr(gaussian)  # (dim, k)
    return np.eye(dim) - basis @ basis.T


# ---------------------------------------------------------------- the probes' words


def subsample_words(x: np.ndarray, y: np.ndarray, limit: int | None, seed: int
                    ) -> tuple[np.ndarray, np.ndarray]:
    if limit is None or limit >= len(y):
        return x, y
    keep = np.sort(np.random.default_rng(seed).choice(len(y), size=limit, replace=False))
    return x[keep], y[keep]


def split_dev(x: np.ndarray, y: np.ndarray, seed: int
              ) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """A seeded DEV_SHARE of the train words for INLP's stopping rule, so the eval words that
    score the probes after INLP take no part in choosing how much INLP removes."""
    order = np.random.default_rng(seed).permutation(len(y))
    cut = max(1, int(len(y) * DEV_SHARE))
    dev, train = order[:cut], order[cut:]
    return (x[train], y[train]), (x[dev], y[dev])


def majority_label(y_train: np.ndarray):
    """The commonest train label (the smallest where several tie)."""
    values, counts = np.unique(y_train, return_counts=True)
    return values[np.argmax(counts)]


def compute_majority_accuracy(y_train: np.ndarray, y_eval: np.ndarray) -> float:
    """Accuracy of always predicting the commonest train label: where INLP should leave a
    probe (Elazar et al. run it until the probe is at the majority baseline)."""
    return float(np.mean(y_eval == majority_label(y_train)))


def compute_probe_accuracy(x_train: np.ndarray, y_train: np.ndarray, x_eval: np.ndarray,
                           y_eval: np.ndarray, projection: np.ndarray, seed: int) -> float:
    """A probe retrained from scratch on projected features, scored on projected eval words."""
    probe = fit_linear_probe(x_train @ projection, y_train, seed)
    return float(probe.score(x_eval @ projection, y_eval))
