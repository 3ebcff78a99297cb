"""Compression beyond heads (the survey's §6.2): whole layers dropped, weights pruned by
magnitude, linear layers quantised to int8, and all of them with distillation side by side.

- layers: Sajjad et al. (2020)'s strategies on the fine-tuned model, read without retraining
  (their recipe fine-tunes after dropping: `bertology distill student.layer_choice=first
  kd.alpha=0` is that); the curve is metric against layers dropped.
- magnitude: one global threshold over the encoder's linear weights (Gordon et al., 2020).
- int8: dynamic quantisation (pruning/quantize.py): metric, bytes, latency.
- matrix: the original, its head-pruned model, a distilled student and the student pruned the
  same way, each in fp32 and int8: one table and a metric-vs-latency Pareto plot.
"""

from __future__ import annotations

import copy
import logging
import re
import shutil

import matplotlib.pyplot as plt
from tqdm.auto import tqdm

from bertology.config.groups import HeadConfig
from bertology.errors import require
from bertology.models.build import load_checkpoint_config
from bertology.models.task_model import TaskModel, build_task_model, check_task_checkpoint
from bertology.pruning.head_pruning import build_pruned, masked_heads, removal_gates
from bertology.pruning.heads import (
    LAYER_DROPPING,
    build_gates,
    drop_layers,
    encoder_layers,
    kept_heads,
    prune_heads,
)
from bertology.pruning.prune_context import PruneContext, model_sizes, save_curve_plot
from bertology.pruning.quantize import linear_weight_bytes, quantize_int8, size_on_disk
from bertology.pruning.schedules import (
    compute_fraction_within_loss,
    prune_magnitude,
    select_heads_to_mask,
)
from bertology.run.figures import integer_ticks, save_figure, tie
from bertology.run.tables import write_table

log = logging.getLogger(__name__)


def layer_schedules(num_layers: int, strategy: str) -> list[list[int]]:
    """The kept layers for 1, 2, … dropped, as far as the strategy goes (alternate stops at
    every other layer) and while one layer stays."""
    schedules = []
    for count in range(1, num_layers):
        kept = LAYER_DROPPING[strategy](num_layers, count)
        if len(kept) != num_layers - count:
            break
        schedules.append(kept)
    return schedules


def run_layers(ctx: PruneContext) -> dict[str, float]:
    num_layers = len(encoder_layers(ctx.model.model))
    rows = [{"strategy": "none", "dropped": 0, "kept": "all", "metric": ctx.base_metric}]
    metrics: dict[str, float] = {}
    for strategy in ctx.config.prune.layer_strategies:
        for kept in tqdm(layer_schedules(num_layers, strategy), desc=f"drop layers: {strategy}",
                         unit="model", leave=False):
            model = ctx.copy_model()
            drop_layers(model.model, kept)
            value = ctx.evaluate(model)[ctx.metric]
            dropped = num_layers - len(kept)
            rows.append({"strategy": strategy, "dropped": dropped,
                         "kept": " ".join(str(i + 1) for i in kept), "metric": value})
            metrics[f"prune/layers/{strategy}/dropped_{dropped:02d}/{ctx.metric}"] = value
            log.info("layers %s (%s): %s %.4f", rows[-1]["kept"], strategy, ctx.metric, value)
    write_table(ctx.out_dir, "layer_dropping", rows)
    plot_layer_dropping(ctx, rows, num_layers)
    return metrics


def plot_layer_dropping(ctx: PruneContext, rows: list[dict], num_layers: int) -> None:
    figure, axis = plt.subplots(figsize=(5.5, 3.8))
    for strategy in ctx.config.prune.layer_strategies:
        points = [(0, ctx.base_metric)] + [(r["dropped"], r["metric"]) for r in rows
                                           if r["strategy"] == strategy]
        line = axis.plot(*zip(*points), marker="o", label=strategy)[0]
        tie(line, [f"prune/original/{ctx.metric}"] + [
            f"prune/layers/{strategy}/dropped_{dropped:02d}/{ctx.metric}"
            for dropped, _ in points[1:]])
    integer_ticks(axis)
    save_curve_plot(ctx, figure, axis, "layers dropped (no retraining)",
                    "layer dropping (Sajjad et al.)", "layer_dropping")


