"""A fine-tuned random-init twin given by path (probe's compare_to_twin, prune's
twin_name_or_path) is checked against what it must be before anything runs: the random-init
twin of this run's own seed (models/build.py twin_seed: a finetune run with init=random and
seed s starts from the weights a probe of seed s contrasts with), fine-tuned as the model arm
was (the same task, trainer and head), with the model's architecture. The facts come from the
runs' recorded configs (<model dir>/../.hydra/config.yaml, as `bertology finetune` writes it)
and config.json; a dir that records no run (a copied or hub checkpoint) cannot be checked,
and the run says so in its log."""

from __future__ import annotations

import logging
from pathlib import Path

from omegaconf import OmegaConf

from bertology.config.path_checks import (
    MADE_BY_THE_RUN,
    is_path,
    read_checkpoint,
    resolve_checkpoint,
)
from bertology.errors import require

log = logging.getLogger(__name__)

RECIPE = ("task", "trainer", "head")  # what "fine-tuned the same way" compares
ARCHITECTURE = ("model_type", "num_hidden_layers", "hidden_size", "num_attention_heads",
                "vocab_size")


def read_run_config(model_dir: str | None) -> dict | None:
    """The recorded config of the finetune run whose model/ (or seed's model/) this is; None
    for a hub id or a dir no run recorded."""
    if model_dir is None or not is_path(resolve_checkpoint(model_dir)):
        return None
    record = Path(resolve_checkpoint(model_dir)).expanduser().parent / ".hydra" / "config.yaml"
    if not record.is_file():
        return None
    return OmegaConf.to_container(OmegaConf.load(record))


def check_fine_tuned_twin(twin: str, key: str, seed: int, model: str | None,
                          model_key: str) -> None:
    """`twin` (the value of `key`) is seed `seed`'s random-init twin, fine-tuned as `model`
    (the value of `model_key`, the model arm) was; a one-line UserError where the records
    say otherwise."""
    if twin == MADE_BY_THE_RUN:  # an earlier job of `make reproduce` makes it
        return
    twin_config = read_checkpoint(twin, key)
    model_config = read_checkpoint(model, model_key) if model else None
    if twin_config is not None and model_config is not None:
        differs = [k for k in ARCHITECTURE if twin_config.get(k) != model_config.get(k)]
        require(not differs, f"{key}={twin!r} is not {model_key}'s architecture "
                f"({', '.join(differs)} differ); give the random-init twin of the same model, "
                "fine-tuned the same way")
    run = read_run_config(twin)
    if run is None:
        log.warning("%s=%s records no finetune run: not checked that it is the random-init "
                    "twin of seed %d fine-tuned as %s was", key, twin, seed, model_key)
        return
    require(run.get("init") == "random", f"{key}={twin!r} was fine-tuned with "
            f"init={run.get('init')}; the twin arm is the random-init model fine-tuned the "
            "same way: a finetune run's model/ with init=random")
    require(run.get("seed") == seed and not run.get("seeds"), f"{key}={twin!r} was "
            f"fine-tuned with seed={run.get('seed')}" + (f", seeds={run.get('seeds')}"
                                                      if run.get("seeds") else "")
            + f", so it started from another twin than this run's (seed={seed}); give the "
            f"init=random run of seed={seed}")
    model_run = read_run_config(model)
    if model_run is not None:
        differs = [k for k in RECIPE if model_run.get(k) != run.get(k)]
        require(not differs, f"{key}={twin!r} was not fine-tuned as {model_key}={model!r} "
                f"was ({', '.join(differs)} differ); the twin arm takes the model arm's recipe")
