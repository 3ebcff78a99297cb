"""A checkpoint dir's tokenizer files, read before any run dir is made (path_checks.py's
read_checkpoint calls it): each present one whole, readable and of its format, naming the file
that is not."""

from __future__ import annotations

import json
from pathlib import Path

from bertology.errors import UserError, require

# The tokenizer files save_pretrained writes (v5: the first two; v4 and the hub: the rest too).
# transformers reads whichever are there, and some only when another is missing, so each one
# present must read: a damaged copy is refused here, naming it, not half-used later.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "added_tokens.json", "vocab.json", "vocab.txt", "merges.txt")


def check_tokenizer_files(path: Path, key: str) -> None:
    """Every tokenizer file in a checkpoint dir is a non-empty UTF-8 file (a JSON one a JSON
    object); tokenizer.json comes with its tokenizer_config.json (lower-casing, special
    tokens), and a vocab.txt beside it lists the same vocabulary."""
    fix = f"{key} needs the tokenizer files of one save_pretrained folder: copy them again"
    # weights copied without their tokenizer: transformers would build none, or another's,
    # and every analysis would run on the wrong token ids (a POS probe at 0.31-0.44 on
    # MiniLM's weights, against 0.9 with their own tokenizer)
    require(any((path / name).exists() for name in ("tokenizer.json", "tokenizer_config.json",
                                                    "vocab.txt", "vocab.json")),
            f"{key}: {path} has no tokenizer (no tokenizer.json, tokenizer_config.json or "
            "vocab.txt); copy the tokenizer files saved with these weights beside them")
    for name in TOKENIZER_FILES:
        file = path / name
        if not (file.exists() or file.is_symlink()):
            continue
        require(file.is_file(), f"{file} is a folder, not a file; {fix}")
        text = read_text_file(file, fix)
        require(text.strip(), f"{file} is empty; {fix}")
        if name.endswith(".json"):
            require(isinstance(parse_json(file, text, fix), dict),
                    f"{file}: not a JSON object; {fix}")
    if (path / "tokenizer.json").is_file():
        require((path / "tokenizer_config.json").exists(), f"{path} has tokenizer.json but no "
                f"tokenizer_config.json (its lower-casing and special tokens); {fix}")
        check_vocab_txt(path, fix)


def check_vocab_txt(path: Path, fix: str) -> None:
    """A WordPiece tokenizer.json and a vocab.txt beside it hold one vocabulary: a vocab.txt
    cut short or replaced is refused, though tokenizer.json is what transformers reads."""
    if not (path / "vocab.txt").is_file():
        return
    spec = json.loads((path / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = spec.get("model", {}).get("vocab") if isinstance(spec.get("model"), dict) else None
    if spec.get("model", {}).get("type") != "WordPiece" or not isinstance(vocab, dict):
        return
    lines = (path / "vocab.txt").read_text(encoding="utf-8").splitlines()
    require(len(lines) == len(vocab), f"{path / 'vocab.txt'} lists {len(lines)} tokens, "
            f"{path / 'tokenizer.json'} {len(vocab)}; the two come from different saves or "
            f"one is cut short; {fix}")


def read_text_file(file: Path, fix: str) -> str:
    data = file.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[:err.start].count(b"\n") + 1
        raise UserError(f"{file}:{line}: not UTF-8 text (byte {err.start}); {fix}") from err


def parse_json(file: Path, text: str, fix: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise UserError(f"{file}:{err.lineno}: not valid JSON ({err.msg}); {fix}") from err
