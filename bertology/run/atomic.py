"""Files a run writes, atomically: a reader (or a resumed run) sees the old file or the whole
new one, never half of it."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bertology.run.write_errors import writing


def _read_umask() -> int:
    mask = os.umask(0)  # the only way to read it is to set it; put it straight back
    os.umask(mask)
    return mask


# Read once, at import (in the main thread, before any writer thread starts).
UMASK = _read_umask()


def share_with_group(path: Path) -> None:
    """Give `path` and everything under it the modes a plain open() or mkdir() gives (0644 and
    0755 under the usual umask 022), so a lab mate can read a run: safetensors (0.8) writes
    its files 0600 whatever the umask, which left every model and checkpoint readable by its
    owner only."""
    for item in [path, *path.rglob("*")]:
        if item.is_symlink():
            continue
        os.chmod(item, (0o777 if item.is_dir() else 0o666) & ~UMASK)


def write_text_atomic(path: Path, text: str) -> None:
    """Write to a temporary file and rename, so readers never see half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    with writing(path):
        tmp.write_text(text)
    os.replace(tmp, path)


def write_json_atomic(path: Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())


def write_dir_atomic(path: Path, write: Callable[[Path], None]) -> None:
    """write(tmp) fills a dir beside `path`, which then replaces it: a reader (or a resumed
    run) sees the old dir or the whole new one, never half of it."""
    tmp = path.with_name(f".tmp-{path.name}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        with writing(path):
            write(tmp)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)  # a full disk gets its partial dir back
        raise
    share_with_group(tmp)
    if path.exists():
        shutil.rmtree(path)
    os.replace(tmp, path)


def write_predictions(rows: list[dict], path: Path) -> None:
    tmp = path.with_name(f".{path.name}")
    tmp.write_text("".join(json.dumps(row) + "\n" for row in rows))
    os.replace(tmp, path)


