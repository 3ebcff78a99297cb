"""Checked views of the composed Hydra config: one dataclass per group (DESIGN §4).

A bad value raises UserError naming the key and the fix, so the CLI can exit 2 before any work.
Names of variants are checked against the dispatch dicts next to the code they name.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from pathlib import Path
from types import UnionType
from typing import Any, Union

from omegaconf import DictConfig, OmegaConf

from bertology.errors import UserError, require

INPUT_FORMATS = ("segment_pair", "sentence_pair", "full_sentences", "doc_sentences")
PAIR_FORMATS = ("segment_pair", "sentence_pair")
PAIR_OBJECTIVES = ("mlm_nsp", "mlm_sop")


def one_of(value: Any, options: tuple | list, key: str) -> None:
    require(value in options, f"{key}={value!r} is not an option; use one of: {', '.join(options)}")


def in_open_unit(value: float, key: str) -> None:
    require(0.0 < value < 1.0, f"{key}={value} must lie strictly between 0 and 1")


def positive(value: float, key: str) -> None:
    require(value > 0, f"{key}={value} must be positive")


# The dataclass defaults mirror the default option of each group (conf/<group>/*.yaml), so
# code and tests that build a group directly get what the CLI gets.


@dataclass
class ModelConfig:
    family: str = "bert"
    name_or_path: str | None = None
    tokenizer: str = "wordpiece"
    vocab_size: int = 8000
    masking: str = "static"
    dupe_factor: int = 1
    input_format: str = "segment_pair"
    max_position_embeddings: int = 512
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    attn_implementation: str = "sdpa"
    generator_fraction: float = 0.25  # ELECTRA: generator width / discriminator width
    sbo_position_embeddings: int = 20  # SpanBERT's SBO head: relative positions in a span

    def __post_init__(self) -> None:
        one_of(self.family, ("bert", "roberta", "spanbert", "electra"), "model.family")
        require(self.sbo_position_embeddings >= 1,
                f"model.sbo_position_embeddings={self.sbo_position_embeddings} must be >= 1")
        require(0.0 < self.generator_fraction <= 1.0,
                f"model.generator_fraction={self.generator_fraction} must lie in (0, 1]")
        one_of(self.tokenizer, ("wordpiece", "bpe"), "model.tokenizer")
        one_of(self.masking, ("static", "dynamic"), "model.masking")
        one_of(self.input_format, INPUT_FORMATS, "model.input_format")
        one_of(self.attn_implementation, ("sdpa", "eager"), "model.attn_implementation")
        require(self.vocab_size >= 100,
                f"model.vocab_size={self.vocab_size} is too small; use >= 100")
        require(self.dupe_factor >= 1, f"model.dupe_factor={self.dupe_factor} must be >= 1")
        for key in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            value = getattr(self, key)
            require(0.0 <= value < 1.0, f"model.{key}={value} must lie in [0, 1)")


@dataclass
class SizeConfig:
    num_hidden_layers: int = 2
    hidden_size: int = 128
    num_attention_heads: int = 2
    intermediate_size: int = 512

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            positive(getattr(self, f.name), f"size.{f.name}")
        require(
            self.hidden_size % self.num_attention_heads == 0,
            f"size.hidden_size={self.hidden_size} is not divisible by "
            f"size.num_attention_heads={self.num_attention_heads}; "
            "pick a head count that divides it",
        )


@dataclass
class ObjectiveConfig:
    name: str = "mlm"
    mask_prob: float = 0.15
    mask_token_ratio: float = 0.8
    random_token_ratio: float = 0.1
    keep_ratio: float = 0.1
    whole_word: bool = False
    mask_with: str = "mask"
    disc_weight: float = 50.0  # ELECTRA's λ on the discriminator loss
    span_geometric_p: float = 0.2  # SpanBERT: span lengths in words ~ Geo(p)
    max_span_words: int = 10  # SpanBERT: ... clipped at this many words
    sbo_weight: float = 1.0  # SpanBERT: loss = MLM + sbo_weight * SBO

    def __post_init__(self) -> None:
        one_of(self.name, ("mlm", *PAIR_OBJECTIVES, "span_sbo", "electra"), "objective.name")
        in_open_unit(self.span_geometric_p, "objective.span_geometric_p")
        require(self.max_span_words >= 1,
                f"objective.max_span_words={self.max_span_words} must be >= 1")
        require(self.sbo_weight >= 0, f"objective.sbo_weight={self.sbo_weight} must be >= 0")
        require(self.disc_weight >= 0, f"objective.disc_weight={self.disc_weight} must be >= 0")
        one_of(self.mask_with, ("mask", "unk"), "objective.mask_with")
        in_open_unit(self.mask_prob, "objective.mask_prob")
        ratios = (self.mask_token_ratio, self.random_token_ratio, self.keep_ratio)
        require(
            all(r >= 0 for r in ratios) and abs(sum(ratios) - 1.0) < 1e-6,
            "objective.mask_token_ratio + random_token_ratio + keep_ratio = "
            f"{sum(ratios):g}; they must be >= 0 and sum to 1 (BERT: 0.8/0.1/0.1)",
        )


@dataclass
class DataConfig:
    name: str = "synthetic"
    max_seq_length: int = 128
    eval_docs: int = 200
    streaming: bool = False
    shuffle_buffer: int = 1000
    # synthetic
    num_sentences: int = 20000
    seed: int = 0
    sentences_per_doc: list[int] = field(default_factory=lambda: [6, 12])
    # wikipedia
    path: str | None = None
    fraction: float = 1.0
    # files
    files: list[str] | None = None
    # hub
    config_name: str | None = None
    split: str = "train"
    text_column: str = "text"
    data_files: list[str] | str | None = None

    def __post_init__(self) -> None:
        one_of(self.name, ("synthetic", "wikipedia", "files", "hub"), "data.name")
        require(
            self.max_seq_length >= 16,
            f"data.max_seq_length={self.max_seq_length} is too short; use >= 16",
        )
        require(self.eval_docs >= 1, f"data.eval_docs={self.eval_docs} must be >= 1")
        require(0.0 < self.fraction <= 1.0, f"data.fraction={self.fraction} must lie in (0, 1]")
        positive(self.num_sentences, "data.num_sentences")
        positive(self.shuffle_buffer, "data.shuffle_buffer")


@dataclass
class TrainerConfig:
    max_steps: int = 1000
    epochs: float | None = None  # finetune: passes over the training set (sets max_steps)
    max_train_examples: int | None = None  # finetune: a seeded sample of the training set
    max_flops: float | None = None  # stop at this many training FLOPs (equal-compute runs)
    max_time_s: float | None = None  # stop after this many seconds of training (Cramming)
    batch_size: int = 16
    grad_accum_steps: int = 1
    lr: float = 2e-3
    weight_decay: float = 0.01
    adam_beta1: float = 0.9
    adam_beta2: float = 0.98
    adam_epsilon: float = 1e-6
    warmup_steps: int = 100
    warmup_ratio: float = 0.0  # finetune: warmup over this share of max_steps (overrides steps)
    max_grad_norm: float = 1.0
    mixed_precision: str = "auto"
    prefetch_batches: int = 0  # > 0: a background thread collates this many batches ahead
    compile: bool = False  # torch.compile the encoders (in place: checkpoints keep their keys)
    log_every: int = 25
    eval_every: int = 250
    eval_batches: int = 16
    save_every: int = 250
    keep_checkpoints: int = 2

    def __post_init__(self) -> None:
        for key in ("max_steps", "batch_size", "grad_accum_steps", "lr", "log_every",
                    "eval_every", "eval_batches", "save_every", "keep_checkpoints"):
            positive(getattr(self, key), f"trainer.{key}")
        require(self.warmup_steps >= 0, f"trainer.warmup_steps={self.warmup_steps} must be >= 0")
        require(self.prefetch_batches >= 0,
                f"trainer.prefetch_batches={self.prefetch_batches} must be >= 0 (0: inline)")
        require(0.0 <= self.warmup_ratio < 1.0,
                f"trainer.warmup_ratio={self.warmup_ratio} must lie in [0, 1)")
        for key in ("max_flops", "max_time_s", "epochs", "max_train_examples"):
            value = getattr(self, key)
            require(value is None or value > 0, f"trainer.{key}={value} must be positive "
                    "(or null for no such budget)")
        one_of(self.mixed_precision, ("auto", "no", "bf16", "fp16"), "trainer.mixed_precision")


@dataclass
class LoggerConfig:
    name: str = "wandb"
    project: str = "bertology"
    entity: str | None = None
    mode: str = "auto"
    tags: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        one_of(self.name, ("wandb", "none"), "logger.name")
        one_of(self.mode, ("auto", "online", "offline"), "logger.mode")


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
        one_of(self.resume, ("auto", "true", "false"), "resume")
        if self.objective.name in PAIR_OBJECTIVES:
            require(
                self.model.family == "bert",
                f"objective={self.objective.name} needs a sentence-pair head, which "
                f"model.family={self.model.family} lacks; use model=bert or objective=mlm",
            )
            require(
                self.model.input_format in PAIR_FORMATS,
                f"objective={self.objective.name} needs segment pairs but model.input_format="
                f"{self.model.input_format}; use model.input_format=segment_pair or sentence_pair",
            )
        require(
            (self.objective.name == "electra") == (self.model.family == "electra"),
            f"objective={self.objective.name} and model.family={self.model.family} do not go "
            "together: replaced-token detection needs ELECTRA's two networks; use model=electra "
            "(objective electra) or another objective with another family",
        )
        require(
            (self.objective.name == "span_sbo") == (self.model.family == "spanbert"),
            f"objective={self.objective.name} and model.family={self.model.family} do not go "
            "together: the span-boundary objective trains SpanBERT's SBO head; use "
            "model=spanbert (objective span_sbo; objective.sbo_weight=0 for span masking alone) "
            "or another objective with another family",
        )
        # RoBERTa numbers positions from padding_idx + 1, so two position slots are unusable.
        offset = 2 if self.model.family == "roberta" else 0
        usable = self.model.max_position_embeddings - offset
        require(
            self.data.max_seq_length <= usable,
            f"data.max_seq_length={self.data.max_seq_length} exceeds the {usable} positions of "
            f"model.max_position_embeddings={self.model.max_position_embeddings}; "
            "lower data.max_seq_length or raise model.max_position_embeddings",
        )


def _type_ok(value: Any, hint: Any) -> bool:
    """Whether a YAML/CLI value fits a field's annotation (ints are accepted as floats)."""
    options = typing.get_args(hint) if typing.get_origin(hint) in (Union, UnionType) else (hint,)
    for option in options:
        origin = typing.get_origin(option) or option
        if option is type(None) and value is None:
            return True
        if origin is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return True
        if origin is int and isinstance(value, int) and not isinstance(value, bool):
            return True
        if origin in (bool, str, list, dict) and isinstance(value, origin):
            return True
    return False


