"""bertology prune: how much of a fine-tuned BERT is needed (the survey's §6).

config → the model to prune (a finetune run's model/, or one fine-tuned here first) → task data
and tokenizer → its original scores → each experiment of prune.experiments (a row each in
config/prune_settings.py) → tables, plots, metrics; the structurally pruned model in model/.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from bertology.config.groups import HeadConfig
from bertology.config.path_checks import resolve_checkpoint
from bertology.config.prune_config import PruneConfig, load_prune_config
from bertology.config.prune_settings import PRUNE_EXPERIMENTS
from bertology.config.rows import load_function
from bertology.data.encode import encode
from bertology.data.tasks import load_task
from bertology.data.tokenizers import load_pretrained_tokenizer, tokenizer_options
from bertology.errors import require
from bertology.models.build import load_checkpoint_config
from bertology.models.latency import eval_latency_batch
from bertology.models.task_model import (
    AUTO_CLASSES,
    TaskModel,
    check_task_checkpoint,
    is_task_checkpoint,
    save_task_model_atomic,
)
from bertology.pipelines.nested import run_nested
from bertology.pruning.heads import load_pruned, read_pruned_heads
from bertology.pruning.prune_context import PruneContext, build_importance_batches
from bertology.run.figures import figure_source
from bertology.run.index import write_run_index
from bertology.run.replicates import compute_item_ids, write_replicates
from bertology.run.tracking import build_tracker

log = logging.getLogger(__name__)

def run(cfg: DictConfig, out_dir: Path) -> dict[str, float]:
    config = load_prune_config(cfg)
    check_schedule(config)
    model_path = resolve_task_model(config, out_dir / "finetune")
    twin_path = resolve_twin_model(config, out_dir / "finetune_twin")
    ctx = build_prune_context(config, model_path, out_dir)
    if twin_path is not None:
        ctx.twin = load_task_model(twin_path, config, ctx.data.labels, "twin_name_or_path")
    if "matrix" in config.prune.experiments:
        ctx.student_path = resolve_student(config, model_path, out_dir / "distill")
    tracker = build_tracker(config.logger, out_dir, OmegaConf.to_container(cfg, resolve=True),
                            name=f"prune-{config.task.name}-{out_dir.name}")
    metrics = {f"prune/original/{k}": v for k, v in ctx.base.items()}
    metrics.update({f"eval/{k}": v for k, v in ctx.base.items()})
    with figure_source(f"fine-tuned model: {model_path}"):
        # in the rows' order, whatever the list's: removal reuses the heads experiment's masks
        for name in (n for n in PRUNE_EXPERIMENTS if n in config.prune.experiments):
            log.info("experiment %s on task %s", name, config.task.name)
            metrics.update(load_function(PRUNE_EXPERIMENTS[name].run)(ctx))
    if ctx.pruned is not None:
        save_task_model_atomic(ctx.pruned, ctx.tokenizer, out_dir / "model")
    original = "prune/original/"
    ctx.replicates.update({f"eval/{k[len(original):]}": v for k, v in ctx.replicates.items()
                           if k.startswith(original)})
    write_prune_replicates(out_dir, ctx)
    write_run_index(out_dir, f"bertology prune: {config.task.name} ({model_path})", metrics)
    log.info("pruned the fine-tuned model %s", model_path)
    return tracker.finish(metrics)


# attention_gradients, on the model and its twin: examples within every layer's window only
SPECIAL = ("prune/special/", "prune/twin/special/")


def write_prune_replicates(out_dir: Path, ctx: PruneContext) -> None:
    """replicates/prune.csv, over the eval examples (their ids beside it, for the report's
    overlap), and prune_special.csv over the examples the special-token shares read (a subset
    where a local-window layer cannot reach [CLS]), with their ids where known."""
    special = {k: v for k, v in ctx.replicates.items() if k.startswith(SPECIAL)}
    scored = {k: v for k, v in ctx.replicates.items() if not k.startswith(SPECIAL)}
    if scored:
        write_replicates(out_dir, "prune", scored, compute_item_ids(ctx.data.eval),
                         ctx.data.eval_pool)
    if special:
        write_replicates(out_dir, "prune_special", special, ctx.special_items,
                         ctx.data.eval_pool)


def count_heads(config: PruneConfig) -> int:
    """Heads in the model to prune, from its config.json (or size= for a random one)."""
    if config.name_or_path is None:
        size = config.finetune.size
        return size.num_hidden_layers * size.num_attention_heads
    model_config = load_checkpoint_config(resolve_checkpoint(config.name_or_path))
    removed = sum(len(heads) for heads in read_pruned_heads(model_config).values())
    return model_config.num_hidden_layers * model_config.num_attention_heads - removed


def check_schedule(config: PruneConfig) -> None:
    """A removal that would leave no head fails now, before any fine-tuning or scoring (the
    matrix removes the same heads as the removal experiment)."""
    fraction = config.prune.remove_fraction
    if fraction is None or not {"removal", "matrix"} & set(config.prune.experiments):
        return
    total = count_heads(config)
    require(round(fraction * total) < total,
            f"prune.remove_fraction={fraction} would remove every head of the model "
            f"({round(fraction * total)} of {total}); lower it so at least one head stays")


def resolve_task_model(config: PruneConfig, finetune_dir: Path) -> str:
    """model.name_or_path as it is when it is a task model already; otherwise (an encoder, or
    null for a random tiny one) fine-tuned on the task first, by `bertology finetune`, into
    <run>/finetune (a finished one is reused)."""
    path = config.name_or_path
    if path is not None:
        path = resolve_checkpoint(path)
        if is_task_checkpoint(load_checkpoint_config(path), config.task.kind):
            return path
    run_nested("finetune", config.finetune_cfg, finetune_dir,
               f"{path or 'a random-initialised model'} is not fine-tuned on "
               f"{config.task.name} yet: fine-tuning it")
    return str(finetune_dir / "model")


def resolve_twin_model(config: PruneConfig, finetune_dir: Path) -> str | None:
    """attention_gradients' twin arm: twin_name_or_path as given; where the run fine-tunes the
    model itself, the random-init twin fine-tuned the same way (init=random: the same recipe,
    data and seed) into <run>/finetune_twin; None where the model was fine-tuned elsewhere and
    no twin is given (its recipe is not known here), said in the log."""
    if "attention_gradients" not in config.prune.experiments:
        return None
    if config.twin_name_or_path is not None:
        return resolve_checkpoint(config.twin_name_or_path)
    path = config.name_or_path
    if path is not None and is_task_checkpoint(load_checkpoint_config(resolve_checkpoint(path)),
                                               config.task.kind):
        log.warning("no twin_name_or_path: prune/twin/special/* are not measured (give the "
                    "random-init twin fine-tuned as %s was: a finetune run with init=random "
                    "and seed=%d)", path, config.seed)
        return None
    twin_cfg = config.finetune_cfg.copy()
    twin_cfg.init = "random"
    run_nested("finetune", twin_cfg, finetune_dir, "the random-init twin, fine-tuned as the "
               "model is (init=random)")
    return str(finetune_dir / "model")


def resolve_student(config: PruneConfig, teacher_path: str, distill_dir: Path) -> str:
    """compression.student_path, or a student distilled here from the model being pruned
    (`bertology distill` into <run>/distill; a finished one is reused)."""
    if config.compression.student_path is not None:
        return resolve_checkpoint(config.compression.student_path)
    distill_cfg = config.distill_cfg.copy()
    distill_cfg.teacher.name_or_path = teacher_path
    run_nested("distill", distill_cfg, distill_dir, "distilling the matrix's student")
    return str(distill_dir / "model")


def load_task_model(path: str, config: PruneConfig, labels: list[str],
                    key: str = "model.name_or_path") -> TaskModel:
    """The fine-tuned model, checked, in fp32 on the CPU; a head-pruned one keeps its heads."""
    model_config = load_checkpoint_config(path)
    check_task_checkpoint(path, model_config, key, config.task.kind,
                          config.task.name, labels)
    model = load_pruned(path, AUTO_CLASSES[config.task.kind], attn_implementation="sdpa")
    return TaskModel(model.to("cpu", torch.float32), config.task.kind, HeadConfig()).eval()


def build_prune_context(config: PruneConfig, model_path: str, out_dir: Path) -> PruneContext:
    data = load_task(config.task, config.data_dir, config.trainer.max_train_examples)
    model = load_task_model(model_path, config, data.labels)
    tokenizer = load_pretrained_tokenizer(
        model_path, **tokenizer_options(model.model.config.model_type))
    eval_features = encode(data.eval, tokenizer, config.task)
    ctx = PruneContext(
        config=config, out_dir=out_dir, model=model, tokenizer=tokenizer, data=data,
        model_path=model_path, eval_features=eval_features,
        importance_batches=build_importance_batches(
            data.train, tokenizer, config.task, config.prune.importance_examples,
            config.prune.batch_size, config.seed),
        latency_batch=eval_latency_batch(eval_features, tokenizer.pad_token_id,
                                          config.prune.batch_size))
    ctx.base = ctx.evaluate(record="prune/original")
    log.info("%s: %d heads in %d layers; %d eval examples; original %s %.4f", model_path,
             ctx.total_heads, model.model.config.num_hidden_layers, len(eval_features),
             ctx.metric, ctx.base_metric)
    return ctx
