"""Checked views of the `probe` config: the run, and one settings dataclass per analysis.

`analysis=linear` or `analysis=[linear,structural,attention]` picks analyses from conf/analysis/;
each file nests its settings under its own name (analysis.linear.*), so several compose side by
side and all of them read one extraction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from bertology.config.checks import (
    build_group,
    build_top_level,
    check_label,
    check_nested,
    check_seed,
    check_seeds,
    distinct,
    in_open_unit,
    non_empty,
    one_of,
    positive,
    resolve_container,
    resolve_paths,
)
from bertology.config.compose import CONF_DIR, load_group_file
from bertology.config.groups import (
    LoggerConfig,
    ModelConfig,
    ObjectiveConfig,
    SizeConfig,
    TaskConfig,
    refuse_tokenizer_name_or_path,
)
from bertology.config.path_checks import (
    check_mlm_head,
    check_task_files,
    missing_data,
    read_checkpoint,
)
from bertology.config.pretrain_config import load_pretrain_config
from bertology.config.twin_checks import check_fine_tuned_twin
from bertology.errors import require


@dataclass
class LinearSettings:
    """analysis=linear: a logistic-regression probe per layer (scikit-learn)."""

    control: bool = True  # Hewitt & Liang (2019) control task → selectivity
    random_init: bool = True  # the same probe on a random-initialised model of the same shape
    mdl: bool = False  # online code length (Voita & Titov, 2020), + the control task's
    c: float = 1.0  # inverse L2 strength of LogisticRegression and of the MDL softmax probe
    max_iter: int = 300  # L-BFGS iterations of either
    max_train_words: int | None = 50000  # a seeded subsample of the training words

    def __post_init__(self) -> None:
        positive(self.c, "analysis.linear.c")
        positive(self.max_iter, "analysis.linear.max_iter")
        require(self.max_train_words is None or self.max_train_words >= 100,
                f"analysis.linear.max_train_words={self.max_train_words} must be >= 100 or null")


@dataclass
class MLPSettings:
    """analysis=mlp: a one-hidden-layer MLP probe per layer (torch)."""

    control: bool = True
    random_init: bool = True
    mdl: bool = False
    hidden_size: int = 256  # Hewitt & Liang's MLP-1 (they vary 1000 → 10)
    dropout: float = 0.0
    weight_decay: float = 0.0
    epochs: int = 20
    lr: float = 1e-3
    batch_size: int = 256
    max_train_words: int | None = 50000

    def __post_init__(self) -> None:
        for key in ("hidden_size", "epochs", "lr", "batch_size"):
            positive(getattr(self, key), f"analysis.mlp.{key}")
        require(0.0 <= self.dropout < 1.0, f"analysis.mlp.dropout={self.dropout} must lie in "
                "[0, 1)")
        require(self.weight_decay >= 0, f"analysis.mlp.weight_decay={self.weight_decay} must "
                "be >= 0")
        require(self.max_train_words is None or self.max_train_words >= 100,
                f"analysis.mlp.max_train_words={self.max_train_words} must be >= 100 or null")


@dataclass
class PositionSettings:
    """analysis=position: a linear probe per layer for each word's index (Lin et al., 2019)."""

    max_position: int = 15  # indices 0..14 are their own class; 15 and later share one
    c: float = 1.0  # inverse L2 strength of LogisticRegression
    max_iter: int = 300
    max_train_words: int | None = 20000  # a seeded subsample of the training words

    def __post_init__(self) -> None:
        require(self.max_position >= 2,
                f"analysis.position.max_position={self.max_position} must be >= 2")
        positive(self.c, "analysis.position.c")
        positive(self.max_iter, "analysis.position.max_iter")
        require(self.max_train_words is None or self.max_train_words >= 100,
                f"analysis.position.max_train_words={self.max_train_words} must be >= 100 "
                "or null")


@dataclass
class NumeracySettings:
    """analysis=numeracy: decode a number's value from its states (Wallace et al., 2019)."""

    max_number: int = 1000  # the integers 0 .. max_number - 1
    train_below: int = 500  # decoders train below this; extrapolation is scored from it up
    alpha: float = 1.0  # ridge strength (scikit-learn's alpha)

    def __post_init__(self) -> None:
        require(10 <= self.train_below < self.max_number,
                f"analysis.numeracy.train_below={self.train_below} must lie in [10, "
                f"max_number={self.max_number})")
        positive(self.alpha, "analysis.numeracy.alpha")


