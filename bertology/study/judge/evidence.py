"""Evidence: one number per run, read from its metrics, with its bootstrap replicates.

An evidence is a metric key (`eval/accuracy`), or a reduction over a layer curve

    {metric: "probe/layer_*/accuracy", reduce: expected_layer}

optionally restricted to some runs of a sweep with `where: {config.key: value}`. Reductions
take (layers,) and (..., layers) arrays, so the same function gives the run's value and, row by
row, the value on each of its item replicates. Effect sizes (a difference, a slope, an expected
layer) are preferred to ranks: a Spearman trend is ±1 for any monotone curve however flat, and
an argmax takes few values; both are kept for description only.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass

import numpy as np

from bertology.errors import require

LAYER = re.compile(r"layer_(\d+)")


def reduce_value(layers: np.ndarray, values: np.ndarray) -> np.ndarray:
    require(values.shape[-1] == 1, "a metric pattern matched several layers; give a reduce")
    return values[..., 0]


def reduce_max(layers: np.ndarray, values: np.ndarray) -> np.ndarray:
    return values.max(axis=-1)


def reduce_mean(layers: np.ndarray, values: np.ndarray) -> np.ndarray:
    return values.mean(axis=-1)


def reduce_top_minus_bottom(layers: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Mean of the top half of the layers minus the mean of the bottom half (the middle layer
    of an odd count in neither)."""
    half = values.shape[-1] // 2
    return values[..., -half:].mean(axis=-1) - values[..., :half].mean(axis=-1)


def middle_layers(layers: np.ndarray) -> np.ndarray:
    """Layers whose depth (0 = embeddings, 1 = top) lies in the middle third, [1/3, 2/3]."""
    depth = layers / layers.max()
    return (depth >= 1 / 3 - 1e-9) & (depth <= 2 / 3 + 1e-9)