def build_group(cls: type, node: DictConfig | dict | None, group: str) -> Any:
    values = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node
    values = dict(values or {})
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    require(not unknown, f"{group}.{unknown[0] if unknown else ''} is not a known key; "
            f"valid keys: {', '.join(sorted(known))}")
    hints = typing.get_type_hints(cls)
    for name, value in values.items():
        require(value != "???", f"{group}.{name} is required; set it on the command line "
                f"({group}.{name}=...)")
        require(_type_ok(value, hints[name]), f"{group}.{name}={value!r} has the wrong type; "
                f"it takes {_type_name(hints[name])}")
    return cls(**values)


def _type_name(hint: Any) -> str:
    return str(hint).replace("typing.", "").replace("<class '", "").replace("'>", "")


def resolve_container(cfg: DictConfig) -> dict:
    """The composed config as plain data; a bad interpolation is a UserError."""
    try:
        return OmegaConf.to_container(cfg, resolve=True)
    except Exception as err:  # omegaconf raises several types for missing or bad interpolations
        raise UserError(f"config: {str(err).splitlines()[0]}; fix the value on the command "
                        "line") from err


def default_cache_dir() -> Path:
    """Where trained tokenizers and other per-machine results go unless paths.cache_dir (or
    BERTOLOGY_CACHE_DIR, its default) says otherwise."""
    return Path.home() / ".cache" / "bertology"


