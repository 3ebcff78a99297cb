"""Each pretraining speed lever on its own, against the step without it, in one run.

One training step (forward, backward, optimizer) of the size's BERT with an MLM head, on a
batch of packed sequences with 15% of positions masked, timed as the median of several steps
after warm-up. Each lever is switched off alone:

  attention   SDPA (PyTorch's fused scaled-dot-product kernel) vs the eager softmax(QK^T)V
  MLM head    decoder at the masked positions only vs at every position (BertForMaskedLM)
  optimizer   fused AdamW vs foreach (multi-tensor) AdamW
  precision   bf16 autocast vs fp32 (what trainer.mixed_precision=auto decides between)
  compile     torch.compile on the encoder vs eager (steady state; compile time reported)
  prefetch    `bertology pretrain` with trainer.prefetch_batches=4 vs 0 (tokens/s, data wait)

    python bench/bench_levers.py [--size mini] [--steps 8]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import BertForMaskedLM

REPO = Path(__file__).resolve().parent
sys.path.insert(0, str(REPO))
import bench_pretrain as base  # noqa: E402

from bertology.config.pretrain_config import load_pretrain_config  # noqa: E402
from bertology.data.corpora import build_corpus  # noqa: E402
from bertology.data.tokenizers import load_or_train_tokenizer  # noqa: E402
from bertology.models.build import build_config  # noqa: E402
from bertology.models.structure import encoder_of, mlm_head_of  # noqa: E402

SEQ_LEN, BATCH, MASKED, SENTENCES = 128, 32, 0.15, 20000


def overrides(size: str, steps: int) -> list[str]:
    """The synthetic-corpus run these levers were measured on (bench_pretrain.py's before it
    moved to Wikipedia), kept so the table stays reproducible."""
    return [f"size={size}", "trainer.mixed_precision=auto", "model=bert",
            "objective=mlm", "model.input_format=full_sentences",
            "model.masking=dynamic", "logger=none", f"trainer.max_steps={steps}",
            f"trainer.batch_size={BATCH}", f"data.max_seq_length={SEQ_LEN}",
            f"data.num_sentences={SENTENCES}", f"trainer.log_every={steps}",
            f"trainer.eval_every={10 * steps}", f"trainer.save_every={10 * steps}"]


def build(size: str, attention: str = "sdpa"):
    config = load_pretrain_config(base.compose_pretrain(overrides(size, 1)))
    tokenizer = load_or_train_tokenizer(build_corpus(config.data, config.data_dir),
                                        "wordpiece", config.model.vocab_size, config.cache_dir)
    torch.manual_seed(0)
    model = BertForMaskedLM._from_config(build_config(config.model, config.size, tokenizer),
                                         attn_implementation=attention)
    return model


def batch_for(model) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(5, model.config.vocab_size, (BATCH, SEQ_LEN), generator=generator)
    labels = torch.full_like(ids, -100)
    masked = torch.rand(ids.shape, generator=generator) < MASKED
    labels[masked] = ids[masked]
    return {"input_ids": ids, "labels": labels, "attention_mask": torch.ones_like(ids),
            "token_type_ids": torch.zeros_like(ids)}


def loss_masked(model, batch):
    """bertology's head: the decoder only where a loss is taken."""
    hidden = encoder_of(model)(input_ids=batch["input_ids"],
                               attention_mask=batch["attention_mask"],
                               token_type_ids=batch["token_type_ids"]).last_hidden_state
    where = batch["labels"] != -100
    logits = mlm_head_of(model, "bert")(hidden[where])
    return F.cross_entropy(logits.float(), batch["labels"][where])


def loss_dense(model, batch):
    """BertForMaskedLM's own forward: logits at every position."""
    return model(**batch).loss


