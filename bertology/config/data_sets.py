"""The real data sets under the data root: what each is, its files and their sha256 sums
(data_sets.json, the manifest, computed from the shared data folder the tests and CI read), and
checks of a data root against it. `bertology data` (cli/data_command.py) lists, fetches and
verifies them; files.py names the set to fetch when a reader finds one missing.

Each set is a folder <data root>/<set>/ in the layout the readers read (tasks.py, corpora.py,
probe_sentences.py, cloze_suites.py). A file's `url` is the original file at the source
repository's commit (raw GitHub); `url: null` marks a file with no public copy (a folder's
README.md, written with the data; Marvin & Linzen's TSVs, converted from pickles), fetched only
from a mirror. `doc: true` files may be absent.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path

MANIFEST = Path(__file__).with_name("data_sets.json")
# The data root unless BERTOLOGY_DATA_DIR (or paths.data_dir) says otherwise; conf/*.yaml's
# paths.data_dir spells the same default.
DEFAULT_DATA_DIR = "~/.cache/bertology/data"


@dataclass(frozen=True)
class DataFile:
    path: str  # relative to the set's folder, POSIX
    bytes: int
    sha256: str
    url: str | None = None
    doc: bool = False


@dataclass(frozen=True)
class DataSet:
    name: str
    what: str
    license: str
    non_commercial: bool
    source: str
    files: tuple[DataFile, ...]
    license_file: str | None = None
    note: str | None = None

    @property
    def bytes(self) -> int:
        return sum(f.bytes for f in self.files)


@cache
def load_manifest() -> dict[str, DataSet]:
    raw = json.loads(MANIFEST.read_text(encoding="utf-8"))
    return {name: DataSet(name=name, **{**entry, "files": tuple(DataFile(**f) for f in
                                                                 entry["files"])})
            for name, entry in raw.items()}


def data_root() -> Path:
    """BERTOLOGY_DATA_DIR, else the user's data dir: the rule paths.data_dir follows."""
    return Path(os.environ.get("BERTOLOGY_DATA_DIR") or DEFAULT_DATA_DIR).expanduser()


def compute_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True)
class Check:
    """A set's files under a root: those missing (data files only) and those that differ."""

    present: int
    missing: tuple[str, ...]
    mismatched: tuple[str, ...]

    @property
    def verified(self) -> bool:
        return not self.missing and not self.mismatched


def check_set(data_set: DataSet, root: Path) -> Check:
    present, missing, mismatched = 0, [], []
    for item in data_set.files:
        path = root / data_set.name / item.path
        if not path.is_file():
            if not item.doc:
                missing.append(item.path)
            continue
        present += 1
        if path.stat().st_size != item.bytes or compute_sha256(path) != item.sha256:
            mismatched.append(item.path)
    return Check(present, tuple(missing), tuple(mismatched))


def find_data_file(path: Path) -> tuple[str, Path] | None:
    """(set, data root) when `path` is a manifest file's place under some data root."""
    text = path.as_posix()
    for data_set in load_manifest().values():
        for item in data_set.files:
            tail = f"/{data_set.name}/{item.path}"
            if text.endswith(tail):
                return data_set.name, Path(text[: -len(tail)] or "/")
    return None
