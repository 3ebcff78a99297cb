"""bertology finetune: a checkpoint → a task model, fine-tuned or feature-based (BERT §4, §5.3).

config → task data → tokenizer → features → per seed: model → train → evaluate → predictions;
then the seeds' aggregate, and the best-on-dev seed's model in model/.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import os
import shutil
import statistics
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf
from transformers import PretrainedConfig, PreTrainedTokenizerBase

from bertology.config.finetune import FinetuneConfig, load_finetune_config
from bertology.config.groups import TrainerConfig
from bertology.data.corpora import Corpus, text_corpus
from bertology.data.encode import encode
from bertology.data.stream import InMemoryExamples
from bertology.data.tasks import TaskData, load_task
from bertology.data.tokenizers import (
    load_or_train_tokenizer,
    load_pretrained_tokenizer,
    tokenizer_options,
)
from bertology.errors import require
from bertology.evaluation import evaluate_task
from bertology.families import family_of_checkpoint
from bertology.models.build import (
    build_config,
    count_parameters,
    load_checkpoint_config,
    resolve_checkpoint,
)
from bertology.models.task_model import (
    build_task_model,
    layer_lr_scale,
    save_task_model_atomic,
)
from bertology.objectives import task as task_objective
from bertology.run.files import write_dir_atomic, write_json_atomic, write_predictions
from bertology.run.tracking import build_tracker
from bertology.training.budget import resolve_budget
from bertology.training.checkpoint import check_resume
from bertology.training.loop import train

log = logging.getLogger(__name__)


def run(cfg: DictConfig, out_dir: Path) -> dict[str, float]:
    config = resolve_model_path(load_finetune_config(cfg))
    check_resume(config, out_dir)
    data = load_task(config.task, config.data_dir, config.trainer.max_train_examples)
    tokenizer, model_config = load_tokenizer_and_config(config, data)
    train_features = encode(data.train, tokenizer, config.task)
    eval_features = encode(data.eval, tokenizer, config.task)
    trainer = resolve_budget(config.trainer, len(train_features))
    log.info("%d train / %d eval features; %d steps", len(train_features), len(eval_features),
             trainer.max_steps)
    context = SeedContext(config, trainer, data, tokenizer, model_config, train_features,
                          eval_features, OmegaConf.to_container(cfg, resolve=True))
    if len(config.seeds) == 1:
        return run_seed(context, config.seeds[0], out_dir)
    results = {seed: run_seed(context, seed, out_dir / "seeds" / str(seed))
               for seed in config.seeds}
    best = max(results, key=lambda seed: results[seed][f"eval/{config.task.metric}"])
    promote(out_dir / "seeds" / str(best), out_dir)
    summary = aggregate(results, best)
    write_json_atomic(out_dir / "metrics.json", summary)  # last: the run is finished
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


def run_seed(ctx: SeedContext, seed: int, seed_dir: Path) -> dict[str, float]:
    """Train and evaluate one seed in seed_dir; a seed that finished before is read back."""
    if (seed_dir / "metrics.json").exists() and seed_dir.name == str(seed):
        return json.loads((seed_dir / "metrics.json").read_text())
    seed_dir.mkdir(parents=True, exist_ok=True)
    config = ctx.config
    torch.manual_seed(seed)  # the new head's initial weights depend on the seed only
    model = build_task_model(config.model.name_or_path, copy.deepcopy(ctx.model_config),
                             config.task.kind, ctx.data.labels, config.head,
                             random_init=config.init == "random",
                             attn_implementation=config.model.attn_implementation)
    log.info("seed %d: %.2fM parameters, %.2fM trained", seed, count_parameters(model) / 1e6,
             sum(p.numel() for p in model.parameters() if p.requires_grad) / 1e6)
    tracker = build_tracker(config.logger, seed_dir, ctx.raw_config,
                            name=f"finetune-{config.task.name}-{seed_dir.name}-seed{seed}")
    objective = task_objective.build(config.task.kind, ctx.tokenizer.pad_token_id)
    examples = InMemoryExamples(ctx.train_features, ctx.eval_features, seed)
    layers = ctx.model_config.num_hidden_layers
    metrics = train(model, objective, examples, ctx.trainer, seed_dir, tracker, seed,
                    desc=f"finetune seed {seed}",
                    lr_scale=lambda name: layer_lr_scale(name, layers, config.head.layer_lr_decay))
    scores, rows = evaluate_task(model, config.task, ctx.data.eval, ctx.eval_features,
                                 ctx.data.labels, ctx.tokenizer.pad_token_id)
    log.info("seed %d: %s", seed, " ".join(f"{k}={v:.4f}" for k, v in sorted(scores.items())))
    metrics.update({f"eval/{k}": v for k, v in scores.items()})
    metrics["model/parameters"] = float(count_parameters(model))
    write_predictions(rows, seed_dir / "predictions.jsonl")
    save_task_model_atomic(model, ctx.tokenizer, seed_dir / "model")
    return tracker.finish(metrics)


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