@dataclass
class StructuralSettings:
    """analysis=structural: Hewitt & Manning (2019) distance and depth probes per layer."""

    probes: list[str] = field(default_factory=lambda: ["distance", "depth"])
    rank: int = 64  # the probe matrix B is (rank × dim); H&M: rank 64 is enough for BERT
    epochs: int = 30
    lr: float = 1e-3  # Adam, as H&M
    batch_size: int = 20  # sentences per step (H&M)
    patience: int = 4  # epochs without dev-loss improvement before stopping
    random_init: bool = True
    linear_baseline: bool = True  # right-branching chain / position as depth (H&M's LINEAR)

    def __post_init__(self) -> None:
        non_empty(self.probes, "analysis.structural.probes", "[distance,depth]")
        distinct(self.probes, "analysis.structural.probes")
        for probe in self.probes:
            one_of(probe, ("distance", "depth"), "analysis.structural.probes")
        for key in ("rank", "epochs", "lr", "batch_size", "patience"):
            positive(getattr(self, key), f"analysis.structural.{key}")


@dataclass
class AttentionSettings:
    """analysis=attention: per-head statistics (Clark et al., 2019) and Kovaleva et al.'s
    (2019) pattern classes."""

    max_sentences: int = 500  # eval sentences whose maps are read
    heatmaps: bool = True
    kovaleva_sentences: int = 100  # maps classified per head (majority class is reported)
    min_dependents: int = 100  # held-out dependents a relation needs for a metric (Clark et al.)

    def __post_init__(self) -> None:
        positive(self.max_sentences, "analysis.attention.max_sentences")
        positive(self.kovaleva_sentences, "analysis.attention.kovaleva_sentences")
        positive(self.min_dependents, "analysis.attention.min_dependents")


@dataclass
class GeometrySettings:
    """analysis=geometry: Ethayarajh (2019) anisotropy / self-similarity, and linear CKA."""

    pairs: int = 2000  # random word pairs for anisotropy
    min_occurrences: int = 5  # a word type's contexts needed for its self-similarity
    max_types: int = 500  # word types whose self-similarity is averaged

    def __post_init__(self) -> None:
        positive(self.pairs, "analysis.geometry.pairs")
        require(self.min_occurrences >= 2, "analysis.geometry.min_occurrences="
                f"{self.min_occurrences} must be >= 2 (similarity needs two contexts)")
        positive(self.max_types, "analysis.geometry.max_types")


# suite -> the data sets it reads under the data root (data/cloze_suites.py)
CLOZE_DATA = {
    "blimp": ("blimp",),
    "agreement": ("marvin_linzen_syneval", "colorless_green_agreement"),
    "ettinger": ("ettinger_diagnostics",),
    "lama": ("lama",),
}
CLOZE_SUITES = tuple(CLOZE_DATA)


@dataclass
class ClozeSettings:
    """analysis=cloze: behavioural tests through the MLM head."""

    suites: list[str] = field(default_factory=lambda: list(CLOZE_SUITES))
    max_items: int = 100  # per BLiMP paradigm / agreement condition / LAMA relation
    blimp_paradigms: list[str] = field(default_factory=list)  # empty: all 67
    top_k: int = 5  # Ettinger reports top-1 and top-5 accuracy
    batch_size: int = 32

    def __post_init__(self) -> None:
        non_empty(self.suites, "analysis.cloze.suites", "[blimp,agreement]")
        distinct(self.suites, "analysis.cloze.suites")
        distinct(self.blimp_paradigms, "analysis.cloze.blimp_paradigms")
        for suite in self.suites:
            one_of(suite, CLOZE_SUITES, "analysis.cloze.suites")
        for key in ("max_items", "top_k", "batch_size"):
            positive(getattr(self, key), f"analysis.cloze.{key}")


