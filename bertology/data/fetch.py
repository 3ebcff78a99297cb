"""Downloads of the data sets' files into the data root: each file goes to <file>.part (resumed
with an HTTP Range request after a kill where the server honours it, restarted otherwise),
is fsynced, checked against the manifest's sha256, and only then renamed into place, so a
file under the data root is always whole and verified.

Sources: BERTOLOGY_DATA_MIRROR (a URL, http(s):// or file://, or a folder) under which the files
sit in the data root's layout (<mirror>/<set>/<file>); else each file's original URL (raw GitHub
at the source repository's commit, config/data_sets.json).
"""

from __future__ import annotations

import logging
import os
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import quote

from tqdm import tqdm

from bertology.config.data_sets import DataFile, DataSet, compute_sha256
from bertology.errors import UserError

log = logging.getLogger(__name__)

CHUNK = 1 << 16
TIMEOUT_S = 30


def mirror_base() -> str | None:
    """BERTOLOGY_DATA_MIRROR as a base URL (a plain folder becomes file://), or None."""
    value = os.environ.get("BERTOLOGY_DATA_MIRROR", "").strip()
    if not value:
        return None
    if "://" not in value:
        return Path(value).expanduser().resolve().as_uri()
    return value.rstrip("/")


def source_url(data_set: DataSet, item: DataFile, mirror: str | None) -> str | None:
    if mirror is not None:
        return f"{mirror}/{quote(data_set.name)}/{quote(item.path)}"
    return item.url


def unreachable(data_set: DataSet, root: Path, what: str) -> UserError:
    return UserError(f"{data_set.name}: {what}; set BERTOLOGY_DATA_MIRROR to a copy of the data "
                     f"sets (URL or folder) or copy the files into {root / data_set.name}")


def _open(url: str, offset: int):
    """The response, and whether it starts at `offset` (206) or at byte 0."""
    headers = {"Range": f"bytes={offset}-"} if offset else {}
    response = urllib.request.urlopen(urllib.request.Request(url, headers=headers),
                                      timeout=TIMEOUT_S)
    return response, offset > 0 and getattr(response, "status", None) == 206


def download(url: str, part: Path, size: int, label: str) -> None:
    """url -> part, resuming a partial part where the server answers a Range request."""
    offset = part.stat().st_size if part.exists() else 0
    if offset >= size:  # not a prefix of the file (or killed before the rename): restart
        offset = 0
    response, resumed = _open(url, offset)
    with response, part.open("ab" if resumed else "wb") as out, \
            tqdm(total=size, initial=offset if resumed else 0, unit="B", unit_scale=True,
                 desc=label, leave=False, disable=None) as bar:
        while chunk := response.read(CHUNK):
            out.write(chunk)
            bar.update(len(chunk))
        out.flush()
        os.fsync(out.fileno())


def fetch_file(data_set: DataSet, item: DataFile, root: Path, url: str) -> None:
    target = root / data_set.name / item.path
    part = target.with_name(target.name + ".part")
    target.parent.mkdir(parents=True, exist_ok=True)
    label = f"{data_set.name}/{item.path}"
    try:
        download(url, part, item.bytes, label)
    except (urllib.error.URLError, OSError) as err:  # HTTPError, timeouts, refused, missing
        reason = getattr(err, "reason", None) or getattr(err, "strerror", None) or err
        raise unreachable(data_set, root, f"cannot fetch {item.path} from {url} ({reason})"
                          ) from err
    digest = compute_sha256(part)
    if digest != item.sha256:
        part.unlink()
        raise UserError(f"{label}: sha256 {digest[:12]}... differs from the manifest's "
                        f"{item.sha256[:12]}... (from {url}); the file was not installed")
    os.replace(part, target)
    directory = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # the rename itself survives a crash
    finally:
        os.close(directory)


def fetch_set(data_set: DataSet, root: Path, mirror: str | None) -> int:
    """Fetch the set's files that are missing or differ; the count fetched."""
    todo = []
    for item in data_set.files:
        target = root / data_set.name / item.path
        if target.is_file() and target.stat().st_size == item.bytes \
                and compute_sha256(target) == item.sha256:
            continue
        url = source_url(data_set, item, mirror)
        if url is None and item.doc:
            log.info("%s/%s: written with the data, only on a mirror; skipped", data_set.name,
                     item.path)
            continue
        if url is None:
            raise unreachable(data_set, root, data_set.note or "no public copy of "
                              f"{item.path}")
        todo.append((item, url))
    for item, url in tqdm(todo, desc=data_set.name, unit="file", disable=None):
        fetch_file(data_set, item, root, url)
    return len(todo)
