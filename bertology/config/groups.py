"""The config groups the pipelines share, one checked dataclass per group (DESIGN §4): model,
size, objective, data, trainer, logger (conf/<group>/*.yaml), and the task and head of the
pipelines that read labelled data.

A bad value raises UserError naming the key and the fix, so the CLI can exit 2 before any work.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from bertology.config.checks import (
    check_seed,
    distinct,
    in_open_unit,
    non_empty,
    non_negative,
    one_of,
    positive,
)
from bertology.config.own_data import OWN_FORMATS, check_own_task
from bertology.errors import require
from bertology.families import FAMILIES, objective_names

INPUT_FORMATS = ("segment_pair", "sentence_pair", "full_sentences", "doc_sentences")
PAIR_FORMATS = ("segment_pair", "sentence_pair")
# training/flops.py: Kaplan et al.'s 6 x MACs, or ELECTRA's App. D (dense look-ups, backward =
# forward, element-wise work)
FLOPS_CONVENTIONS = ("kaplan", "electra")
PAIR_OBJECTIVES = ("mlm_nsp", "mlm_sop")


# The dataclass defaults mirror the default option of each group (conf/<group>/*.yaml), so
# code and tests that build a group directly get what the CLI gets.


@dataclass
class ModelConfig:
    family: str = "bert"
    name_or_path: str | None = None
    revision: str | None = None  # a hub checkpoint's branch, tag or commit (hub_revisions.py)
    suite: str | None = None  # a checkpoint suite (conf/suites/ or a YAML file: suites.py)
    suite_seed: int | None = None  # the suite's seed (None: 0)
    suite_step: int | None = None  # the suite's training step (None: its final model)
    # pretrain, random init: a pretrained tokenizer (folder or hub id) instead of one trained
    # on the corpus; the vocabulary is its length, whatever vocab_size says
    tokenizer_name_or_path: str | None = None
    tokenizer: str = "wordpiece"
    vocab_size: int = 8000
    masking: str = "static"
    dupe_factor: int = 1
    input_format: str = "segment_pair"
    # RoBERTa §4.2: DOC-SENTENCES raises the batch so a step holds as many tokens as with
    # FULL-SENTENCES (conf/input_format/doc_sentences.yaml sets it; pretrain.equal_token_batch)
    doc_sentences_equal_tokens: bool = False
    max_position_embeddings: int = 512
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    attn_implementation: str = "sdpa"
    generator_fraction: float = 0.25  # ELECTRA: generator width / discriminator width
    sbo_position_embeddings: int = 20  # SpanBERT's SBO head: relative positions in a span

    def __post_init__(self) -> None:
        one_of(self.family, tuple(FAMILIES), "model.family")
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
        positive(self.max_position_embeddings, "model.max_position_embeddings")
        require(self.name_or_path is None or self.name_or_path.strip() != "",
                "model.name_or_path='' names nothing; give a model dir or a hub id (or null "
                "for a random-initialised model of size=)")
        self.check_tokenizer_name_or_path()
        for key in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            value = getattr(self, key)
            require(0.0 <= value < 1.0, f"model.{key}={value} must lie in [0, 1)")
        from bertology.config.suites import pin_checkpoint  # reads the hub cache

        pin_checkpoint(self)

    def check_tokenizer_name_or_path(self) -> None:
        """A pretrained tokenizer is for a random-initialised model: a checkpoint continued
        from model.name_or_path brings its own, which its embeddings were trained on."""
        value = self.tokenizer_name_or_path
        require(value is None or value.strip() != "",
                "model.tokenizer_name_or_path='' names nothing; give a tokenizer folder or a hub "
                "id (or null to train one on the corpus)")
        require(value is None or self.name_or_path is None,
                f"model.tokenizer_name_or_path={value!r} is for a random-initialised model, "
                f"and model.name_or_path={self.name_or_path!r} brings its own tokenizer; drop "
                "one of them")


def refuse_tokenizer_name_or_path(model: ModelConfig, pipeline: str) -> None:
    """Only `bertology pretrain` reads model.tokenizer_name_or_path; elsewhere a random-init
    model's tokenizer is trained on the task's text, so the key is refused, not ignored."""
    require(model.tokenizer_name_or_path is None,
            f"model.tokenizer_name_or_path={model.tokenizer_name_or_path!r} is read by "
            f"`bertology pretrain` only; {pipeline} uses model.name_or_path's tokenizer, or "
            "trains one (model.tokenizer, model.vocab_size); drop it")


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
    random_tokens: str = "uniform"  # random replacements: uniform over the vocab, or unigram

    def __post_init__(self) -> None:
        one_of(self.name, objective_names(), "objective.name")
        in_open_unit(self.span_geometric_p, "objective.span_geometric_p")
        require(self.max_span_words >= 1,
                f"objective.max_span_words={self.max_span_words} must be >= 1")
        require(self.sbo_weight >= 0, f"objective.sbo_weight={self.sbo_weight} must be >= 0")
        require(self.disc_weight >= 0, f"objective.disc_weight={self.disc_weight} must be >= 0")
        one_of(self.mask_with, ("mask", "unk"), "objective.mask_with")
        one_of(self.random_tokens, ("uniform", "unigram"), "objective.random_tokens")
        require(self.random_tokens == "uniform" or self.name == "span_sbo",
                f"objective.random_tokens=unigram is SpanBERT's (objective=span_sbo); "
                f"objective={self.name} draws its random tokens uniformly: drop the override")
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
        check_seed(self.seed, "data.seed")
        low_high = self.sentences_per_doc
        require(len(low_high) == 2 and 1 <= low_high[0] <= low_high[1],
                f"data.sentences_per_doc={low_high} must be [low, high] with 1 <= low <= high, "
                "e.g. [6,12]")
        if self.files is not None:
            non_empty(self.files, "data.files", "[corpus.txt]")
            distinct(self.files, "data.files")


@dataclass
class TrainerConfig:
    max_steps: int = 1000
    epochs: float | None = None  # finetune: passes over the training set (sets max_steps)
    max_train_examples: int | None = None  # finetune: a seeded sample of the training set
    max_flops: float | None = None  # stop at this many training FLOPs (equal-compute runs)
    flops_convention: str = "kaplan"  # how max_flops and train/flops count (FLOPS_CONVENTIONS)
    max_time_s: float | None = None  # stop after this many seconds of training (Cramming)
    batch_size: int = 16
    grad_accum_steps: int = 1
    lr: float = 2e-3
    weight_decay: float = 0.01
    adam_beta1: float = 0.9
    adam_beta2: float = 0.98
    adam_epsilon: float = 1e-6
    warmup_steps: int = 100
    warmup_ratio: float = 0.0  # > 0: warm up over this share of the budget (overrides steps)
    max_grad_norm: float = 1.0
    mixed_precision: str = "auto"
    prefetch_batches: int = 0  # > 0: a background thread collates this many batches ahead
    compile: bool = False  # torch.compile the encoders (in place: checkpoints keep their keys)
    dropout_masks: str = "auto"  # bits: masks from 16-bit random integers (training/dropout.py)
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
        one_of(self.flops_convention, FLOPS_CONVENTIONS, "trainer.flops_convention")
        one_of(self.dropout_masks, ("auto", "torch", "bits"), "trainer.dropout_masks")
        for key in ("adam_beta1", "adam_beta2"):  # Adam's decay rates (Kingma & Ba, 2015)
            value = getattr(self, key)
            require(0.0 <= value < 1.0, f"trainer.{key}={value} must lie in [0, 1)")
        positive(self.adam_epsilon, "trainer.adam_epsilon")
        positive(self.max_grad_norm, "trainer.max_grad_norm")
        non_negative(self.weight_decay, "trainer.weight_decay")


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
        distinct(self.tags, "logger.tags")


TASK_KINDS = ("classification", "tagging", "qa")
TASK_FORMATS = ("glue_tsv", "conll03", "conllu", "squad", "synthetic", "marvin_linzen",
                *OWN_FORMATS)
LABELLED_FORMATS = ("glue_tsv", "conll03")  # conllu: probes read any tag; finetune checks
# format -> the annotations a word label can come from (task.label_field)
LABEL_FIELDS = {
    "conllu": ("upos", "xpos", "deprel"),
    "synthetic": ("upos", "depths", "negated", "agreement", "deprel"),
    "marvin_linzen": ("agreement",),
}
# BERT Table 7's feature-based rows, plus the scalar mix of ELMo/Tenney et al.
FEATURES = ("embeddings", "last", "second_to_last", "sum_last_four", "concat_last_four",
            "scalar_mix")
METRICS = ("accuracy", "f1", "mcc", "entity_f1", "exact_match")


@dataclass
class TaskConfig:
    name: str = "synthetic_pos"
    kind: str = "tagging"
    format: str = "synthetic"
    # auto: local files under the data root if present, else the hub (csv/tsv/jsonl: local only)
    source: str = "auto"
    path: str | None = None  # folder under the data root
    # files inside task.path; csv/tsv/jsonl without task.path: absolute, or from the working dir
    train_file: str | None = None
    eval_file: str | None = None  # the dev set (run_glue's --validation_file)
    hub: str | None = None  # datasets.load_dataset(hub, hub_config, revision=, data_dir=)
    hub_config: str | None = None
    hub_revision: str | None = None  # e.g. refs/convert/parquet: the hub's parquet export
    hub_data_dir: str | None = None  # a folder of the repo (a parquet export's config)
    hub_eval_split: str = "validation"
    # glue_tsv: local file columns; csv/tsv/jsonl: [text] or [text,text_pair] if empty
    # (jsonl tagging: [tokens])
    text_columns: list[str] = field(default_factory=list)
    label_column: str | None = None  # csv/tsv/jsonl: label if null (jsonl tagging: tags)
    hub_text_columns: list[str] = field(default_factory=list)
    hub_label_column: str = "label"
    # the label set, in order; csv/tsv/jsonl: read from the train file (sorted) if empty
    labels: list[str] = field(default_factory=list)
    label_field: str = "upos"  # conllu / synthetic: which annotation is the label
    probe_unit: str = "word"  # probe: a word's label, or an edge's (dependent, head) label
    metric: str = "accuracy"  # the metric that picks the best seed
    max_eval_examples: int | None = None  # a seeded subsample of the eval set
    max_seq_length: int = 128
    doc_stride: int = 128  # qa: overlap of windows over a long context (BERT §4.2)
    max_query_length: int = 64  # qa: a longer question is cut to this many tokens (run_squad.py)
    max_answer_tokens: int = 30  # qa: longest answer span considered
    eval_articles: int = 10  # squad: dev articles held out for eval, the rest train
    num_sentences: int = 4000  # synthetic
    eval_fraction: float = 0.2  # synthetic: share of sentences held out

    def __post_init__(self) -> None:
        one_of(self.kind, TASK_KINDS, "task.kind")
        one_of(self.format, TASK_FORMATS, "task.format")
        one_of(self.source, ("auto", "local", "hub"), "task.source")
        if self.format in OWN_FORMATS:
            check_own_task(self)
        one_of(self.metric, METRICS, "task.metric")
        one_of(self.probe_unit, ("word", "edge"), "task.probe_unit")
        require(self.max_seq_length >= 16,
                f"task.max_seq_length={self.max_seq_length} is too short; use >= 16")
        positive(self.doc_stride, "task.doc_stride")
        positive(self.max_query_length, "task.max_query_length")
        if self.kind == "qa":  # a window holds [CLS] question [SEP] context [SEP]
            room = self.max_seq_length - self.max_query_length - 3
            require(self.doc_stride < room, f"task.doc_stride={self.doc_stride} must be below "
                    f"the context room of a window, task.max_seq_length - "
                    f"task.max_query_length - 3 = {room}; lower task.doc_stride or "
                    "task.max_query_length, or raise task.max_seq_length")
        positive(self.max_answer_tokens, "task.max_answer_tokens")
        positive(self.num_sentences, "task.num_sentences")
        in_open_unit(self.eval_fraction, "task.eval_fraction")
        require(self.max_eval_examples is None or self.max_eval_examples > 0,
                f"task.max_eval_examples={self.max_eval_examples} must be positive or null")
        positive(self.eval_articles, "task.eval_articles")
        self.check_columns()
        self.check_labels()

    def check_columns(self) -> None:
        """A sentence task reads one text column or a pair (BERT §3's single / pair input)."""
        read = {"text_columns": self.format == "glue_tsv",
                "hub_text_columns": self.hub is not None and self.kind == "classification"}
        for key, needed in read.items():
            columns = getattr(self, key)
            distinct(columns, f"task.{key}")
            require(not needed or 1 <= len(columns) <= 2, f"task.{key}={columns} must name one "
                    "text column or a pair, e.g. [sentence] or [sentence1,sentence2]")

    def check_labels(self) -> None:
        """Files with gold labels are checked against the label set, so it must be given; the
        synthetic corpus and SQuAD spans need none."""
        distinct(self.labels, "task.labels")
        if self.format in LABELLED_FORMATS:
            non_empty(self.labels, "task.labels", "[negative,positive]")
        fields = LABEL_FIELDS.get(self.format)
        if fields is not None:
            one_of(self.label_field, fields, "task.label_field")


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


