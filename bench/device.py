"""What the benchmarks need to know about the device they time: a GPU's nominal dense bf16 peak
(the vendor's figure, against which MFU is usually quoted), a matmul peak measured on the device
itself, and the peak memory a run took. bench_pretrain.py and gpu_check.py read these.

The nominal peaks are dense (no 2:4 sparsity) bf16 tensor-core FLOP/s from the vendors' data
sheets: H100 SXM 989 TFLOP/s, H100 PCIe 756, H200 989 (the H100 SXM's compute with more
memory), A100 312, L4 121, A10 125.
"""

from __future__ import annotations

import resource

import torch

# (a substring of torch.cuda.get_device_name, dense bf16 FLOP/s), the first match wins
NOMINAL_BF16 = (("H100 PCIe", 756e12), ("H100", 989e12), ("H200", 989e12), ("GH200", 989e12),
                ("A100", 312e12), ("L4", 121e12), ("A10", 125e12))


def nominal_bf16_peak(name: str) -> float | None:
    """The card's nominal dense bf16 FLOP/s, None for a card not in the table (or a CPU)."""
    return next((flops for key, flops in NOMINAL_BF16 if key in name), None)


def device_name(device: str) -> str:
    return torch.cuda.get_device_name(0) if device == "cuda" else "cpu"


def cuda_matmul_flops_per_s(shape: tuple[int, int, int], dtype: torch.dtype,
                            repeats: int = 10) -> float:
    """Measured FLOP/s of one (rows, inner) @ (inner, cols) matmul on the GPU, shape (rows,
    inner, cols), best of repeats, each timed by CUDA events around 10 back-to-back products
    (one is too short for the host's clock); precision.matmul_flops_per_s's call."""
    rows, inner, cols = shape
    a = torch.randn(rows, inner, device="cuda").to(dtype)
    b = torch.randn(inner, cols, device="cuda").to(dtype)
    a @ b  # cuBLAS picks its kernel on the first call
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(10):
            a @ b
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) / 1000 / 10)
    return 2 * rows * inner * cols / best


def peak_memory_mib(device: str) -> float:
    """The most memory the process held: on a GPU what torch allocated there, on a CPU the
    resident set."""
    if device == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def synchronize(device: str) -> None:
    """Wait for the device's queued work (a step's end on a GPU is when its kernels finish)."""
    if device == "cuda":
        torch.cuda.synchronize()