@dataclass
class AmnesicSettings:
    """analysis=amnesic: remove linearly decodable labels (INLP) and measure the MLM drop."""

    layer: int | None = None  # null: the last layer (the MLM head reads it)
    iterations: int = 20  # INLP rounds (Ravfogel et al., 2020)
    mask_prob: float = 0.15  # words masked to measure MLM accuracy
    max_train_words: int | None = 20000

    def __post_init__(self) -> None:
        positive(self.iterations, "analysis.amnesic.iterations")
        require(self.layer is None or self.layer >= 0,
                f"analysis.amnesic.layer={self.layer} must be >= 0 (0: embeddings) or null")
        require(self.max_train_words is None or self.max_train_words >= 100,
                f"analysis.amnesic.max_train_words={self.max_train_words} must be >= 100 or "
                "null")
        in_open_unit(self.mask_prob, "analysis.amnesic.mask_prob")


MLM_ANALYSES = ("cloze", "amnesic")  # the analyses that read the MLM head

# analysis name -> its settings; bertology/pipelines/probe.py's ANALYSES has the same keys
ANALYSIS_SETTINGS = {
    "linear": LinearSettings,
    "mlp": MLPSettings,
    "structural": StructuralSettings,
    "position": PositionSettings,
    "numeracy": NumeracySettings,
    "attention": AttentionSettings,
    "geometry": GeometrySettings,
    "cloze": ClozeSettings,
    "amnesic": AmnesicSettings,
}


GROUPS = ("objective", "model", "size", "task", "analysis", "logger", "paths")


@dataclass
class ProbeRunKeys:
    """The top-level keys of conf/probe.yaml."""

    seed: int = 0
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])  # probe restarts
    init: str = "pretrained"
    pooling: str = "first"
    batch_size: int = 32
    max_train_sentences: int | None = 2000
    max_eval_sentences: int | None = 500
    sample_seed: int = 0
    compare_to: str | None = None
    compare_to_twin: str | None = None
    label: str | None = None  # recorded, never read (config/checks.py check_label)

    def __post_init__(self) -> None:
        check_seed(self.seed, "seed")
        require(self.compare_to_twin is None or self.compare_to is not None,
                "compare_to_twin is the twin arm of compare_to (the random-init twin "
                "fine-tuned as compare_to was); set compare_to too")
        check_seeds(self.seeds)
        check_seed(self.sample_seed, "sample_seed")
        check_label(self.label)
        one_of(self.init, ("pretrained", "random"), "init")
        one_of(self.pooling, ("first", "mean"), "pooling")
        positive(self.batch_size, "batch_size")
        for key in ("max_train_sentences", "max_eval_sentences"):
            value = getattr(self, key)
            require(value is None or value > 0, f"{key}={value} must be positive or null")


@dataclass
class ProbeConfig:
    model: ModelConfig
    size: SizeConfig
    task: TaskConfig
    analyses: dict
    logger: LoggerConfig
    seed: int
    seeds: list[int]
    sample_seed: int
    init: str
    pooling: str
    batch_size: int
    max_train_sentences: int | None
    max_eval_sentences: int | None
    compare_to: str | None
    data_dir: Path
    cache_dir: Path
    compare_to_twin: str | None = None  # the twin (random) fine-tuned as compare_to was
    # model.name_or_path=null, init=pretrained: the `pretrain` config of the model to probe
    pretrain_cfg: DictConfig | None = None

    def __post_init__(self) -> None:
        require(self.analyses, "analysis= picks nothing; use e.g. analysis=linear or "
                "analysis=[linear,structural]")
        refuse_tokenizer_name_or_path(self.model, "probe")
        # before Hydra makes a run dir (the CLI's pre-check runs this): not after the data load
        require(has_word_labels(self.task.format, self.task.label_field), f"task={self.task.name} "
                f"({self.task.format}) has no word labels to probe; use a tagging task: "
                f"{PROBE_TASKS}")


# Task formats whose sentences carry word labels to probe (bertology/data/probe_sentences.py),
# and the synthetic grammar's word annotations among its fields
PROBE_FORMATS = ("synthetic", "conllu", "conll03")
SYNTHETIC_PROBE_FIELDS = ("upos", "depths", "agreement", "deprel")


def has_word_labels(task_format: str, label_field: str | None) -> bool:
    """Whether a task gives the probe word labels (a synthetic task: a word annotation)."""
    return task_format in PROBE_FORMATS and (task_format != "synthetic"
                                             or label_field in SYNTHETIC_PROBE_FIELDS)
PROBE_TASKS = ("ud_pos, ud_deps, conll03, synthetic_pos, synthetic_depth, "
               "synthetic_agreement")


