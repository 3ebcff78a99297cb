"""The probes the layer-wise analyses fit (analysis/probes.py, position.py, mdl.py): logistic
regression on standardised features (scikit-learn) and Hewitt & Liang's MLP-1 (torch), each
returning a predict_proba over all label ids; and their accuracy."""

from __future__ import annotations

import warnings

import numpy as np
import torch
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits
from torch import nn

from bertology.analysis.mdl import fit_softmax
from bertology.config.analysis_settings import LinearSettings, MLPSettings


def fit_logistic(x: np.ndarray, y: np.ndarray, classes: int, settings: LinearSettings,
                 seed: int):
    """Multinomial logistic regression on standardised features; returns predict_proba."""
    scaler = StandardScaler().fit(x)
    model = LogisticRegression(C=settings.c, max_iter=settings.max_iter, random_state=seed)
    # One BLAS thread: these (words × dim) problems are too small to gain from more, and on
    # a shared machine extra threads made each fit several times slower.
    with warnings.catch_warnings(), threadpool_limits(1, user_api="blas"):
        warnings.simplefilter("ignore", ConvergenceWarning)  # stopping at max_iter is fine
        model.fit(scaler.transform(x), y)

    def predict_proba(features: np.ndarray) -> np.ndarray:
        """(n, classes) over all label ids, zero for classes absent from the fit."""
        out = np.zeros((len(features), classes))
        out[:, model.classes_] = model.predict_proba(scaler.transform(features))
        return out

    return predict_proba


class MLPProbe(nn.Module):
    """Hewitt & Liang's MLP-1: linear → ReLU → (dropout) → linear."""

    def __init__(self, dim: int, hidden: int, classes: int, dropout: float):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Dropout(dropout),
                                 nn.Linear(hidden, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def fit_mlp(x: np.ndarray, y: np.ndarray, classes: int, settings: MLPSettings, seed: int):
    """Adam on cross-entropy for a fixed number of epochs; returns predict_proba."""
    torch.manual_seed(seed)
    # a constant feature (any feature of a one-unit fit: the online code's first block) keeps
    # scale 1, as scikit-learn's StandardScaler does; dividing by ~0 saturated the softmax
    mean, std = x.mean(axis=0), x.std(axis=0)
    std = np.where(std < 1e-6, 1.0, std)
    inputs = torch.from_numpy((x - mean) / std).float()
    targets = torch.from_numpy(y)
    probe = MLPProbe(x.shape[1], settings.hidden_size, classes, settings.dropout)
    optimizer = torch.optim.Adam(probe.parameters(), lr=settings.lr,
                                 weight_decay=settings.weight_decay)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(settings.epochs):
        for batch in torch.randperm(len(y), generator=generator).split(settings.batch_size):
            loss = nn.functional.cross_entropy(probe(inputs[batch]), targets[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    probe.eval()

    @torch.no_grad()
    def predict_proba(features: np.ndarray) -> np.ndarray:
        logits = probe(torch.from_numpy((features - mean) / std).float())
        # float64 softmax: the online code takes −log2 p, which must not underflow to 0
        return torch.softmax(logits.double(), dim=-1).numpy()

    return predict_proba


FITS = {"linear": fit_logistic, "mlp": fit_mlp}
# The online code needs probabilities for all K classes (Voita & Titov's softmax probe)
MDL_FITS = {"linear": fit_softmax, "mlp": fit_mlp}


def compute_accuracy(proba: np.ndarray, labels: np.ndarray) -> float:
    return float((proba.argmax(axis=1) == labels).mean())
