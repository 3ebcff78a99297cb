"""Pretraining throughput: `bertology pretrain` against HF Trainer + DataCollatorForLanguageModeling
+ BertForMaskedLM, same model size, corpus, tokenizer, sequence length and batch, in one run.

Tokens/s counts real (non-padding) tokens per second of training. The baseline is the usual
recipe: one example per document, truncated to the sequence length and padded per batch by the
collator, the MLM head over every position. bertology packs sentences into full sequences and
runs the MLM head only at masked positions.

    python bench/bench_pretrain.py [--sizes tiny mini] [--steps 120] [--out bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import torch
from hydra import compose, initialize_config_dir

REPO = Path(__file__).resolve().parent.parent
os.environ.setdefault("BERTOLOGY_DATA_DIR", str(REPO.parent / "shared" / "data"))
os.environ.setdefault("WANDB_MODE", "offline")

from bertology.config import load_pretrain_config  # noqa: E402
from bertology.data.corpora import build_corpus  # noqa: E402
from bertology.data.tokenizers import load_or_train_tokenizer  # noqa: E402
from bertology.models.build import FAMILIES  # noqa: E402
from bertology.pipelines import pretrain  # noqa: E402
from bertology.training.precision import resolve_precision  # noqa: E402

SEQ_LEN, BATCH, SENTENCES = 128, 32, 20000


def overrides(size: str, steps: int, precision: str = "auto") -> list[str]:
    return [f"size={size}", f"trainer.mixed_precision={precision}", "model=bert",
            "objective=mlm", "model.input_format=full_sentences",
            "model.masking=dynamic", "logger=none", f"trainer.max_steps={steps}",
            f"trainer.batch_size={BATCH}", f"data.max_seq_length={SEQ_LEN}",
            f"data.num_sentences={SENTENCES}", f"trainer.log_every={steps}",
            f"trainer.eval_every={10 * steps}", f"trainer.save_every={10 * steps}"]


def compose_pretrain(args: list[str]):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose(config_name="pretrain", overrides=args)


def run_bertology(size: str, steps: int, precision: str) -> float:
    with tempfile.TemporaryDirectory() as out:
        metrics = pretrain.run(compose_pretrain(overrides(size, steps, precision)), Path(out))
    return metrics["train/tokens_per_s"]


def auto_precision(size: str) -> str:
    """What trainer.mixed_precision=auto resolves to for this size on this machine."""
    config = load_pretrain_config(compose_pretrain(overrides("tiny", 1) + [f"size={size}"]))
    model = SimpleNamespace(config=SimpleNamespace(hidden_size=config.size.hidden_size))
    return resolve_precision(config.trainer, model)


class CountingCollator:
    """DataCollatorForLanguageModeling, counting the real tokens it hands to the model."""

    def __init__(self, collator):
        self.collator, self.tokens = collator, 0

    def __call__(self, features):
        batch = self.collator(features)
        self.tokens += int(batch["attention_mask"].sum())
        return batch


def run_hf_trainer(size: str, steps: int) -> float:
    from datasets import Dataset
    from transformers import (
        BertForMaskedLM,
        DataCollatorForLanguageModeling,
        Trainer,
        TrainingArguments,
    )

    config = load_pretrain_config(compose_pretrain(overrides(size, steps)))
    corpus = build_corpus(config.data, config.data_dir)
    tokenizer = load_or_train_tokenizer(corpus, "wordpiece", config.model.vocab_size,
                                        config.cache_dir)
    texts = [" ".join(doc) for doc in corpus.iter_documents()]
    dataset = Dataset.from_dict({"text": texts}).map(
        lambda b: tokenizer(b["text"], truncation=True, max_length=SEQ_LEN),
        batched=True, remove_columns=["text"])
    model = BertForMaskedLM(FAMILIES["bert"][0](config.model, config.size, tokenizer))
    collator = CountingCollator(DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15))
    with tempfile.TemporaryDirectory() as out:
        arguments = TrainingArguments(
            output_dir=out, per_device_train_batch_size=BATCH, max_steps=steps,
            learning_rate=config.trainer.lr, warmup_steps=config.trainer.warmup_steps,
            weight_decay=config.trainer.weight_decay, save_strategy="no", report_to=[],
            logging_steps=steps, disable_tqdm=True, use_cpu=True, dataloader_num_workers=0)
        trainer = Trainer(model=model, args=arguments, train_dataset=dataset,
                          data_collator=collator)
        start = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - start
    return collator.tokens / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["tiny", "mini"])
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "RESULTS.md")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    rows = []
    for size in args.sizes:
        precision = auto_precision(size)
        ours = run_bertology(size, args.steps, "auto")
        ours_fp32 = ours if precision == "no" else run_bertology(size, args.steps, "no")
        baseline = run_hf_trainer(size, args.steps)
        rows.append((size, precision, ours, ours_fp32, baseline))
        print(f"{size}: bertology {ours:,.0f} tok/s ({precision}), fp32 {ours_fp32:,.0f}, "
              f"HF Trainer {baseline:,.0f} tok/s: {ours / baseline:.2f}x", flush=True)
    write_results(args, rows)


def write_results(args, rows) -> None:
    command = "python bench/bench_pretrain.py " + " ".join(
        [f"--sizes {' '.join(args.sizes)}", f"--steps {args.steps}"])
    lines = [
        "", "## Pretraining throughput vs HF Trainer", "",
        f"`{command}` on {platform.machine()}, {os.cpu_count()} CPU cores, torch "
        f"{torch.__version__}, {time.strftime('%Y-%m-%d')}. Synthetic corpus "
        f"({SENTENCES} sentences), sequence length {SEQ_LEN}, batch {BATCH}, "
        f"{args.steps} steps each, MLM only, real (non-padding) tokens per second. bertology "
        "runs with its default `trainer.mixed_precision=auto` (bf16 autocast on this CPU from "
        "hidden size 256) and, beside it, in fp32; the HF Trainer runs its default fp32.", "",
        "| size | precision (auto) | bertology tok/s | bertology fp32 tok/s "
        "| HF Trainer fp32 tok/s | ratio (auto) | ratio (fp32 vs fp32) |",
        "|---|---|---:|---:|---:|---:|---:|",
        *[f"| {s} | {p} | {a:,.0f} | {f:,.0f} | {b:,.0f} | {a / b:.2f}x | {f / b:.2f}x |"
          for s, p, a, f, b in rows],
    ]
    replace_section(args.out, "## Pretraining throughput vs HF Trainer", lines)


def replace_section(path: Path, heading: str, lines: list[str]) -> None:
    """Rewrite one `## ` section of RESULTS.md, keeping the others."""
    text = path.read_text() if path.exists() else "# Benchmark results\n"
    parts = text.split("\n## ")
    kept = [parts[0].rstrip()] + ["## " + p.rstrip() for p in parts[1:]
                                  if not ("## " + p).startswith(heading)]
    path.write_text("\n\n".join(kept) + "\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
