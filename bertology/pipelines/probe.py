"""bertology probe: what a checkpoint knows, and where (the survey's §3-§4).

config → sentences → encoder → per analysis: features (extracted once, cached) → tables,
plots and metrics. `analysis=[linear,structural,...]` runs several on one extraction.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from bertology.analysis.features import fingerprint_model
from bertology.analysis.probe_context import Encoder, ProbeContext, device, keep_whole
from bertology.config.analysis_settings import ANALYSES, analyses_needing
from bertology.config.path_checks import read_checkpoint, resolve_checkpoint
from bertology.config.probe_config import ProbeConfig, load_probe_config, own_head_analyses
from bertology.config.rows import load_function
from bertology.data.corpora import text_corpus
from bertology.data.long_inputs import fit_to_positions
from bertology.data.probe_sentences import ProbeSplits, load_probe_sentences
from bertology.data.tokenizers import load_or_train_tokenizer
from bertology.errors import UserError, require
from bertology.models.build import build_config
from bertology.pipelines.nested import run_nested
from bertology.run.cache_notes import recompute
from bertology.run.figures import figure_source
from bertology.run.index import write_run_index
from bertology.run.replicates import MIN_BOOTSTRAP_ITEMS
from bertology.run.rundir import RunDir
from bertology.run.tracking import build_tracker

log = logging.getLogger(__name__)

def run(cfg: DictConfig, out_dir: Path) -> dict[str, float]:
    config = resolve_probe_paths(load_probe_config(cfg))
    ctx = build_probe_context(config, out_dir)
    tracker = build_tracker(config.logger, out_dir, OmegaConf.to_container(cfg, resolve=True),
                            name=f"probe-{config.task.name}-{'+'.join(config.analyses)}")
    metrics: dict[str, float] = {}
    subject = describe_subject(config)
    with figure_source(subject):
        for name, settings in config.analyses.items():
            log.info("analysis %s on task %s", name, config.task.name)
            metrics.update(load_function(ANALYSES[name].run)(ctx, settings))
    metrics.update(ctx.notes)
    write_run_index(out_dir, f"bertology probe: {config.task.name}, "
                    f"{'+'.join(config.analyses)} ({subject})", metrics)
    log.info("probed %s", subject)  # the line above the closing summary
    return tracker.finish(metrics)


def reads_attention(config: ProbeConfig) -> bool:
    """An analysis reads attention maps: the encoders run with eager attention (SDPA returns
    no weights)."""
    return bool(analyses_needing("attention_maps", config.analyses))


def describe_subject(config: ProbeConfig) -> str:
    """The model the figures and the closing lines are about."""
    if config.model.name_or_path is None:
        size = config.size
        return (f"a random-init {config.model.family} of {size.num_hidden_layers} layers, "
                f"hidden {size.hidden_size} (no checkpoint)")
    return f"checkpoint: {config.model.name_or_path}"


def build_probe_context(config: ProbeConfig, out_dir: Path) -> ProbeContext:
    """The sentences (whole under every tokenizer in use) and the encoders; what would make
    an analysis fail late (no MLM head) is checked now, before any extraction."""
    splits = load_probe_sentences(config.task, config.data_dir, config.max_train_sentences,
                                  config.max_eval_sentences, config.sample_seed)
    pretrain_default_model(config)  # after the data, whose errors are found in seconds
    ctx = ProbeContext(config, splits, out_dir, attention=reads_attention(config))
    if config.model.name_or_path is None:
        ctx.encoders["model"] = build_random_encoder(config, splits)
    encoders = [ctx.encoder("model")]
    for which, path in (("compare", config.compare_to), ("compare_twin", config.compare_to_twin)):
        if path is not None:
            encoders.append(ctx.encoder(which))
    for encoder in encoders:  # a sentence past the positions would index past them
        fit_to_positions(config.task, encoder.model.config, encoder.name_or_path or "the model")
    ctx.splits = keep_whole(splits, [e.tokenizer for e in encoders], config.task.max_seq_length,
                            ctx.notes)
    # Every analysis's intervals resample eval sentences: one sentence has no spread to draw
    require(len(ctx.splits.eval) >= MIN_BOOTSTRAP_ITEMS, f"task={config.task.name}: "
            f"{len(ctx.splits.eval)} eval sentence left to probe; the bootstrap intervals "
            f"resample sentences and need {MIN_BOOTSTRAP_ITEMS} or more (check the eval file "
            "and max_eval_sentences, task.max_seq_length)")
    if own_head_analyses(config.analyses):  # before any analysis spends time
        ctx.mlm_model()
    return ctx


def resolve_probe_paths(config: ProbeConfig) -> ProbeConfig:
    """Hub ids that an installed package mirrors become that package's dir."""
    if config.compare_to is not None:
        config.compare_to = resolve_checkpoint(config.compare_to)
    if config.compare_to_twin is not None:
        config.compare_to_twin = resolve_checkpoint(config.compare_to_twin)
    if config.model.name_or_path is not None:
        config.model.name_or_path = resolve_checkpoint(config.model.name_or_path)
    return config


def pretrain_default_model(config: ProbeConfig) -> None:
    """No model.name_or_path (and init=pretrained): the default `bertology pretrain` of
    model=/size= is the model to probe, run once into cache_dir/pretrained/<key of its
    config> and reused by every later probe, as features are."""
    if config.pretrain_cfg is None:
        return
    settings = {k: v for k, v in OmegaConf.to_container(config.pretrain_cfg).items()
                if k not in ("logger", "paths")}  # what the weights depend on
    key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
    run_dir = config.cache_dir / "pretrained" / key
    drop_damaged_pretrain(run_dir)
    run_nested("pretrain", config.pretrain_cfg, run_dir, "no model.name_or_path: the model to "
               "probe is the default `bertology pretrain` (once; cached)")
    config.model.name_or_path = str(run_dir / "model")


def drop_damaged_pretrain(run_dir: Path) -> None:
    """A cached default pretrain whose model/ fails the checkpoint checks (a file missing,
    empty or cut short) is pretrained again, never served."""
    if not RunDir(run_dir).finished:
        return
    try:
        read_checkpoint(str(run_dir / "model"), "the cached default pretrain")
    except UserError as err:
        recompute("pretrained_model", run_dir, str(err))


def build_random_encoder(config: ProbeConfig, splits: ProbeSplits) -> Encoder:
    """model.name_or_path=null: a random-initialised model of size= with a tokenizer trained
    on the task's sentences; the default tiny smoke run."""
    from transformers import AutoModel

    texts = [" ".join(s.words) for s in splits.train]
    corpus = text_corpus(f"probe:{config.task.name}", texts)
    tokenizer = load_or_train_tokenizer(corpus, config.model.tokenizer, config.model.vocab_size,
                                        config.cache_dir, pre_split=True)
    model_config = build_config(config.model, config.size, tokenizer)
    torch.manual_seed(config.seed)
    kernel = "eager" if reads_attention(config) else "sdpa"
    model = AutoModel.from_config(model_config, attn_implementation=kernel)
    return Encoder(model.to(device()), tokenizer, fingerprint_model(model, "size"), None)
