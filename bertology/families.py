"""What differs per model family, in one table: the only place in the code that spells out a
family's name.

Adding a family takes its conf/model/<name>.yaml, its row in FAMILIES and its tests; the config
checks, model building, task models, probing, cloze scoring, head gating and removal, students
and FLOP counts all read the row (tests/test_layout.py adds a family that way and runs the
pipelines on it). A row says where the encoder's layers, heads and MLM decoder live, how the
family's config class names bertology's keys, and what its architecture fixes, so a family
laid out unlike BERT (ModernBERT: model.layers, a fused Wqkv, no segment embeddings) is still
only a row. Classes and module paths are names, resolved in transformers where a model is
built, so this table and the config checks that read it load no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from bertology.errors import UserError


@dataclass(frozen=True)
class Attention:
    """Where a layer's attention heads live, as attribute paths inside one transformer layer
    (pruning/heads.py gates and removes heads through them). BERT's layout by default."""

    # the query, key and value projections; one path: a fused projection whose output rows
    # are [queries; keys; values], each heads x head_dim (ModernBERT's Wqkv)
    qkv: tuple[str, ...] = ("attention.self.query", "attention.self.key", "attention.self.value")
    output: str = "attention.output.dense"  # the output projection, heads x head_dim -> hidden
    core: str = "attention.self"  # the module that runs the heads (its forward returns
    # (context, weights)); head_dim and, where it keeps one, the head count are its attributes
    head_dim: str = "attention_head_size"
    head_count: str | None = "num_attention_heads"  # None: counted from output's input width
    core_applies_output: bool = False  # core's context has been through `output` already


@dataclass(frozen=True)
class Family:
    model_type: str  # transformers' model_type of the family's checkpoints
    config_class: str  # transformers config class of a random-initialised model
    mlm_class: str  # the pretraining model: encoder + masked-LM head
    mlm_head: str  # the MLM head (transform + decoder) inside mlm_class, as an attribute path
    objectives: tuple[str, ...]  # the objectives (conf/objective) it trains with
    pair_class: str | None = None  # MLM + a sentence-pair head (NSP/SOP); None: no pair head
    pair_head: str | None = None  # the 2-way pair classifier inside pair_class
    segment_vocab: int = 2  # type_vocab_size: segments A and B (0: no segment embeddings)
    position_offset: int = 0  # position slots no token can use (RoBERTa: padding_idx + 1)
    bos_eos_from_cls_sep: bool = False  # the config's bos/eos ids are the tokenizer's CLS/SEP
    prefix_space: bool = False  # byte-level BPE: a pre-split word needs its leading space
    embedding_size_is_hidden: bool = False  # a separate embedding width, set to the hidden size
    span_boundary_head: bool = False  # SpanBERT's SBO head hangs on the MLM model
    generator: bool = False  # ELECTRA: a generator and a discriminator, trained together
    # the MLM head's transform (dense, GELU, LayerNorm), whose output the decoder reads, as an
    # attribute path; None: BERT's layout, <mlm_head>.transform (amnesic probing projects there)
    mlm_transform: str | None = None
    # the MLM decoder (hidden -> vocabulary), as an attribute path, where mlm_head stops before
    # it (ModernBERT's head is the transform only); None: mlm_head includes it
    mlm_decoder: str | None = None
    # the encoder's transformer layers inside the bare encoder (model.base_model), as a path
    layers: str = "encoder.layer"
    attention: Attention = Attention()  # the heads inside one of those layers
    # The config class's names for bertology's config keys, where they differ: each of
    # type_vocab_size, hidden_dropout_prob, attention_probs_dropout_prob maps to the keys that
    # take its value instead (none: the class has no such setting, the value is dropped).
    config_names: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # architecture settings the family fixes, passed to config_class as they are
    config_extra: tuple[tuple[str, object], ...] = ()
    cls_sep_ids: bool = False  # the config's cls/sep ids are the tokenizer's CLS/SEP
    # intermediate width = size.intermediate_size x this (size= groups give BERT's 4H)
    intermediate_fraction: float = 1.0
    glu: bool = False  # a gated FFN: the input projection gives value and gate, 2 x the width
    # ELECTRA's App. D count (trainer.flops_convention=electra: position and segment look-ups,
    # BERT's blocks element by element) describes the architecture
    electra_flops: bool = True


