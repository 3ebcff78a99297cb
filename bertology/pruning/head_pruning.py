"""Are all those heads needed? Iterative head masking by importance against random order
(Michel et al., 2019), then the chosen heads removed for good.

`heads`: for each score, mask the lowest-scoring 10% of all heads, re-score the rest with the
mask applied (HF run_bertology.py), read the eval metric, repeat until it falls below
stop_fraction of the original or one more step would leave no head. Each curve is summarised by
its mean over the fraction range every curve reached (the area under it, in metric units) and
by the fraction masked before the metric first drops more than max_loss.

`removal`: the mask of scores[0] at the largest step within max_loss (or prune.remove_fraction)
becomes a structural pruning (q/k/v rows and output-projection columns removed); the pruned
model must give the masked model's logits, with fewer parameters and lower latency.
"""

from __future__ import annotations

import logging
import statistics

import matplotlib.pyplot as plt
import numpy as np
import torch
from tqdm.auto import tqdm

from bertology.models.task_model import TaskModel
from bertology.pruning.heads import HeadGates, build_gates, kept_heads, prune_heads
from bertology.pruning.prune_context import Curve, PruneContext, model_sizes, save_curve_plot
from bertology.pruning.schedules import (
    compute_curve_area,
    compute_fraction_within_loss,
    compute_step_counts,
    select_heads_to_mask,
)
from bertology.run.figures import GREY, band_caption, plot_head_heatmap, reference, tie
from bertology.run.tables import write_table

log = logging.getLogger(__name__)


def curve_seeds(ctx: PruneContext, score: str) -> list[int | None]:
    """Random order is drawn once per seed (the baseline's band); the scores are deterministic."""
    return list(ctx.config.prune.random_seeds) if score == "random" else [None]


def get_curve(ctx: PruneContext, score: str, seed: int | None) -> Curve:
    """The pruning curve of one order, computed once per run (removal and the matrix reuse
    the masks of the heads experiment)."""
    if (score, seed) not in ctx.curves:
        ctx.curves[score, seed] = compute_curve(ctx, score, seed)
    return ctx.curves[score, seed]


def compute_curve(ctx: PruneContext, score: str, seed: int | None) -> Curve:
    settings = ctx.config.prune
    gates = build_gates(ctx.model.model)  # (layers, heads), all on
    total = ctx.total_heads
    curve = Curve(score, seed, [0.0], [0], [ctx.base_metric], [gates.clone()])
    stop_below = settings.stop_fraction * ctx.base_metric
    scores = None
    label = score if seed is None else f"{score} (seed {seed})"
    for count in tqdm(compute_step_counts(total, settings.step_fraction),
                      desc=f"prune heads by {label}", unit="step"):
        if scores is None or (settings.rescore and score != "random"):
            scores = ctx.score_heads(score, gates, seed)
            curve.first_scores = scores if curve.first_scores is None else curve.first_scores
        for layer, head in select_heads_to_mask(scores, gates, count - curve.counts[-1]):
            gates[layer, head] = 0.0
        # a deterministic order's steps keep their item replicates (masked_<percent>/<metric>)
        record = None if seed is not None else masked_key(score, count, total)
        value = ctx.evaluate(gates=gates, record=record)[ctx.metric]
        curve.fractions.append(count / total)
        curve.counts.append(count)
        curve.values.append(value)
        curve.gates.append(gates.clone())
        log.info("%s: %d/%d heads masked → %s %.4f", label, count, total, ctx.metric, value)
        if value < stop_below:
            break
    return curve


