"""The data half of the config checks: every data file or folder a config names (a task's
split files, the corpus's files, a user's own files, or the hub data set a task falls back to) is
there before a run dir is made, and a missing one says which data set it belongs to and how to
get it (`bertology data fetch <set>`). The pipelines' readers (data/tasks.py, data/corpora.py)
resolve paths with the same functions, so a check and a read cannot disagree. No torch."""

from __future__ import annotations

from pathlib import Path

from bertology.config.data_sets import find_data_file, load_manifest
from bertology.config.hub_revisions import offline_flag
from bertology.config.own_data import OWN_FORMATS, check_own_files, own_file
from bertology.config.path_checks import check_file, check_folder, is_path
from bertology.errors import require

DATA_FIX = ("set BERTOLOGY_DATA_DIR (paths.data_dir) to the folder that holds the data sets, "
            "or give an absolute path")


def data_set_of(path: Path, data_dir: Path | None = None) -> str | None:
    """The data set (data_sets.json) a path under the data root belongs to: its first folder
    there, or, without the root, the set whose manifest file the path ends with."""
    if data_dir is not None and path.is_relative_to(data_dir) and path != data_dir:
        name, *inside = path.relative_to(data_dir).parts
        data_set = load_manifest().get(name)
        inner = "/".join(inside)
        known = data_set is not None and (not inner or any(
            f.path == inner or f.path.startswith(inner + "/") for f in data_set.files))
        return name if known else None
    found = find_data_file(path)
    return found[0] if found else None


def data_fix(path: Path, data_dir: Path | None = None) -> str:
    """What to do about a data path that is not there: for a known set, fetch it or point the
    data root at a copy; for anything else, DATA_FIX."""
    return fetch_fix(data_set_of(path, data_dir))


def fetch_fix(name: str | None) -> str:
    if name is None:
        return DATA_FIX
    return (f"run `bertology data fetch {name}` or set BERTOLOGY_DATA_DIR (paths.data_dir) to "
            f"the folder that holds {name}/")


def missing_data(path: Path, data_dir: Path | None = None) -> str:
    """One line for a missing data file or folder: the set, the path expected, the fix."""
    name = data_set_of(path, data_dir)  # once: it may scan the manifest
    return f"{f'data set {name}: ' if name else ''}{path} is missing; {fetch_fix(name)}"


def under_root(path: str, data_dir: Path) -> Path:
    """A data path is absolute or relative to the data root."""
    resolved = Path(path).expanduser()
    return resolved if resolved.is_absolute() else data_dir / resolved


def hub_offline() -> bool:
    return offline_flag("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE") is not None


def reads_local_files(task, data_dir: Path) -> bool:
    """Whether a task reads files under the data root (source=local, or auto with task.path
    present) rather than the hub; data/tasks.py loads by the same rule. A user's own files
    (csv, tsv, jsonl) are always local: a typo must not fall back to a hub data set."""
    if task.format in OWN_FORMATS:
        return True
    if task.source != "auto":
        return task.source == "local"
    return task.path is not None and under_root(task.path, data_dir).exists()


def task_file(task, key: str, data_dir: Path) -> Path:
    """The file task.<key> names: inside task.path (under the data root) where that is set,
    else absolute or from the working dir, as a user's own files are (own_data.own_file)."""
    if task.path is None:
        return own_file(getattr(task, key))
    return under_root(task.path, data_dir) / getattr(task, key)


def check_task_files(task, data_dir: Path) -> None:
    """A task's local folder and files (TaskConfig), or the hub it falls back to: the same
    choice data/tasks.py makes (source=auto: local files when task.path is present)."""
    if task.format == "synthetic":
        return
    if task.path is None and reads_local_files(task, data_dir):
        check_own_files(task)  # absolute, or from the working dir
        return
    root = under_root(task.path, data_dir) if task.path is not None else None
    fix = data_fix(root, data_dir) if root else DATA_FIX
    if not reads_local_files(task, data_dir):
        missing = f"task.path: {root} does not exist" if root else "task.path is not set"
        require(task.hub is not None, f"{missing} and task={task.name} names no hub data "
                f"set; {fix}")
        require(not hub_offline(), f"{missing} and the hub is offline (HF_HUB_OFFLINE=1), so "
                f"task.hub={task.hub!r} cannot be fetched; {fix}")
        return
    check_folder(root, "task.path", fix)
    for key in ("train_file", "eval_file"):
        name = getattr(task, key)
        if name is not None:
            path = root / name
            check_file(path, f"task.{key}", data_fix(path, data_dir) if data_set_of(
                path, data_dir) else f"name a file inside task.path ({root})")


def check_corpus_files(data, data_dir: Path) -> None:
    """An unlabelled corpus's files (DataConfig): the same paths data/corpora.py reads."""
    if data.name == "files":
        for path in expand_files(data.files or [], data_dir):
            check_file(path, "data.files", "list text files, e.g. data.files=[corpus.txt]")
            require(path.stat().st_size > 0, f"data.files: {path} is empty; remove it from "
                    "the list")
    elif data.name == "wikipedia":
        root = under_root(data.path or "wikipedia_en_wikiextractor", data_dir)
        check_folder(root, "data.path", data_fix(root, data_dir) + " (a folder of "
                     "WikiExtractor shards)")
    elif data.name == "hub" and data.path is not None and is_path(data.path):
        check_folder(Path(data.path).expanduser(), "data.path", "give a hub data set name "
                     "(e.g. wikitext) or a local folder (one text file: data=files "
                     "data.files=[<file>])")


def expand_files(patterns: list[str], data_dir: Path) -> list[Path]:
    """data.files: each entry a path under the data root (or absolute) or a glob over one
    folder; a glob that matches nothing stays as it is, so the check names it as missing."""
    paths: list[Path] = []
    for pattern in patterns:
        base = under_root(pattern, data_dir)
        matches = sorted(base.parent.glob(base.name)) if any(c in base.name for c in "*?[") \
            else []
        paths.extend(matches or [base])
    return paths
