"""trainer.mixed_precision=auto: bf16 on a GPU that has it, fp32 on a CPU (where bf16 autocast
made every measured training step slower; training/precision.py)."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from bertology.training import precision


def test_an_explicit_precision_is_kept():
    for value in ("no", "bf16", "fp16"):
        assert precision.resolve_precision(SimpleNamespace(mixed_precision=value)) == value


def test_auto_is_fp32_on_a_cpu_and_bf16_on_a_gpu_that_has_it(monkeypatch):
    auto = SimpleNamespace(mixed_precision="auto")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert precision.resolve_precision(auto) == "no"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    assert precision.resolve_precision(auto) == "bf16"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    assert precision.resolve_precision(auto) == "no"


def test_the_matmul_timer_reports_a_plausible_rate():
    rate = precision.matmul_flops_per_s(256, 256, 256, torch.float32, repeats=3)
    assert 1e8 < rate < 1e14
