"""The checks every config group uses: value checks that raise UserError naming the key and
the fix, typed construction of a group's dataclass, and the paths block."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from types import UnionType
from typing import Any, Union

from omegaconf import DictConfig, OmegaConf

from bertology.errors import UserError, require


def one_of(value: Any, options: tuple | list, key: str) -> None:
    require(value in options, f"{key}={value!r} is not an option; use one of: {', '.join(options)}")


def in_open_unit(value: float, key: str) -> None:
    require(0.0 < value < 1.0, f"{key}={value} must lie strictly between 0 and 1")


def positive(value: float, key: str) -> None:
    require(value > 0, f"{key}={value} must be positive")


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
        if origin in (bool, str, list, dict) and isinstance(value, origin):
            return True
    return False


def build_group(cls: type, node: DictConfig | dict | None, group: str) -> Any:
    values = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node
    values = dict(values or {})
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    require(not unknown, f"{group}.{unknown[0] if unknown else ''} is not a known key; "
            f"valid keys: {', '.join(sorted(known))}")
    hints = typing.get_type_hints(cls)
    for name, value in values.items():
        require(value != "???", f"{group}.{name} is required; set it on the command line "
                f"({group}.{name}=...)")
        require(_type_ok(value, hints[name]), f"{group}.{name}={value!r} has the wrong type; "
                f"it takes {_type_name(hints[name])}")
    return cls(**values)


def _type_name(hint: Any) -> str:
    return str(hint).replace("typing.", "").replace("<class '", "").replace("'>", "")


def resolve_container(cfg: DictConfig) -> dict:
    """The composed config as plain data; a bad interpolation is a UserError."""
    try:
        return OmegaConf.to_container(cfg, resolve=True)
    except Exception as err:  # omegaconf raises several types for missing or bad interpolations
        raise UserError(f"config: {str(err).splitlines()[0]}; fix the value on the command "
                        "line") from err


def default_cache_dir() -> Path:
    """Where trained tokenizers and other per-machine results go unless paths.cache_dir (or
    BERTOLOGY_CACHE_DIR, its default) says otherwise."""
    return Path.home() / ".cache" / "bertology"


def resolve_paths(container: dict) -> tuple[Path, Path]:
    """(data root, cache dir) from the `paths` block."""
    cache = container["paths"].get("cache_dir") or default_cache_dir()
    data_dir = Path(str(container["paths"]["data_dir"])).expanduser()
    return data_dir, Path(str(cache)).expanduser()


def check_nested(load: typing.Callable[[DictConfig], Any], cfg: DictConfig, what: str) -> Any:
    """load(cfg) for a pipeline run nested in another (distill's teacher, prune's student,
    pretrain's downstream fine-tuning), checked before any work; a bad value's error line
    says which nested run it belongs to."""
    try:
        return load(cfg)
    except UserError as err:
        raise UserError(f"{what}: {err}") from err