def reduce_middle(layers: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Mean over the middle third of the layers (a fixed band: no layer chosen on the data)."""
    return values[..., middle_layers(layers)].mean(axis=-1)


def lower_middle_layers(layers: np.ndarray) -> np.ndarray:
    """Layers whose depth (0 = embeddings, 1 = top) lies in the lower-middle band (1/4, 1/2]:
    where Tenney et al. (2019a, Fig. 2) and Liu et al. (2019, §4) find POS best decoded (the
    embeddings below it, the top above)."""
    depth = layers / layers.max()
    return (depth > 1 / 4 + 1e-9) & (depth <= 1 / 2 + 1e-9)


def reduce_lower_middle(layers: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Mean over the lower-middle band (lower_middle_layers): where POS is decoded best, a
    band fixed before any run (pos_layers), not a layer picked on the data."""
    return values[..., lower_middle_layers(layers)].mean(axis=-1)


def reduce_lower_middle_minus_top(layers: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Mean over the lower-middle band (lower_middle_layers) minus the top layer."""
    return values[..., lower_middle_layers(layers)].mean(axis=-1) - values[..., -1]


def reduce_middle_minus_ends(layers: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Mean over the middle third of the layers minus the mean over the others."""
    middle = middle_layers(layers)
    return values[..., middle].mean(axis=-1) - values[..., ~middle].mean(axis=-1)


def reduce_slope(layers: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Least-squares slope of the value over depth (0 = embeddings, 1 = top): the change from
    bottom to top of the fitted line, in the metric's units."""
    depth = layers / layers.max()
    centred = depth - depth.mean()
    return (values * centred).sum(axis=-1) / (centred**2).sum()


def reduce_expected_layer(layers: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Tenney et al. (2019a)'s expected layer under differential scores, as a fraction of
    depth: Σ_l l·Δ_l / Σ_l Δ_l with Δ_l = score(l) − score(l − 1), l = 1..L, divided by L.
    Where the curve falls back after its peak the negative Δ pull the expectation down, as in
    the paper. The denominator is the top's gain over the embeddings; where it is not
    positive the value is undefined (nan), and the verdict says so."""
    deltas = np.diff(values, axis=-1)  # (..., L)
    weights = layers[1:] / layers.max()
    total = deltas.sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, (deltas * weights).sum(axis=-1) / total, np.nan)


def reduce_argmax_fraction(layers: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Where the curve peaks, as a fraction of the depth (discrete: for description)."""
    return layers[values.argmax(axis=-1)] / layers.max()


def reduce_last(layers: np.ndarray, values: np.ndarray) -> np.ndarray:
    return values[..., -1]


def reduce_first(layers: np.ndarray, values: np.ndarray) -> np.ndarray:
    return values[..., 0]


REDUCTIONS = {
    "value": reduce_value,
    "max": reduce_max,
    "mean": reduce_mean,
    "first": reduce_first,
    "last": reduce_last,
    "top_minus_bottom": reduce_top_minus_bottom,
    "middle": reduce_middle,
    "middle_minus_ends": reduce_middle_minus_ends,
    "lower_middle": reduce_lower_middle,
    "lower_middle_minus_top": reduce_lower_middle_minus_top,
    "slope": reduce_slope,
    "expected_layer": reduce_expected_layer,
    "argmax_fraction": reduce_argmax_fraction,
}


@dataclass(frozen=True)
class Evidence:
    metric: str  # a key, or a pattern with one * for the layer
    reduce: str = "value"
    where: tuple[tuple[str, str], ...] = ()

    def describe(self) -> str:
        text = self.metric if self.reduce == "value" else f"{self.reduce}({self.metric})"
        where = ", ".join(f"{k}={v}" for k, v in self.where)
        return f"{text} [{where}]" if where else text


def parse_evidence(spec) -> Evidence | float:
    """A finding's `a` or `b`: a number (a threshold), a metric key, or a reduction."""
    if isinstance(spec, bool):
        raise ValueError("evidence cannot be a boolean")
    if isinstance(spec, int | float):
        return float(spec)
    if isinstance(spec, str):
        return Evidence(spec)
    require(isinstance(spec, dict) and isinstance(spec.get("metric"), str),
            f"evidence {spec!r} needs a metric (a key, or a pattern with * for the layer)")
    reduce = str(spec.get("reduce", "value"))
    require(reduce in REDUCTIONS, f"reduce={reduce!r} is unknown; valid: {', '.join(REDUCTIONS)}")
    where = tuple(sorted((str(k), str(v)) for k, v in (spec.get("where") or {}).items()))
    return Evidence(spec["metric"], reduce, where)


def layer_keys(keys, pattern: str) -> tuple[np.ndarray, list[str]]:
    """(layers, keys) of the metric keys matching a pattern, in layer order."""
    if "*" not in pattern:
        return np.array([0]), [pattern] if pattern in keys else []
    matched = sorted((int(LAYER.search(k).group(1)), k) for k in keys
                     if fnmatch.fnmatchcase(k, pattern) and LAYER.search(k))
    return np.array([m[0] for m in matched]), [m[1] for m in matched]


def evaluate(evidence: Evidence, metrics: dict[str, float],
             replicates: dict[str, np.ndarray]) -> tuple[float, np.ndarray | None]:
    """The evidence's value on a run, and on each of its item replicates (None where some
    metric it reads has no replicates)."""
    layers, keys = layer_keys(metrics, evidence.metric)
    require(bool(keys), f"no metric matches {evidence.metric!r}")
    reduce = REDUCTIONS[evidence.reduce]
    value = float(reduce(layers, np.array([metrics[k] for k in keys], dtype=np.float64)))
    if not all(k in replicates for k in keys):
        return value, None
    table = np.stack([replicates[k] for k in keys], axis=-1)  # (R, layers)
    return value, reduce(layers, table)


def evaluate_items(evidence: Evidence, metrics: dict[str, float],
                   item_ids: dict[str, list[str]]) -> list[str] | None:
    """The ids of the items the evidence's replicates resample, in their order (every metric
    it reads resamples one list); None where some metric has no ids (a run made before runs
    recorded them) or two metrics resample different lists."""
    _, keys = layer_keys(metrics, evidence.metric)
    lists = [item_ids.get(k) for k in keys]
    if not lists or any(ids is None or ids != lists[0] for ids in lists):
        return None
    return lists[0]


def evaluate_headroom(evidence: Evidence, metrics: dict[str, float], item_ids: dict[str, list],
                      pools: dict[str, int]) -> float | None:
    """How many times its items the set they were drawn from holds (the run's eval set over
    the items it scored): the most an items budget can ask of it; None where unrecorded."""
    _, keys = layer_keys(metrics, evidence.metric)
    rooms = [pools[k] / len(item_ids[k]) for k in keys
             if k in pools and item_ids.get(k)]
    return min(rooms) if rooms and len(rooms) == len(keys) else None
