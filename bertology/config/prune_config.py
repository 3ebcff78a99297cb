"""Checked views of the `prune` config: what to prune and how (DESIGN §4).

Shares the model, size, task, trainer and logger groups with fine-tuning
(config/finetune_config.py): when model.name_or_path is not a task model yet, `bertology
finetune` makes one first from those groups, so that config is composed and checked here too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from bertology.config.checks import (
    TrainingRunKeys,
    build_group,
    build_top_level,
    check_nested,
    resolve_container,
)
from bertology.config.distill_config import KDConfig, StudentConfig, load_distill_config
from bertology.config.family_checks import check_uses, prune_uses
from bertology.config.finetune_config import (
    FinetuneConfig,
    build_finetune_cfg,
    load_finetune_config,
)
from bertology.config.groups import LoggerConfig, ObjectiveConfig, TaskConfig, TrainerConfig
from bertology.config.path_checks import MADE_BY_THE_RUN, check_task_architecture, read_checkpoint
from bertology.config.prune_settings import PruneSettings
from bertology.config.twin_checks import check_fine_tuned_twin
from bertology.errors import require


@dataclass
class CompressionConfig:
    student_path: str | None = None
    student: dict = field(default_factory=dict)
    kd: dict = field(default_factory=dict)


@dataclass
class PruneRunKeys(TrainingRunKeys):
    twin_name_or_path: str | None = None


@dataclass
class PruneConfig:
    finetune: FinetuneConfig  # the model to prune, or the recipe that fine-tunes it first
    finetune_cfg: DictConfig  # the same, as the `finetune` config `finetune.run` takes
    prune: PruneSettings
    compression: CompressionConfig
    distill_cfg: DictConfig | None  # matrix without student_path: the `distill` config
    task: TaskConfig
    trainer: TrainerConfig
    logger: LoggerConfig
    seed: int
    data_dir: Path
    cache_dir: Path
    # attention_gradients' twin arm: the random-init twin fine-tuned as the model was (a
    # finetune run's model/ with init=random and this seed); null: fine-tuned here from
    # finetune_cfg with init=random where the run fine-tunes the model itself, else none
    twin_name_or_path: str | None = None

    @property
    def name_or_path(self) -> str | None:
        return self.finetune.model.name_or_path


def check_student(path: str, finetune: FinetuneConfig) -> None:
    """The matrix's student, from config.json: a model of this task, with the vocabulary of
    the model being pruned (compression.py loads it only after pruning)."""
    student = read_checkpoint(path, "compression.student_path")
    if student is None:
        return
    check_task_architecture(student, finetune.task.kind, "compression.student_path", path,
                            finetune.task.name)
    check_uses(student, prune_uses(["matrix"]), "compression.student_path", path)
    pruned = finetune.model.name_or_path
    original = read_checkpoint(pruned, "model.name_or_path") if pruned else None
    if original is not None:
        require(student.get("vocab_size") == original.get("vocab_size"),
                f"compression.student_path={path!r} has a {student.get('vocab_size')}-token "
                f"vocabulary, the model being pruned {original.get('vocab_size')}; give a "
                "student distilled from this model")


def build_distill_cfg(container: dict, teacher_path: str) -> DictConfig:
    """The `distill` config of the matrix's student: the fine-tuned model as the teacher."""
    compression = container["compression"]
    return OmegaConf.create({
        "teacher": {"name_or_path": teacher_path}, "student": compression["student"],
        "kd": compression["kd"], "size": container["size"], "task": container["task"],
        "trainer": container["trainer"], "logger": container["logger"],
        "seed": container["seed"], "resume": container["resume"], "paths": container["paths"],
    })


PRUNE_GROUPS = ("objective", "model", "size", "task", "trainer", "logger", "prune", "compression",
          "paths")


def load_prune_config(cfg: DictConfig) -> PruneConfig:
    """Check a composed `prune` config and return its typed view (raises UserError)."""
    container = resolve_container(cfg)
    run = build_top_level(PruneRunKeys, container, PRUNE_GROUPS)
    if "objective" in container:  # composed for model/*.yaml's sake; checked all the same
        build_group(ObjectiveConfig, container["objective"], "objective")
    # when model.name_or_path is not a task model yet, it is fine-tuned into <run>/finetune
    finetune_cfg = build_finetune_cfg(container, container["model"], container["size"],
                                      container["trainer"], container["task"])
    finetune = load_finetune_config(finetune_cfg)
    settings = build_group(PruneSettings, container["prune"], "prune")
    compression = build_group(CompressionConfig, container["compression"], "compression")
    build_group(StudentConfig, compression.student, "student", within="compression")
    build_group(KDConfig, compression.kd, "kd", within="compression")
    if finetune.model.name_or_path is not None:
        path = finetune.model.name_or_path
        check_uses(read_checkpoint(path, "model.name_or_path"),
                   prune_uses(settings.experiments), "model.name_or_path", path)
    if compression.student_path is not None:
        check_student(compression.student_path, finetune)
    distill_cfg = None
    if "matrix" in settings.experiments and compression.student_path is None:
        # checked now with a stand-in teacher path; run() fills in the fine-tuned model's
        distill_cfg = build_distill_cfg(container, MADE_BY_THE_RUN)
        check_nested(load_distill_config, distill_cfg,
                     "compression (the student, built by distill)")
    if run.twin_name_or_path is not None:
        require("attention_gradients" in settings.experiments, "twin_name_or_path is the "
                "twin arm of prune.experiments=[attention_gradients]; add it, or drop the twin")
        check_fine_tuned_twin(run.twin_name_or_path, "twin_name_or_path", finetune.seed,
                              finetune.model.name_or_path, "model.name_or_path")
    return PruneConfig(
        finetune=finetune, finetune_cfg=finetune_cfg, prune=settings, compression=compression,
        distill_cfg=distill_cfg, task=finetune.task, trainer=finetune.trainer,
        logger=finetune.logger, seed=finetune.seed, data_dir=finetune.data_dir,
        cache_dir=finetune.cache_dir, twin_name_or_path=run.twin_name_or_path,
    )
