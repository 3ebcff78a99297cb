"""Linear concept erasure and counterfactual pushes, as interventions (interventions.py applies
them at a site): LEACE (Belrose et al., 2023), INLP's projection (Ravfogel et al., 2020; fit by
inlp.py) and AlterRep (Ravfogel et al., 2021), and the controls an erasure's effect is read
against: a random subspace of equal rank, and the concept's labels shuffled.

Each is an object with `apply(values)`: (n, dim) activations at a site's positions → (n, dim)
replacements, computed in float64. Fitting is NumPy on the CPU in float64; applying is torch on
the activations' device.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg
import torch

from bertology.analysis.inlp import RANK_TOLERANCE, INLPResult
from bertology.errors import require

ORTHONORMAL_TOLERANCE = 1e-8  # AlterRep's directions: |W Wᵀ − I| below this


@dataclass(frozen=True)
class Erasure:
    """An affine erasure of row vectors, x ↦ x A + b: LEACE's A = I − Mᵀ, b = μ Mᵀ; INLP's A = P,
    b = 0."""

    matrix: np.ndarray  # (dim, dim) A
    offset: np.ndarray  # (dim,) b
    rank: int  # directions the erasure removes

    def apply(self, values: torch.Tensor) -> torch.Tensor:
        matrix = torch.as_tensor(self.matrix, dtype=torch.float64, device=values.device)
        offset = torch.as_tensor(self.offset, dtype=torch.float64, device=values.device)
        return values.double() @ matrix + offset  # (n, dim)


def fit_leace(x: np.ndarray, labels: np.ndarray) -> Erasure:
    """LEACE (Belrose et al., 2023): the affine eraser r(x) = x − W⁺ P W (x − μ) that leaves
    no linear classifier better than a constant (Cov(r(X), Z) = 0) while moving X least in
    mean squared distance. W = (Σ_XX^½)⁺ whitens, P projects onto the column space of
    W Σ_XZ (the cross-covariance with the one-hot concept Z, whitened), W⁺ = Σ_XX^½ un-whitens;
    μ = E[X] keeps the mean where it was. The covariances' normalisation cancels out of the
    formula. x: (n, dim); labels: (n,) the concept's class per row."""
    x = np.asarray(x, dtype=np.float64)
    labels = np.asarray(labels)
    classes = np.unique(labels)
    require(len(classes) >= 2, "LEACE needs a concept with at least two classes")
    one_hot = (labels[:, None] == classes[None, :]).astype(np.float64)  # (n, classes)
    mean = x.mean(axis=0)  # (dim,)
    centred = x - mean  # (n, dim)
    sigma_xx = centred.T @ centred / len(x)  # (dim, dim)
    sigma_xz = centred.T @ (one_hot - one_hot.mean(axis=0)) / len(x)  # (dim, classes)
    eigenvalues, vectors = np.linalg.eigh(sigma_xx)
    keep = eigenvalues > eigenvalues.max() * RANK_TOLERANCE  # Σ's numerical range
    root = np.sqrt(eigenvalues[keep])
    whiten = (vectors[:, keep] / root) @ vectors[:, keep].T  # (dim, dim) W = (Σ^½)⁺
    unwhiten = (vectors[:, keep] * root) @ vectors[:, keep].T  # (dim, dim) W⁺ = Σ^½
    basis = scipy.linalg.orth(whiten @ sigma_xz, rcond=RANK_TOLERANCE)  # (dim, rank)
    removed = unwhiten @ basis @ basis.T @ whiten  # (dim, dim) M = W⁺ P W
    # x − (x − μ) Mᵀ for row vectors
    return Erasure(np.eye(x.shape[1]) - removed.T, mean @ removed.T, basis.shape[1])


def compute_random_erasure(dim: int, rank: int, seed: int) -> Erasure:
    """The control of an erasure: the orthogonal projection out of a random subspace of the
    same rank, drawn uniformly (the Q of a Gaussian matrix's QR). Elazar et al. (2021) report a
    concept's erasure against it: what removing `rank` directions costs whatever they carry."""
    require(0 < rank < dim, f"a random erasure removes 1 to {dim - 1} directions, not {rank}")
    gaussian = np.random.default_rng(seed).standard_normal((dim, rank))
    basis, _ = np.linalg.qr(gaussian)  # (dim, rank) orthonormal columns
    return Erasure(np.eye(dim) - basis @ basis.T, np.zeros(dim), rank)


def compute_shuffled_concept(labels: np.ndarray, seed: int) -> np.ndarray:
    """The concept's labels permuted across rows: Hewitt & Liang's (2019) control, a concept of
    the same classes and frequencies that the states cannot carry."""
    return np.random.default_rng(seed).permutation(np.asarray(labels))


def compute_inlp_erasure(result: INLPResult) -> Erasure:
    """INLP's projection onto the intersection of its classifiers' nullspaces as an erasure
    (x ↦ x P; P is symmetric)."""
    dim = result.projection.shape[0]
    return Erasure(result.projection, np.zeros(dim), result.directions_removed)


def compute_concept_directions(projection: np.ndarray) -> np.ndarray:
    """(dim, dim) orthogonal projection P (INLP's) → (rank, dim) orthonormal rows spanning the
    space it removes, the range of I − P: the concept subspace AlterRep pushes along."""
    dim = projection.shape[0]
    return scipy.linalg.orth(np.eye(dim) - projection, rcond=RANK_TOLERANCE).T


def compute_alterrep(values: torch.Tensor, directions: torch.Tensor, alpha: float,
                     side: int | None) -> torch.Tensor:
    """AlterRep (Ravfogel et al., 2021): h = h_N + Σ_w (wᵀh) w splits h into its nullspace
    part and its components along the concept's orthonormal directions w; the counterfactual
    keeps h_N and sets each component to α |wᵀh| on the chosen side: h' = h_N + α Σ_w s_w |wᵀh| w.
    side=+1 or −1 puts every component on that side of its direction (the paper's positive and
    negative counterfactuals); None puts each on the side opposite its own (α = 1 reflects h
    through the nullspace). values: (n, dim); directions: (k, dim)."""
    x = values.double()
    coordinates = x @ directions.T  # (n, k): wᵀh per direction
    signs = -torch.sign(coordinates) if side is None else torch.full_like(coordinates, side)
    return x - coordinates @ directions + alpha * (signs * coordinates.abs()) @ directions


@dataclass(frozen=True)
class AlterRep:
    """A counterfactual push along a concept's directions (compute_alterrep)."""

    directions: np.ndarray  # (k, dim) orthonormal rows: the concept subspace
    alpha: float  # the push's magnitude, Ravfogel et al.'s α
    side: int | None = None  # +1 / −1: every component to that side; None: to the other side

    def __post_init__(self):
        w = np.asarray(self.directions, dtype=np.float64)
        require(w.ndim == 2 and np.allclose(w @ w.T, np.eye(len(w)), atol=ORTHONORMAL_TOLERANCE),
                "AlterRep's directions must be orthonormal rows (compute_concept_directions)")
        require(self.side in (None, 1, -1), f"AlterRep's side is +1, -1 or None, not {self.side}")
        require(self.alpha >= 0, f"AlterRep's alpha is a magnitude, not {self.alpha}")

    def apply(self, values: torch.Tensor) -> torch.Tensor:
        directions = torch.as_tensor(self.directions, dtype=torch.float64, device=values.device)
        return compute_alterrep(values, directions, self.alpha, self.side)
