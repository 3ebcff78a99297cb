"""`bertology convert DIR`: a checkpoint folder's pytorch_model.bin re-saved as
model.safetensors beside it (bertology/models/convert.py), so every pipeline can load it. No
Hydra, no run dir; bad input is a UserError (one line, exit 2, cli/entry.py)."""

from __future__ import annotations

from pathlib import Path

from bertology.config.path_checks import is_path
from bertology.errors import UserError

CONVERT_USAGE = """usage: bertology convert DIR|ORG/NAME[@REVISION] ...

Writes DIR/model.safetensors from DIR/pytorch_model.bin (read with torch.load(...,
weights_only=True), which runs no code), checked against it before it is renamed into place;
pytorch_model.bin is left as it was. Then: bertology finetune model.name_or_path=DIR ...
A hub id (a commit in the local Hugging Face cache that ships only pytorch_model.bin, as the
MultiBERTs do) is converted into a copy of its snapshot in bertology's cache, which every run
that names the id (at that revision) then reads."""


def main(argv: list[str]) -> int:
    if argv[:1] in (["-h"], ["--help"]):
        print(CONVERT_USAGE)
        return 0
    if not argv or any(arg.startswith("-") for arg in argv):
        raise UserError(f"convert takes checkpoint folders or hub ids, got "
                        f"{' '.join(argv) or 'none'}; usage: bertology convert DIR|ORG/NAME ...")
    from bertology.models.convert import convert_checkpoint, convert_hub_checkpoint  # torch

    for arg in argv:
        if is_path(arg.split("@")[0]) or "/" not in arg:
            print(convert_checkpoint(Path(arg).expanduser()))
        else:
            print(convert_hub_checkpoint(arg))
    return 0