def run_magnitude(ctx: PruneContext) -> dict[str, float]:
    rows = [{"sparsity": 0.0, "zeroed": 0.0, "metric": ctx.base_metric}]
    metrics: dict[str, float] = {}
    for sparsity in tqdm(ctx.config.prune.sparsities, desc="magnitude pruning", unit="model",
                         leave=False):
        model = ctx.copy_model()
        zeroed = prune_magnitude(model.model, sparsity)
        value = ctx.evaluate(model, record=f"prune/magnitude/sparsity_{round(sparsity * 100):02d}"
                             )[ctx.metric]
        rows.append({"sparsity": sparsity, "zeroed": zeroed, "metric": value})
        metrics[f"prune/magnitude/sparsity_{round(sparsity * 100):02d}/{ctx.metric}"] = value
        log.info("magnitude sparsity %.2f (zeroed %.3f): %s %.4f", sparsity, zeroed, ctx.metric,
                 value)
    metrics["prune/magnitude/fraction_within_loss"] = compute_fraction_within_loss(
        [r["sparsity"] for r in rows], [r["metric"] for r in rows], ctx.base_metric,
        ctx.config.prune.max_loss)
    write_table(ctx.out_dir, "magnitude_pruning", rows)
    plot_magnitude(ctx, rows)
    return metrics


def plot_magnitude(ctx: PruneContext, rows: list[dict]) -> None:
    figure, axis = plt.subplots(figsize=(5.5, 3.8))
    line = axis.plot([r["sparsity"] for r in rows], [r["metric"] for r in rows], marker="o",
                     label="global magnitude")[0]
    tie(line, [f"prune/original/{ctx.metric}"] + [
        f"prune/magnitude/sparsity_{round(r['sparsity'] * 100):02d}/{ctx.metric}"
        for r in rows[1:]])
    save_curve_plot(ctx, figure, axis, "share of encoder linear weights zeroed",
                    "magnitude pruning (Gordon et al.)", "magnitude_pruning")


def run_int8(ctx: PruneContext) -> dict[str, float]:
    quantized = quantize_int8(ctx.model, ctx.config.prune.int8_backend)
    scores = ctx.evaluate(quantized, record="prune/int8")
    latency = ctx.compare_latency({"fp32": ctx.model.model, "int8": quantized.model})
    scratch = ctx.out_dir / ".size_on_disk"
    try:
        disk = {"fp32": size_on_disk(ctx.model, scratch), "int8": size_on_disk(quantized, scratch)}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    fp32_bytes, int8_bytes = linear_weight_bytes(ctx.model), linear_weight_bytes(quantized)
    metrics = {
        **{f"prune/int8/{k}": v for k, v in scores.items()},
        "prune/int8/metric_change": scores[ctx.metric] - ctx.base_metric,
        "prune/int8/linear_weight_ratio": int8_bytes / fp32_bytes,
        "prune/int8/linear_weight_mb": int8_bytes / 2**20,
        "prune/int8/fp32_linear_weight_mb": fp32_bytes / 2**20,
        "prune/int8/disk_mb": disk["int8"] / 2**20,
        "prune/int8/fp32_disk_mb": disk["fp32"] / 2**20,
        "prune/int8/latency_ms": latency["int8"],
        "prune/int8/fp32_latency_ms": latency["fp32"],
        "prune/int8/speedup": latency["fp32"] / latency["int8"],
    }
    log.info("int8: %s %.4f (fp32 %.4f); linear weights %.1f%% of fp32; latency %.1f → %.1f ms",
             ctx.metric, scores[ctx.metric], ctx.base_metric, 100 * int8_bytes / fp32_bytes,
             latency["fp32"], latency["int8"])
    return metrics


def load_student(ctx: PruneContext, path: str) -> TaskModel:
    """A distill run's model/: the same task, head and tokenizer vocabulary as the original."""
    config = load_checkpoint_config(path, "compression.student_path")
    check_task_checkpoint(path, config, "compression.student_path", ctx.config.task.kind,
                          ctx.config.task.name, ctx.data.labels)
    vocab = ctx.model.model.config.vocab_size
    require(config.vocab_size == vocab,
            f"compression.student_path={path!r} has a {config.vocab_size}-token vocabulary, the "
            f"model being pruned {vocab}; give a student distilled from this model")
    student = build_task_model(path, config, ctx.config.task.kind, ctx.data.labels,
                               HeadConfig(), random_init=False, attn_implementation="sdpa")
    return student.eval()


