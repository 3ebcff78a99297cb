"""env.json: what a run ran on (package versions, the code's git commit, the device, the CPU,
the command), written at every start whether or not W&B is on, so a number in metrics.json can
be traced to the code and machine that made it.

Nothing from the environment is recorded beyond these facts: environment variables hold tokens
(WANDB_API_KEY, HF_TOKEN) and are never read here. A resumed run keeps the records of the
attempts before it under `earlier_attempts` (a resume may land on another node).
"""

from __future__ import annotations

import os
import platform
import shlex
import subprocess
import time
from importlib import metadata
from pathlib import Path

from bertology.run.atomic import read_json, write_json_atomic
from bertology.run.processes import world_size

ENV = "env.json"
PACKAGES = ("bertology", "torch", "transformers", "tokenizers", "accelerate", "datasets",
            "safetensors", "hydra-core", "numpy", "scikit-learn")
# The checkout this bertology was imported from (an installed wheel has none).
SOURCE = Path(__file__).resolve().parent.parent.parent


def package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _git(root: Path, *args: str) -> str | None:
    """git's output in root, or None when git is missing, fails or hangs. GIT_OPTIONAL_LOCKS=0:
    `git status` must not take the index lock that a commit in the same checkout needs."""
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              timeout=10, env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"})
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def read_git(root: Path = SOURCE) -> dict[str, str | bool | None]:
    """The commit of the checkout bertology runs from and whether tracked files differ from it
    (git describe --dirty's sense: untracked files do not count); both None outside a git
    checkout of bertology (an installed wheel, or a checkout of something else around it)."""
    top = _git(root, "rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != root.resolve():
        return {"commit": None, "dirty": None}
    commit = _git(root, "rev-parse", "HEAD")
    changes = _git(root, "status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": None if changes is None else bool(changes)}


def read_cpu(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict[str, object]:
    """The CPU's model and feature flags (Linux's /proc/cpuinfo; elsewhere the model only), and
    the vector ISA torch's kernels picked (a bf16 or matmul speed depends on it)."""
    model, flags = platform.processor() or None, None
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key in ("model name", "Model") and model in (None, "", platform.machine()):
                model = value.strip()
            elif key in ("flags", "Features") and flags is None:
                flags = " ".join(value.split())  # one line: env.json stays readable
    return {"model": model, "flags": flags, "cores": os.cpu_count(),
            "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
            else os.cpu_count(), "torch_capability": _torch_cpu_capability()}


def _torch_cpu_capability() -> str | None:
    import torch

    try:
        return torch.backends.cpu.get_cpu_capability()
    except AttributeError:  # torch before 2.1
        return None


def read_device() -> dict[str, object]:
    """The accelerator a run trains on (the one accelerate picks: CUDA, then MPS, else CPU)."""
    import torch

    if torch.cuda.is_available():
        index = torch.cuda.current_device()
        return {"type": "cuda", "name": torch.cuda.get_device_name(index),
                "count": torch.cuda.device_count(), "cuda": torch.version.cuda,
                "capability": ".".join(map(str, torch.cuda.get_device_capability(index))),
                "processes": world_size()}
    if torch.backends.mps.is_available():
        return {"type": "mps", "processes": world_size()}
    return {"type": "cpu", "threads": torch.get_num_threads(), "processes": world_size()}


def collect_env(command: list[str], overrides: list[str]) -> dict[str, object]:
    return {
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": shlex.join(command),
        "overrides": overrides,  # this job's own (a sweep's command holds all of them)
        "python": platform.python_version(),
        "versions": package_versions(),
        "git": read_git(),
        "device": read_device(),
        "cpu": read_cpu(),
        "platform": platform.platform(),
        "host": platform.node(),
    }


def write_env(run_dir: Path, command: list[str], overrides: list[str],
              checkpoint: dict | None = None) -> dict[str, object]:
    """<run dir>/env.json for this start; the records of earlier starts stay inside it.
    checkpoint: the pretrained checkpoint the run reads, its revision and commit
    (config/hub_revisions.checkpoint_record)."""
    record = {**collect_env(command, overrides), "checkpoint": checkpoint}
    path = run_dir / ENV
    try:
        earlier = read_json(path) if path.exists() else None
    except (OSError, ValueError):  # a damaged record is replaced, not a reason to stop
        earlier = None
    if isinstance(earlier, dict):
        record["earlier_attempts"] = [*earlier.pop("earlier_attempts", []), earlier]
    write_json_atomic(path, record)
    return record
