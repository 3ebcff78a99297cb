"""What differs per model family, in two tables: the only place in the code that spells out a
family's name.

FAMILIES are the families bertology pretrains (model.family, conf/model/*.yaml); READING holds
encoders it only reads, a row per transformers model_type: probed, fine-tuned, pruned and
distilled from a checkpoint, never pretrained. A row says what its architecture cannot do
(`cannot`: ALBERT shares one layer's weights across its depth, so no head of one layer can be
gated or removed alone), and the config checks refuse an analysis that needs it in one line,
from config.json, before any work (config/family_checks.py).

Adding a family takes its conf/model/<name>.yaml, its row in FAMILIES and its tests; the config
checks, model building, task models, probing, cloze scoring, head gating and removal, students
and FLOP counts all read the row (tests/house/test_layout.py adds a family that way and runs the
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
    # other projections whose output rows are per head, sliced with q/k/v where the layer has
    # them (DeBERTa-v2's position projections, built only when share_att_key is false)
    per_head_rows: tuple[str, ...] = ()


@dataclass(frozen=True)
class Family:
    model_type: str  # transformers' model_type of the family's checkpoints
    config_class: str  # transformers config class of a random-initialised model
    mlm_class: str  # the pretraining model: encoder + masked-LM head
    # the MLM head (transform + decoder) inside mlm_class, as an attribute path; where the
    # head is several modules (DistilBERT's), the first: a checkpoint has a head if it has its
    # weights
    mlm_head: str
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
    # what the architecture cannot do, as (capability, why) pairs; CAPABILITIES names them
    cannot: tuple[tuple[str, str], ...] = ()
    sdpa: bool = True  # transformers has an SDPA kernel for it; False: eager attention always


# What a reading analysis may need of an architecture beyond its hidden states (which every
# row gives); a row's `cannot` names those it lacks.
CAPABILITIES = {
    "attention_maps": "every head's attention map (eager attention)",
    "head_gates": "a gate on each head of each layer (a hook on the output projection's input)",
    "head_removal": "heads removed from one layer alone (q/k/v rows and output columns sliced)",
    "layer_modules": "a module of its own per layer (frozen, re-weighted, dropped or copied)",
    "mlm_head": "a masked-LM head bertology can find and read",
}

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

# ALBERT's one reason, shared by everything that needs a layer of its own
ALBERT_SHARED = ("ALBERT shares one layer's weights across all its layers (Lan et al., 2020, "
                 "§3.1), so ")

# Reading-only rows: checkpoints bertology probes, fine-tunes, prunes and distils, never
# pretrains (objectives=(); model.family never names them). Of a row, reading uses the layers,
# attention, position_offset, prefix_space, MLM head paths, config_names, cannot and sdpa.
READING = {
    # DistilBERT (Sanh et al., 2019): BERT's layout with 6 layers, no segment embeddings, no
    # pooler; the MLM head is three modules on the model, not one (vocab_transform, _layer_norm,
    # _projector); the attention module applies its own output projection.
    "distilbert": Family(
        model_type="distilbert", config_class="DistilBertConfig",
        mlm_class="DistilBertForMaskedLM", mlm_head="vocab_transform", objectives=(),
        segment_vocab=0, mlm_transform="vocab_layer_norm", layers="transformer.layer",
        attention=Attention(qkv=("attention.q_lin", "attention.k_lin", "attention.v_lin"),
                            output="attention.out_lin", core="attention",
                            head_count="n_heads", core_applies_output=True),
        config_names=(("num_hidden_layers", ("n_layers",)), ("hidden_size", ("dim",)),
                      ("num_attention_heads", ("n_heads",)),
                      ("intermediate_size", ("hidden_dim",)), ("type_vocab_size", ()),
                      ("hidden_dropout_prob", ("dropout",)),
                      ("attention_probs_dropout_prob", ("attention_dropout",)))),
    # ALBERT (Lan et al., 2020): factorised embeddings (128 wide, then mapped to the hidden
    # size) and one layer applied num_hidden_layers times. Hidden states and attention maps
    # come per application; nothing that needs a layer's own weights can be done.
    "albert": Family(
        model_type="albert", config_class="AlbertConfig", mlm_class="AlbertForMaskedLM",
        mlm_head="predictions", objectives=(), mlm_transform="predictions.LayerNorm",
        layers="encoder.albert_layer_groups.0.albert_layers",  # the shared layer, once
        attention=Attention(qkv=("attention.query", "attention.key", "attention.value"),
                            output="attention.dense", core="attention",
                            core_applies_output=True),
        cannot=(("head_gates", ALBERT_SHARED + "a head's gate would act in every layer at once"),
                ("head_removal", ALBERT_SHARED + "a head removed from one layer is removed "
                 "from all"),
                ("layer_modules", ALBERT_SHARED + "no layer can be frozen, re-weighted, "
                 "dropped or copied alone"))),
    # DeBERTa-v2 and -v3 (He et al., 2021; 2023; v3 checkpoints are model_type deberta-v2):
    # disentangled attention adds content-to-position and position-to-content scores, made
    # from relative-position embeddings through the layer's own query and key projections
    # (share_att_key) or its per-head position projections, so removing a head slices those
    # too. v3 is pretrained by replaced-token detection (He et al., 2023): its checkpoints
    # carry no masked-LM head, and v2's has two layouts (config.legacy).
    "deberta-v2": Family(
        model_type="deberta-v2", config_class="DebertaV2Config",
        mlm_class="DebertaV2ForMaskedLM", mlm_head="lm_predictions", objectives=(),
        segment_vocab=0,
        attention=Attention(qkv=("attention.self.query_proj", "attention.self.key_proj",
                                 "attention.self.value_proj"),
                            per_head_rows=("attention.self.pos_query_proj",
                                           "attention.self.pos_key_proj")),
        cannot=(("mlm_head", "DeBERTa-v3 checkpoints are replaced-token-detection "
                 "discriminators without a masked-LM head (He et al., 2023), and v2's head "
                 "has two layouts (config.legacy)"),),
        sdpa=False),  # transformers v5 has no SDPA kernel for it
    # XLM-RoBERTa (Conneau et al., 2020): RoBERTa's layout with a SentencePiece vocabulary of
    # 250k pieces; positions numbered from padding_idx + 1, as RoBERTa's.
    "xlm-roberta": Family(
        model_type="xlm-roberta", config_class="XLMRobertaConfig",
        mlm_class="XLMRobertaForMaskedLM", mlm_head="lm_head", objectives=(), segment_vocab=1,
        position_offset=2, mlm_transform="lm_head.layer_norm"),
    # MPNet (Song et al., 2020): BERT's layout with no segment embeddings and a relative
    # position bias per head, computed once by the encoder and added in every layer.
    "mpnet": Family(
        model_type="mpnet", config_class="MPNetConfig", mlm_class="MPNetForMaskedLM",
        mlm_head="lm_head", objectives=(), segment_vocab=0, position_offset=2,
        mlm_transform="lm_head.layer_norm",
        attention=Attention(qkv=("attention.attn.q", "attention.attn.k", "attention.attn.v"),
                            output="attention.attn.o", core="attention.attn",
                            core_applies_output=True),
        cannot=(("head_removal", "MPNet adds one relative-position bias per head, computed "
                 "once for all layers (Song et al., 2020), so one layer cannot lose heads "
                 "alone"),),
        sdpa=False),  # transformers v5 has no SDPA kernel for it
}


def every_family() -> dict[str, Family]:
    """The pretraining families, then the reading-only rows."""
    return FAMILIES | READING


def model_types(rows: dict[str, Family]) -> list[str]:
    return list(dict.fromkeys(f.model_type for f in rows.values()))


def family_of_checkpoint(model_type: str, key: str = "model.name_or_path") -> Family:
    """The row a checkpoint of this model_type reads (SpanBERT's checkpoints are BERT's);
    `key` names the option the checkpoint came from, for the error."""
    rows = [f for f in every_family().values() if f.model_type == model_type]
    if not rows:
        raise UserError(f"{key} is a {model_type!r} model; bertology supports checkpoints of "
                        f"type {', '.join(model_types(every_family()))}")
    return rows[0]


def checkpoint_family(model_type: str, requested: str) -> str:
    """The family a checkpoint continues as: the requested one where it has that architecture
    (model=spanbert continues any BERT checkpoint), else the first of its model_type. A
    reading-only type is refused: no objective is set up for it."""
    if requested in FAMILIES and FAMILIES[requested].model_type == model_type:
        return requested
    family_of_checkpoint(model_type)  # an unknown type: the list of every type
    names = [name for name, f in FAMILIES.items() if f.model_type == model_type]
    if not names:
        raise UserError(f"{model_type} checkpoints are read (probe, finetune, prune, distill), "
                        "not pretrained further; pretraining continues checkpoints of type "
                        f"{', '.join(model_types(FAMILIES))}")
    return names[0]


def why_not(family: Family, capability: str) -> str | None:
    """Why the family's architecture lacks a capability (CAPABILITIES), or None if it has it."""
    if capability not in CAPABILITIES:
        raise KeyError(f"unknown capability {capability!r}; known: {', '.join(CAPABILITIES)}")
    return dict(family.cannot).get(capability)