def prune_student(ctx: PruneContext, student: TaskModel, fraction: float) -> TaskModel:
    """A copy of the student with the same share of its heads removed as the original lost,
    in one shot by scores[0] computed on the student itself."""
    pruned = copy.deepcopy(student)
    gates = build_gates(pruned.model)  # (layers, heads)
    total = int(gates.numel())
    count = min(total - 1, round(fraction * total))
    if count > 0:
        scores = ctx.score_heads(ctx.config.prune.scores[0], gates, 0, model=pruned)
        for layer, head in select_heads_to_mask(scores, gates, count):
            gates[layer, head] = 0.0
        prune_heads(pruned.model, masked_heads(pruned, gates))
    return pruned.eval()


def build_variants(ctx: PruneContext, student_path: str) -> dict[str, TaskModel]:
    """The matrix's fp32 models: original, heads pruned, student, student heads pruned."""
    pruned = ctx.pruned if ctx.pruned is not None else build_pruned(ctx, removal_gates(ctx))
    kept = sum(len(heads) for heads in kept_heads(pruned.model))
    fraction = 1.0 - kept / ctx.total_heads
    student = load_student(ctx, student_path)
    return {"original": ctx.model, "heads pruned": pruned, "student": student,
            "student + heads pruned": prune_student(ctx, student, fraction)}


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def compute_pareto(points: list[tuple[float, float]]) -> list[bool]:
    """Which (latency, metric) points no other point beats: as fast or faster and as good
    or better, strictly better in one."""
    return [not any(lat_o <= lat and met_o >= met and (lat_o < lat or met_o > met)
                    for lat_o, met_o in points)
            for lat, met in points]


def run_matrix(ctx: PruneContext) -> dict[str, float]:
    """Every fp32 variant and its int8 copy: metric, size and latency, timed together."""
    require(ctx.student_path is not None, "the compression matrix needs a student: set "
            "compression.student_path to a distill run's model/ (or leave it null)")
    fp32 = build_variants(ctx, ctx.student_path)
    models = {**fp32, **{f"{name} + int8": quantize_int8(model, ctx.config.prune.int8_backend)
                         for name, model in fp32.items()}}
    latency = ctx.compare_latency({name: model.model for name, model in models.items()})
    rows = []
    for name, model in tqdm(models.items(), desc="compression matrix", unit="model"):
        source = fp32[name.removesuffix(" + int8")]
        rows.append({"model": name, "metric": ctx.evaluate(model)[ctx.metric],
                     "parameters": model_sizes(source.model)["parameters"],
                     "linear_weight_mb": linear_weight_bytes(model.model) / 2**20,
                     "latency_ms": latency[name],
                     "speedup": latency["original"] / latency[name]})
    for row, best in zip(rows, compute_pareto([(r["latency_ms"], r["metric"]) for r in rows])):
        row["retained"] = row["metric"] / ctx.base_metric if ctx.base_metric else float("nan")
        row["pareto"] = best
    write_table(ctx.out_dir, "compression_matrix", rows)
    plot_pareto(ctx, rows)
    return {f"compression/{slug(row['model'])}/{key}": float(row[key]) for row in rows
            for key in ("metric", "parameters", "linear_weight_mb", "latency_ms", "speedup",
                        "retained", "pareto")}


def plot_pareto(ctx: PruneContext, rows: list[dict]) -> None:
    figure, axis = plt.subplots(figsize=(6.5, 4.2))
    for row in rows:
        int8 = row["model"].endswith("int8")
        label = ("on the front" if row["pareto"] else "dominated") + (", int8" if int8 else "")
        key = f"compression/{slug(row['model'])}"
        tie(axis.scatter(row["latency_ms"], row["metric"], marker="s" if int8 else "o",
                         color="C3" if row["pareto"] else "C0", label=label),
            [f"{key}/metric"], [f"{key}/latency_ms"])
        axis.annotate(row["model"], (row["latency_ms"], row["metric"]), fontsize=7,
                      xytext=(4, 3), textcoords="offset points")
    front = sorted((r["latency_ms"], r["metric"], f"compression/{slug(r['model'])}")
                   for r in rows if r["pareto"])
    line = axis.plot([f[0] for f in front], [f[1] for f in front], color="C3", linestyle="--",
                     label="Pareto front")[0]
    tie(line, [f"{f[2]}/metric" for f in front], [f"{f[2]}/latency_ms" for f in front])
    axis.set_xlabel("CPU latency per batch (ms, median)")
    axis.set_ylabel(f"eval {ctx.metric}")
    axis.set_title(f"compression matrix: {ctx.config.task.name}")
    axis.grid(alpha=0.3)
    unique = dict(zip(*reversed(axis.get_legend_handles_labels())))  # a label once
    axis.legend(unique.values(), unique.keys())
    save_figure(figure, ctx.out_dir, "compression_pareto")
