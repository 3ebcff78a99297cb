"""Which commit of a hub checkpoint a run reads: `model.revision` (a branch, tag or commit)
resolved to a snapshot folder of the local Hugging Face cache, and the commit SHA recorded.

A run never reads a revision by name alone: the name is resolved once, when the config is
checked, to `<cache>/models--<org>--<name>/snapshots/<sha>` (downloaded first when the hub can
be reached), and every later step reads that folder, so the weights, tokenizer and the SHA in
env.json are one commit even if the branch moves while the run goes. Offline, a revision that
is not in the cache is refused with the revisions that are: never guessed.

The cache layout (huggingface_hub's): refs/<branch or tag> holds the commit SHA it points to;
snapshots/<sha>/ holds the files of that commit. Read with the standard library, no torch.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from bertology.errors import UserError, require

SHA = re.compile(r"[0-9a-f]{40}")
# What a reading pipeline needs of a checkpoint: config, safetensors weights, tokenizer files
# (WordPiece's vocab.txt, sentencepiece's *.model, BPE's merges.txt and vocab.json)
CHECKPOINT_FILES = ("*.json", "*.safetensors", "*.txt", "*.model")


def default_cache_dir() -> Path:
    """Where trained tokenizers, converted checkpoints and other per-machine results go unless
    paths.cache_dir (or BERTOLOGY_CACHE_DIR, its default) says otherwise."""
    return Path.home() / ".cache" / "bertology"


def cache_root() -> Path:
    """bertology's own cache: BERTOLOGY_CACHE_DIR (what paths.cache_dir defaults to), else
    default_cache_dir(), read at call time."""
    return Path(os.environ.get("BERTOLOGY_CACHE_DIR") or default_cache_dir()).expanduser()


def hub_cache() -> Path:
    """The Hugging Face hub cache, read from the environment at call time (HF_HUB_CACHE, else
    HF_HOME/hub, else huggingface_hub's default), so a run and its tests agree on it."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def offline_flag(*names: str) -> str | None:
    """The first of these environment variables that is set true (HF_HUB_OFFLINE=1), if any."""
    return next((name for name in names
                 if os.environ.get(name, "").lower() in ("1", "true", "yes", "on")), None)


def models_offline() -> bool:
    """Whether the hub may not be asked for a model (HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE)."""
    return offline_flag("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE") is not None


def repo_folder(repo_id: str) -> Path:
    """<cache>/models--org--name for a model repo id."""
    return hub_cache() / f"models--{repo_id.replace('/', '--')}"


def cached_refs(repo_id: str) -> dict[str, str]:
    """{branch or tag: commit SHA} of a repo in the local cache (refs/pr/1 and the like keep
    their slashes); {} where the repo is not cached."""
    refs = repo_folder(repo_id) / "refs"
    if not refs.is_dir():
        return {}
    found = {}
    for path in sorted(p for p in refs.rglob("*") if p.is_file()):
        sha = path.read_text(encoding="utf-8").strip()
        if SHA.fullmatch(sha):
            found[path.relative_to(refs).as_posix()] = sha
    return found


def cached_snapshot(repo_id: str, revision: str) -> Path | None:
    """The snapshot folder of a revision (a ref name or a commit SHA) in the local cache, where
    its config.json is there; None otherwise."""
    sha = revision if SHA.fullmatch(revision) else cached_refs(repo_id).get(revision)
    if sha is None:
        return None
    folder = repo_folder(repo_id) / "snapshots" / sha
    return folder if (folder / "config.json").is_file() else None


def hub_label(repo_id: str, revision: str | None) -> str:
    """How a user names a hub checkpoint at a revision: org/name or org/name@revision."""
    return f"{repo_id}@{revision}" if revision else repo_id


def snapshot_sha(path: str | Path) -> str | None:
    """The commit SHA of a path inside the hub cache's snapshots/<sha>/; None elsewhere."""
    parts = Path(path).parts
    if len(parts) >= 2 and parts[-2] == "snapshots" and SHA.fullmatch(parts[-1]):
        return parts[-1]
    return None


def hub_snapshot(repo_id: str, revision: str | None, key: str) -> Path | None:
    """The snapshot a hub id reads: at a revision, resolve_revision's (downloaded where the
    hub can be reached); without one, main's where the cache holds it, else None (transformers
    reads or downloads the id itself)."""
    if revision is None:
        return cached_snapshot(repo_id, "main")
    return resolve_revision(repo_id, revision, key, models_offline())


def resolve_revision(repo_id: str, revision: str, key: str, offline: bool,
                     patterns: tuple[str, ...] = CHECKPOINT_FILES) -> Path:
    """The local snapshot folder of repo_id at revision: from the cache, else (online) the
    files matching patterns downloaded into it. Offline and not cached: one line that lists
    the revisions the cache holds."""
    folder = cached_snapshot(repo_id, revision)
    if folder is not None:
        return folder
    if offline:
        refs = cached_refs(repo_id)
        held = ", ".join(refs) if refs else "none"
        raise UserError(f"{key}={repo_id!r} at model.revision={revision!r} is not in the local "
                        f"Hugging Face cache ({repo_folder(repo_id)}; cached revisions: "
                        f"{held}) and the hub is offline; pick a cached revision, or connect "
                        "once to download it")
    return download_revision(repo_id, revision, key, patterns)


def download_revision(repo_id: str, revision: str, key: str, patterns: tuple[str, ...]) -> Path:
    """The files of repo_id at revision that match patterns (a reading pipeline's: not every
    file of the repo), downloaded into the cache."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    try:
        return Path(snapshot_download(repo_id, revision=revision, cache_dir=hub_cache(),
                                      allow_patterns=list(patterns)))
    except RevisionNotFoundError:
        raise UserError(f"{key}={repo_id!r} has no revision {revision!r}; give a branch, tag or "
                        "commit of that repo (its 'Files and versions' page lists them)") from None
    except RepositoryNotFoundError:
        raise UserError(f"{key}={repo_id!r} is not a hub repo (or is private); check the id") \
            from None
    except (HfHubHTTPError, OSError) as err:
        raise UserError(f"{key}={repo_id!r} at revision {revision!r} could not be downloaded "
                        f"({str(err).splitlines()[0]}); retry, or download it once where the "
                        "hub can be reached") from None


# Weights files a snapshot may hold: safetensors (what bertology loads) or a pickle, which is
# converted once into bertology's cache (`bertology convert <org/name>`) and read from there
SAFE_WEIGHTS = ("model.safetensors", "model.safetensors.index.json")
PICKLED_WEIGHTS = "pytorch_model.bin"


def converted_snapshot(repo_id: str, sha: str) -> Path:
    """Where `bertology convert <repo_id>` writes the safetensors copy of a commit whose
    snapshot ships only pytorch_model.bin: <BERTOLOGY_CACHE_DIR>/converted/models--org--name/
    snapshots/<sha>, a snapshot folder of its own (same SHA, same config and tokenizer)."""
    return cache_root() / "converted" / repo_folder(repo_id).name / "snapshots" / sha


def ships_safetensors(folder: Path) -> bool:
    return any((folder / name).is_file() for name in SAFE_WEIGHTS)


def readable_folder(repo_id: str, snapshot: Path) -> Path | None:
    """The folder a run reads a hub snapshot from: the snapshot where it ships safetensors
    (or no weights at all: the checks that read it say so), its converted copy where it ships
    only pytorch_model.bin and one was made; None where that copy is still to be made."""
    if ships_safetensors(snapshot) or not (snapshot / PICKLED_WEIGHTS).is_file():
        return snapshot
    converted = converted_snapshot(repo_id, snapshot.name)
    return converted if ships_safetensors(converted) else None


def weights_folder(repo_id: str, snapshot: Path, key: str, label: str) -> Path:
    """readable_folder, or one line naming the command that makes the converted copy (label:
    how the user names the checkpoint)."""
    folder = readable_folder(repo_id, snapshot)
    require(folder is not None, f"{key}={label!r} ships only {PICKLED_WEIGHTS} (a pickle, "
            f"never opened by a run); convert it once: bertology convert {label}")
    return folder


def checkpoint_record(name_or_path: str | None, revision: str | None) -> dict | None:
    """env.json's record of the checkpoint a run reads: the name and revision it was given,
    and the commit SHA that name resolves to in the cache (a local folder outside the cache:
    none). None for a random-initialised model."""
    if not name_or_path:
        return None
    record: dict[str, object] = {"name_or_path": name_or_path, "revision": revision,
                                 "sha": snapshot_sha(name_or_path)}
    if record["sha"] is None and "/" in name_or_path and not Path(name_or_path).exists():
        folder = cached_snapshot(name_or_path, revision or "main")
        record["sha"] = folder.name if folder is not None else None
    return record


def check_revision_target(name_or_path: str | None, revision: str) -> None:
    """model.revision names a commit of a hub repo: a random-init model or a local folder
    outside the cache has none."""
    require(name_or_path is not None, f"model.revision={revision!r} needs a hub checkpoint; "
            "set model.name_or_path=<org/name> (or drop model.revision)")
    require(snapshot_sha(name_or_path) is not None or not Path(name_or_path).expanduser().exists(),
            f"model.revision={revision!r} is for a hub id, and model.name_or_path="
            f"{name_or_path!r} is a local folder (it has no revisions); drop model.revision, or "
            "give the hub id")
