"""CPU inference latency of a model on one batch: median and 90th percentile over repeats.

Threads are the caller's (torch.set_num_threads): compare fp32 and int8 under the same setting.
"""

from __future__ import annotations

import itertools
import logging
import math
import time

import numpy as np
import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from bertology.data.encode import build_collate
from bertology.errors import require
from bertology.models.task_model import INPUT_KEYS

log = logging.getLogger(__name__)


def build_latency_batch(tokenizer: PreTrainedTokenizerBase, texts: list[str], batch_size: int,
                        max_length: int) -> dict[str, torch.Tensor]:
    """`batch_size` texts (cycled if there are fewer), padded to the longest, cut at
    `max_length` tokens: the tokenizer's tensors, ready for `model(**batch)`."""
    require(len(texts) > 0, "build_latency_batch needs at least one text")
    require(batch_size > 0, f"latency batch_size must be positive, got {batch_size}")
    require(max_length > 1, f"latency max_length must be at least 2 tokens, got {max_length}")
    chosen = list(itertools.islice(itertools.cycle(texts), batch_size))
    return dict(tokenizer(chosen, padding=True, truncation=True, max_length=max_length,
                          return_tensors="pt"))


def eval_latency_batch(features: list[dict], pad_token_id: int, size: int
                       ) -> dict[str, torch.Tensor]:
    """The first `size` encoded eval examples, padded: what the models of a comparison are
    timed on (distill's teacher and student, prune's variants)."""
    batch = build_collate(pad_token_id)(features[:size])
    return {k: batch[k] for k in INPUT_KEYS if k in batch}


def measure_latency(model: nn.Module, batch: dict[str, torch.Tensor], warmup: int = 3,
                    repeats: int = 20) -> dict[str, float]:
    """Milliseconds per forward pass `model(**batch)` on CPU, in eval mode under
    torch.inference_mode: {"median_ms", "p90_ms"}. The model's train/eval mode is restored."""
    require(repeats > 0, f"latency repeats must be positive, got {repeats}")
    require(warmup >= 0, f"latency warmup must be non-negative, got {warmup}")
    tensors = itertools.chain(model.parameters(), model.buffers(), batch.values())
    require(all(t.device.type == "cpu" for t in tensors),
            "latency is measured on CPU: move the model and the batch to the CPU first")
    was_training = model.training
    model.eval()
    try:
        times = time_forward(model, batch, warmup, repeats)
    finally:
        model.train(was_training)
    result = {"median_ms": float(np.median(times)), "p90_ms": float(np.percentile(times, 90))}
    require(all(math.isfinite(v) for v in result.values()), "latency timing was not finite")
    log.info("latency over %d repeats (%d threads): median %.2f ms, p90 %.2f ms", repeats,
             torch.get_num_threads(), result["median_ms"], result["p90_ms"])
    return result


def compare_latency(models: dict[str, nn.Module], batch: dict[str, torch.Tensor],
                    rounds: int = 3, repeats: int = 20) -> dict[str, dict[str, float]]:
    """Each model's CPU latency on one batch, timed in interleaved rounds, so that drift in a
    shared machine's speed falls on every model alike: {name: {"median_ms", "p90_ms"}}, each
    the median over the rounds."""
    require(rounds > 0, f"latency rounds must be positive, got {rounds}")
    times: dict[str, list[dict[str, float]]] = {name: [] for name in models}
    for _ in range(rounds):
        for name, model in models.items():
            times[name].append(measure_latency(model, batch, repeats=repeats))
    return {name: {key: float(np.median([t[key] for t in timings])) for key in timings[0]}
            for name, timings in times.items()}


def time_forward(model: nn.Module, batch: dict[str, torch.Tensor], warmup: int,
                 repeats: int) -> list[float]:
    """Wall-clock milliseconds of each of `repeats` forward passes after `warmup` untimed ones
    (the first calls pay for allocation and kernel selection)."""
    times = []
    with torch.inference_mode():
        for _ in range(warmup):
            model(**batch)
        for _ in range(repeats):
            start = time.perf_counter()
            model(**batch)
            times.append((time.perf_counter() - start) * 1000.0)
    return times
