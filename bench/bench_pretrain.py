"""Pretraining throughput: `bertology pretrain` against HF Trainer + DataCollatorForLanguageModeling
+ BertForMaskedLM, same model size, corpus, tokenizer, sequence length and batch, in one run.

Each arm runs in its own fresh process (so peak memory is its own), one after the other, for
each size. Reported per arm: real (non-padding) tokens per second of training; model FLOPs
utilisation (MFU), the FLOPs the model executes per second over the fp32 matmul peak measured
at the start of the same run; the share of step time spent waiting for a batch (bertology);
peak resident memory. The baseline is the usual recipe: one example per document, truncated to
the sequence length and padded per batch by the collator, the MLM head over every position.
bertology packs sentences into full sequences and runs the MLM head only at masked positions;
its FLOPs are counted by training/flops.py, the baseline's the same way over its padded
positions and its full MLM head.

    python bench/bench_pretrain.py [--sizes tiny mini small] [--steps 120 60 30]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import resource
import subprocess
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

from bertology.config.pretrain import load_pretrain_config  # noqa: E402
from bertology.data.corpora import build_corpus  # noqa: E402
from bertology.data.tokenizers import load_or_train_tokenizer  # noqa: E402
from bertology.models.build import build_config  # noqa: E402
from bertology.pipelines import pretrain  # noqa: E402
from bertology.training.flops import encoder_flops, mlm_head_flops  # noqa: E402
from bertology.training.precision import matmul_flops_per_s, resolve_precision  # noqa: E402

SEQ_LEN, BATCH, SENTENCES = 128, 32, 20000


def overrides(size: str, steps: int) -> list[str]:
    return [f"size={size}", "trainer.mixed_precision=auto", "model=bert",
            "objective=mlm", "model.input_format=full_sentences",
            "model.masking=dynamic", "logger=none", f"trainer.max_steps={steps}",
            f"trainer.batch_size={BATCH}", f"data.max_seq_length={SEQ_LEN}",
            f"data.num_sentences={SENTENCES}", f"trainer.log_every={steps}",
            f"trainer.eval_every={10 * steps}", f"trainer.save_every={10 * steps}"]


def compose_pretrain(args: list[str]):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose(config_name="pretrain", overrides=args)


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_bertology(size: str, steps: int) -> dict:
    with tempfile.TemporaryDirectory() as out:
        metrics = pretrain.run(compose_pretrain(overrides(size, steps)), Path(out))
    seconds = metrics["train/tokens"] / metrics["train/tokens_per_s"]
    return {"tokens_per_s": metrics["train/tokens_per_s"],
            "flops_per_s": metrics["train/flops"] / seconds,
            "data_wait_share": metrics["train/data_wait_share"],
            "precision": auto_precision(size), "peak_rss_mib": peak_rss_mib()}


def auto_precision(size: str) -> str:
    """What trainer.mixed_precision=auto resolves to for this size on this machine."""
    config = load_pretrain_config(compose_pretrain(overrides("tiny", 1) + [f"size={size}"]))
    model = SimpleNamespace(config=SimpleNamespace(hidden_size=config.size.hidden_size))
    return resolve_precision(config.trainer, model)


class CountingCollator:
    """DataCollatorForLanguageModeling, counting the real tokens it hands to the model and the
    FLOPs the model will execute on the batch: every padded position through the encoder, and
    the MLM head at every position (BertForMaskedLM computes logits everywhere)."""

    def __init__(self, collator, config):
        self.collator, self.config = collator, config
        self.tokens, self.flops = 0, 0.0

    def __call__(self, features):
        batch = self.collator(features)
        rows, length = batch["input_ids"].shape
        self.tokens += int(batch["attention_mask"].sum())
        self.flops += encoder_flops(self.config, torch.full((rows,), length))
        self.flops += mlm_head_flops(self.config, rows * length)
        return batch


def run_hf_trainer(size: str, steps: int) -> dict:
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
    model = BertForMaskedLM(build_config(config.model, config.size, tokenizer))
    collator = CountingCollator(DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15),
                                model.config)
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
    return {"tokens_per_s": collator.tokens / seconds, "flops_per_s": collator.flops / seconds,
            "precision": "no", "peak_rss_mib": peak_rss_mib()}


ARMS = {"bertology": run_bertology, "hf": run_hf_trainer}


def run_arm(arm: str, size: str, steps: int) -> dict:
    """One arm in a fresh process; its result as JSON on the last line of stdout."""
    out = subprocess.run([sys.executable, __file__, "--arm", arm, "--sizes", size,
                          "--steps", str(steps)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure_peak() -> float:
    """fp32 matmul peak of this machine: the best of a few large square products."""
    return max(matmul_flops_per_s(n, n, n, torch.float32, repeats=5) for n in (1024, 2048))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["tiny", "mini", "small"])
    parser.add_argument("--steps", nargs="+", type=int, default=[120, 60, 30],
                        help="steps per size (one value: the same for all)")
    parser.add_argument("--arm", choices=ARMS, help=argparse.SUPPRESS)  # child process
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "RESULTS.md")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    steps = dict(zip(args.sizes, args.steps * len(args.sizes) if len(args.steps) == 1
                     else args.steps))
    if args.arm:
        print(json.dumps(ARMS[args.arm](args.sizes[0], steps[args.sizes[0]])))
        return
    peak = measure_peak()
    print(f"fp32 matmul peak: {peak / 1e9:,.0f} GFLOP/s", flush=True)
    rows = []
    for size in args.sizes:
        ours, hf = (run_arm(arm, size, steps[size]) for arm in ("bertology", "hf"))
        rows.append((size, steps[size], ours, hf))
        print(f"{size}: bertology {ours['tokens_per_s']:,.0f} tok/s "
              f"(MFU {ours['flops_per_s'] / peak:.0%}, data wait {ours['data_wait_share']:.1%}), "
              f"HF Trainer {hf['tokens_per_s']:,.0f} tok/s (MFU {hf['flops_per_s'] / peak:.0%}): "
              f"{ours['tokens_per_s'] / hf['tokens_per_s']:.2f}x", flush=True)
    write_results(args, peak, rows)


def write_results(args, peak: float, rows) -> None:
    command = "python bench/bench_pretrain.py " + " ".join(
        [f"--sizes {' '.join(args.sizes)}", f"--steps {' '.join(map(str, args.steps))}"])
    lines = [
        "", "## Pretraining throughput vs HF Trainer", "",
        f"`{command}` on {platform.machine()}, {os.cpu_count()} CPU cores, torch "
        f"{torch.__version__}, {time.strftime('%Y-%m-%d')}, nothing else running. Synthetic "
        f"corpus ({SENTENCES} sentences), sequence length {SEQ_LEN}, batch {BATCH}, MLM only; "
        "each arm in a fresh process, one after the other. Tokens/s counts real (non-padding) "
        f"tokens. MFU: executed model FLOPs per second over the fp32 matmul peak measured at the "
        f"start of the run, **{peak / 1e9:,.0f} GFLOP/s** (best 1024³/2048³ product). bertology "
        "runs `trainer.mixed_precision=auto` (the precision column: what it chose here).", "",
        "| size | steps | precision | bertology tok/s | HF Trainer tok/s | ratio "
        "| bertology MFU | HF MFU | data wait | peak RSS bertology / HF (MiB) |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|",
        *[f"| {size} | {n} | {o['precision']} | {o['tokens_per_s']:,.0f} "
          f"| {h['tokens_per_s']:,.0f} | **{o['tokens_per_s'] / h['tokens_per_s']:.2f}x** "
          f"| {o['flops_per_s'] / peak:.0%} | {h['flops_per_s'] / peak:.0%} "
          f"| {o['data_wait_share']:.1%} | {o['peak_rss_mib']:,.0f} / {h['peak_rss_mib']:,.0f} |"
          for size, n, o, h in rows],
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
