"""The environment failing under a run: a full disk, an I/O error, a forbidden or read-only
dir, a folder removed while the run writes into it.

Writers wrap their writes in `writing(path)`, so every failure is an OSError that names the
file, whichever library wrote it: safetensors raises SafetensorError("... (os error 28)") and
torch.save a RuntimeError from its zip writer ("unexpected pos ..."), neither an OSError nor
naming the path. The CLI turns such an error into one line naming the error, the path, the fix
and whether a rerun resumes (`describe`), exit status 1: not the user's typo, not a bug.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# errno -> what to do about it
FIXES = {
    errno.ENOSPC: "free disk space",
    errno.EDQUOT: "free disk space (the quota is full)",
    errno.EROFS: "make the run dir writable",
    errno.EACCES: "check its permissions (the run dir must be writable)",
    errno.EPERM: "check its permissions (the run dir must be writable)",
    errno.EIO: "check the disk (an I/O error: a failing disk or a lost network mount)",
}
# a path that vanished under the run: only a fault of the environment inside the run dir
VANISHED = {errno.ENOENT: "a folder of the run dir was removed while the run wrote into it",
            errno.ENOTDIR: "a folder of the run dir was replaced while the run wrote into it",
            errno.ESTALE: "the run dir's network mount went stale"}
_OS_ERROR = re.compile(r"os error (\d+)")  # how Rust's std::io::Error prints (safetensors)
_TORCH_WRITER = ("PytorchStreamWriter", "inline_container", "unexpected pos")


def _free_bytes(path: Path) -> int:
    for folder in [path, *path.parents]:
        if folder.exists():
            stats = os.statvfs(folder)
            return stats.f_bavail * stats.f_frsize
    return 0


def errno_of(err: BaseException, path: Path) -> int | None:
    """The errno behind a write failure a library reported in its own exception type."""
    if isinstance(err, OSError):
        return err.errno
    found = _OS_ERROR.search(str(err))
    if found:
        return int(found.group(1))
    if isinstance(err, RuntimeError) and any(s in str(err) for s in _TORCH_WRITER):
        # torch's zip writer says only that a write fell short: a full disk, or an I/O error
        return errno.ENOSPC if _free_bytes(path) < (1 << 20) else errno.EIO
    return None


def as_os_error(err: Exception, path: Path) -> Exception:
    """A write failure as an OSError naming `path` (the file or dir being written) where the
    error names no file; an error with no errno behind it (a bug) as it is."""
    if isinstance(err, OSError) and err.filename is not None:
        return err
    code = errno_of(err, path)
    if code is None:
        return err
    return OSError(code, os.strerror(code), str(path))


@contextmanager
def writing(path: Path) -> Iterator[None]:
    """The writes inside: any failure as_os_error(failure, path)."""
    try:
        yield
    except Exception as err:  # noqa: BLE001 - only those with an errno behind them are mapped
        mapped = as_os_error(err, path)
        if mapped is err:
            raise
        raise mapped from err


def _inside(path: str | None, run_dir: Path) -> bool:
    if path is None:
        return not run_dir.exists()
    try:
        Path(path).resolve().relative_to(run_dir.resolve())
    except ValueError:
        return False
    return True


def _resume_hint(run_dir: Path) -> str:
    if not run_dir.exists():
        return "then rerun the same command (the run dir is gone: it starts again)"
    saved = sorted(run_dir.rglob("checkpoints/step_*/state.json"))
    if saved:
        newest = max(saved, key=lambda p: p.parent.name).parent
        return (f"then rerun the same command (hydra.run.dir={run_dir}) to resume from "
                f"{newest.relative_to(run_dir)}")
    return "then rerun the same command (no checkpoint was written: it starts again)"


def describe_write_error(err: OSError, run_dir: Path) -> str | None:
    """The one line for an OSError the environment caused, or None when it is not one (a
    missing input file is a user error found earlier; anything else is a bug to show)."""
    code = err.errno
    if code in VANISHED and _inside(err.filename, run_dir):
        fix = VANISHED[code] + "; restore it or pick another hydra.run.dir"
    elif code in FIXES:
        fix = FIXES[code]
    else:
        return None
    where = f": {err.filename}" if err.filename else ""
    return f"{err.strerror or os.strerror(code)}{where}; {fix}, {_resume_hint(run_dir)}"
