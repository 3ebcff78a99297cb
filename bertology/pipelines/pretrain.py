"""bertology pretrain: masked-LM pretraining (BERT, RoBERTa, SpanBERT, ELECTRA) on a corpus.

build config → corpus → tokenizer → objective → examples → model → train → save model/.
"""

from __future__ import annotations

import dataclasses
import logging
from itertools import islice
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from bertology.config.path_checks import resolve_checkpoint
from bertology.config.pretrain_config import PretrainConfig, load_pretrain_config
from bertology.data.corpora import Corpus, build_corpus
from bertology.data.formats import compute_tokens_per_sequence, count_tokens
from bertology.data.stream import PretrainData
from bertology.data.tokenizers import load_or_train_tokenizer, load_pretrained_tokenizer
from bertology.errors import require
from bertology.models.build import (
    build_model,
    build_random_twin,
    count_parameters,
    load_checkpoint_family,
)
from bertology.models.electra_pair import ElectraPair
from bertology.models.weights import save_model
from bertology.objectives import OBJECTIVES
from bertology.pipelines.nested import run_nested
from bertology.run.atomic import write_dir_atomic
from bertology.run.processes import is_main_process, world_size
from bertology.run.replicates import read_replicates, write_replicates
from bertology.run.resume import refuse_fresh_start
from bertology.run.tracking import build_tracker
from bertology.run.training_figures import write_run_page
from bertology.training.loop import TrainJob, TrainOutput, train

log = logging.getLogger(__name__)


def run(cfg: DictConfig, out_dir: Path) -> dict[str, float]:
    config = load_pretrain_config(cfg)
    require(world_size() == 1 or config.downstream is None,
            "downstream.task runs in one process; pretrain with several processes without it, "
            "then run `bertology finetune model.name_or_path=<run>/model`")
    refuse_fresh_start(out_dir, config.resume)
    corpus = build_corpus(config.data, config.data_dir)
    config, tokenizer = load_tokenizer(config, corpus)
    objective = build_objective(config, tokenizer, corpus)
    config = equal_token_batch(config, tokenizer, corpus)
    data = PretrainData(corpus, tokenizer, config, objective.pair_task)
    log.info("%d held-out sequences; tokenizer %s with %d tokens", len(data.eval_examples),
             config.model.tokenizer, len(tokenizer))
    model = build_model(config.model, config.size, tokenizer,
                        pair_head=objective.pair_task is not None, seed=config.seed)
    log.info("%s: %.2fM parameters", type(model).__name__, count_parameters(model) / 1e6)
    tracker = build_tracker(config.logger, out_dir, OmegaConf.to_container(cfg, resolve=True),
                            name=f"pretrain-{config.model.family}-{out_dir.name}",
                            main_process=is_main_process())
    output = TrainOutput(out_dir, tracker, export=lambda path: write_model(model, tokenizer, path),
                         cache_dir=config.cache_dir)
    metrics = train(TrainJob(model, objective, data, config.trainer, output, config.seed))
    if is_main_process():  # every process holds the same weights; one writes them
        save_models(model, tokenizer, out_dir)
    metrics["model/parameters"] = float(count_parameters(model))
    metrics.update(run_downstream(config, out_dir))
    metrics = tracker.finish(metrics)
    if is_main_process():
        write_run_page(out_dir, f"bertology pretrain: {config.model.family}, "
                       f"{config.objective.name}", metrics)
    return metrics


EQUAL_TOKEN_DOCS = 2000  # training documents the tokens per sequence are measured on


def equal_token_batch(config: PretrainConfig, tokenizer, corpus: Corpus) -> PretrainConfig:
    """RoBERTa §4.2: "When sampling near the end of a document, the sequence may be shorter
    than 512 tokens, so we dynamically increase the batch size in these cases to achieve a
    similar number of total tokens as FULL-SENTENCES." Here, with static shapes, the batch
    of DOC-SENTENCES is trainer.batch_size times the ratio of the mean tokens per sequence
    of the two formats, measured once on the first training documents; without it the
    format comparison (experiment=pretrain_input_format) is confounded with the tokens."""
    if config.model.input_format != "doc_sentences" or not config.model.doc_sentences_equal_tokens:
        return config
    documents = list(islice(corpus.iter_documents(), config.data.eval_docs,
                            config.data.eval_docs + EQUAL_TOKEN_DOCS))
    means = compute_tokens_per_sequence(documents, tokenizer, config.data.max_seq_length)
    require(means["doc_sentences"] > 0, f"data={corpus.name}: no training documents to "
            "measure DOC-SENTENCES on; set model.doc_sentences_equal_tokens=false")
    batch = max(1, round(config.trainer.batch_size * means["full_sentences"]
                         / means["doc_sentences"]))
    log.info("DOC-SENTENCES: %.1f tokens a sequence against FULL-SENTENCES' %.1f, so a batch "
             "of %d sequences for FULL-SENTENCES' %d (RoBERTa §4.2)", means["doc_sentences"],
             means["full_sentences"], batch, config.trainer.batch_size)
    return dataclasses.replace(config, trainer=dataclasses.replace(config.trainer,
                                                                   batch_size=batch))


