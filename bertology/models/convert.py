"""`bertology convert <dir>`: a checkpoint saved as pytorch_model.bin (a pickle) re-saved as
model.safetensors beside it, the one weights format bertology loads (models/weights.py);
`bertology convert org/name[@revision]`: a hub commit that ships only pytorch_model.bin (the
MultiBERTs do) converted into a copy of its snapshot in bertology's cache.

torch.load(weights_only=True) unpickles tensors and plain containers only, so a crafted file
cannot run code here. safetensors stores every tensor once and refuses tensors that share
memory, as tied weights do (BERT's MLM decoder is its word embeddings): each is written as a
copy of its own, and transformers ties them again on load. The file is written beside the
checkpoint under a temporary name, read back and compared tensor by tensor, then renamed, so
the folder never holds half a model.safetensors.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from bertology.config.hub_revisions import (
    CHECKPOINT_FILES,
    converted_snapshot,
    models_offline,
    resolve_revision,
)
from bertology.errors import UserError, require
from bertology.run.write_errors import writing

log = logging.getLogger(__name__)

BIN = "pytorch_model.bin"
SAFETENSORS = "model.safetensors"


def check_convertible(folder: Path) -> None:
    """A folder with pytorch_model.bin and no model.safetensors yet."""
    fix = "give the checkpoint folder that holds pytorch_model.bin"
    require(folder.exists(), f"{folder} does not exist; {fix}")
    require(folder.is_dir(), f"{folder} is a file, not a folder; {fix}")
    require(not (folder / SAFETENSORS).exists(), f"{folder / SAFETENSORS} exists already; "
            "nothing to convert (remove it to convert pytorch_model.bin again)")
    require(not (folder / f"{BIN}.index.json").is_file(), f"{folder} holds a sharded "
            f"checkpoint ({BIN}.index.json), which convert does not join; load it with "
            "transformers' from_pretrained and save_pretrained it")
    require((folder / BIN).is_file(), f"{folder} has no {BIN}; {fix}")


def load_bin(path: Path) -> dict[str, torch.Tensor]:
    """The state dict of a .bin file, unpickled with tensors and containers only."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - the unpickler and the zip reader raise many types
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(f"{path}: not a plain state dict torch.load can read with "
                        f"weights_only=True ({reason[:200]}); re-save it from the model that "
                        "wrote it (torch.save(model.state_dict(), ...))") from err
    require(isinstance(state, dict) and state, f"{path}: holds {type(state).__name__}, not a "
            "state dict of tensors; save model.state_dict()")
    for key, value in state.items():
        if not isinstance(value, torch.Tensor):
            raise UserError(f"{path}: {key!r} is not a tensor ({type(value).__name__}), so "
                            "this is no model's state dict (a training checkpoint?); save "
                            "model.state_dict()")
    return state


def own_storage(state: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], int]:
    """Each tensor contiguous and alone in its memory (safetensors' rule); the count of those
    that shared memory with another (tied weights) or were a view into a larger block."""
    seen: set[int] = set()
    out, copied = {}, 0
    for name, tensor in state.items():
        storage = tensor.untyped_storage()
        alone = (storage.data_ptr() not in seen and tensor.is_contiguous()
                 and tensor.numel() * tensor.element_size() == storage.nbytes())
        seen.add(storage.data_ptr())
        out[name] = tensor if alone else tensor.contiguous().clone()
        copied += not alone
    return out, copied


def write_checked(tensors: dict[str, torch.Tensor], target: Path) -> None:
    """save_file to a temporary name beside `target`, read back and compared, then renamed."""
    tmp = target.with_name(f".{target.name}.tmp")
    try:
        with writing(tmp):  # safetensors reports a failed write as its own error type
            save_file(tensors, tmp, metadata={"format": "pt"})  # transformers reads "format"
        written = load_file(tmp)
        same = written.keys() == tensors.keys() and all(
            torch.equal(written[name], tensor) for name, tensor in tensors.items())
        require(same, f"{tmp} does not read back as the tensors written; nothing was "
                "replaced (check the disk)")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def convert_checkpoint(folder: Path) -> str:
    """Write folder/model.safetensors from folder/pytorch_model.bin; one line saying what was
    written (the .bin file is left as it was)."""
    check_convertible(folder)
    tensors, copied = own_storage(load_bin(folder / BIN))
    try:
        write_checked(tensors, folder / SAFETENSORS)
    except OSError as err:
        raise UserError(f"cannot write {folder / SAFETENSORS} ({err.strerror or err}); make "
                        f"{folder} writable, or convert a copy of it") from err
    size = (folder / SAFETENSORS).stat().st_size / 1e6
    tied = f", {copied} shared or tied tensors stored as copies" if copied else ""
    config = "" if (folder / "config.json").is_file() else (
        "; the folder has no config.json, which transformers needs beside the weights")
    return (f"wrote {folder / SAFETENSORS} ({len(tensors)} tensors, {size:.1f} MB{tied}); "
            f"{BIN} is left as it was{config}")


def convert_hub_checkpoint(label: str) -> str:
    """`bertology convert org/name[@revision]`: the commit's snapshot in the hub cache (read
    offline, downloaded with its pytorch_model.bin where the hub can be reached) copied into
    bertology's cache with model.safetensors written from its .bin
    (hub_revisions.converted_snapshot), where every run that names it then reads it; one line
    saying what was written."""
    repo_id, _, revision = label.partition("@")
    # the commit with its .bin: from the cache, or downloaded (offline: refused in one line)
    snapshot = resolve_revision(repo_id, revision or "main", label, models_offline(),
                                (*CHECKPOINT_FILES, BIN))
    target = converted_snapshot(repo_id, snapshot.name)
    require(not (target / SAFETENSORS).is_file(), f"{label} is converted already ({target}); "
            "remove that folder to convert it again")
    require((snapshot / BIN).is_file(), f"{label}: its snapshot {snapshot} has no {BIN}; "
            "nothing to convert (it ships safetensors, or no weights)")
    staging = target.with_name(f".{target.name}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:  # config and tokenizer files as the commit has them, then the weights, then rename
        for path in snapshot.iterdir():
            if path.is_file() and path.name != BIN and not path.name.endswith((".h5", ".msgpack")):
                shutil.copyfile(path, staging / path.name)
        tensors, _ = own_storage(load_bin(snapshot / BIN))
        write_checked(tensors, staging / SAFETENSORS)
        os.replace(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return f"wrote {target / SAFETENSORS} ({len(tensors)} tensors) from {label}'s {BIN}; runs " \
           f"that name {label} read it"
