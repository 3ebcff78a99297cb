"""The checks every config group uses: value checks that raise UserError naming the key and
the fix, typed construction of a group's dataclass, and the paths block."""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from pathlib import Path
from types import UnionType
from typing import Any, Union

from omegaconf import DictConfig, OmegaConf

from bertology.config.data_sets import DEFAULT_DATA_DIR
from bertology.config.hub_revisions import default_cache_dir
from bertology.config.options import did_you_mean
from bertology.config.path_checks import check_writable_folder
from bertology.errors import UserError, require


def one_of(value: Any, options: tuple | list, key: str) -> None:
    require(value in options, f"{key}={value!r} is not an option; use one of: {', '.join(options)}")


def in_open_unit(value: float, key: str) -> None:
    require(0.0 < value < 1.0, f"{key}={value} must lie strictly between 0 and 1")


def positive(value: float, key: str) -> None:
    require(value > 0, f"{key}={value} must be positive")


def non_negative(value: float, key: str) -> None:
    require(value >= 0, f"{key}={value} must be >= 0")


def distinct(values: list, key: str) -> None:
    """A list whose entries name things (seeds, labels, experiments) lists each once."""
    repeated = sorted({str(v) for v in values if values.count(v) > 1})
    require(not repeated, f"{key}={values} lists {', '.join(repeated)} twice; list each once")


def non_empty(values: list, key: str, example: str) -> None:
    require(len(values) > 0, f"{key}=[] is empty; list at least one, e.g. {key}={example}")


def _type_ok(value: Any, hint: Any) -> bool:
    """Whether a YAML/CLI value fits a field's annotation (ints are accepted as floats)."""
    options = typing.get_args(hint) if typing.get_origin(hint) in (Union, UnionType) else (hint,)
    for option in options:
        origin = typing.get_origin(option) or option
        if option is type(None) and value is None:
            return True
        if origin is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return True
        if origin is int and isinstance(value, int) and not isinstance(value, bool):
            return True
        if origin is list and isinstance(value, list):
            element = (typing.get_args(option) or (Any,))[0]
            return element is Any or all(_type_ok(v, element) for v in value)
        if origin in (bool, str, dict) and isinstance(value, origin):
            return True
    return False


def build_group(cls: type, node: DictConfig | dict | None, group: str,
                within: str = "") -> Any:
    """The group's dataclass from its config block: unknown keys, required values and types
    checked here, ranges in its __post_init__. `within` names the block a group sits in
    (compression: student, kd), so the error names the full key."""
    try:
        return _build_group(cls, node, group)
    except UserError as err:
        if not within:
            raise
        raise UserError(f"{within}: {err}") from err


def _build_group(cls: type, node: DictConfig | dict | None, group: str) -> Any:
    values = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node
    require(values is None or isinstance(values, dict),
            f"{group}={values!r} has the wrong type; it takes a mapping of its keys "
            f"({group}.<key>=...)")
    values = dict(values or {})
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        near = did_you_mean(unknown[0], known, lambda name: dotted(group, name))
        raise UserError(f"{dotted(group, unknown[0])} is not a known key" + (
            near or f"; valid keys: {', '.join(sorted(known))}"))
    hints = typing.get_type_hints(cls)
    for name, value in values.items():
        key = dotted(group, name)
        require(value != "???", f"{key} is required; set it on the command line ({key}=...)")
        require(_type_ok(value, hints[name]), f"{key}={value!r} has the wrong type; "
                f"it takes {_type_name(hints[name])}")
    return cls(**values)


def dotted(group: str, name: str) -> str:
    return f"{group}.{name}" if group else name


def build_top_level(cls: type, container: dict, groups: tuple[str, ...]) -> Any:
    """The run's own keys (seed, resume, ...), typed and range-checked like a group's keys.
    A key that is neither one of them nor a group (`+sed=1`) is refused with both lists."""
    values = {k: v for k, v in container.items() if k not in groups}
    known = sorted({f.name for f in dataclasses.fields(cls)} | set(groups))
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise UserError(f"{unknown[0]} is not a known key" + (
            did_you_mean(unknown[0], known) or f"; valid top-level keys: {', '.join(known)}"))
    return build_group(cls, values, "")


def _type_name(hint: Any) -> str:
    return str(hint).replace("typing.", "").replace("<class '", "").replace("'>", "")


def resolve_container(cfg: DictConfig) -> dict:
    """The composed config as plain data; a bad interpolation is a UserError."""
    try:
        return OmegaConf.to_container(cfg, resolve=True)
    except Exception as err:  # omegaconf raises several types for missing or bad interpolations
        raise UserError(f"config: {str(err).splitlines()[0]}; fix the value on the command "
                        "line") from err


@dataclass
class PathsConfig:
    data_dir: str = DEFAULT_DATA_DIR  # the data root (BERTOLOGY_DATA_DIR)
    cache_dir: str | None = None  # tokenizers, features (BERTOLOGY_CACHE_DIR)


def resolve_paths(container: dict) -> tuple[Path, Path]:
    """(data root, cache dir) from the `paths` block. The data root may be missing (only tasks
    and corpora under it read it, and they say so) but not a file; the cache must be writable."""
    paths = build_group(PathsConfig, container.get("paths"), "paths")
    data_dir = Path(paths.data_dir).expanduser()
    existing = next(p for p in (data_dir, *data_dir.parents) if p.exists())
    require(existing.is_dir(), f"paths.data_dir: {existing} is a file, not a folder; set "
            "BERTOLOGY_DATA_DIR (paths.data_dir) to the folder that holds the data sets")
    cache_dir = Path(paths.cache_dir or default_cache_dir()).expanduser()
    check_writable_folder(cache_dir, "paths.cache_dir")
    return data_dir, cache_dir


RESUME = ("auto", "true", "false", "force")


def check_seed(value: int, key: str) -> None:
    """numpy and torch take seeds in [0, 2^32)."""
    require(0 <= value < 2**32, f"{key}={value} must lie in [0, 2^32) (numpy's seed range)")


def check_seeds(seeds: list[int] | None, key: str = "seeds") -> None:
    if seeds is None:
        return
    non_empty(seeds, key, "[0,1,2]")
    distinct(seeds, key)
    for seed in seeds:
        check_seed(seed, key)


@dataclass
class TrainingRunKeys:
    """The top-level keys of a pipeline that trains (pretrain, prune, distill; finetune adds
    its own): the seed, whether to resume, and the run's label."""

    seed: int = 0
    resume: str | bool = "auto"  # auto: resume a run dir that has checkpoints
    label: str | None = None  # see check_label

    def __post_init__(self) -> None:
        check_seed(self.seed, "seed")
        one_of(str(self.resume).lower(), RESUME, "resume")
        check_label(self.label)


def check_label(label: object) -> None:
    """`label`: a name the run is filed under (a study bundle sets its study's name). The runner
    records it in the run's config and never reads it; `bertology report` groups runs by it."""
    require(label is None or (isinstance(label, str) and label.strip() != ""),
            f"label={label!r}: give a non-empty name or leave it out")


def check_nested(load: typing.Callable[[DictConfig], Any], cfg: DictConfig, what: str) -> Any:
    """load(cfg) for a pipeline run nested in another (distill's teacher, prune's student,
    pretrain's downstream fine-tuning), checked before any work; a bad value's error line
    says which nested run it belongs to."""
    try:
        return load(cfg)
    except UserError as err:
        raise UserError(f"{what}: {err}") from err


