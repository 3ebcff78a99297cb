"""Layer curves across runs: the report's figure of a sweep that probes several checkpoints (or
models) on one task, one curve per checkpoint, so a probe's accuracy per layer reads across
pretraining: when, in training and in depth, a property becomes linearly decodable. Runs on a
checkpoint suite's steps (model.suite) are drawn a second way too: each layer's value against
the tokens the checkpoint had seen.

Runs that differ only in their seed are one curve, their mean per layer (a band of ± 1 std
where there are several seeds); a curve is named by the config values that differ between the
curves of its figure (a path by the part after the paths' common folder: step_00000500, model).
"""

from __future__ import annotations

import re
import statistics
from contextlib import suppress
from dataclasses import dataclass
from functools import cache
from pathlib import PurePath

from bertology.config.suites import Suite, load_suite
from bertology.errors import UserError
from bertology.run.figures import literal
from bertology.run.rundir import RunDir
from bertology.study.judge.evidence import layer_keys
from bertology.study.judge.results import NOT_THE_EXPERIMENT, flatten, replication_key

# The layer-wise metrics drawn across runs: the linear probe's accuracy and its selectivity
# over the control task (Hewitt & Liang, 2019).
LAYER_CURVES = {"probe/layer_*/accuracy": "probe accuracy",
                "probe/layer_*/selectivity": "probe selectivity"}


@dataclass
class LayerCurve:
    label: str
    layers: list[int]
    mean: list[float]
    std: list[float]  # over seeds; 0 with one seed
    seeds: int


def shorten_paths(values: list[str]) -> list[str]:
    """Paths less the folders all of them share: /r/checkpoints/step_1, /r/model ->
    checkpoints/step_1, model. Values that are not all paths stay as they are."""
    if len(values) < 2 or not all(isinstance(v, str) and "/" in v for v in values):
        return values
    parts = [PurePath(v).parts for v in values]
    shared = 0
    while all(len(p) > shared + 1 and p[shared] == parts[0][shared] for p in parts):
        shared += 1
    return ["/".join(p[shared:]) for p in parts]


def differing_labels(configs: list[dict]) -> list[str]:
    """One label per config: `key=value` of every key whose value differs between them (seed,
    paths and the finding block aside); the bare value where one key differs."""
    flat = [flatten({k: v for k, v in c.items() if k not in NOT_THE_EXPERIMENT}) for c in configs]
    keys = sorted({k for f in flat for k in f})
    differing = [k for k in keys if len({repr(f.get(k)) for f in flat}) > 1]
    columns = {k: shorten_paths([f.get(k) for f in flat]) for k in differing}
    if len(differing) == 1:
        return [str(v) for v in columns[differing[0]]]
    return [", ".join(f"{k}={columns[k][i]}" for k in differing) for i in range(len(flat))]