def load_probe_config(cfg: DictConfig) -> ProbeConfig:
    """Check a composed `probe` config and return its typed view (raises UserError)."""
    container = resolve_container(cfg)
    run = build_top_level(ProbeRunKeys, container, GROUPS)
    data_dir, cache_dir = resolve_paths(container)
    analyses = container.get("analysis") or {}
    require(isinstance(analyses, dict), f"analysis={analyses!r} has the wrong type; pick "
            "analyses by name, e.g. analysis=[linear,structural]")
    for name in analyses:
        one_of(name, tuple(ANALYSIS_SETTINGS), "analysis")
    if "objective" in container:  # composed for model/*.yaml's sake; checked all the same
        build_group(ObjectiveConfig, container["objective"], "objective")
    config = ProbeConfig(
        model=build_group(ModelConfig, container["model"], "model"),
        size=build_group(SizeConfig, container["size"], "size"),
        task=build_group(TaskConfig, container["task"], "task"),
        analyses={name: build_group(ANALYSIS_SETTINGS[name], settings, f"analysis.{name}")
                  for name, settings in analyses.items()},
        logger=build_group(LoggerConfig, container["logger"], "logger"),
        seed=run.seed, seeds=run.seeds, sample_seed=run.sample_seed, init=run.init,
        pooling=run.pooling, batch_size=run.batch_size,
        max_train_sentences=run.max_train_sentences,
        max_eval_sentences=run.max_eval_sentences, compare_to=run.compare_to,
        data_dir=data_dir, cache_dir=cache_dir, compare_to_twin=run.compare_to_twin,
    )
    if config.model.name_or_path is None and config.init == "pretrained":
        config.pretrain_cfg = build_pretrain_cfg(container)
        check_nested(load_pretrain_config, config.pretrain_cfg, "the model to probe (no "
                     "model.name_or_path: pretrained first by `bertology pretrain`)")
    for key, path in (("model.name_or_path", config.model.name_or_path),
                      ("compare_to", config.compare_to)):
        if path is not None:
            read_checkpoint(path, key)
    if config.compare_to_twin is not None:
        check_fine_tuned_twin(config.compare_to_twin, "compare_to_twin", config.seed,
                              config.compare_to, "compare_to")
    check_task_files(config.task, data_dir)
    check_mlm_analyses(config)
    if "cloze" in config.analyses:
        for suite in config.analyses["cloze"].suites:
            for name in CLOZE_DATA[suite]:
                require((data_dir / name).is_dir(), f"analysis.cloze.suites: {suite} reads "
                        f"{missing_data(data_dir / name, data_dir)}")
    return config


def check_mlm_analyses(config: ProbeConfig) -> None:
    """Cloze and amnesic probing read the MLM head of a checkpoint: one must be given, and
    have the head's weights (read from the safetensors header, before any model is built)."""
    needs = [name for name in config.analyses if name in MLM_ANALYSES]
    if not needs:
        return
    path = config.model.name_or_path
    if path is None and config.pretrain_cfg is not None:
        return  # the default pretrain run's model/ has the head (BertForPreTraining and kin)
    require(path is not None, f"analysis={','.join(needs)} reads a checkpoint's MLM head; set "
            "model.name_or_path (e.g. the model/ of a bertology pretrain run)")
    found = read_checkpoint(path, "model.name_or_path")
    if found is not None:
        check_mlm_head(path, found, needs)


def build_pretrain_cfg(container: dict) -> DictConfig:
    """What a probe with no checkpoint probes: the default `bertology pretrain` of its model=
    and size= (conf/pretrain.yaml's run: the embedded corpus, trainer=default, its dropout
    and seed), so the no-argument figure shows a model that has learned the grammar against
    its random-init and control baselines instead of noise against noise. The probe
    pipeline runs it once and caches it (pipelines/probe.py)."""
    primary = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "pretrain.yaml"))
    model = OmegaConf.merge(container["model"], primary["model"])
    return OmegaConf.create({
        "model": OmegaConf.to_container(model), "size": container["size"],
        "objective": container["objective"], "data": load_group_file("data", "synthetic"),
        "trainer": load_group_file("trainer", "default"), "logger": container["logger"],
        "seed": primary["seed"], "resume": primary["resume"], "paths": container["paths"],
        "downstream": primary["downstream"],
    })