def build_objective(config: PretrainConfig, tokenizer, corpus: Corpus):
    """The objective. With objective.random_tokens=unigram (SpanBERT's code) its random
    replacement tokens follow the token counts of the training documents (those after the
    data.eval_docs held out), counted here once."""
    build = OBJECTIVES[config.objective.name]
    args = (config.objective, tokenizer, config.model.family, config.seed)
    if config.objective.random_tokens == "uniform":
        return build(*args)
    counts = count_tokens(islice(corpus.iter_documents(), config.data.eval_docs, None),
                          tokenizer)
    log.info("random replacement tokens: the unigram distribution of %d training tokens",
             int(counts.sum()))
    return build(*args, token_counts=counts)


DOWNSTREAM = (("model", "downstream", "downstream"),  # (model dir, run dir, metric prefix)
              ("twin", "downstream_twin", "downstream/twin"))


def run_downstream(config: PretrainConfig, out_dir: Path) -> dict[str, float]:
    """downstream.task: model/ fine-tuned by `bertology finetune` into <run>/downstream, its
    eval/* as downstream/eval/*; and model/'s random-init twin (twin/: the same architecture
    and tokenizer, untrained) fine-tuned the same way into <run>/downstream_twin, as
    downstream/twin/eval/*. A comparison of pretraining arms on the task means something only
    where the task separates a pretrained encoder from its twin (the findings' guards)."""
    if config.downstream is None:
        return {}
    twin = build_random_twin(out_dir / "model", config.seed)
    tokenizer = load_pretrained_tokenizer(str(out_dir / "model"))
    write_dir_atomic(out_dir / "twin", lambda tmp: write_pretrained(twin, tokenizer, tmp))
    metrics = {}
    for model_dir, run_dir, prefix in DOWNSTREAM:
        cfg = config.downstream.copy()
        cfg.model.name_or_path = str(out_dir / model_dir)
        scores = run_nested("finetune", cfg, out_dir / run_dir,
                            f"fine-tuning {model_dir}/ on {cfg.task.name}")
        replicates = read_replicates(out_dir / run_dir)  # of its eval/*, over eval examples
        write_replicates(out_dir, run_dir, {f"{prefix}/{k}": v for k, v in replicates.items()})
        metrics.update({f"{prefix}/{k}": v for k, v in scores.items() if k.startswith("eval/")})
    return metrics


def load_tokenizer(config: PretrainConfig, corpus: Corpus):
    """The checkpoint's tokenizer (and family) when continuing, the pretrained one named by
    model.tokenizer_name_or_path, else one trained on the corpus."""
    if config.model.name_or_path is not None:
        path = resolve_checkpoint(config.model.name_or_path)
        family = load_checkpoint_family(path, config.model.family)
        config = dataclasses.replace(config, model=dataclasses.replace(
            config.model, family=family, name_or_path=path))
        return config, load_pretrained_tokenizer(config.model.name_or_path)
    if config.model.tokenizer_name_or_path is not None:
        return config, load_named_tokenizer(config.model.tokenizer_name_or_path)
    tokenizer = load_or_train_tokenizer(corpus, config.model.tokenizer,
                                        config.model.vocab_size, config.cache_dir)
    return config, tokenizer


MLM_SPECIAL_TOKENS = ("cls_token", "sep_token", "mask_token", "pad_token")


def load_named_tokenizer(name: str):
    """model.tokenizer_name_or_path: random-init pretraining with a real vocabulary (BERT's
    30,522-token uncased WordPiece, BERT §A.2) rather than one learnt from the corpus. The
    model's vocabulary is the tokenizer's length (build_config), whatever model.vocab_size
    says; the input formats and masking need its [CLS], [SEP], [MASK] and padding tokens."""
    key = "model.tokenizer_name_or_path"
    tokenizer = load_pretrained_tokenizer(resolve_checkpoint(name), key=key)
    missing = [token for token in MLM_SPECIAL_TOKENS if getattr(tokenizer, token) is None]
    require(not missing, f"{key}={name!r} has no {', '.join(missing)}; masked-LM pretraining "
            "needs a tokenizer with [CLS], [SEP], [MASK] and padding tokens (e.g. BERT's)")
    log.info("%s=%s: %d tokens, so the model's vocabulary is %d (model.tokenizer and "
             "model.vocab_size are not used)", key, name, len(tokenizer), len(tokenizer))
    return tokenizer


def save_models(model, tokenizer, out_dir: Path) -> None:
    """model/ holds the model the run is about; ELECTRA's generator goes to generator/. Each
    appears whole or not at all: written beside its name, then renamed."""
    if isinstance(model, ElectraPair):
        write_dir_atomic(out_dir / "generator",
                         lambda tmp: write_pretrained(model.generator, tokenizer, tmp))
    write_dir_atomic(out_dir / "model", lambda tmp: write_model(model, tokenizer, tmp))


def write_model(model, tokenizer, path: Path) -> None:
    """The model the run is about, loadable by from_pretrained, as model/ and every
    checkpoint hold it: ELECTRA's discriminator (its generator only helps train it)."""
    if isinstance(model, ElectraPair):
        model = model.discriminator
    write_pretrained(model, tokenizer, path)


def write_pretrained(model, tokenizer, path: Path) -> None:
    save_model(model, path)  # safetensors (+ SpanBERT's SBO head beside it)
    tokenizer.save_pretrained(path)
