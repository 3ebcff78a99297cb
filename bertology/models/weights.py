"""The one way weights are saved and loaded: safetensors only, no remote code.

A `.bin`/`.pt` checkpoint is a pickle, which can run code when loaded, so it is refused rather
than opened; a hub model's `trust_remote_code` stays off (a user who wants either converts the
checkpoint first). A missing, truncated or corrupted weights file is a one-line UserError.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from safetensors import SafetensorError
from transformers import PreTrainedModel
from transformers.utils import logging as hf_logging

from bertology.errors import UserError
from bertology.models.spanbert import (
    ATTRIBUTE,
    has_sbo_head,
    save_sbo_head,
    without_sbo_head,
)


def save_model(model: PreTrainedModel, path: Path) -> None:
    """save_pretrained (safetensors); a SpanBERT model's SBO head goes beside the weights, not
    into them, so plain transformers loads the encoder."""
    if not has_sbo_head(model):
        with no_shard_bar():
            model.save_pretrained(path)
        return
    with without_sbo_head(model), no_shard_bar():
        model.save_pretrained(path)
    save_sbo_head(getattr(model, ATTRIBUTE), Path(path))


@contextmanager
def no_shard_bar() -> Iterator[None]:
    """transformers v5 draws a "Writing model shards" bar on every save; at a terminal it
    lands on the training bar at each checkpoint, for a file that takes milliseconds."""
    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


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
