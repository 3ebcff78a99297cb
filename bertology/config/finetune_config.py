"""The checked `finetune` config: the model, size, trainer and logger groups of pretraining
(config/groups.py) with a task and a head, one seed or several."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from bertology.config.checks import (
    RESUME,
    TrainingRunKeys,
    build_group,
    build_top_level,
    check_seeds,
    one_of,
    resolve_container,
    resolve_paths,
)
from bertology.config.data_checks import check_task_files
from bertology.config.family_checks import check_uses, finetune_uses
from bertology.config.groups import (
    HeadConfig,
    LoggerConfig,
    ModelConfig,
    ObjectiveConfig,
    SizeConfig,
    TaskConfig,
    TrainerConfig,
    refuse_tokenizer_name_or_path,
)
from bertology.config.path_checks import read_checkpoint
from bertology.errors import require
from bertology.families import config_value


@dataclass
class FinetuneConfig:
    model: ModelConfig
    size: SizeConfig
    task: TaskConfig
    head: HeadConfig
    trainer: TrainerConfig
    logger: LoggerConfig
    seed: int
    seeds: list[int]
    init: str
    resume: str
    data_dir: Path
    cache_dir: Path
    eval_shuffled_words: bool = False  # also score word-shuffled eval inputs: eval/shuffled/*

    def __post_init__(self) -> None:
        one_of(self.init, ("pretrained", "random"), "init")
        require(not self.eval_shuffled_words or self.task.kind == "classification",
                f"eval_shuffled_words=true shuffles the words of classification inputs; "
                f"task={self.task.name} is a {self.task.kind} task")
        one_of(self.resume, RESUME, "resume")
        refuse_tokenizer_name_or_path(self.model, "finetune")


def build_finetune_cfg(container: dict, model: dict, size: dict, trainer: dict, task: dict
                       ) -> DictConfig:
    """The `finetune` config of a fine-tuning run nested in another pipeline (distill's
    teacher, prune's model, pretrain's downstream task): the given model, size, trainer and
    task, the paper's fine-tuning head, one seed, and the outer run's logger, seed, resume
    and paths."""
    return OmegaConf.create({
        "model": model, "size": size, "trainer": trainer, "task": task, "head": {},
        "logger": container["logger"], "seed": container["seed"], "seeds": None,
        "init": "pretrained", "resume": container["resume"], "paths": container["paths"],
        "eval_shuffled_words": False,
    })


FINETUNE_GROUPS = ("objective", "model", "size", "task", "head", "trainer", "logger", "paths")


@dataclass
class FinetuneRunKeys(TrainingRunKeys):
    seeds: list[int] | None = None  # random restarts: mean/std/median/best-on-dev (BERT §4.1)
    init: str = "pretrained"
    eval_shuffled_words: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        check_seeds(self.seeds)


def load_finetune_config(cfg: DictConfig) -> FinetuneConfig:
    """Check a composed `finetune` config and return its typed view (raises UserError)."""
    container = resolve_container(cfg)
    run = build_top_level(FinetuneRunKeys, container, FINETUNE_GROUPS)
    data_dir, cache_dir = resolve_paths(container)
    if "objective" in container:  # composed for model/*.yaml's sake; checked all the same
        build_group(ObjectiveConfig, container["objective"], "objective")
    config = FinetuneConfig(
        model=build_group(ModelConfig, container["model"], "model"),
        size=build_group(SizeConfig, container["size"], "size"),
        task=build_group(TaskConfig, container["task"], "task"),
        head=build_group(HeadConfig, container["head"], "head"),
        trainer=build_group(TrainerConfig, container["trainer"], "trainer"),
        logger=build_group(LoggerConfig, container["logger"], "logger"),
        seed=run.seed,
        seeds=run.seeds or [run.seed],
        init=run.init,
        resume=str(run.resume).lower(),
        data_dir=data_dir,
        cache_dir=cache_dir,
        eval_shuffled_words=run.eval_shuffled_words,
    )
    checkpoint = None
    if config.model.name_or_path is not None:
        checkpoint = read_checkpoint(config.model.name_or_path, "model.name_or_path")
        check_uses(checkpoint, finetune_uses(config.head), "model.name_or_path",
                   config.model.name_or_path)
    check_freeze_layers(config, checkpoint)
    check_task_files(config.task, data_dir)
    return config


def check_freeze_layers(config: FinetuneConfig, checkpoint: dict | None) -> None:
    """head.freeze_layers against the encoder's depth, known from the checkpoint's
    config.json or the size (a hub id not in the local files: checked when it loads)."""
    if config.model.name_or_path is None:
        layers = config.size.num_hidden_layers
    else:
        layers = config_value(checkpoint or {}, "num_hidden_layers")
    k = config.head.freeze_layers
    require(not isinstance(layers, int) or k <= layers,
            f"head.freeze_layers={k} exceeds the model's {layers} layers; freeze at most "
            f"{layers}")
