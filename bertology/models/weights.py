"""The one way weights are saved and loaded: safetensors only, no remote code.

A `.bin`/`.pt` checkpoint is a pickle, which can run code when loaded, so it is refused rather
than opened (`bertology convert <dir>` re-saves one as safetensors, models/convert.py); a hub
model's `trust_remote_code` stays off. A missing, truncated or corrupted weights file is a
one-line UserError.
"""

from __future__ import annotations

import logging
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

log = logging.getLogger(__name__)


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
    """auto_class.from_pretrained(name_or_path, ...) with safetensors and no remote code; the
    model, or (model, loading info) with output_loading_info=True. Refused where the
    checkpoint lacks some of the encoder's own weights (check_encoder_loaded)."""
    wants_info = kwargs.pop("output_loading_info", False)
    try:
        with quiet_load_report():
            model, info = auto_class.from_pretrained(name_or_path, use_safetensors=True,
                                                     trust_remote_code=False,
                                                     output_loading_info=True, **kwargs)
    except (OSError, ValueError, SafetensorError, RuntimeError) as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(f"cannot load weights from {str(name_or_path)!r} ({reason}); give a "
                        "checkpoint dir with an intact model.safetensors (a bertology model/ "
                        "dir or a hub id); a pytorch_model.bin converts with `bertology "
                        "convert <dir>`") from err
    check_encoder_loaded(model, info, name_or_path)
    prefix = model.base_model_prefix + "."
    heads = sorted({k.removeprefix(prefix).split(".")[0] for k in info.get("missing_keys", [])})
    if heads:  # what the report said at length, in one line: the rest was refused above
        log.info("%s: newly initialised (not in the checkpoint): %s", name_or_path,
                 ", ".join(heads))
    return (model, info) if wants_info else model


@contextmanager
def quiet_load_report() -> Iterator[None]:
    """transformers' multi-line load report (MISSING / UNEXPECTED tables) is replaced by
    check_encoder_loaded's refusal or one line naming the new heads."""
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)


# Base-model weights a checkpoint may lack while its encoder is whole: the pooler (a masked-LM
# checkpoint has none; BertModel builds one, which no analysis here reads)
OPTIONAL_ENCODER_WEIGHTS = ("pooler.",)


def check_encoder_loaded(model: PreTrainedModel, info: dict, name_or_path: Any) -> None:
    """transformers initialises at random every weight it does not find in the checkpoint and
    only logs it: a checkpoint saved under other weight names (another wrapper's prefix, an
    edited architecture) would run to the end on a random encoder. A task head missing is
    expected (the run trains it); an encoder weight missing is refused."""
    missing = missing_encoder_weights(model, info.get("missing_keys", []))
    if not missing:
        return
    total = sum(1 for _ in model.base_model.state_dict())
    unused = sorted(info.get("unexpected_keys", []))
    found = (f"; the checkpoint's own {len(unused)} unused tensors start like {unused[0]!r}"
             if unused else "")
    raise UserError(f"{str(name_or_path)!r}: {len(missing)} of the encoder's {total} weights are "
                    f"not in its model.safetensors (e.g. {missing[0]!r}) and would be random"
                    f"{found}; give a checkpoint saved by save_pretrained for config.json's "
                    f"model_type ({model.config.model_type}), or rename its tensors to match")


def missing_encoder_weights(model: PreTrainedModel, missing: list[str]) -> list[str]:
    """The missing keys that are the encoder's own (the base model's, pooler aside), in the
    base model's names; an AutoModel is its own base, so every key is."""
    if model.base_model is model:
        names = list(missing)
    else:
        prefix = model.base_model_prefix + "."
        names = [k.removeprefix(prefix) for k in missing if k.startswith(prefix)]
    return sorted(k for k in names if not k.startswith(OPTIONAL_ENCODER_WEIGHTS))
