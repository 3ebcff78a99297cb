"""Checked views of the `distill` config: teacher, student and distillation loss (DESIGN §4).

Shares the task, size, trainer and logger groups with fine-tuning (config/finetune.py).
With teacher.name_or_path=null the teacher is first fine-tuned by `bertology finetune` from the
teacher.model / teacher.size / teacher.trainer groups; that config is composed and checked here
too, so a bad value in it fails before any work.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from bertology.config.checks import (
    build_group,
    check_nested,
    one_of,
    positive,
    resolve_container,
    resolve_paths,
)
from bertology.config.finetune import build_finetune_cfg, load_finetune_config
from bertology.config.groups import LoggerConfig, SizeConfig, TaskConfig, TrainerConfig
from bertology.errors import require

STUDENT_INITS = ("teacher_layers", "random")
# first: drop the top layers (Sajjad et al., 2020's best strategy); alternate: one layer out of
# two, spread evenly (DistilBERT, Sanh et al., 2019); last: drop the bottom layers.
LAYER_CHOICES = ("first", "alternate", "last")
DISTILL_KINDS = ("classification", "tagging")


@dataclass
class StudentConfig:
    init: str = "teacher_layers"
    layer_choice: str = "alternate"
    num_layers: int | None = None  # teacher_layers: null → half the teacher's (DistilBERT)
    layers: list[int] | None = None  # teacher_layers: 0-based teacher layers to copy, in order

    def __post_init__(self) -> None:
        one_of(self.init, STUDENT_INITS, "student.init")
        one_of(self.layer_choice, LAYER_CHOICES, "student.layer_choice")
        require(self.num_layers is None or self.num_layers >= 1,
                f"student.num_layers={self.num_layers} must be >= 1 or null")
        if self.layers is not None:
            require(len(self.layers) > 0 and all(isinstance(i, int) and i >= 0
                                                 for i in self.layers),
                    f"student.layers={self.layers} must be a non-empty list of 0-based teacher "
                    "layer indices, e.g. [0,2,4]")
            require(len(set(self.layers)) == len(self.layers),
                    f"student.layers={self.layers} repeats a layer")
        if self.init == "random":
            require(self.layers is None and self.num_layers is None,
                    "student.layers / student.num_layers pick teacher layers to copy; "
                    "student.init=random takes its shape from size= (e.g. size=mini)")


@dataclass
class KDConfig:
    temperature: float = 2.0  # Hinton et al. (2015)'s T
    alpha: float = 0.5  # weight of the soft-target term; 1 - alpha on the gold labels
    hidden_weight: float = 0.0  # TinyBERT's hidden-state MSE (Jiao et al., 2020)
    attention_weight: float = 0.0  # TinyBERT's attention-map MSE
    layer_map: list[int] | None = None  # student layer i ↔ teacher layer_map[i] (0: embeddings)

    def __post_init__(self) -> None:
        positive(self.temperature, "kd.temperature")
        require(0.0 <= self.alpha <= 1.0, f"kd.alpha={self.alpha} must lie in [0, 1]")
        for key in ("hidden_weight", "attention_weight"):
            require(getattr(self, key) >= 0, f"kd.{key}={getattr(self, key)} must be >= 0")
        if self.layer_map is not None:
            require(len(self.layer_map) >= 2 and all(isinstance(i, int) and i >= 0
                                                     for i in self.layer_map),
                    f"kd.layer_map={self.layer_map} must list a teacher layer (0 = embeddings) "
                    "for each student layer 0..k, e.g. [0,2,4,6]")


@dataclass
class DistillConfig:
    teacher_path: str | None  # a finetune run's model/ dir
    teacher_finetune: DictConfig | None  # teacher_path=null: the finetune config that builds it
    student: StudentConfig
    size: SizeConfig  # student.init=random: the student's shape
    kd: KDConfig
    task: TaskConfig
    trainer: TrainerConfig
    logger: LoggerConfig
    seed: int
    resume: str
    data_dir: Path
    cache_dir: Path

    def __post_init__(self) -> None:
        one_of(self.resume, ("auto", "true", "false"), "resume")
        require(self.task.kind in DISTILL_KINDS,
                f"task={self.task.name} is a {self.task.kind} task; distill supports "
                f"{' and '.join(DISTILL_KINDS)} tasks")


TEACHER_KEYS = ("name_or_path", "model", "size", "trainer")


def load_distill_config(cfg: DictConfig) -> DistillConfig:
    """Check a composed `distill` config and return its typed view (raises UserError)."""
    container = resolve_container(cfg)
    data_dir, cache_dir = resolve_paths(container)
    teacher = container.get("teacher") or {}
    unknown = sorted(set(teacher) - set(TEACHER_KEYS))
    require(not unknown, f"teacher.{unknown[0] if unknown else ''} is not a known key; valid "
            f"keys: {', '.join(TEACHER_KEYS)}")
    path = teacher.get("name_or_path")
    require(path is None or (isinstance(path, str) and path),
            f"teacher.name_or_path={path!r} must be a finetune run's model/ dir (or null)")
    finetune_cfg = None
    if path is None:
        # the built-in teacher, fine-tuned on the distillation task into <run>/teacher
        finetune_cfg = build_finetune_cfg(container, teacher["model"], teacher["size"],
                                          teacher["trainer"], container["task"])
        check_nested(load_finetune_config, finetune_cfg, "teacher (built by finetune)")
    return DistillConfig(
        teacher_path=path,
        teacher_finetune=finetune_cfg,
        student=build_group(StudentConfig, container["student"], "student"),
        size=build_group(SizeConfig, container["size"], "size"),
        kd=build_group(KDConfig, container["kd"], "kd"),
        task=build_group(TaskConfig, container["task"], "task"),
        trainer=build_group(TrainerConfig, container["trainer"], "trainer"),
        logger=build_group(LoggerConfig, container["logger"], "logger"),
        seed=int(container["seed"]),
        resume=str(container["resume"]).lower(),
        data_dir=data_dir,
        cache_dir=cache_dir,
    )