def run_heads(ctx: PruneContext) -> dict[str, float]:
    """Every score's curve (random: one per seed), the table, the plot and the summaries."""
    settings = ctx.config.prune
    curves = {score: [get_curve(ctx, score, seed) for seed in curve_seeds(ctx, score)]
              for score in settings.scores}
    upto = min(curve.fractions[-1] for group in curves.values() for curve in group)
    metrics = {"prune/heads/total": float(ctx.total_heads), "prune/heads/area_upto": upto}
    for score, group in curves.items():
        areas = [compute_curve_area(c.fractions, c.values, upto) for c in group]
        within = [compute_fraction_within_loss(c.fractions, c.values, ctx.base_metric,
                                               settings.max_loss) for c in group]
        metrics[f"prune/heads/{score}/area"] = statistics.fmean(areas)
        metrics[f"prune/heads/{score}/fraction_within_loss"] = statistics.fmean(within)
        # the metric after every step: a deterministic order's, or the mean over the random
        # orders that reached the step (the curve the figure draws)
        metrics.update(step_metrics(mean_curve(group), ctx.total_heads, ctx.metric))
        if len(group) > 1:
            metrics[f"prune/heads/{score}/area_std"] = statistics.stdev(areas)
            metrics[f"prune/heads/{score}/fraction_within_loss_std"] = statistics.stdev(within)
    if "random" in curves:
        for score in curves:
            if score != "random":
                metrics[f"prune/heads/{score}/area_over_random"] = (
                    metrics[f"prune/heads/{score}/area"] - metrics["prune/heads/random/area"])
    write_table(ctx.out_dir, "head_pruning", pruning_curve_rows(curves))
    plot_curves(ctx, curves, upto)
    first = curves[settings.scores[0]][0].first_scores
    if first is not None:
        plot_head_heatmap(first, f"head importance: {settings.scores[0]} (before pruning)",
                          ctx.out_dir, "head_importance", label=settings.scores[0],
                          table=("head_importance", "importance"))
        write_table(ctx.out_dir, "head_importance", importance_rows(first))
    return metrics


def masked_key(score: str, count: int, total: int) -> str:
    """prune/heads/<score>/masked_<percent of heads masked, rounded>: the name of a step."""
    return f"prune/heads/{score}/masked_{round(100 * count / total):02d}"


def step_metrics(curve: Curve, total: int, metric: str) -> dict[str, float]:
    return {f"{masked_key(curve.score, count, total)}/{metric}": value
            for count, value in zip(curve.counts[1:], curve.values[1:])}


def pruning_curve_rows(curves: dict[str, list[Curve]]) -> list[dict]:
    return [{"score": c.score, "seed": "" if c.seed is None else c.seed, "step": step,
             "heads_masked": count, "fraction_masked": fraction, "metric": value}
            for group in curves.values() for c in group
            for step, (count, fraction, value) in enumerate(zip(c.counts, c.fractions,
                                                                c.values))]


def importance_rows(scores: np.ndarray) -> list[dict]:
    return [{"layer": layer + 1, "head": head, "importance": float(scores[layer, head])}
            for layer in range(scores.shape[0]) for head in range(scores.shape[1])
            if not np.isnan(scores[layer, head])]


def mean_curve(group: list[Curve]) -> Curve:
    """One order's curve as it is; several (random) orders' mean at each step that any of them
    reached (an order stops early once below the budget), over the orders that reached it."""
    if len(group) == 1:
        return group[0]
    longest = max(group, key=lambda c: len(c.values))
    means = [statistics.fmean(c.values[i] for c in group if i < len(c.values))
             for i in range(len(longest.values))]
    return Curve(longest.score, None, list(longest.fractions), list(longest.counts), means)


def plot_curves(ctx: PruneContext, curves: dict[str, list[Curve]], upto: float) -> None:
    """Metric against the fraction of heads masked: each score's curve (random order: the
    mean over its orders, `mean_curve`, with a band of ±1 s.d.); every point tied to its
    metrics.json key (step 0: the original model's)."""
    figure, axis = plt.subplots(figsize=(5.5, 3.8))
    bands = []
    for score, group in curves.items():
        curve = mean_curve(group)
        line = axis.plot(curve.fractions, curve.values, marker="o", label=score)[0]
        tie(line, [f"prune/original/{ctx.metric}",
                   *step_metrics(curve, ctx.total_heads, ctx.metric)])
        if len(group) > 1:
            stds = np.array([statistics.pstdev([c.values[i] for c in group
                                                if i < len(c.values)])
                             for i in range(len(curve.values))])
            means = np.array(curve.values)
            axis.fill_between(curve.fractions, means - stds, means + stds, alpha=0.2,
                              color=line.get_color(), linewidth=0)
            bands.append(f"{score} {band_caption(len(group), 'orders')}")
    reference(axis.axvline(upto, color=GREY, linestyle=":", label="area range"))
    save_curve_plot(ctx, figure, axis, "fraction of heads masked", "head pruning",
                    "head_pruning", caption="; ".join(bands))


