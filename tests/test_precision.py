"""trainer.mixed_precision=auto on a CPU: bf16 only where this machine measures it faster."""

from __future__ import annotations

import json
from types import SimpleNamespace

import torch

from bertology.training import precision


def model(hidden: int):
    return SimpleNamespace(config=SimpleNamespace(hidden_size=hidden))


def test_an_explicit_precision_is_kept():
    for value in ("no", "bf16", "fp16"):
        assert precision.resolve_precision(SimpleNamespace(mixed_precision=value), model(64)) \
            == value


def test_auto_measures_once_and_chooses_bf16_only_where_it_pays(tmp_path, monkeypatch):
    monkeypatch.setenv("BERTOLOGY_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(precision, "cpu_native_bf16", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    # GFLOP/s by hidden size: bf16 1.8x faster at H=512, half as fast at H=128.
    speed = {512: {torch.float32: 100.0, torch.bfloat16: 180.0},
             128: {torch.float32: 100.0, torch.bfloat16: 50.0}}
    calls = []

    def fake_speed(rows, inner, cols, dtype, repeats=10):
        calls.append((inner, cols, dtype))
        return speed[inner][dtype]
    monkeypatch.setattr(precision, "matmul_flops_per_s", fake_speed)
    precision.cpu_bf16_pays.cache_clear()
    auto = SimpleNamespace(mixed_precision="auto")
    assert precision.resolve_precision(auto, model(512)) == "bf16"  # 1.8x faster
    assert precision.resolve_precision(auto, model(128)) == "no"  # bf16 at half speed
    assert (512, 2048, torch.bfloat16) in calls  # timed on the layer's FFN shape
    measured = json.loads((tmp_path / "cpu_bf16.json").read_text())
    assert sorted(round(r, 2) for r in measured.values()) == [0.5, 1.8]
    precision.cpu_bf16_pays.cache_clear()
    calls.clear()
    assert precision.resolve_precision(auto, model(512)) == "bf16" and not calls  # from the file
    precision.cpu_bf16_pays.cache_clear()


def test_the_matmul_timer_reports_a_plausible_rate():
    rate = precision.matmul_flops_per_s(256, 256, 256, torch.float32, repeats=3)
    assert 1e8 < rate < 1e14
