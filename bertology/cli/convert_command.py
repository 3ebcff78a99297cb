"""`bertology convert DIR`: a checkpoint folder's pytorch_model.bin re-saved as
model.safetensors beside it (bertology/models/convert.py), so every pipeline can load it. No
Hydra, no run dir; bad input is a UserError (one line, exit 2, cli/entry.py)."""

from __future__ import annotations

from pathlib import Path

from bertology.errors import UserError

USAGE = """usage: bertology convert DIR

Writes DIR/model.safetensors from DIR/pytorch_model.bin (read with torch.load(...,
weights_only=True), which runs no code), checked against it before it is renamed into place;
pytorch_model.bin is left as it was. Then: bertology finetune model.name_or_path=DIR ..."""


def main(argv: list[str]) -> int:
    if argv[:1] in (["-h"], ["--help"]):
        print(USAGE)
        return 0
    if len(argv) != 1 or argv[0].startswith("-"):
        raise UserError(f"convert takes one checkpoint folder, got {' '.join(argv) or 'none'}; "
                        "usage: bertology convert DIR")
    from bertology.models.convert import convert_checkpoint  # torch: only when converting

    print(convert_checkpoint(Path(argv[0]).expanduser()))
    return 0
