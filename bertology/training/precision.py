"""trainer.mixed_precision=auto: bf16 on a GPU that has it, fp32 on a CPU.

On a CPU, bf16 autocast made every training step we timed slower, even on this project's Xeon,
whose AMX unit multiplies bf16 matrices 6-12x faster than fp32 (`matmul_flops_per_s`): the
casts around each matmul and the non-matmul work (LayerNorm, softmax, GELU, the optimizer)
outweigh the faster products. Measured end to end with `bertology pretrain`, 2 cores,
2026-11-25: size=tiny ELECTRA 1.9x slower in bf16 (15.2k vs 29.1k tokens/s), and a size=mini
step 1.83x (bench/RESULTS.md, speed levers). An earlier `auto` timed one bf16 and one fp32
matmul and chose bf16 from that; the matmul won and the step lost. bf16 also cost ELECTRA's
discriminator about 0.03 of held-out balanced accuracy at the sanity budget (README, ELECTRA).
So on a CPU `auto` keeps fp32; `trainer.mixed_precision=bf16` still forces it, to try on other
chips.
"""

from __future__ import annotations

import time

import torch


def matmul_flops_per_s(rows: int, inner: int, cols: int, dtype: torch.dtype,
                       repeats: int = 10) -> float:
    """Measured FLOP/s of one (rows, inner) @ (inner, cols) matmul in dtype, best of repeats
    (the benchmarks' peak, for MFU)."""
    a = torch.randn(rows, inner).to(dtype)
    b = torch.randn(inner, cols).to(dtype)
    a @ b  # oneDNN builds its kernel on the first call
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * rows * inner * cols / best


def resolve_precision(cfg) -> str:
    """The precision a run trains in: cfg.mixed_precision, with `auto` resolved."""
    if cfg.mixed_precision != "auto":
        return cfg.mixed_precision
    if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
        return "bf16"
    return "no"
