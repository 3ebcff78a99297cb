"""build_model: a pretraining model per family, random-initialised from `size=` or continued
from `model.name_or_path` (any Hugging Face checkpoint, this program's outputs included)."""

from __future__ import annotations

import copy
import hashlib
import logging
from functools import lru_cache
from pathlib import Path

import torch
import transformers
from transformers import (
    AutoConfig,
    AutoModel,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from bertology import families
from bertology.config.groups import ModelConfig, SizeConfig
from bertology.config.path_checks import resolve_checkpoint
from bertology.errors import UserError, require
from bertology.families import FAMILIES, Family
from bertology.models.electra_pair import ElectraPair, build_electra_pair, electra_configs
from bertology.models.spanbert import attach_sbo_head
from bertology.models.weights import load_safetensors_model

log = logging.getLogger(__name__)


def build_config(model: ModelConfig, size: SizeConfig, tokenizer) -> PretrainedConfig:
    """The transformers config of a random-initialised model of the family and size=, its
    vocabulary and special ids from the tokenizer (families.py says what differs)."""
    family = FAMILIES[model.family]
    extra = dict(family.config_extra)
    if family.bos_eos_from_cls_sep:
        extra.update(bos_token_id=tokenizer.cls_token_id, eos_token_id=tokenizer.sep_token_id)
    if family.cls_sep_ids:
        extra.update(cls_token_id=tokenizer.cls_token_id, sep_token_id=tokenizer.sep_token_id)
    if family.embedding_size_is_hidden:
        extra["embedding_size"] = size.hidden_size
    shape = vars(size) | {
        "intermediate_size": round(size.intermediate_size * family.intermediate_fraction)}
    named = family_names(family, {
        "type_vocab_size": family.segment_vocab,
        "hidden_dropout_prob": model.hidden_dropout_prob,
        "attention_probs_dropout_prob": model.attention_probs_dropout_prob})
    return getattr(transformers, family.config_class)(
        vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
        max_position_embeddings=model.max_position_embeddings, **named, **shape, **extra,
    )


def family_names(family: Family, values: dict) -> dict:
    """bertology's config keys under the names the family's config class uses (families.py's
    config_names; a key mapped to no name is dropped)."""
    renamed = dict(family.config_names)
    return {name: value for key, value in values.items()
            for name in renamed.get(key, (key,))}


def pretraining_class(family: Family, pair_head: bool) -> type[PreTrainedModel]:
    """The family's MLM model, or its MLM + sentence-pair model when the objective needs one."""
    return getattr(transformers, family.pair_class if pair_head else family.mlm_class)


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


def load_checkpoint_family(name_or_path: str, requested: str) -> str:
    """The family a checkpoint continues as (families.checkpoint_family)."""
    model_type = load_checkpoint_config(name_or_path).model_type
    try:
        return families.checkpoint_family(model_type, requested)
    except UserError as err:
        raise UserError(f"model.name_or_path={name_or_path!r}: {err}") from err


def build_model(model: ModelConfig, size: SizeConfig, tokenizer: PreTrainedTokenizerBase,
                pair_head: bool, seed: int) -> PreTrainedModel:
    """A model with an MLM head (and a sentence-pair head when the objective needs one;
    SpanBERT's span-boundary head on model=spanbert)."""
    torch.manual_seed(seed)  # the initial weights depend on the run's seed only
    family = FAMILIES[model.family]
    if family.generator:  # two networks, not one class
        return build_electra(model, size, tokenizer)
    model_class = pretraining_class(family, pair_head)
    if model.name_or_path is None:
        built = model_class._from_config(build_config(model, size, tokenizer),
                                         attn_implementation=model.attn_implementation)
    else:
        built = load_pretrained_model(model, model_class, tokenizer)
    if family.span_boundary_head:
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


def build_random_twin(model_dir: Path, seed: int) -> PreTrainedModel:
    """The random-init twin of a saved model: its class and config (architecture, vocabulary,
    positions), freshly initialised as transformers initialises that class, untrained. What
    an analysis gives on it is what the architecture and tokenizer give without training,
    the null for a claim about what training put in the model (Zhang & Bowman, 2018; Hewitt
    & Liang, 2019)."""
    config = load_checkpoint_config(str(model_dir))
    model_class = getattr(transformers, config.architectures[0])
    with torch.random.fork_rng():  # the run's own random stream goes on untouched
        torch.manual_seed(seed)
        return model_class._from_config(config)


def twin_seed(seed: int, checkpoint: str | None = None) -> int:
    """The seed the random-init twin of a run of seed `seed` is drawn with, wherever a twin
    is drawn from a checkpoint's architecture: the probe's twin encoder, a finetune run's
    init=random encoder, prune's twin arm. One rule, so that a twin fine-tuned with seed s
    starts from exactly the weights a probe of seed s contrasts with (finetuning_top_layers
    compares the two by CKA). With the checkpoint, its weights are mixed in
    (checkpoint_digest): the members of a checkpoint population, one architecture probed with
    one seed, each get a twin of their own (a twin they shared would add noise common to them
    all, which their spread cannot show: study/judge/population.py). Without: seed + 1, so that an
    init=random model (drawn at s) and its twin differ."""
    if checkpoint is None:
        return seed + 1
    digest = hashlib.sha256(f"twin:{seed + 1}:{checkpoint_digest(checkpoint)}".encode())
    return int(digest.hexdigest()[:15], 16)


@lru_cache(maxsize=16)
def checkpoint_digest(checkpoint: str) -> str:
    """sha256 of a checkpoint's safetensors files, so one set of weights has one twin whatever
    path or hub id names it; the name itself where no local file holds it (a hub id no
    installed package mirrors). Hashing reads every weight, so it runs once a process."""
    path = Path(resolve_checkpoint(checkpoint))
    files = sorted(path.glob("*.safetensors")) if path.is_dir() else []
    if not files:
        return checkpoint
    digest = hashlib.sha256()
    for file in files:
        with file.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 22), b""):
                digest.update(chunk)
    return digest.hexdigest()


def draw_random_encoder(config: PretrainedConfig, seed: int) -> PreTrainedModel:
    """The encoder (AutoModel) of config's architecture with fresh weights drawn after
    torch.manual_seed(seed) (its initializer_range), in config's attention implementation.
    The weights depend on the architecture and the seed alone, not on task fields
    (num_labels) or the class the config was saved from."""
    torch.manual_seed(seed)
    config = copy.deepcopy(config)
    return AutoModel.from_config(config, attn_implementation=config._attn_implementation)


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
