"""The figure of erasure_use.py: per layer, what erasing the labels changes in the readout (the
effect, with its 95% bootstrap interval over the readout's items, beside its controls) next to
what a linear probe decodes before and after the erasure ("decodable vs used")."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import numpy as np

from bertology.run.figures import GREY, PALETTE, integer_ticks, save_figure, tie

EFFECTS = {"concept": PALETTE[0], "subspace": GREY, "shuffled": PALETTE[1]}
PROBES = {"probe_before": PALETTE[2], "probe_after": PALETTE[3], "probe_majority": GREY}
ARMS = {"": ("-", "model"), "twin/": (":", "twin")}  # line style and label of each arm
LAYER_NUMBER = re.compile(r"layer_(\d+)")


def matching_layers(metrics: dict, pattern: str) -> tuple[list[int], list[str]]:
    """The layers and keys of the metrics matching `pattern` (one * for the layer), in order."""
    found = sorted((int(LAYER_NUMBER.search(k).group(1)), k) for k in metrics
                   if fnmatch.fnmatchcase(k, pattern))
    return [layer for layer, _ in found], [k for _, k in found]


def draw_series(axis, metrics: dict, replicates: dict, pattern: str, style: str, colour: str,
                label: str) -> None:
    """One layer curve of metrics.json keys matching `pattern`, tied to them; a shaded 95%
    percentile interval where the keys have replicates."""
    layers, keys = matching_layers(metrics, pattern)
    if not keys:
        return
    line, = axis.plot(layers, [metrics[k] for k in keys], style, marker="o", color=colour,
                      label=label)
    tie(line, keys)
    if all(k in replicates for k in keys):
        table = np.stack([replicates[k] for k in keys], axis=-1)  # (replicates, layers)
        low, high = np.nanpercentile(table, [2.5, 97.5], axis=0)
        axis.fill_between(layers, low, high, color=colour, alpha=0.15, linewidth=0)


def plot_erasure_use(metrics: dict, replicates: dict, out_dir: Path, kind: str,
                           name: str, title: str) -> None:
    import matplotlib.pyplot as plt

    figure, (used, decodable) = plt.subplots(1, 2, figsize=(10, 3.6))
    for scope, (style, arm) in ARMS.items():
        prefix = f"erasure_use/{scope}{kind}/layer_*"
        for condition, colour in EFFECTS.items():
            draw_series(used, metrics, replicates, f"{prefix}/{condition}/flip", style, colour,
                        f"{condition} ({arm})")
        for probe, colour in PROBES.items():
            draw_series(decodable, metrics, replicates, f"{prefix}/{probe}", style, colour,
                        f"{probe.removeprefix('probe_')} ({arm})")
    used.set_ylabel("share of predictions changed")
    used.set_title("used: erasing at the layer's output", fontsize=9)
    decodable.set_ylabel("linear probe accuracy")
    decodable.set_title("decodable: the probe before / after erasure", fontsize=9)
    decodable.set_ylim(0, 1)
    for axis in (used, decodable):
        axis.set_xlabel("layer (0 = embeddings)")
        integer_ticks(axis)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    figure.suptitle(f"{title}\nbands: 95% bootstrap intervals over the readout's items",
                    fontsize=9)
    save_figure(figure, out_dir, name)