FAMILIES = {
    # BERT (Devlin et al., 2019): MLM, with NSP (or ALBERT's SOP) on the pooled [CLS].
    "bert": Family(
        model_type="bert", config_class="BertConfig", mlm_class="BertForMaskedLM",
        mlm_head="cls.predictions", objectives=("mlm", "mlm_nsp", "mlm_sop"),
        pair_class="BertForPreTraining", pair_head="cls.seq_relationship"),
    # RoBERTa (Liu et al., 2019): no segment embeddings to speak of, positions numbered from
    # padding_idx + 1 (<pad> is id 1, so two slots are unusable).
    "roberta": Family(
        model_type="roberta", config_class="RobertaConfig", mlm_class="RobertaForMaskedLM",
        mlm_head="lm_head", objectives=("mlm",), segment_vocab=1, position_offset=2,
        bos_eos_from_cls_sep=True, prefix_space=True,
        # no transform module: lm_head runs its dense, gelu and layer_norm itself
        mlm_transform="lm_head.layer_norm"),
    # SpanBERT (Joshi et al., 2020): BERT's architecture without NSP, plus the span-boundary
    # head (models/spanbert.py); its checkpoints are plain BERT ones.
    "spanbert": Family(
        model_type="bert", config_class="BertConfig", mlm_class="BertForMaskedLM",
        mlm_head="cls.predictions", objectives=("span_sbo",), span_boundary_head=True),
    # ELECTRA (Clark et al., 2020): model/ is the discriminator; the MLM head is the generator's.
    "electra": Family(
        model_type="electra", config_class="ElectraConfig", mlm_class="ElectraForMaskedLM",
        mlm_head="generator_predictions", objectives=("electra",),
        embedding_size_is_hidden=True, generator=True,
        # generator_predictions is the transform; generator_lm_head is the decoder
        mlm_transform="generator_predictions"),
    # ModernBERT (Warner et al., 2024): rotary positions, GeGLU, pre-norm, no biases, global
    # attention every 3rd layer and a 128-token local window elsewhere (§2.1.1), no segment
    # embeddings; MLM at 30% without NSP (§2.2). No pair head, no pooler.
    "modernbert": Family(
        model_type="modernbert", config_class="ModernBertConfig",
        mlm_class="ModernBertForMaskedLM", mlm_head="head", objectives=("mlm",),
        segment_vocab=0, bos_eos_from_cls_sep=True, cls_sep_ids=True,
        mlm_decoder="decoder",  # head is the transform (dense, GELU, norm) only
        mlm_transform="head",
        layers="layers",
        attention=Attention(qkv=("attn.Wqkv",), output="attn.Wo", core="attn",
                            head_dim="head_dim", head_count=None, core_applies_output=True),
        config_names=(("type_vocab_size", ()),
                      ("hidden_dropout_prob", ("embedding_dropout", "mlp_dropout")),
                      ("attention_probs_dropout_prob", ("attention_dropout",))),
        config_extra=(("local_attention", 128), ("global_attn_every_n_layers", 3)),
        # ModernBERT-base: 1152 = 0.375 x BERT-base's 3072 (GeGLU's Wi is twice as wide), so
        # size=base gives its width; the other sizes keep the same ratio
        intermediate_fraction=0.375, glu=True,
        electra_flops=False),  # rotary, GeGLU, no segment table: App. D counts none of them
}

def family_of_checkpoint(model_type: str, key: str = "model.name_or_path") -> Family:
    """The row a checkpoint of this model_type reads (SpanBERT's checkpoints are BERT's);
    `key` names the option the checkpoint came from, for the error."""
    rows = [f for f in FAMILIES.values() if f.model_type == model_type]
    if not rows:
        types = ", ".join(dict.fromkeys(f.model_type for f in FAMILIES.values()))
        raise UserError(f"{key} is a {model_type!r} model; bertology supports checkpoints of "
                        f"type {types}")
    return rows[0]


def checkpoint_family(model_type: str, requested: str) -> str:
    """The family a checkpoint continues as: the requested one where it has that architecture
    (model=spanbert continues any BERT checkpoint), else the first of its model_type."""
    if requested in FAMILIES and FAMILIES[requested].model_type == model_type:
        return requested
    row = family_of_checkpoint(model_type)
    return next(name for name, f in FAMILIES.items() if f is row)


def mlm_transform_path(family: Family) -> str:
    """The attribute path of the MLM head's transform, whose output the decoder reads."""
    return family.mlm_transform or f"{family.mlm_head}.transform"


def objective_names() -> tuple[str, ...]:
    """Every objective some family trains with (objectives/__init__.py's OBJECTIVES keys)."""
    return tuple(dict.fromkeys(o for f in FAMILIES.values() for o in f.objectives))
