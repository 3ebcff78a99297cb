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
    distinct,
    non_empty,
    one_of,
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
from bertology.config.twin_checks import check_fine_tuned_twin
from bertology.errors import require

EXPERIMENTS = ("heads", "removal", "layers", "magnitude", "int8", "matrix", "ablation",
               "attention_gradients")
SCORES = ("gradient", "confidence", "entropy", "ablation", "random")
INT8_BACKENDS = ("auto", "torch_ao", "torchao")
# Sajjad et al. (2020) §3's layer-dropping strategies; pruning/heads.py's LAYER_DROPPING has
# the same keys (tests/test_layout.py checks it)
LAYER_STRATEGIES = ("top", "bottom", "alternate_even", "alternate_odd", "symmetric")


def unit_interval(value: float, key: str, closed_low: bool = False) -> None:
    low_ok = value >= 0.0 if closed_low else value > 0.0
    require(low_ok and value < 1.0, f"{key}={value} must lie in {'[' if closed_low else '('}0, 1)")


@dataclass
class PruneSettings:
    experiments: list[str] = field(default_factory=lambda: ["heads", "removal"])
    scores: list[str] = field(default_factory=lambda: ["gradient", "random"])
    step_fraction: float = 0.1
    stop_fraction: float = 0.5
    max_loss: float = 0.01
    rescore: bool = True
    importance_examples: int = 512
    batch_size: int = 32
    random_seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    remove_fraction: float | None = None
    layer_strategies: list[str] = field(default_factory=lambda: ["top", "bottom"])
    sparsities: list[float] = field(default_factory=lambda: [0.1, 0.5, 0.9])
    int8_backend: str = "auto"

    def __post_init__(self) -> None:
        require(self.experiments, "prune.experiments is empty; choose from "
                f"{', '.join(EXPERIMENTS)}")
        for key in ("experiments", "scores", "random_seeds", "layer_strategies", "sparsities"):
            distinct(getattr(self, key), f"prune.{key}")
        if "layers" in self.experiments:
            non_empty(self.layer_strategies, "prune.layer_strategies", "[top,bottom]")
        if "magnitude" in self.experiments:
            non_empty(self.sparsities, "prune.sparsities", "[0.1,0.5,0.9]")
        for name in self.experiments:
            one_of(name, EXPERIMENTS, "prune.experiments")
        for name in self.scores:
            one_of(name, SCORES, "prune.scores")
        for name in self.layer_strategies:
            one_of(name, LAYER_STRATEGIES, "prune.layer_strategies")
        one_of(self.int8_backend, INT8_BACKENDS, "prune.int8_backend")
        needs_curve = {"heads", "removal", "matrix"} & set(self.experiments)
        require(not needs_curve or self.scores, "prune.scores is empty; the head experiments "
                "need at least one score, e.g. prune.scores=[gradient,random]")
        require(not needs_curve or self.scores[0] != "random" or len(self.scores) == 1,
                f"prune.scores={self.scores}: list the score under study first; removal and "
                "the matrix prune by scores[0], and random is the baseline")
        require(0.0 < self.step_fraction < 1.0, f"prune.step_fraction={self.step_fraction} "
                "must lie in (0, 1): a step of the whole model would remove every head")
        unit_interval(self.stop_fraction, "prune.stop_fraction", closed_low=True)
        unit_interval(self.max_loss, "prune.max_loss")
        require(self.remove_fraction is None or 0.0 < self.remove_fraction < 1.0,
                f"prune.remove_fraction={self.remove_fraction} must lie in (0, 1): 1 would "
                "remove every head (or null for the largest step within max_loss)")
        require(self.importance_examples > 0 and self.batch_size > 0,
                "prune.importance_examples and prune.batch_size must be positive")
        require(bool(self.random_seeds) or "random" not in self.scores,
                "prune.random_seeds is empty; the random order needs at least one seed")
        require(all(0.0 < s < 1.0 for s in self.sparsities),
                f"prune.sparsities={self.sparsities} must lie in (0, 1)")


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
