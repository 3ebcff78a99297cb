"""What every analysis reads: the sentences, the encoders and their cached features.

Encoders are named: "model" (the checkpoint under study), "random" (the same architecture with
fresh weights: the baseline that shows what pretraining adds), "compare" (`compare_to=`, a
second checkpoint, e.g. the model after fine-tuning) and "compare_twin" (`compare_to_twin=`:
"random" after the same fine-tuning, so that geometry's CKA has a twin arm). Each is loaded,
and each split extracted, at most once per run, and only when an analysis asks.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import AutoModel, AutoModelForMaskedLM, PreTrainedModel, PreTrainedTokenizerBase

from bertology.analysis.features import Features, extract_or_load, fingerprint_model, fits
from bertology.config.path_checks import resolve_checkpoint
from bertology.config.probe_config import ProbeConfig
from bertology.data.long_inputs import left_out_metrics
from bertology.data.probe_sentences import ProbeSentence, ProbeSplits
from bertology.errors import UserError, require
from bertology.families import attention_kernel, family_of_checkpoint
from bertology.models.build import draw_random_encoder, load_checkpoint_config, twin_seed
from bertology.models.weights import load_safetensors_model

log = logging.getLogger(__name__)

ENCODERS = ("model", "random", "compare", "compare_twin")


@dataclass
class Encoder:
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    fingerprint: str
    name_or_path: str | None


def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def load_encoder(name_or_path: str, attention: bool) -> tuple[PreTrainedModel,
                                                              PreTrainedTokenizerBase]:
    """A checkpoint's encoder (AutoModel) and tokenizer; eager attention only when attention
    maps are read (SDPA returns none, and is faster)."""
    from bertology.data.tokenizers import load_pretrained_tokenizer, tokenizer_options

    path = resolve_checkpoint(name_or_path)
    config = load_checkpoint_config(path)
    family_of_checkpoint(config.model_type, f"model.name_or_path={name_or_path!r}")
    kernel = attention_kernel(config.model_type, "eager" if attention else "sdpa")
    model = load_safetensors_model(AutoModel, path, attn_implementation=kernel)
    tokenizer = load_pretrained_tokenizer(path, **tokenizer_options(config.model_type))
    return model, tokenizer


def random_like(model: PreTrainedModel, seed: int) -> PreTrainedModel:
    """The same architecture and config with fresh weights (its initializer_range), and the
    model's attention implementation: eager where attention maps are read, so that the twin
    returns maps too (SDPA returns none)."""
    return draw_random_encoder(model.config, seed)


@dataclass
class ProbeContext:
    config: ProbeConfig
    splits: ProbeSplits
    out_dir: Path
    attention: bool  # some analysis reads attention maps: extract them, with eager attention
    encoders: dict[str, Encoder] = field(default_factory=dict)
    _features: dict[tuple[str, str], Features] = field(default_factory=dict)
    _mlm: tuple[PreTrainedModel, PreTrainedTokenizerBase] | None = None
    notes: dict[str, float] = field(default_factory=dict)  # what was left out (long_inputs)

    def sentences(self, split: str) -> list[ProbeSentence]:
        return self.splits.train if split == "train" else self.splits.eval

    def encoder(self, which: str = "model") -> Encoder:
        require(which in ENCODERS, f"unknown encoder {which!r}")
        if which not in self.encoders:
            self.encoders[which] = self._build_encoder(which)
        return self.encoders[which]

    def _build_encoder(self, which: str) -> Encoder:
        if which == "random":
            base = self.encoder("model")
            # the weights a finetune run of this seed with init=random starts from
            model = random_like(base.model, twin_seed(self.config.seed,
                                                       self.config.model.name_or_path))
            return Encoder(model.to(device()), base.tokenizer,
                           fingerprint_model(model, "random"), None)
        path = {"compare": self.config.compare_to, "compare_twin": self.config.compare_to_twin
                }.get(which, self.config.model.name_or_path)
        require(path is not None, "this analysis compares two checkpoints; set compare_to=<a "
                "checkpoint dir or hub id> (e.g. the model/ of a finetune run)")
        model, tokenizer = load_encoder(path, self.attention)
        if which == "model" and self.config.init == "random":
            model = random_like(model, self.config.seed)
        log.info("%s encoder: %s (%d layers, %d heads)", which, path,
                 model.config.num_hidden_layers, model.config.num_attention_heads)
        return Encoder(model.to(device()), tokenizer, fingerprint_model(model, path), path)

    def features(self, which: str = "model", split: str = "train") -> Features:
        """Word-level hidden states of one encoder on one split, from the cache or extracted
        now; with attention maps where an analysis reads them: the eval split of every
        encoder (the random-init twin's, sharpened, are the attention analysis's null); maps take
        ~(layers·heads·n²) floats a sentence, so the train split gets none."""
        key = (which, split)
        if key not in self._features:
            encoder = self.encoder(which)
            attention = self.attention and split == "eval"
            self._features[key] = extract_or_load(
                encoder.model, encoder.fingerprint, encoder.tokenizer, self.sentences(split),
                self.config.cache_dir, self.config.pooling, attention,
                self.config.batch_size, self.config.task.max_seq_length,
                desc=f"extract {which}/{split}")
        return self._features[key]

    def mlm_model(self) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
        """The checkpoint with its masked-LM head, for cloze and amnesic probing; a checkpoint
        without one (e.g. all-MiniLM-L6-v2, an ELECTRA discriminator) is a UserError."""
        if self._mlm is None:
            self._mlm = self._load_mlm_model()
        return self._mlm

    def _load_mlm_model(self) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
        model, head_missing = self.masked_lm()
        if head_missing:
            raise UserError(f"model.name_or_path={self.config.model.name_or_path!r} has no "
                            f"masked-LM head (missing {head_missing[0]}); cloze and amnesic "
                            "probing need one: use a bertology pretrain model/ dir (ELECTRA: "
                            "its generator/)")
        return model, self.encoder("model").tokenizer

    def masked_lm(self) -> tuple[PreTrainedModel, list[str]]:
        """The checkpoint in its masked-LM class, and the head weights it lacks (none: it has
        its own head; else the head is at random, for a caller that fits one)."""
        path = self.config.model.name_or_path
        require(path is not None, "this analysis needs a checkpoint with an MLM head; set "
                "model.name_or_path (e.g. the model/ of a bertology pretrain run)")
        model, info = load_safetensors_model(AutoModelForMaskedLM, resolve_checkpoint(path),
                                             output_loading_info=True)
        head = family_of_checkpoint(model.config.model_type).mlm_head.split(".")[0] + "."
        missing = [k for k in info["missing_keys"] if k.startswith(head)]
        return model.to(device()).eval(), missing


def keep_whole(splits: ProbeSplits, tokenizers: list[PreTrainedTokenizerBase],
               max_length: int, notes: dict[str, float] | None = None) -> ProbeSplits:
    """Drop sentences that some tokenizer would truncate: trees and word pairs need every
    word (Hewitt & Manning likewise drop over-long sentences). `notes` gets the share of
    words left out per split (data/long_inputs.py), which the run's metrics.json records."""
    def whole(sentences: list[ProbeSentence], split: str) -> list[ProbeSentence]:
        kept = [s for s in sentences if all(fits(t, s, max_length) for t in tokenizers)]
        words = sum(len(s.words) for s in sentences)
        left = words - sum(len(s.words) for s in kept)
        found = left_out_metrics(split, len(kept), len(sentences), left, words, max_length)
        if notes is not None:
            notes.update(found)
        require(kept, f"no {split} sentence fits task.max_seq_length={max_length}; raise it")
        return kept

    return ProbeSplits(whole(splits.train, "train"), whole(splits.eval, "eval"), splits.eval_pool)
