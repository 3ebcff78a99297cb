"""Hydra's composition errors as one line with the closest valid names ("did you mean"), in
place of its advice to append a misspelt key with `+key=` (which the config checks refuse
anyway: every group's keys are a fixed schema).
"""

from __future__ import annotations

import re

from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from bertology.config.compose import CONF_DIR
from bertology.config.options import all_groups, did_you_mean, group_options, primary_defaults

MISSING_OPTION = re.compile(r"Could not (?:find|load) '(?P<group>[\w/]+)/(?P<option>[^']+)'")
AVAILABLE = re.compile(r"Available options in '[^']+':\n(?P<options>(?:\t[^\n]+\n?)+)")
UNKNOWN_KEY = re.compile(r"Could not override '(?P<key>[^']+)'|"
                         r"Could not delete from config\. '(?P<deleted>[^']+)' does not exist")
AMBIGUOUS = re.compile(r"Ambiguous value for argument '(?P<override>[^']+)'")
LISTED = 12  # options listed in full up to this many; beyond, --help lists them


def explain(err: HydraException | OmegaConfBaseException, pipeline: str,
            overrides: list[str]) -> str | None:
    """The one-line message for a misspelt option or key, or None for other errors."""
    text = str(err)
    if found := MISSING_OPTION.search(text):
        available = AVAILABLE.search(text)
        # Hydra lists the options, plugins' included (hydra/launcher); for a list group
        # (analysis=[...]) it does not, and conf/ has them all
        options = available["options"].split() if available else group_options(found["group"])
        return unknown_option(found["group"], found["option"], options, pipeline)
    if found := UNKNOWN_KEY.search(text):
        key = found["key"] or found["deleted"]
        others = [o for o in overrides if _override_key(o) != key]
        return unknown_key(key, candidate_keys(pipeline, others), pipeline)
    if found := AMBIGUOUS.search(text):
        key, _, value = found["override"].partition("=")
        return (f"{found['override']}: a comma-separated value is a sweep; add -m to run one job "
                f"per value, or write {key}=[{value}] for a list or {key}='{value}' for a string")
    return None


def unknown_option(group: str, option: str, options: list[str], pipeline: str) -> str:
    near = did_you_mean(option, options, lambda name: f"{group}={name}")
    listed = (f"options: {', '.join(options)}" if len(options) <= LISTED
              else f"`bertology {pipeline} --help` lists all {len(options)}")
    return f"{group}={option} is not an option of {group}{near} ({listed})"


def unknown_key(key: str, keys: list[str], pipeline: str) -> str:
    """Matched within its group when the group exists (trainer.max_step), else as a whole
    (trainr.max_steps); a far-off name in a known group lists that group's keys. A group of
    other pipelines is said to be one (never "did you mean model?" for `model`)."""
    placed = [g for g in primary_defaults(pipeline) if g.partition("@")[0] == key]
    if placed:  # distill's teacher: model@teacher.model
        return (f"{key} is placed at {placed[0].partition('@')[2]} in the {pipeline} config; "
                f"write {placed[0]}=<option>")
    if key in all_groups():
        return (f"{key} is a config group of other pipelines, not of the {pipeline} config; "
                f"`bertology {pipeline} --help` lists its groups and keys")
    parent, _, name = key.rpartition(".")
    siblings = sorted(k.rpartition(".")[2] for k in keys if parent and k.startswith(parent + ".")
                      and k.rpartition(".")[0] == parent)
    if siblings:
        near = did_you_mean(name, siblings, lambda n: f"{parent}.{n}")
        listed = f"{parent} has: {', '.join(siblings)}"
    else:
        near = did_you_mean(key, keys)
        listed = f"`bertology {pipeline} --cfg job` prints every key"
    return f"{key} is not a key of the {pipeline} config" + (near or f"; {listed}")


def _override_key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def candidate_keys(pipeline: str, overrides: list[str]) -> list[str]:
    """Every key of the config the other overrides compose (the defaults when they fail too),
    and the group names (a misspelt `modle=bert` is near `model`)."""
    from hydra import compose, initialize_config_dir

    cfg = None
    for attempt in (overrides, []):
        try:
            with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
                cfg = compose(config_name=pipeline, overrides=attempt)
            break
        except (HydraException, OmegaConfBaseException):
            continue
    keys = set(flatten_keys(cfg)) if cfg is not None else set()
    return sorted(keys | set(all_groups()))


def flatten_keys(cfg: DictConfig | dict, prefix: str = "") -> list[str]:
    """Every dotted key of a config, inner mappings included (trainer, trainer.max_steps)."""
    node = OmegaConf.to_container(cfg, resolve=False) if isinstance(cfg, DictConfig) else cfg
    keys = []
    for name, value in node.items():
        key = f"{prefix}{name}"
        keys.append(key)
        if isinstance(value, dict):
            keys += flatten_keys(value, f"{key}.")
    return keys

