"""trainer.mixed_precision=auto: bf16 where the hardware has it and it pays.

On a GPU with bf16 it always pays. On a CPU it depends on the chip: with AMX, or AVX512-BF16
on some parts, a bf16 matmul runs up to twice as fast as fp32; on others oneDNN's bf16 path
is slower than fp32 (measured on this project's 2-core Xeon: 82 vs 176 GFLOP/s at a size=mini
layer). So the choice is measured, once per machine and hidden size, on the layer's own matmul
shape, and kept in the cache dir so that later runs on the machine choose alike.
"""

from __future__ import annotations

import json
import os
import platform
import time
from functools import cache
from pathlib import Path

import torch

from bertology.config.checks import default_cache_dir

# bf16 must beat fp32 by this much to be chosen: autocast adds casts around every matmul.
MARGIN = 1.25
TOKENS = 2048  # rows of the timed matmul: a batch of 16 sequences of 128


def cpu_native_bf16() -> bool:
    """A CPU that multiplies bf16 in hardware (AVX512-BF16 or AMX), where oneDNN runs it."""
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(getattr(torch.cpu, name, lambda: False)() for name in checks)


def matmul_flops_per_s(rows: int, inner: int, cols: int, dtype: torch.dtype,
                       repeats: int = 10) -> float:
    """Measured FLOP/s of one (rows, inner) @ (inner, cols) matmul in dtype, best of repeats."""
    a = torch.randn(rows, inner).to(dtype)
    b = torch.randn(inner, cols).to(dtype)
    a @ b  # oneDNN builds its kernel on the first call
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * rows * inner * cols / best


def _cpu_name() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor() or platform.machine()
    names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
    return names[0] if names else platform.machine()


def _cache_file() -> Path:
    root = os.environ.get("BERTOLOGY_CACHE_DIR") or default_cache_dir()
    return Path(root) / "cpu_bf16.json"


@cache
def cpu_bf16_pays(hidden: int) -> bool:
    """bf16 at least MARGIN times faster than fp32 on the FFN matmul (tokens, H) @ (H, 4H)."""
    key = f"{_cpu_name()}|{torch.get_num_threads()} threads|torch {torch.__version__}|H={hidden}"
    path = _cache_file()
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    if key not in known:
        shape = (TOKENS, hidden, 4 * hidden)
        ratio = matmul_flops_per_s(*shape, torch.bfloat16) / matmul_flops_per_s(*shape,
                                                                                torch.float32)
        known[key] = ratio
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(known, indent=1, sort_keys=True))
            os.replace(tmp, path)
        except OSError:  # a read-only cache only costs a re-measurement next time
            pass
    return known[key] >= MARGIN


def resolve_precision(cfg, model: torch.nn.Module) -> str:
    if cfg.mixed_precision != "auto":
        return cfg.mixed_precision
    if torch.cuda.is_available():
        return "bf16" if torch.cuda.is_bf16_supported() else "no"
    hidden = getattr(model.config, "hidden_size", 0)
    return "bf16" if cpu_native_bf16() and cpu_bf16_pays(hidden) else "no"
