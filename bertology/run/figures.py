"""What analyses leave in the run dir (DESIGN §5): tables/<analysis>_<task>.csv for machines,
plots/*.png for people. Both are written to a temporary name and renamed."""

from __future__ import annotations

import os
import statistics
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: runs on CI and clusters without a display

import matplotlib.pyplot as plt  # noqa: E402


def save_figure(figure, out_dir: Path, name: str) -> Path:
    """plots/<name>.png, then the figure is closed (matplotlib keeps every open one)."""
    path = out_dir / "plots" / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.tmp.png")
    figure.savefig(tmp, dpi=120, bbox_inches="tight")
    plt.close(figure)
    os.replace(tmp, path)
    return path


def layer_means(rows: list[dict], metric: str, series: str = "model"
                ) -> dict[str, tuple[list[int], list[float], list[float]]]:
    """rows of (series, layer, seed, metric) → per series: layers, mean and std over seeds."""
    values: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        if metric in row and row[metric] != "":
            values[row[series]][int(row["layer"])].append(float(row[metric]))
    curves = {}
    for name, by_layer in values.items():
        layers = sorted(by_layer)
        means = [statistics.fmean(by_layer[layer]) for layer in layers]
        stds = [statistics.stdev(by_layer[layer]) if len(by_layer[layer]) > 1 else 0.0
                for layer in layers]
        curves[name] = (layers, means, stds)
    return curves


def plot_layer_curves(rows: list[dict], metrics: list[str], title: str, out_dir: Path,
                      name: str, series: str = "model", baselines: list[dict] = (),
                      xlabel: str = "layer (0 = embeddings)") -> Path:
    """One panel per metric: a line per series (model, random-init, control …) over layers,
    with a band of ±1 std over seeds; each baseline row (a series without layers, e.g. a
    linear baseline) is a dashed horizontal line."""
    figure, axes = plt.subplots(1, len(metrics), figsize=(4.2 * len(metrics), 3.4),
                                squeeze=False)
    for axis, metric in zip(axes[0], metrics):
        for label, (layers, means, stds) in layer_means(rows, metric, series).items():
            axis.plot(layers, means, marker="o", label=label)
            axis.fill_between(layers, [m - s for m, s in zip(means, stds)],
                              [m + s for m, s in zip(means, stds)], alpha=0.2)
        for row in baselines:
            if row.get(metric, "") != "":
                axis.axhline(float(row[metric]), color="grey", linestyle="--",
                             label=str(row[series]))
        axis.set_xlabel(xlabel)
        axis.set_ylabel(metric)
        axis.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    figure.suptitle(title)
    return save_figure(figure, out_dir, name)


def plot_head_heatmap(values, title: str, out_dir: Path, name: str, cmap: str = "viridis",
                      label: str = "") -> Path:
    """A layers × heads grid (values: (layers, heads) array), layer 1 at the top."""
    figure, axis = plt.subplots(figsize=(0.45 * values.shape[1] + 2.5,
                                         0.4 * values.shape[0] + 1.8))
    image = axis.imshow(values, cmap=cmap, aspect="auto")
    axis.set_xticks(range(values.shape[1]), [str(h) for h in range(values.shape[1])])
    axis.set_yticks(range(values.shape[0]), [str(layer + 1) for layer in range(values.shape[0])])
    axis.set_xlabel("head")
    axis.set_ylabel("layer")
    figure.colorbar(image, ax=axis, label=label)
    axis.set_title(title)
    return save_figure(figure, out_dir, name)