def natural_key(label: str) -> list:
    """step_2 before step_10; the numbers in a label compare as numbers."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", label)]


def means_and_stds(values: list[list[float]]) -> tuple[list[float], list[float]]:
    """Per point, the mean of its runs and their std (0 with one run)."""
    return ([statistics.fmean(v) for v in values],
            [statistics.stdev(v) if len(v) > 1 else 0.0 for v in values])


def viridis(plt, count: int) -> list:
    """count colours along viridis, early to late, short of its pale yellow end."""
    return list(plt.get_cmap("viridis")([i / max(count - 1, 1) * 0.9 for i in range(count)]))


def compute_layer_curves(runs: list[RunDir], metric: str) -> list[LayerCurve]:
    """One curve per group of runs that differ only in seed, for the runs that have the
    layer-wise metric; sorted by label (a checkpoint sweep in training order)."""
    groups: dict[str, list[RunDir]] = {}
    for run in runs:
        if layer_keys(run.metrics, metric)[1]:
            groups.setdefault(replication_key(run), []).append(run)
    labels = differing_labels([g[0].config for g in groups.values()])
    curves = []
    for label, group in zip(labels, groups.values()):
        per_run = [dict(zip(*layer_keys(r.metrics, metric))) for r in group]  # layer -> key
        layers = sorted(set.intersection(*(set(keys) for keys in per_run)))
        values = [[r.metrics[keys[layer]] for r, keys in zip(group, per_run)]
                  for layer in layers]  # (layers, seeds)
        curves.append(LayerCurve(label, [int(layer) for layer in layers], *means_and_stds(values),
                                 len(group)))
    return sorted(curves, key=lambda c: natural_key(c.label))


def tokens_seen(run: RunDir) -> int | None:
    """Tokens the probed checkpoint had seen in pretraining: a checkpoint suite's member
    (model.suite, its step x the suite's tokens per step); None otherwise."""
    suite = run.select("model.suite")
    if suite is None:
        return None
    with suppress(UserError):
        return suite_row(str(suite)).tokens(run.select("model.suite_step"))
    return None


@cache  # a sweep's runs name the same suite: its YAML is read once
def suite_row(name: str) -> Suite:
    return load_suite(name)


@dataclass
class TokensCurve:
    layer: int
    tokens: list[int]
    mean: list[float]
    std: list[float]  # over the runs at those tokens (seeds, and a suite's seeds)


def compute_token_curves(runs: list[RunDir], metric: str) -> list[TokensCurve]:
    """One curve per layer over the tokens seen, each point the mean of every run at that
    many tokens; runs with no token count are left out."""
    points: dict[int, dict[int, list[float]]] = {}  # layer -> tokens -> values
    for run in runs:
        tokens = tokens_seen(run)
        layers, keys = layer_keys(run.metrics, metric)
        if tokens is None or not keys:
            continue
        for layer, key in zip(layers, keys):
            points.setdefault(int(layer), {}).setdefault(tokens, []).append(run.metrics[key])
    curves = []
    for layer, by_tokens in sorted(points.items()):
        tokens = sorted(by_tokens)
        values = [by_tokens[t] for t in tokens]
        curves.append(TokensCurve(layer, tokens, *means_and_stds(values)))
    return curves


def plot_token_curves(runs: list[RunDir], task: str, metric: str, name: str, out_dir
                      ) -> str | None:
    """plots/pretraining_<metric>_<task>.png: the metric at each layer against the tokens the
    checkpoint had seen (a suite swept over its steps); None where fewer than two token counts
    are known."""
    import matplotlib.pyplot as plt

    from bertology.run.figures import save_figure

    curves = compute_token_curves(runs, metric)
    if len({t for c in curves for t in c.tokens}) < 2:
        return None
    figure, axis = plt.subplots(figsize=(5.2, 3.5))
    for curve, colour in zip(curves, viridis(plt, len(curves))):
        axis.errorbar(curve.tokens, curve.mean, yerr=curve.std, marker="o", color=colour,
                      capsize=2, label=f"layer {curve.layer}")
    axis.set_xscale("symlog", linthresh=max(min(t for c in curves for t in c.tokens if t) / 2, 1))
    axis.set_xlabel("tokens seen in pretraining")
    axis.set_ylabel(f"{name} ({task})")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=7)
    axis.set_title(f"{name} across pretraining, by layer (mean ± std over runs)")
    path = save_figure(figure, out_dir, f"pretraining_{metric.split('/')[-1]}_{task}")
    return str(path.relative_to(out_dir))


def task_of(run: RunDir) -> str:
    task = run.config.get("task")
    return str(task.get("name") if isinstance(task, dict) else task)


def plot_layer_curves_across_runs(runs: list[RunDir], out_dir) -> dict[str, str]:
    """plots/layers_<metric>_<task>.png for every task and layer-wise metric that two or more
    curves share; {caption: the PNG's path relative to out_dir}."""
    import matplotlib.pyplot as plt

    from bertology.run.figures import integer_ticks, save_figure

    figures = {}
    for task in sorted({task_of(r) for r in runs}):
        task_runs = [r for r in runs if task_of(r) == task]
        for metric, name in LAYER_CURVES.items():
            over_tokens = plot_token_curves(task_runs, task, metric, name, out_dir)
            if over_tokens is not None:
                figures[f"{name} across pretraining on {task}"] = over_tokens
            curves = compute_layer_curves(task_runs, metric)
            if len(curves) < 2:
                continue
            figure, axis = plt.subplots(figsize=(5.2, 3.5))
            for curve, colour in zip(curves, viridis(plt, len(curves))):
                axis.plot(curve.layers, curve.mean, marker="o", color=colour,
                          label=literal(f"{curve.label} (n={curve.seeds})"))
                low = [m - s for m, s in zip(curve.mean, curve.std)]
                high = [m + s for m, s in zip(curve.mean, curve.std)]
                axis.fill_between(curve.layers, low, high, color=colour, alpha=0.2)
            axis.set_xlabel("layer (0 = embeddings)")
            axis.set_ylabel(f"{name} ({task})")
            integer_ticks(axis)
            axis.grid(alpha=0.3)
            axis.legend(fontsize=7)
            axis.set_title(f"{name} per layer, one curve per run (mean ± std over seeds)")
            stem = metric.split("/")[-1]
            path = save_figure(figure, out_dir, f"layers_{stem}_{task}")
            figures[f"{name} per layer on {task}"] = str(path.relative_to(out_dir))
    return figures
