"""Files a run writes, atomically: a reader (or a resumed run) sees the old file or the whole
new one, never half of it."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any


def write_text_atomic(path: Path, text: str) -> None:
    """Write to a temporary file and rename, so readers never see half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
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
    write(tmp)
    if path.exists():
        shutil.rmtree(path)
    os.replace(tmp, path)


def write_predictions(rows: list[dict], path: Path) -> None:
    tmp = path.with_name(f".{path.name}")
    tmp.write_text("".join(json.dumps(row) + "\n" for row in rows))
    os.replace(tmp, path)


