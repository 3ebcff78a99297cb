"""Probing every layer from one extraction (bertology probe) against re-running the model
for each layer's features (the baseline the issue names: one extraction per layer, as a
layer-at-a-time probing script does), in one run, on the same sentences and probes.

Both arms fit the same logistic-regression probe (bertology.analysis.probe_fits.fit_logistic)
on the same words of UD English-EWT (UPOS), so their accuracies must agree; only the way the
features are produced differs. Models: all-MiniLM-L6-v2 (the installed checkpoint) and the
BERT-base architecture (12 layers, H=768; random weights, since the hub is out of reach here,
and the cost of a forward pass does not depend on the weights), both with MiniLM's uncased
WordPiece tokenizer (BERT-base-uncased's vocabulary).

    python bench/bench_probe.py [--models minilm bert-base] [--train 400] [--eval 150]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parent.parent
os.environ.setdefault("BERTOLOGY_DATA_DIR", str(REPO.parent / "shared" / "data"))

from transformers import AutoModel, BertConfig  # noqa: E402

from bertology.analysis.features import (  # noqa: E402
    Features,
    extract_batch,
    extract_features,
    fits,
    load_features,
)
from bertology.analysis.probe_fits import compute_accuracy, fit_logistic  # noqa: E402
from bertology.analysis.probes import build_units, label_set  # noqa: E402
from bertology.config.analysis_settings import LinearSettings  # noqa: E402
from bertology.config.groups import TaskConfig  # noqa: E402
from bertology.config.path_checks import resolve_checkpoint  # noqa: E402
from bertology.data.probe_sentences import load_probe_sentences  # noqa: E402
from bertology.data.tokenizers import load_pretrained_tokenizer  # noqa: E402

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
BATCH, MAX_LENGTH = 32, 128


def load_model(name: str):
    path = resolve_checkpoint(MINILM)
    tokenizer = load_pretrained_tokenizer(path)
    if name == "minilm":
        return AutoModel.from_pretrained(path).eval(), tokenizer
    torch.manual_seed(0)  # BERT-base (Devlin et al., 2019): L=12, H=768, A=12
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=768, num_hidden_layers=12,
                        num_attention_heads=12, intermediate_size=3072)
    return AutoModel.from_config(config).eval(), tokenizer


def load_sentences(tokenizer, train: int, evaluation: int):
    task = TaskConfig(name="ud_pos", format="conllu", path="ud_english_ewt",
                      train_file="en_ewt-ud-train.conllu", eval_file="en_ewt-ud-dev.conllu",
                      label_field="upos")
    splits = load_probe_sentences(task, Path(os.environ["BERTOLOGY_DATA_DIR"]), train,
                                  evaluation)
    return ([s for s in splits.train if fits(tokenizer, s, MAX_LENGTH)],
            [s for s in splits.eval if fits(tokenizer, s, MAX_LENGTH)])


def word_index(sentences) -> Features:
    """Only the word offsets, which is all build_units reads."""
    lengths = [len(s.words) for s in sentences]
    return Features(np.empty((1, 0, 0)), np.concatenate([[0], np.cumsum(lengths)]))


def probe(train_x, eval_x, train_units, eval_units, classes: int) -> float:
    fit = fit_logistic(train_x[train_units.rows], train_units.labels, classes,
                       LinearSettings(), seed=0)
    return compute_accuracy(fit(eval_x[eval_units.rows]), eval_units.labels)


def extract_layer(model, tokenizer, sentences, layer: int) -> np.ndarray:
    """The baseline's features: run the model over every sentence, keep one layer."""
    words = []
    for start in range(0, len(sentences), BATCH):
        batch = sentences[start: start + BATCH]
        for hidden, _ in extract_batch(model, tokenizer, batch, "first", False, MAX_LENGTH):
            words.append(hidden[layer].numpy())  # (n, dim) of this layer
    return np.concatenate(words)


def run_once(model, tokenizer, train, evaluation, units, classes) -> tuple[float, list]:
    """Extract all layers once into a cache dir, then probe each layer from it."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for split, sentences in (("train", train), ("eval", evaluation)):
            (Path(tmp) / split).mkdir()
            extract_features(model, tokenizer, sentences, Path(tmp) / split, "first", False,
                             BATCH, MAX_LENGTH, desc=f"extract {split}")
        features = {split: load_features(Path(tmp) / split) for split in ("train", "eval")}
        accuracies = [probe(features["train"].layer(layer), features["eval"].layer(layer),
                            *units, classes)
                      for layer in range(model.config.num_hidden_layers + 1)]
    return time.perf_counter() - start, accuracies


def run_per_layer(model, tokenizer, train, evaluation, units, classes) -> tuple[float, list]:
    start = time.perf_counter()
    accuracies = [probe(extract_layer(model, tokenizer, train, layer),
                        extract_layer(model, tokenizer, evaluation, layer), *units, classes)
                  for layer in range(model.config.num_hidden_layers + 1)]
    return time.perf_counter() - start, accuracies


def bench(name: str, train_n: int, eval_n: int) -> dict:
    model, tokenizer = load_model(name)
    train, evaluation = load_sentences(tokenizer, train_n, eval_n)
    names = label_set(train)
    units = tuple(build_units(sentences, word_index(sentences), "word", names)
                  for sentences in (train, evaluation))
    once, acc_once = run_once(model, tokenizer, train, evaluation, units, len(names))
    per_layer, acc_per_layer = run_per_layer(model, tokenizer, train, evaluation, units,
                                             len(names))
    assert np.allclose(acc_once, acc_per_layer, atol=0.01), (acc_once, acc_per_layer)
    return {"model": name, "layers": model.config.num_hidden_layers + 1,
            "sentences": f"{len(train)} / {len(evaluation)}",
            "words": len(units[0].labels), "once": once, "per_layer": per_layer,
            "best": max(acc_once)}


def report(rows: list[dict], command: str) -> str:
    lines = [f"`{command}` on {platform.machine()}, {os.cpu_count()} CPU cores, torch "
             f"{torch.__version__}, {time.strftime('%Y-%m-%d')}. UD English-EWT UPOS, one "
             "logistic-regression probe per layer (seed 0, task only), train / eval sentences "
             "as listed. Both arms fit identical probes; best-layer accuracy shown as a check.",
             "",
             "| model | layers | train / eval sentences | train words | extract once + probe all "
             "(s) | extract per layer + probe (s) | ratio | best-layer accuracy |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['layers']} | {r['sentences']} | {r['words']:,} | "
                     f"{r['once']:.1f} | {r['per_layer']:.1f} | "
                     f"{r['per_layer'] / r['once']:.2f}x | {r['best']:.3f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["minilm", "bert-base"])
    parser.add_argument("--train", type=int, default=400)
    parser.add_argument("--eval", type=int, default=150)
    args = parser.parse_args()
    rows = [bench(name, args.train, args.eval) for name in args.models]
    command = "python bench/bench_probe.py " + " ".join(sys.argv[1:])
    print(report(rows, command.strip()))


if __name__ == "__main__":
    main()
