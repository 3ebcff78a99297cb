"""The one way weights are loaded from a checkpoint: safetensors only, no remote code.

A `.bin`/`.pt` checkpoint is a pickle, which can run code when loaded, so it is refused rather
than opened; a hub model's `trust_remote_code` stays off (a user who wants either converts the
checkpoint first). A missing, truncated or corrupted weights file is a one-line UserError.
"""

from __future__ import annotations

from typing import Any

from safetensors import SafetensorError

from bertology.errors import UserError


def load_safetensors_model(auto_class: Any, name_or_path: Any, **kwargs: Any) -> Any:
    """auto_class.from_pretrained(name_or_path, ...) with safetensors and no remote code."""
    try:
        return auto_class.from_pretrained(name_or_path, use_safetensors=True,
                                          trust_remote_code=False, **kwargs)
    except (OSError, ValueError, SafetensorError, RuntimeError) as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(f"cannot load weights from {str(name_or_path)!r} ({reason}); give a "
                        "checkpoint dir with an intact model.safetensors (a bertology model/ "
                        "dir or a hub id), or re-save a .bin checkpoint as safetensors") from err
