"""bertology finetune: a checkpoint → a task model, fine-tuned or feature-based (BERT §4, §5.3).

config → task data → tokenizer → features → per seed: model → train → evaluate → predictions;
then the seeds' aggregate, and the best-on-dev seed's model in model/.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import os
import shutil
import statistics
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from transformers import PretrainedConfig, PreTrainedTokenizerBase

from bertology.config.finetune_config import FinetuneConfig, load_finetune_config
from bertology.config.groups import TrainerConfig
from bertology.config.path_checks import resolve_checkpoint
from bertology.data.corpora import Corpus, text_corpus
from bertology.data.encode import encode
from bertology.data.long_inputs import fit_to_positions, truncation_metrics
from bertology.data.perturb import shuffle_words
from bertology.data.stream import InMemoryExamples
from bertology.data.tasks import TaskData, load_task
from bertology.data.tokenizers import (
    load_or_train_tokenizer,
    load_pretrained_tokenizer,
    tokenizer_options,
)
from bertology.errors import require
from bertology.evaluation.predictions import compute_score_replicates, evaluate_task
from bertology.families import family_of_checkpoint
from bertology.models.build import (
    build_config,
    count_parameters,
    load_checkpoint_config,
)
from bertology.models.task_model import (
    build_task_model,
    layer_lr_scale,
    save_task_model_atomic,
    write_task_model,
)
from bertology.objectives import task as task_objective
from bertology.run.atomic import write_dir_atomic, write_json_atomic, write_predictions
from bertology.run.replicates import (
    average_replicates,
    compute_item_ids,
    compute_mean_replicates,
    read_replicates,
    write_replicates,
)
from bertology.run.resume import refuse_fresh_start
from bertology.run.rundir import METRICS_FILE, RunDir
from bertology.run.tracking import build_tracker
from bertology.run.training_figures import write_run_page
from bertology.training.loop import TrainJob, TrainOutput, resolve_budget, train

log = logging.getLogger(__name__)


def run(cfg: DictConfig, out_dir: Path) -> dict[str, float]:
    config = resolve_model_path(load_finetune_config(cfg))
    refuse_fresh_start(out_dir, config.resume)
    data = load_task(config.task, config.data_dir, config.trainer.max_train_examples)
    tokenizer, model_config = load_tokenizer_and_config(config, data)
    fit_to_positions(config.task, model_config, config.model.name_or_path or "size=")
    train_features = encode(data.train, tokenizer, config.task)
    eval_features = encode(data.eval, tokenizer, config.task)
    notes = truncation_metrics(config.task, {"train": train_features, "eval": eval_features})
    trainer = resolve_budget(config.trainer, len(train_features))
    log.info("%d train / %d eval features; %d steps", len(train_features), len(eval_features),
             trainer.max_steps)
    shuffled = shuffle_words(data.eval, config.seed) if config.eval_shuffled_words else None
    context = SeedContext(config, trainer, data, tokenizer, model_config, train_features,
                          eval_features, OmegaConf.to_container(cfg, resolve=True), shuffled,
                          encode(shuffled, tokenizer, config.task) if shuffled else None,
                          notes)
    title = f"bertology finetune: {config.task.name}"
    if len(config.seeds) == 1:
        metrics = run_seed(context, config.seeds[0], out_dir)
        write_run_page(out_dir, title, metrics)
        return metrics
    results = {seed: run_seed(context, seed, out_dir / "seeds" / str(seed))
               for seed in config.seeds}
    best = max(results, key=lambda seed: results[seed][f"eval/{config.task.metric}"])
    promote(out_dir / "seeds" / str(best), out_dir)
    summary = aggregate(results, best)
    write_replicates(out_dir, "eval", average_replicates(
        [read_replicates(out_dir / "seeds" / str(seed)) for seed in config.seeds]),
        compute_item_ids(data.eval))  # every restart scores the same eval examples
    write_run_page(out_dir, title, summary)  # every seed's curves
    write_json_atomic(out_dir / METRICS_FILE, summary)  # last: the run is finished
    return summary


@dataclasses.dataclass(frozen=True)
class SeedContext:
    """What every seed's run shares: config, data, tokenizer and encoded features."""

    config: FinetuneConfig
    trainer: TrainerConfig
    data: TaskData
    tokenizer: PreTrainedTokenizerBase
    model_config: PretrainedConfig
    train_features: list[dict]
    eval_features: list[dict]
    raw_config: dict
    shuffled: list[dict] | None = None  # eval_shuffled_words: the word-shuffled eval examples
    shuffled_features: list[dict] | None = None
    notes: dict[str, float] = dataclasses.field(default_factory=dict)  # what was cut (long_inputs)


