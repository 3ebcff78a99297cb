"""Resumable training state under <run dir>/checkpoints/step_XXXXXXXX/, written atomically.

Each checkpoint is built in a hidden temporary dir and renamed into place, so a run killed at
any moment leaves only complete checkpoints. Weights are safetensors; the optimizer state is
plain tensors and numbers, loaded with weights_only=True (nothing is unpickled).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_model, save_model

from bertology.errors import require

log = logging.getLogger(__name__)

PREFIX = "step_"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_checkpoint(root: Path, step: int, model: torch.nn.Module, optimizer, state: dict,
                    keep: int) -> Path:
    final = root / f"{PREFIX}{step:08d}"
    tmp = root / f".tmp-{PREFIX}{step:08d}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_model(model, str(tmp / "model.safetensors"))  # handles tied embeddings
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    (tmp / "state.json").write_text(json.dumps(state, indent=2))
    for file in tmp.iterdir():
        with file.open("rb") as handle:
            os.fsync(handle.fileno())
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    _fsync_dir(root)
    for old in list_checkpoints(root)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def list_checkpoints(root: Path) -> list[Path]:
    """Complete checkpoints, oldest first (temporary dirs are never listed)."""
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir()
                  if p.name.startswith(PREFIX) and (p / "state.json").exists())


def load_checkpoint(path: Path, model: torch.nn.Module, optimizer) -> dict:
    """Restore model and optimizer in place; returns the loop state (the learning rate is a
    function of it)."""
    load_model(model, str(path / "model.safetensors"))
    optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=True))
    log.info("resumed from %s", path)
    return json.loads((path / "state.json").read_text())


def check_resume(config, out_dir: Path) -> None:
    """resume=false refuses a run dir that already holds checkpoints (any pipeline's config
    with a `resume` field)."""
    if config.resume == "false":
        require(not list_checkpoints(out_dir / "checkpoints"),
                f"{out_dir} already holds checkpoints and resume=false; pick another "
                "hydra.run.dir or drop resume=false to continue that run")
