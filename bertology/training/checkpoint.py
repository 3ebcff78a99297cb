"""Resumable training state under <run dir>/checkpoints/step_XXXXXXXX/, written atomically.

Each checkpoint is built in a hidden temporary dir and renamed into place, so a run killed at
any moment leaves only complete checkpoints. Weights are safetensors; the optimizer state is
plain tensors and numbers, loaded with weights_only=True (nothing is unpickled). Every file's
sha256 goes to checksums.json, so a checkpoint damaged later (a bad disk, a truncated copy) is
found before it is loaded, and resume falls back to the one before it.

A checkpoint is also a model dir: the pipeline's `export` writes there what it writes to the
run's model/ (config.json, model.safetensors, the tokenizer), so `from_pretrained` and
`bertology probe model.name_or_path=<run>/checkpoints/step_N` load any step, and a sweep over
a run's checkpoints probes across pretraining. The whole trained module (ELECTRA's generator
and discriminator, SpanBERT's SBO head, a feature head), which resume restores, is in
training_model.safetensors beside it.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_model, save_model

from bertology.config.data_sets import compute_sha256
from bertology.run.atomic import share_with_group
from bertology.run.write_errors import as_os_error

log = logging.getLogger(__name__)

STEP_PREFIX = "step_"
CHECKSUMS = "checksums.json"
WEIGHTS = "training_model.safetensors"  # the trained module, whole: what resume restores
OLD_WEIGHTS = "model.safetensors"  # where checkpoints without a model export held it


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# An export: writes a from_pretrained-loadable model dir (weights, config, tokenizer) into a path.
Export = Callable[[Path], None]


@dataclass(frozen=True)
class Snapshot:
    """What a checkpoint is written from: the whole trained module, its optimizer, the loop's
    state (plain numbers and dicts, for state.json) and the pipeline's export, if any."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    state: dict
    export: Export | None = None


def _write_files(tmp: Path, snapshot: Snapshot) -> None:
    if snapshot.export is not None:
        snapshot.export(tmp)  # first: the training files below must not be overwritten by it
    save_model(snapshot.model, str(tmp / WEIGHTS))  # handles tied embeddings
    torch.save(snapshot.optimizer.state_dict(), tmp / "optimizer.pt")
    (tmp / "state.json").write_text(json.dumps(snapshot.state, indent=2))
    files = sorted(file for file in tmp.rglob("*") if file.is_file())
    sums = {file.relative_to(tmp).as_posix(): compute_sha256(file) for file in files}
    (tmp / CHECKSUMS).write_text(json.dumps(sums, indent=2))
    share_with_group(tmp)
    for file in tmp.rglob("*"):
        if file.is_file():
            with file.open("rb") as handle:
                os.fsync(handle.fileno())


def save_checkpoint(root: Path, step: int, snapshot: Snapshot, keep: int) -> Path:
    """Write the checkpoint beside its final name, then rename, and keep the newest `keep`. A
    failed write (disk full, read-only dir) removes the partial dir and raises; the earlier
    checkpoints stay. The snapshot's export adds the loadable model (what the pipeline writes
    to model/)."""
    final = root / f"{STEP_PREFIX}{step:08d}"
    tmp = root / f".tmp-{STEP_PREFIX}{step:08d}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir(parents=True)
        _write_files(tmp, snapshot)
    except Exception as err:  # noqa: BLE001 - safetensors and torch have their own types
        shutil.rmtree(tmp, ignore_errors=True)
        mapped = as_os_error(err, tmp)  # an OSError naming the checkpoint, if a write failed
        if mapped is err:
            raise
        raise mapped from err
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
                  if p.name.startswith(STEP_PREFIX) and (p / "state.json").exists())


def find_damage(path: Path) -> str | None:
    """Why the checkpoint cannot be trusted, or None when every file matches its checksum.
    Checkpoints written before checksums existed are trusted as they are."""
    sums_file = path / CHECKSUMS
    if not sums_file.exists():
        return None
    try:
        sums = json.loads(sums_file.read_text())
    except (OSError, ValueError):
        return f"{CHECKSUMS} is unreadable"
    for name, expected in sums.items():
        file = path / name
        if not file.exists():
            return f"{name} is missing"
        if compute_sha256(file) != expected:
            return f"{name} does not match its checksum"
    return None


def load_checkpoint(path: Path, model: torch.nn.Module, optimizer) -> dict:
    """Restore model and optimizer in place; returns the loop state (the learning rate is a
    function of it)."""
    weights = path / WEIGHTS if (path / WEIGHTS).exists() else path / OLD_WEIGHTS
    load_model(model, str(weights))
    optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=True))
    log.info("resumed from %s", path)
    return json.loads((path / "state.json").read_text())


