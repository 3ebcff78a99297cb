"""Checked views of the `finetune` config: the task, the head, the run (DESIGN §4).

Shares the model, size, trainer and logger groups with pretraining (bertology/config.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from bertology.config import (
    LoggerConfig,
    ModelConfig,
    SizeConfig,
    TrainerConfig,
    build_group,
    in_open_unit,
    one_of,
    positive,
    resolve_container,
    resolve_paths,
)
from bertology.errors import require

TASK_KINDS = ("classification", "tagging", "qa")
TASK_FORMATS = ("glue_tsv", "conll03", "conllu", "squad", "synthetic")
# BERT Table 7's feature-based rows, plus the scalar mix of ELMo/Tenney et al.
FEATURES = ("embeddings", "last", "second_to_last", "sum_last_four", "concat_last_four",
            "scalar_mix")
METRICS = ("accuracy", "f1", "mcc", "entity_f1", "exact_match")


@dataclass
class TaskConfig:
    name: str = "synthetic_pos"
    kind: str = "tagging"
    format: str = "synthetic"
    source: str = "auto"  # auto: local files under the data root if present, else the hub
    path: str | None = None  # folder under the data root
    train_file: str | None = None
    eval_file: str | None = None
    hub: str | None = None  # datasets.load_dataset(hub, hub_config)
    hub_config: str | None = None
    hub_eval_split: str = "validation"
    text_columns: list[str] = field(default_factory=list)  # glue_tsv: local file columns
    label_column: str | None = None
    hub_text_columns: list[str] = field(default_factory=list)
    hub_label_column: str = "label"
    labels: list[str] = field(default_factory=list)  # classification: the label set, in order
    label_field: str = "upos"  # conllu / synthetic: which annotation is the label
    probe_unit: str = "word"  # probe: a word's label, or an edge's (dependent, head) label
    metric: str = "accuracy"  # the metric that picks the best seed
    max_eval_examples: int | None = None  # a seeded subsample of the eval set
    max_seq_length: int = 128
    doc_stride: int = 128  # qa: overlap of windows over a long context (BERT §4.2)
    max_answer_tokens: int = 30  # qa: longest answer span considered
    eval_articles: int = 10  # squad: dev articles held out for eval, the rest train
    num_sentences: int = 4000  # synthetic
    eval_fraction: float = 0.2  # synthetic: share of sentences held out

    def __post_init__(self) -> None:
        one_of(self.kind, TASK_KINDS, "task.kind")
        one_of(self.format, TASK_FORMATS, "task.format")
        one_of(self.source, ("auto", "local", "hub"), "task.source")
        one_of(self.metric, METRICS, "task.metric")
        one_of(self.probe_unit, ("word", "edge"), "task.probe_unit")
        require(self.max_seq_length >= 16,
                f"task.max_seq_length={self.max_seq_length} is too short; use >= 16")
        positive(self.doc_stride, "task.doc_stride")
        positive(self.max_answer_tokens, "task.max_answer_tokens")
        positive(self.num_sentences, "task.num_sentences")
        in_open_unit(self.eval_fraction, "task.eval_fraction")
        require(self.max_eval_examples is None or self.max_eval_examples > 0,
                f"task.max_eval_examples={self.max_eval_examples} must be positive or null")


@dataclass
class HeadConfig:
    mode: str = "finetune"  # finetune: all weights train; feature: the encoder is frozen
    features: str = "last"  # which hidden states the head reads (BERT Table 7)
    pooling: str = "cls"  # classification: [CLS] output or the mean of token outputs
    freeze_layers: int = 0  # finetune: freeze the embeddings and the lowest k layers
    layer_lr_decay: float = 1.0  # lr × decay^(depth from the top) (Clark et al., 2020)
    dropout: float = 0.1  # BERT §A.3
    lstm_hidden: int = 0  # > 0: a 2-layer BiLSTM before the classifier (BERT §5.3)

    def __post_init__(self) -> None:
        one_of(self.mode, ("finetune", "feature"), "head.mode")
        one_of(self.features, FEATURES, "head.features")
        one_of(self.pooling, ("cls", "mean"), "head.pooling")
        require(self.freeze_layers >= 0, f"head.freeze_layers={self.freeze_layers} must be >= 0")
        require(0.0 < self.layer_lr_decay <= 1.0,
                f"head.layer_lr_decay={self.layer_lr_decay} must lie in (0, 1]")
        require(0.0 <= self.dropout < 1.0, f"head.dropout={self.dropout} must lie in [0, 1)")
        require(self.lstm_hidden >= 0, f"head.lstm_hidden={self.lstm_hidden} must be >= 0")

    @property
    def standard(self) -> bool:
        """The paper's fine-tuning head (the checkpoint class's own), which model/ reproduces
        exactly in plain transformers; every other choice adds a head of bertology's."""
        return (self.mode == "finetune" and self.features == "last" and self.pooling == "cls"
                and self.lstm_hidden == 0)


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

    def __post_init__(self) -> None:
        one_of(self.init, ("pretrained", "random"), "init")
        one_of(self.resume, ("auto", "true", "false"), "resume")
        require(len(set(self.seeds)) == len(self.seeds), f"seeds={self.seeds} repeats a seed")
        require(self.init == "pretrained" or self.model.name_or_path is not None,
                "init=random draws new weights for a checkpoint's architecture; set "
                "model.name_or_path (a random model of size= is what model.name_or_path=null "
                "already gives)")
        if self.model.name_or_path is None:
            require(self.model.family in ("bert", "roberta"),
                    f"finetune builds random-initialised bert or roberta models; "
                    f"model={self.model.family} needs model.name_or_path (a pretrained run's "
                    "model/ dir)")


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
    })


def load_finetune_config(cfg: DictConfig) -> FinetuneConfig:
    """Check a composed `finetune` config and return its typed view (raises UserError)."""
    container = resolve_container(cfg)
    data_dir, cache_dir = resolve_paths(container)
    seeds = container.get("seeds")
    require(seeds is None or (isinstance(seeds, list) and seeds
                              and all(isinstance(s, int) for s in seeds)),
            f"seeds={seeds!r} must be a non-empty list of integers, e.g. seeds=[0,1,2]")
    return FinetuneConfig(
        model=build_group(ModelConfig, container["model"], "model"),
        size=build_group(SizeConfig, container["size"], "size"),
        task=build_group(TaskConfig, container["task"], "task"),
        head=build_group(HeadConfig, container["head"], "head"),
        trainer=build_group(TrainerConfig, container["trainer"], "trainer"),
        logger=build_group(LoggerConfig, container["logger"], "logger"),
        seed=int(container["seed"]),
        seeds=list(seeds) if seeds else [int(container["seed"])],
        init=str(container["init"]),
        resume=str(container["resume"]).lower(),
        data_dir=data_dir,
        cache_dir=cache_dir,
    )