def removal_gates(ctx: PruneContext) -> torch.Tensor:
    """The mask to make permanent: scores[0]'s at prune.remove_fraction (exactly that many
    heads), else at the largest step within max_loss, at least one step."""
    settings, total = ctx.config.prune, ctx.total_heads
    score = settings.scores[0]
    curve = get_curve(ctx, score, curve_seeds(ctx, score)[0])
    if settings.remove_fraction is None:
        within = compute_fraction_within_loss(curve.fractions, curve.values, ctx.base_metric,
                                              settings.max_loss)
        return curve.gates[max(1, curve.fractions.index(within))].clone()
    target = round(settings.remove_fraction * total)  # < total: pipelines/prune.check_schedule
    step = max(i for i, count in enumerate(curve.counts) if count <= target)
    gates = curve.gates[step].clone()
    if target > curve.counts[step]:  # between two steps: mask the next heads by the score
        scores = ctx.score_heads(score, gates, curve.seed)
        for layer, head in select_heads_to_mask(scores, gates, target - curve.counts[step]):
            gates[layer, head] = 0.0
    return gates


def masked_heads(model: TaskModel, gates: torch.Tensor) -> dict[int, list[int]]:
    """{layer: [heads]} gated off and still present in the model."""
    return {layer: [h for h in heads if gates[layer, h] == 0]
            for layer, heads in enumerate(kept_heads(model.model))}


def build_pruned(ctx: PruneContext, gates: torch.Tensor) -> TaskModel:
    """A copy of the model with the gated-off heads removed for good."""
    pruned = ctx.copy_model()
    prune_heads(pruned.model, masked_heads(pruned, gates))
    return pruned.eval()


@torch.no_grad()
def compute_logit_gap(ctx: PruneContext, pruned: TaskModel, gates: torch.Tensor) -> float:
    """Largest |logit difference| between the masked and the pruned model on the latency
    batch: removal must compute exactly what masking did."""
    with HeadGates(ctx.model.model, gates):
        masked = ctx.model.eval()(ctx.latency_batch)
    return float((masked - pruned.eval()(ctx.latency_batch)).abs().max())


def run_removal(ctx: PruneContext) -> dict[str, float]:
    gates = removal_gates(ctx)
    pruned = build_pruned(ctx, gates)
    masked_scores = ctx.evaluate(gates=gates)
    scores = ctx.evaluate(pruned)
    gap = compute_logit_gap(ctx, pruned, gates)
    latency = ctx.compare_latency({"original": ctx.model.model, "pruned": pruned.model})
    remaining = sum(len(heads) for heads in kept_heads(pruned.model))
    metrics = {
        "prune/heads_remaining": float(remaining),
        "prune/removal/fraction_removed": 1.0 - remaining / ctx.total_heads,
        "prune/removal/max_logit_diff": gap,
        f"prune/removal/masked/{ctx.metric}": masked_scores[ctx.metric],
        "prune/removal/latency_ms": latency["pruned"],
        "prune/removal/original_latency_ms": latency["original"],
        "prune/removal/speedup": latency["original"] / latency["pruned"],
        **{f"prune/removal/{k}": v for k, v in scores.items()},
        **{f"prune/removal/{k}": v for k, v in model_sizes(pruned.model).items()},
        **{f"prune/original/{k}": v for k, v in model_sizes(ctx.model.model).items()},
    }
    log.info("removed %d of %d heads: %s %.4f (masked %.4f), max logit gap %.2e, latency "
             "%.1f → %.1f ms", ctx.total_heads - remaining, ctx.total_heads, ctx.metric,
             scores[ctx.metric], masked_scores[ctx.metric], gap, latency["original"],
             latency["pruned"])
    ctx.pruned = pruned
    return metrics


def run_ablation(ctx: PruneContext) -> dict[str, float]:
    """Removing some heads improves the model (Michel et al., 2019, §3.2; Kovaleva et al.,
    2019, §6). The head is chosen where it is not scored: on the training sample, as the one
    whose removal lowers the loss most (leave-one-out ablation importance, most negative);
    then the eval set scores the model without it, example by example beside the original,
    so the choice cannot flatter its own score."""
    scores = ctx.score_heads("ablation", build_gates(ctx.model.model), None)
    layer, head = np.unravel_index(np.nanargmin(scores), scores.shape)
    gates = build_gates(ctx.model.model)
    gates[layer, head] = 0.0
    masked = ctx.evaluate(gates=gates, record="prune/ablation/best_head")
    log.info("head %d.%d (train loss %.4f lower without it): eval %s %.4f → %.4f", layer + 1,
             head, -scores[layer, head], ctx.metric, ctx.base_metric, masked[ctx.metric])
    return {"prune/ablation/best_head/layer": float(layer + 1),
            "prune/ablation/best_head/head": float(head),
            "prune/ablation/best_head/train_loss_drop": float(-scores[layer, head]),
            "prune/ablation/heads_lowering_train_loss": float(np.nanmean(scores < 0)),
            **{f"prune/ablation/best_head/{k}": v for k, v in masked.items()}}
