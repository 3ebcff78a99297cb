"""One row per probing analysis: the code that runs it, its checked settings (analysis.<name>.*
in conf/analysis/<name>.yaml) and what it needs of a checkpoint beyond hidden states.

The probe config builds each analysis's settings from its row (config/probe_config.py), the
capability checks read its needs (config/family_checks.py), the pipeline runs its code
(pipelines/probe.py), and `bertology --help` lists the rows. Adding an analysis takes its module,
its settings and row here, and its conf/analysis/<name>.yaml (tests/house/test_rows.py adds one that
way).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from bertology.config.checks import distinct, in_open_unit, non_empty, one_of, positive
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


HEADS = ("own", "fitted", "auto")  # AgreementInterchangeSettings.head


@dataclass
class AgreementInterchangeSettings:
    """analysis=agreement_interchange: interchange the subject's number at each layer and read
    the MLM's verb form (Finlayson et al., 2021; Geiger et al., 2021)."""

    random_init: bool = True  # the same measurement on the random-init twin
    batch_size: int = 64  # minimal pairs per forward pass
    # the readout: own (the checkpoint's MLM head; the twin's at random), fitted (a head
    # trained on the frozen encoder, and on the twin's: analysis/fitted_head.py), auto (own
    # where the checkpoint has one, else fitted)
    head: str = "own"
    head_steps: int = 1000  # fitted: batches of 256 masked words (the encoder read once)

    def __post_init__(self) -> None:
        positive(self.batch_size, "analysis.agreement_interchange.batch_size")
        one_of(self.head, HEADS, "analysis.agreement_interchange.head")
        positive(self.head_steps, "analysis.agreement_interchange.head_steps")
READOUTS = ("task", "mlm")  # analysis/readouts.py


@dataclass
class ErasureUseSettings:
    """analysis=erasure_use: erase the labels with LEACE per layer and measure the readout."""

    readouts: list[str] = field(default_factory=lambda: ["task"])  # task | mlm
    layers: list[int] | None = None  # null: every layer, 0 (embeddings) … L
    task: str = "sst2"  # conf/task/<task>.yaml: the classifier's task (the task readout)
    max_examples: int = 200  # a seeded sample of its eval examples
    mask_prob: float = 0.15  # the MLM readout's masked words
    max_fit_words: int | None = 20000  # a seeded sample of the train words LEACE is fit on
    max_probe_words: int | None = 5000  # the probe that checks the erasure

    def __post_init__(self) -> None:
        from bertology.config.compose import CONF_DIR  # the task files the readout may name

        one_of(self.task, sorted(p.stem for p in (CONF_DIR / "task").glob("*.yaml")),
               "analysis.erasure_use.task")
        non_empty(self.readouts, "analysis.erasure_use.readouts", "[task]")
        distinct(self.readouts, "analysis.erasure_use.readouts")
        for readout in self.readouts:
            one_of(readout, READOUTS, "analysis.erasure_use.readouts")
        require(self.layers is None or (self.layers and all(k >= 0 for k in self.layers)),
                f"analysis.erasure_use.layers={self.layers} must list layers >= 0 or be null")
        positive(self.max_examples, "analysis.erasure_use.max_examples")
        in_open_unit(self.mask_prob, "analysis.erasure_use.mask_prob")
        for key in ("max_fit_words", "max_probe_words"):
            value = getattr(self, key)
            require(value is None or value >= 100,
                    f"analysis.erasure_use.{key}={value} must be >= 100 or null")


@dataclass(frozen=True)
class Analysis:
    run: str  # "module:function": run(ctx, settings) -> metrics, imported when it runs
    settings: type  # the dataclass analysis.<name>.* is checked into
    # what it needs of the checkpoint's architecture beyond hidden states, one of
    # families.CAPABILITIES: the config refuses a model type without it, before any work
    needs: str | None = None


# analysis name -> its row; conf/analysis/<name>.yaml for each
# (tests/analysis/test_probe.py checks it)
ANALYSES = {
    "linear": Analysis("bertology.analysis.probes:run_linear", LinearSettings),
    "mlp": Analysis("bertology.analysis.probes:run_mlp", MLPSettings),
    "structural": Analysis("bertology.analysis.structural:run", StructuralSettings),
    "position": Analysis("bertology.analysis.position:run", PositionSettings),
    "numeracy": Analysis("bertology.analysis.numeracy:run", NumeracySettings),
    # attention maps: the encoders then run with eager attention
    "attention": Analysis("bertology.analysis.attention:run", AttentionSettings,
                          needs="attention_maps"),
    "geometry": Analysis("bertology.analysis.geometry:run", GeometrySettings),
    # the masked-LM head: checked before any other analysis spends time
    "cloze": Analysis("bertology.analysis.cloze:run", ClozeSettings, needs="mlm_head"),
    "amnesic": Analysis("bertology.analysis.amnesic:run", AmnesicSettings, needs="mlm_head"),
    "agreement_interchange": Analysis("bertology.analysis.agreement_interchange:run",
                                      AgreementInterchangeSettings, needs="mlm_head"),
    # the MLM head only with readouts=[mlm]: checked when the analysis loads it
    "erasure_use": Analysis("bertology.analysis.erasure_use:run", ErasureUseSettings),
}


def analyses_needing(capability: str, names: Iterable[str]) -> list[str]:
    """Those of the named analyses whose row needs the capability."""
    return [name for name in names if ANALYSES[name].needs == capability]