def run_seed(ctx: SeedContext, seed: int, seed_dir: Path) -> dict[str, float]:
    """Train and evaluate one seed in seed_dir; a seed that finished before is read back."""
    done = RunDir(seed_dir)
    if done.finished and seed_dir.name == str(seed):
        return done.metrics
    seed_dir.mkdir(parents=True, exist_ok=True)
    config = ctx.config
    torch.manual_seed(seed)  # the new head's initial weights depend on the seed only
    model = build_task_model(config.model.name_or_path, copy.deepcopy(ctx.model_config),
                             config.task.kind, ctx.data.labels, config.head,
                             random_init=config.init == "random",
                             attn_implementation=config.model.attn_implementation, seed=seed)
    log.info("seed %d: %.2fM parameters, %.2fM trained", seed, count_parameters(model) / 1e6,
             sum(p.numel() for p in model.parameters() if p.requires_grad) / 1e6)
    tracker = build_tracker(config.logger, seed_dir, ctx.raw_config,
                            name=f"finetune-{config.task.name}-{seed_dir.name}-seed{seed}")
    objective = task_objective.build(config.task.kind, ctx.tokenizer.pad_token_id)
    examples = InMemoryExamples(ctx.train_features, ctx.eval_features, seed)
    layers = ctx.model_config.num_hidden_layers
    path = family_of_checkpoint(ctx.model_config.model_type).layers
    output = TrainOutput(seed_dir, tracker,
                         export=lambda path: write_task_model(model, ctx.tokenizer, path),
                         desc=f"finetune seed {seed}",
                         eval_name="eval_subset")  # evaluate_task below scores the dev set: eval/
    metrics = train(TrainJob(
        model, objective, examples, ctx.trainer, output, seed,
        lr_scale=lambda name: layer_lr_scale(name, layers, config.head.layer_lr_decay, path)))
    scores, rows = evaluate_task(model, config.task, ctx.data.eval, ctx.eval_features,
                                 ctx.data.labels, ctx.tokenizer.pad_token_id)
    log.info("seed %d: %s", seed, " ".join(f"{k}={v:.4f}" for k, v in sorted(scores.items())))
    metrics.update({f"eval/{k}": v for k, v in scores.items()})
    replicates = {f"eval/{k}": v for k, v in
                  compute_score_replicates(config.task.kind, rows, ctx.data.labels).items()}
    if ctx.shuffled is not None:
        shuffled_scores, shuffled_replicates = evaluate_shuffled(model, ctx, rows)
        metrics.update(shuffled_scores)
        replicates.update(shuffled_replicates)
    metrics["model/parameters"] = float(count_parameters(model))
    metrics.update(ctx.notes)
    # the eval examples, in the order the replicates resample them (the report's overlap)
    write_replicates(seed_dir, "eval", replicates, compute_item_ids(ctx.data.eval),
                     ctx.data.eval_pool)
    write_predictions(rows, seed_dir / "predictions.jsonl")
    save_task_model_atomic(model, ctx.tokenizer, seed_dir / "model")
    return tracker.finish(metrics)