def resolve_paths(container: dict) -> tuple[Path, Path]:
    """(data root, cache dir) from the `paths` block."""
    cache = container["paths"].get("cache_dir") or default_cache_dir()
    data_dir = Path(str(container["paths"]["data_dir"])).expanduser()
    return data_dir, Path(str(cache)).expanduser()


def load_pretrain_config(cfg: DictConfig) -> PretrainConfig:
    """Check a composed `pretrain` config and return its typed view (raises UserError)."""
    container = resolve_container(cfg)
    data_dir, cache_dir = resolve_paths(container)
    return PretrainConfig(
        model=build_group(ModelConfig, container["model"], "model"),
        size=build_group(SizeConfig, container["size"], "size"),
        objective=build_group(ObjectiveConfig, container["objective"], "objective"),
        data=build_group(DataConfig, container["data"], "data"),
        trainer=build_group(TrainerConfig, container["trainer"], "trainer"),
        logger=build_group(LoggerConfig, container["logger"], "logger"),
        seed=int(container["seed"]),
        resume=str(container["resume"]).lower(),
        data_dir=data_dir,
        cache_dir=cache_dir,
        downstream=check_downstream(container),
    )


def check_nested(load: typing.Callable[[DictConfig], Any], cfg: DictConfig, what: str) -> Any:
    """load(cfg) for a pipeline run nested in another (distill's teacher, prune's student,
    pretrain's downstream fine-tuning), checked before any work; a bad value's error line
    says which nested run it belongs to."""
    try:
        return load(cfg)
    except UserError as err:
        raise UserError(f"{what}: {err}") from err


def check_downstream(container: dict) -> DictConfig | None:
    """downstream.task: the finetune config of the pretrained model/, checked now."""
    from bertology.downstream import build_downstream_cfg
    from bertology.task_config import load_finetune_config

    cfg = build_downstream_cfg(container, "<this run's model/>")
    if cfg is not None:
        check_nested(load_finetune_config, cfg, "downstream (fine-tuning model/)")
    return cfg