def step_seconds(model, batch, loss_fn=loss_masked, fused=True, dtype=None,
                 steps: int = 8) -> float:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=fused,
                                  foreach=None if fused else True)
    times = []
    for index in range(steps + 2):  # two warm-up steps
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
            loss = loss_fn(model, batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if index >= 2:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def compiled_seconds(size: str, batch, steps: int) -> tuple[float, float]:
    model = build(size)
    start = time.perf_counter()
    encoder_of(model).compile()
    step_seconds(model, batch, steps=1)  # compiles forward and backward
    compile_s = time.perf_counter() - start
    return step_seconds(model, batch, steps=steps), compile_s


def prefetch_rows(size: str, steps: int) -> list[tuple[str, float, float]]:
    rows = []
    for depth in (0, 4):
        with tempfile.TemporaryDirectory() as out:
            metrics = base.pretrain.run(base.compose_pretrain(
                [*overrides(size, steps), f"trainer.prefetch_batches={depth}"]), Path(out))
        rows.append((f"prefetch_batches={depth}", metrics["train/tokens_per_s"],
                     metrics["train/data_wait_share"]))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="mini")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--prefetch-size", default="tiny")
    parser.add_argument("--out", type=Path, default=REPO / "RESULTS.md")
    args = parser.parse_args()
    model = build(args.size)
    batch = batch_for(model)
    timed = {"on": step_seconds(model, batch, steps=args.steps)}
    levers = [
        ("attention", "SDPA", "eager", step_seconds(build(args.size, "eager"), batch,
                                                    steps=args.steps)),
        ("MLM head", "masked positions", "every position",
         step_seconds(build(args.size), batch, loss_dense, steps=args.steps)),
        ("optimizer", "fused AdamW", "foreach AdamW",
         step_seconds(build(args.size), batch, fused=False, steps=args.steps)),
    ]
    rows = [(name, on, off, off_s, timed["on"]) for name, on, off, off_s in levers]
    bf16 = step_seconds(build(args.size), batch, dtype=torch.bfloat16, steps=args.steps)
    rows.append(("precision", "fp32", "bf16 autocast", bf16, timed["on"]))
    compiled, compile_s = compiled_seconds(args.size, batch, args.steps)
    rows.append(("compile", "eager", f"torch.compile ({compile_s:.0f} s to compile)",
                 compiled, timed["on"]))
    for name, on, off, off_s, on_s in rows:
        print(f"{name}: {on} {on_s * 1000:.0f} ms/step, {off} {off_s * 1000:.0f} ms/step: "
              f"{off_s / on_s:.2f}x", flush=True)
    prefetch = prefetch_rows(args.prefetch_size, 120)
    for name, rate, wait in prefetch:
        print(f"{name}: {rate:,.0f} tok/s, data wait {wait:.1%}", flush=True)
    write_results(args, rows, prefetch)


def write_results(args, rows, prefetch) -> None:
    lines = [
        "", "## Speed levers, one at a time", "",
        f"`python bench/bench_levers.py --size {args.size} --steps {args.steps}` on "
        f"{platform.machine()}, {os.cpu_count()} CPU cores, torch {torch.__version__}, "
        f"{time.strftime('%Y-%m-%d')}, nothing else running. One training step (forward, "
        f"backward, AdamW) of size={args.size} BERT with an MLM head on {BATCH} packed "
        f"sequences of {SEQ_LEN} with {MASKED:.0%} masked; median of {args.steps} steps after "
        "two warm-up steps. The first column is bertology's choice on this machine; the ratio "
        "is the other choice's step time over it (above 1: bertology's choice is faster).", "",
        "| lever | bertology | ms/step | alternative | ms/step | ratio |",
        "|---|---|---:|---|---:|---:|",
        *[f"| {name} | {on} | {on_s * 1000:.0f} | {off} | {off_s * 1000:.0f} "
          f"| {off_s / on_s:.2f}x |" for name, on, off, off_s, on_s in rows],
        "",
        f"Prefetching batches in a thread, `bertology pretrain size={args.prefetch_size}` for "
        "120 steps (the size where collating is the largest share of a step):", "",
        "| setting | tokens/s | data wait |", "|---|---:|---:|",
        *[f"| `trainer.{name}` | {rate:,.0f} | {wait:.1%} |" for name, rate, wait in prefetch],
    ]
    base.replace_section(args.out, "## Speed levers, one at a time", lines)


if __name__ == "__main__":
    sys.exit(main())