def require_capability(model_type: str, capability: str, what: str,
                       where: str = "this model", fix: str | None = None) -> None:
    """Refuse `what` (the analysis or option, as the user names it) on `where` (the option
    that named the checkpoint) where its model type lacks the capability `what` needs: one
    line, with the row's reason and the fix."""
    reason = why_not(family_of_checkpoint(model_type), capability)
    if reason is not None:
        raise UserError(f"{what} cannot run on {where} ({model_type}): {reason}"
                        + (f"; {fix}" if fix else ""))


def attention_kernel(model_type: str, wanted: str) -> str:
    """The attention implementation to build a model of this type with: `wanted` ("sdpa" or
    "eager"), or eager where transformers has no SDPA kernel for the type."""
    return wanted if family_of_checkpoint(model_type).sdpa else "eager"


def config_names_of(family: Family, key: str) -> tuple[str, ...]:
    """The names the family's config uses for one of bertology's keys (the key itself unless
    config_names renames it; none where the class has no such setting)."""
    return dict(family.config_names).get(key, (key,))


def config_value(config: dict, key: str) -> object:
    """A setting of a checkpoint's config.json (read as JSON) under bertology's name for it:
    DistilBERT's n_layers is num_hidden_layers. None where the config has none."""
    rows = [f for f in every_family().values() if f.model_type == config.get("model_type")]
    names = config_names_of(rows[0], key) if rows else (key,)
    return next((config[name] for name in names if name in config), None)


def mlm_transform_path(family: Family) -> str:
    """The attribute path of the MLM head's transform, whose output the decoder reads."""
    return family.mlm_transform or f"{family.mlm_head}.transform"


def objective_names() -> tuple[str, ...]:
    """Every objective some family trains with (objectives/__init__.py's OBJECTIVES keys)."""
    return tuple(dict.fromkeys(o for f in FAMILIES.values() for o in f.objectives))
