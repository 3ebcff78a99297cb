"""The checked `pretrain` config, and its downstream fine-tuning.

What a pretraining objective buys downstream: after `bertology pretrain`, its model/ is
fine-tuned on a task by `bertology finetune` (into <run>/downstream) and the task scores join
the run's metrics as downstream/eval/*. RoBERTa (§4) and ELECTRA (§3.3) compare objectives
this way, not by their own pretraining losses, which are not comparable across objectives.
`downstream.task` names a conf/task/ file (null: no fine-tuning) and `downstream.trainer`
overrides trainer/finetune.yaml; that finetune config is built and checked here, at config
time, so a bad value fails before pretraining starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from bertology.config.checks import (
    RESUME,
    TrainingRunKeys,
    build_group,
    build_top_level,
    check_nested,
    one_of,
    resolve_container,
    resolve_paths,
)
from bertology.config.compose import load_group_file
from bertology.config.data_checks import check_corpus_files
from bertology.config.finetune_config import build_finetune_cfg, load_finetune_config
from bertology.config.groups import (
    PAIR_FORMATS,
    PAIR_OBJECTIVES,
    DataConfig,
    LoggerConfig,
    ModelConfig,
    ObjectiveConfig,
    SizeConfig,
    TrainerConfig,
)
from bertology.config.path_checks import MADE_BY_THE_RUN, check_tokenizer, read_checkpoint
from bertology.errors import UserError, require
from bertology.families import FAMILIES, checkpoint_family


@dataclass
class PretrainConfig:
    model: ModelConfig
    size: SizeConfig
    objective: ObjectiveConfig
    data: DataConfig
    trainer: TrainerConfig
    logger: LoggerConfig
    seed: int
    resume: str
    data_dir: Path
    cache_dir: Path
    downstream: DictConfig | None = None  # the finetune config of model/, or None

    def __post_init__(self) -> None:
        one_of(self.resume, RESUME, "resume")
        family = FAMILIES[self.model.family]
        if self.objective.name in PAIR_OBJECTIVES:
            with_pair = [name for name, f in FAMILIES.items() if f.pair_class is not None]
            require(
                family.pair_class is not None,
                f"objective={self.objective.name} needs a sentence-pair head, which "
                f"model.family={self.model.family} lacks; use model={' or model='.join(with_pair)}"
                " or objective=mlm",
            )
            require(
                self.model.input_format in PAIR_FORMATS,
                f"objective={self.objective.name} needs segment pairs but model.input_format="
                f"{self.model.input_format}; use model.input_format=segment_pair or sentence_pair",
            )
        trains = [name for name, f in FAMILIES.items() if self.objective.name in f.objectives]
        require(
            self.objective.name in family.objectives,
            f"objective={self.objective.name} and model.family={self.model.family} do not go "
            f"together: model.family={self.model.family} trains with objective="
            f"{' or objective='.join(family.objectives)}, and objective={self.objective.name} "
            f"trains model={' or model='.join(trains)}",
        )
        require(
            family.electra_flops or self.trainer.flops_convention != "electra",
            f"trainer.flops_convention=electra counts BERT's embeddings and blocks (ELECTRA App. "
            f"D), not model.family={self.model.family}'s; use trainer.flops_convention=kaplan",
        )
        usable = self.model.max_position_embeddings - family.position_offset
        require(
            self.data.max_seq_length <= usable,
            f"data.max_seq_length={self.data.max_seq_length} exceeds the {usable} positions of "
            f"model.max_position_embeddings={self.model.max_position_embeddings}; "
            "lower data.max_seq_length or raise model.max_position_embeddings",
        )


PRETRAIN_GROUPS = ("model", "size", "objective", "data", "trainer", "logger", "downstream", "paths")


@dataclass
class DownstreamSettings:
    task: str | None = None  # a conf/task/ name; null: no downstream fine-tuning
    trainer: dict | None = None  # overrides of trainer/finetune.yaml


def load_pretrain_config(cfg: DictConfig) -> PretrainConfig:
    """Check a composed `pretrain` config and return its typed view (raises UserError)."""
    container = resolve_container(cfg)
    run = build_top_level(TrainingRunKeys, container, PRETRAIN_GROUPS)
    data_dir, cache_dir = resolve_paths(container)
    config = PretrainConfig(
        model=build_group(ModelConfig, container["model"], "model"),
        size=build_group(SizeConfig, container["size"], "size"),
        objective=build_group(ObjectiveConfig, container["objective"], "objective"),
        data=build_group(DataConfig, container["data"], "data"),
        trainer=build_group(TrainerConfig, container["trainer"], "trainer"),
        logger=build_group(LoggerConfig, container["logger"], "logger"),
        seed=run.seed,
        resume=str(run.resume).lower(),
        data_dir=data_dir,
        cache_dir=cache_dir,
        downstream=check_downstream(container),
    )
    if config.model.name_or_path is not None:
        check_continued(config.model, read_checkpoint(config.model.name_or_path,
                                                      "model.name_or_path"))
    if config.model.tokenizer_name_or_path is not None:
        check_tokenizer(config.model.tokenizer_name_or_path, "model.tokenizer_name_or_path")
    check_corpus_files(config.data, data_dir)
    return config


def check_continued(model: ModelConfig, checkpoint: dict | None) -> None:
    """A checkpoint pretraining continues is of a family it trains (a reading-only type such as
    ALBERT is refused now, not after the corpus is read); None: a hub id, checked on load."""
    if checkpoint is None:
        return
    try:
        checkpoint_family(str(checkpoint.get("model_type")), model.family)
    except UserError as err:
        raise UserError(f"model.name_or_path={model.name_or_path!r}: {err}") from None


def check_downstream(container: dict) -> DictConfig | None:
    """downstream.task: the finetune config of the pretrained model/, checked now."""
    build_group(DownstreamSettings, container.get("downstream"), "downstream")
    cfg = build_downstream_cfg(container, MADE_BY_THE_RUN)
    if cfg is not None:
        check_nested(load_finetune_config, cfg, "downstream (fine-tuning model/)")
    return cfg


def build_downstream_cfg(container: dict, model_path: str) -> DictConfig | None:
    """The `finetune` config that fine-tunes a pretrain run's model/ (None: no task given)."""
    downstream = container.get("downstream") or {}
    task = downstream.get("task")
    if not task:
        return None
    trainer = OmegaConf.merge(load_group_file("trainer", "finetune"),
                              downstream.get("trainer") or {})
    # model/ holds the pretrained tokenizer, so the fine-tuning run names none of its own
    model = {**container["model"], "name_or_path": model_path, "tokenizer_name_or_path": None}
    return build_finetune_cfg(container, model, container["size"],
                              OmegaConf.to_container(trainer), load_group_file("task", str(task)))