def evaluate_shuffled(model, ctx: SeedContext, rows: list[dict]
                      ) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """Scores on the word-shuffled eval inputs (eval/shuffled/*) and the share of predictions
    the shuffle leaves unchanged (eval/shuffled/agreement); and their replicates over the same
    resampled examples as the unshuffled scores'."""
    task, labels = ctx.config.task, ctx.data.labels
    scores, shuffled_rows = evaluate_task(model, task, ctx.shuffled, ctx.shuffled_features,
                                          labels, ctx.tokenizer.pad_token_id)
    same = np.array([a["predicted"] == b["predicted"] for a, b in zip(rows, shuffled_rows)],
                    dtype=np.float64)
    metrics = {f"eval/shuffled/{k}": v for k, v in scores.items()}
    metrics["eval/shuffled/agreement"] = float(same.mean())
    replicates = {f"eval/shuffled/{k}": v for k, v in
                  compute_score_replicates(task.kind, shuffled_rows, labels).items()}
    replicates["eval/shuffled/agreement"] = compute_mean_replicates(same)
    log.info("word-shuffled eval: %s", " ".join(f"{k}={v:.4f}" for k, v in
                                                sorted(metrics.items())))
    return metrics, replicates


def load_tokenizer_and_config(config: FinetuneConfig, data: TaskData):
    """A checkpoint's tokenizer and config, or for model.name_or_path=null a tokenizer trained
    on the task's training text and a config of size=."""
    if config.model.name_or_path is not None:
        path = config.model.name_or_path
        model_config = load_checkpoint_config(path)
        family_of_checkpoint(model_config.model_type,
                             f"model.name_or_path={config.model.name_or_path!r}")
        tokenizer = load_pretrained_tokenizer(path, **tokenizer_options(model_config.model_type))
        require(len(tokenizer) <= model_config.vocab_size,
                f"model.name_or_path={config.model.name_or_path!r}: its tokenizer "
                f"({len(tokenizer)} tokens) exceeds its vocabulary ({model_config.vocab_size}); "
                "the checkpoint and tokenizer do not match")
        return tokenizer, model_config
    tokenizer = load_or_train_tokenizer(task_corpus(data, config.task.name),
                                        config.model.tokenizer, config.model.vocab_size,
                                        config.cache_dir, pre_split=True)
    return tokenizer, build_config(config.model, config.size, tokenizer)



def resolve_model_path(config: FinetuneConfig) -> FinetuneConfig:
    """A hub id that an installed package mirrors becomes that package's dir."""
    if config.model.name_or_path is None:
        return config
    model = dataclasses.replace(config.model,
                                name_or_path=resolve_checkpoint(config.model.name_or_path))
    return dataclasses.replace(config, model=model)


def task_corpus(data: TaskData, name: str) -> Corpus:
    """The task's training text as a corpus, to train a tokenizer for a random-init model."""
    texts = [" ".join(e["words"]) if "words" in e else
             " ".join(t for t in (e.get("question"), e.get("context"), e.get("text"),
                                  e.get("text_pair")) if t) for e in data.train]
    return text_corpus(f"task:{name}", texts)


def aggregate(results: dict[int, dict[str, float]], best: int) -> dict[str, float]:
    """Random restarts as the BERT paper reports them (§4.1): mean, std, median and the
    best-on-dev seed of every eval metric; train/* and per-seed values beside them."""
    summary = {k: v for k, v in results[best].items() if not k.startswith("eval/")}
    keys = sorted({k for metrics in results.values() for k in metrics if k.startswith("eval/")})
    for key in keys:
        values = [metrics[key] for metrics in results.values() if key in metrics]
        summary[key] = statistics.fmean(values)
        summary[f"{key}_std"] = statistics.stdev(values) if len(values) > 1 else 0.0
        summary[f"{key}_median"] = statistics.median(values)
        summary[f"{key}_best"] = results[best].get(key, float("nan"))
    for seed, metrics in results.items():
        summary.update({f"seed_{seed}/{k}": v for k, v in metrics.items()
                        if k.startswith("eval/")})
    summary["train/best_seed"] = float(best)
    summary["train/seeds"] = float(len(results))
    return summary


def promote(seed_dir: Path, out_dir: Path) -> None:
    """The best seed's model/ and predictions become the run's."""
    write_dir_atomic(out_dir / "model", lambda tmp: shutil.copytree(seed_dir / "model", tmp))
    shutil.copyfile(seed_dir / "predictions.jsonl", out_dir / ".predictions.jsonl")
    os.replace(out_dir / ".predictions.jsonl", out_dir / "predictions.jsonl")
