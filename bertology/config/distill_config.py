"""Checked views of the `distill` config: teacher, student and distillation loss (DESIGN §4).

Shares the task, size, trainer and logger groups with fine-tuning (config/finetune_config.py).
With teacher.name_or_path=null the teacher is first fine-tuned by `bertology finetune` from the
teacher.model / teacher.size / teacher.trainer groups; that config is composed and checked here
too, so a bad value in it fails before any work.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from bertology.config.checks import (
    TrainingRunKeys,
    build_group,
    build_top_level,
    check_nested,
    one_of,
    positive,
    resolve_container,
    resolve_paths,
)
from bertology.config.data_checks import check_task_files
from bertology.config.family_checks import check_uses, distill_uses
from bertology.config.finetune_config import build_finetune_cfg, load_finetune_config
from bertology.config.groups import (
    LoggerConfig,
    ObjectiveConfig,
    SizeConfig,
    TaskConfig,
    TrainerConfig,
)
from bertology.config.path_checks import check_task_architecture, read_checkpoint
from bertology.errors import require
from bertology.families import config_value

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
        require(self.task.kind in DISTILL_KINDS,
                f"task={self.task.name} is a {self.task.kind} task; distill supports "
                f"{' and '.join(DISTILL_KINDS)} tasks")


def choose_layers(num_teacher_layers: int, cfg: StudentConfig) -> list[int]:
    """The 0-based teacher layers the student copies, bottom to top."""
    total = num_teacher_layers
    if cfg.layers is not None:
        require(max(cfg.layers) < total, f"student.layers={cfg.layers} names layer "
                f"{max(cfg.layers)}; the teacher has {total} layers (0..{total - 1})")
        require(cfg.layers == sorted(cfg.layers), f"student.layers={cfg.layers} must be in "
                "increasing order (the student keeps the teacher's layer order)")
        return list(cfg.layers)
    k = cfg.num_layers if cfg.num_layers is not None else max(1, total // 2)
    require(k <= total, f"student.num_layers={k} exceeds the teacher's {total} layers")
    if cfg.layer_choice == "first":
        return list(range(k))
    if cfg.layer_choice == "last":
        return list(range(total - k, total))
    # alternate: evenly spread from the bottom; k = L/2 gives DistilBERT's 0, 2, 4, ...
    return [i * total // k for i in range(k)]


def check_layer_map(layer_map: list[int], num_student: int, num_teacher: int) -> list[int]:
    require(len(layer_map) == num_student + 1,
            f"kd.layer_map={layer_map} needs {num_student + 1} entries: one teacher layer for "
            f"each student layer 0 (embeddings)..{num_student}")
    require(max(layer_map) <= num_teacher,
            f"kd.layer_map={layer_map} names layer {max(layer_map)}; the teacher's layers are "
            f"0 (embeddings)..{num_teacher}")
    return list(layer_map)


TEACHER_KEYS = ("name_or_path", "model", "size", "trainer")


DISTILL_GROUPS = ("objective", "teacher", "student", "kd", "size", "task", "trainer", "logger",
          "paths")


def load_distill_config(cfg: DictConfig) -> DistillConfig:
    """Check a composed `distill` config and return its typed view (raises UserError).
    Everything a teacher's shape decides (the student's layers, the layer map, matching heads)
    is checked here from config.json or teacher.size, before any teacher is fine-tuned."""
    container = resolve_container(cfg)
    run = build_top_level(TrainingRunKeys, container, DISTILL_GROUPS)
    data_dir, cache_dir = resolve_paths(container)
    teacher = container.get("teacher") or {}
    require(isinstance(teacher, dict), f"teacher={teacher!r} has the wrong type; set "
            "teacher.name_or_path=<finetune model/> or the teacher.model/size/trainer groups")
    unknown = sorted(set(teacher) - set(TEACHER_KEYS))
    require(not unknown, f"teacher.{unknown[0] if unknown else ''} is not a known key; valid "
            f"keys: {', '.join(TEACHER_KEYS)}")
    path = teacher.get("name_or_path")
    require(path is None or (isinstance(path, str) and path),
            f"teacher.name_or_path={path!r} must be a finetune run's model/ dir (or null)")
    if "objective" in container:  # composed for model/*.yaml's sake; checked all the same
        build_group(ObjectiveConfig, container["objective"], "objective")
    finetune_cfg = None
    if path is None:
        # the built-in teacher, fine-tuned on the distillation task into <run>/teacher
        finetune_cfg = build_finetune_cfg(container, teacher["model"], teacher["size"],
                                          teacher["trainer"], container["task"])
        check_nested(load_finetune_config, finetune_cfg, "teacher (built by finetune)")
    config = DistillConfig(
        teacher_path=path,
        teacher_finetune=finetune_cfg,
        student=build_group(StudentConfig, container["student"], "student"),
        size=build_group(SizeConfig, container["size"], "size"),
        kd=build_group(KDConfig, container["kd"], "kd"),
        task=build_group(TaskConfig, container["task"], "task"),
        trainer=build_group(TrainerConfig, container["trainer"], "trainer"),
        logger=build_group(LoggerConfig, container["logger"], "logger"),
        seed=run.seed,
        resume=str(run.resume).lower(),
        data_dir=data_dir,
        cache_dir=cache_dir,
    )
    check_task_files(config.task, data_dir)
    shape = teacher_shape(config, teacher)
    if shape is not None:
        check_student_shape(config, *shape)
    return config


def teacher_shape(config: DistillConfig, teacher: dict) -> tuple[int, int] | None:
    """(layers, heads) of the teacher before it is loaded or trained: its config.json (a
    finetune model/, whose head must fit the task), or the built-in teacher's checkpoint or
    size. None for a hub id, which is only known once fetched."""
    if config.teacher_path is not None:
        found = read_checkpoint(config.teacher_path, "teacher.name_or_path")
        if found is not None:
            check_task_architecture(found, config.task.kind, "teacher.name_or_path",
                                    config.teacher_path, config.task.name)
    elif teacher["model"].get("name_or_path"):
        found = read_checkpoint(teacher["model"]["name_or_path"], "teacher.model.name_or_path")
    else:
        found = teacher["size"]
    if found is None:
        return None
    if "model_type" in found:  # a checkpoint's config.json, not size=
        key = "teacher.name_or_path" if config.teacher_path else "teacher.model.name_or_path"
        check_uses(found, distill_uses(config.student, config.kd), key,
                   config.teacher_path or teacher["model"]["name_or_path"])
    return (int(config_value(found, "num_hidden_layers")),
            int(config_value(found, "num_attention_heads")))


def check_student_shape(config: DistillConfig, teacher_layers: int, teacher_heads: int) -> None:
    """The student's layers, the layer map and TinyBERT's head-by-head attention loss, all
    against the teacher's shape (pipelines/distill.py builds them the same way)."""
    if config.student.init == "teacher_layers":
        student_layers = len(choose_layers(teacher_layers, config.student))
        student_heads = teacher_heads
    else:
        student_layers, student_heads = (config.size.num_hidden_layers,
                                         config.size.num_attention_heads)
    if config.kd.layer_map is not None:
        check_layer_map(config.kd.layer_map, student_layers, teacher_layers)
    if config.kd.attention_weight > 0:
        require(student_heads == teacher_heads, "kd.attention_weight > 0 matches attention "
                f"maps head by head (TinyBERT); the student has {student_heads} heads, the "
                f"teacher {teacher_heads}")
        require(config.kd.layer_map is None or min(config.kd.layer_map[1:]) >= 1,
                f"kd.layer_map={config.kd.layer_map} maps a student layer to the embeddings "
                "(0), which have no attention map; use layers >= 1")
