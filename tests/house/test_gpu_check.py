"""bench/gpu_check.py, the prepared GPU check: its plan fits ten minutes on one GPU, and its
dry run (every step on the CPU, size tiny) passes end to end, so the script is known to work
before a GPU is lent (docs/gpu.md)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import REPO

sys.path.insert(0, str(REPO / "bench"))
import gpu_check  # noqa: E402


def test_the_gpu_plan_fits_its_budget_on_one_gpu():
    one_gpu = {k: v for k, v in gpu_check.GPU.limits.items() if k != "accelerate"}
    assert sum(one_gpu.values()) < gpu_check.BUDGET_S == 600
    assert gpu_check.GPU.size == "base" and gpu_check.GPU.steps == 300
    assert gpu_check.GPU.precision == "bf16" and set(gpu_check.GPU.bench_sizes) == {"small",
                                                                                 "base"}
    assert set(gpu_check.FAMILIES) == {"bert", "roberta", "spanbert", "electra", "modernbert"}


def test_without_a_gpu_the_check_says_so_in_one_line(tmp_path):
    done = subprocess.run([sys.executable, "bench/gpu_check.py", "--out", str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True,
                          env={"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 2
    assert done.stderr.strip().startswith("no GPU:") and len(done.stderr.splitlines()) == 1
    assert "| machine | **no** |" in (tmp_path / "gpu_check.md").read_text()


@pytest.mark.slow
def test_the_dry_check_passes_every_step_on_the_cpu(tmp_path):
    done = subprocess.run([sys.executable, "bench/gpu_check.py", "--dry", "--out",
                           str(tmp_path)], cwd=REPO, capture_output=True, text=True,
                          timeout=1500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    steps = {s["name"]: s for s in json.loads((tmp_path / "gpu_check.json").read_text())}
    assert list(steps) == ["machine", "bench", "pretrain", "probe", "finetune", "compile",
                           "accelerate"]
    assert all(s["ok"] for s in steps.values())
    losses = steps["pretrain"]["details"]["losses"]
    assert losses[-1] < losses[0]
    assert {family: row["breaks"] for family, row in
            steps["compile"]["details"]["families"].items()} == dict.fromkeys(
        gpu_check.FAMILIES, 0)
    text = (tmp_path / "gpu_check.md").read_text()
    assert text.startswith("# GPU check (dry, on the CPU)")
    assert "| bertology |" in text and "| hf_grouped |" in text  # the bench's cells
