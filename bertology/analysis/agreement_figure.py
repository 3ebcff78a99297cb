"""The figure of agreement_interchange.py: "decodable vs used", per encoder.

One panel per encoder (the model, its random-init twin): over layers, the interchange's
effect on the verb with its 95% percentile interval over item resamples, the same interchange
at the control positions, and the linear probe's accuracy decoding the subject's number at the
subject (with its majority baseline). Where the probe line stands high and the effect line
low, the layer holds number that the model does not use there.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from bertology.run.figures import (
    GREY,
    LABELS,
    PALETTE,
    integer_ticks,
    reference,
    save_figure,
    tie,
)

INTERCHANGE_SERIES = (("effect", "interchange at the subject (used)", PALETTE[0], "-"),
          ("control", "interchange at other words (control)", PALETTE[0], "--"),
          ("probe_accuracy", "probe: subject number (decodable)", PALETTE[1], "-"))


def plot_decodable_vs_used(rows: list[dict], metrics: dict[str, float], out_dir: Path,
                           name: str, keys: Callable[[str, int, str], str]) -> Path:
    """rows: the interchange table's (encoder, layer, effect, effect_low, effect_high, ...);
    each line is tied to the metrics.json keys it draws, keys(encoder, layer, column)."""
    import matplotlib.pyplot as plt

    encoders = list(dict.fromkeys(row["encoder"] for row in rows))
    figure, axes = plt.subplots(1, len(encoders), figsize=(4.2 * len(encoders) + 0.6, 3.4),
                                squeeze=False, sharey=True)
    for axis, encoder in zip(axes[0], encoders):
        mine = [row for row in rows if row["encoder"] == encoder]
        layers = [row["layer"] for row in mine]
        for column, label, colour, style in INTERCHANGE_SERIES:
            line = axis.plot(layers, [row[column] for row in mine], marker="o", color=colour,
                             linestyle=style, label=label)[0]
            tie(line, [keys(encoder, layer, column) for layer in layers])
        axis.fill_between(layers, [row["effect_low"] for row in mine],
                          [row["effect_high"] for row in mine], color=PALETTE[0], alpha=0.2,
                          linewidth=0)
        tie(axis.axhline(metrics["interchange/majority_accuracy"], color=GREY, linestyle=":",
                         label="probe: majority class"), ["interchange/majority_accuracy"])
        reference(axis.axhline(0.0, color=GREY, linewidth=0.6))
        axis.set_title(LABELS.get(encoder, encoder))
        axis.set_xlabel("layer (0 = embeddings)")
        axis.set_ylim(-0.1, 1.05)
        axis.grid(alpha=0.3)
        integer_ticks(axis)
    axes[0][0].set_ylabel("share of items")
    handles, labels = axes[0][0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="outside lower center", ncols=2)
    items = int(metrics["interchange/items"])
    figure.suptitle(f"subject-verb agreement: decodable vs used ({items} minimal pairs)\n"
                    "effect: net share of verb predictions flipped to the counterfactual's "
                    "number; band: 95% interval over item resamples")
    return save_figure(figure, out_dir, name)
