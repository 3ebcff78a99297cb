"""Unlabelled corpora as streams of documents, a document being a list of sentence strings.

Every corpus streams (a generator over its files), so memory does not grow with its size; only
the embedded synthetic corpus is small enough to be held whole (see formats.build_examples).
"""

from __future__ import annotations

import hashlib
import html
import json
import logging
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bertology.config.data_checks import data_fix, expand_files, under_root
from bertology.config.groups import DataConfig
from bertology.data import synthetic
from bertology.errors import UserError, require

Document = list[str]

# A sentence ends at . ! or ? followed by space and an upper-case letter, digit or quote.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'A-Z0-9])")


@dataclass(frozen=True)
class Corpus:
    name: str
    fingerprint: str  # changes whenever the text would; keys the tokenizer cache
    iter_documents: Callable[[], Iterator[Document]]


def text_corpus(name: str, texts: list[str]) -> Corpus:
    """A corpus over in-memory texts (a task's training text), to train a tokenizer for a
    random-initialised model; the fingerprint keys the tokenizer cache."""
    fingerprint = hashlib.sha256("\n".join([name, *texts]).encode()).hexdigest()[:16]
    return Corpus(name, fingerprint,
                  lambda: (texts[i: i + 100] for i in range(0, len(texts), 100)))


def split_sentences(text: str) -> list[str]:
    """A rule-based splitter, enough for NSP/segment pairs on encyclopaedic prose."""
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]


def resolve_path(path: str | Path, data_dir: Path, key: str) -> Path:
    """A data path is absolute or relative to the data root; it must exist."""
    resolved = under_root(str(path), data_dir)
    require(resolved.exists(), f"{key}: {resolved} does not exist; "
            f"{data_fix(resolved, data_dir)}")
    return resolved


def _fingerprint_files(paths: list[Path], extra: str = "") -> str:
    digest = hashlib.sha256(extra.encode())
    for path in paths:
        stat = path.stat()
        digest.update(f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


def read_text(path: Path, encoding: str = "utf-8") -> str:
    """A text file; anything but UTF-8 is a UserError naming the byte."""
    data = path.read_bytes()
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as err:
        line = data[:err.start].count(b"\n") + 1
        raise UserError(f"{path}:{line}: not UTF-8 text (byte {err.start}); convert it to "
                        "UTF-8") from err


def parse_json_lines(path: Path, lines: list[str], fix: str, keys: tuple[str, ...] = ()
                     ) -> list[tuple[int, dict]]:
    """(line number, object) of every non-blank line; the first line that is not a JSON
    object (with `keys`) is a UserError naming it, ending in `fix`."""
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise UserError(f"{path}:{number}: not JSON ({err.msg}, column {err.colno}); "
                            f"{fix}") from err
        require(isinstance(record, dict), f"{path}:{number}: a JSON {type(record).__name__}, "
                f"not an object; {fix}")
        missing = [key for key in keys if key not in record]
        require(not missing, f"{path}:{number}: no field {missing[:1]}; {fix}")
        records.append((number, record))
    return records


# ---------------------------------------------------------------- synthetic


def build_synthetic(cfg: DataConfig, data_dir: Path) -> Corpus:
    low, high = cfg.sentences_per_doc

    def iter_documents() -> Iterator[Document]:
        for doc in synthetic.iter_documents(cfg.num_sentences, cfg.seed, (low, high)):
            yield [sentence.text for sentence in doc.sentences]

    key = f"synthetic:v{synthetic.GRAMMAR_VERSION}:{cfg.num_sentences}:{cfg.seed}:{low}:{high}"
    return Corpus("synthetic", hashlib.sha256(key.encode()).hexdigest()[:16], iter_documents)


# ---------------------------------------------------------------- wikipedia (WikiExtractor)

_DOC_OPEN = re.compile(r'^<doc id="[^"]*"[^>]*>$')


def list_wikipedia_shards(root: Path, fraction: float) -> list[Path]:
    folders = sorted(p for p in root.rglob("wiki_*") if p.is_dir())
    require(not folders, f"data.path: {folders[0] if folders else ''} is a folder, not a "
            "WikiExtractor shard (a file of <doc> blocks); remove it or re-extract")
    shards = sorted(p for p in root.rglob("wiki_*") if p.is_file())
    require(shards, f"data.path: no WikiExtractor shards (wiki_*) under {root}; "
            "point data.path at the folder of <doc> shards")
    return shards[: max(1, round(len(shards) * fraction))]


def decode_line(raw: bytes, path: Path, number: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise UserError(f"{path}:{number}: not UTF-8 text (byte {err.start} of the line); "
                        "convert it to UTF-8 or re-extract the shard") from err


def iter_wikiextractor(path: Path) -> Iterator[Document]:
    """Documents of one shard: `<doc ...>`, the title line, paragraphs, `</doc>`. A shard
    with no `<doc>` (empty, or another format) or whose last `<doc>` is not closed (a copy cut
    short) is refused, naming it: its text would otherwise be left out without a word."""
    lines: list[str] | None = None
    opened, number = 0, 0
    with path.open("rb") as handle:  # decoded line by line, so an error names its line
        for number, raw in enumerate(handle, start=1):
            line = decode_line(raw, path, number).strip()
            if _DOC_OPEN.match(line):
                require(lines is None, f"{path}:{number}: <doc> inside the <doc> of line "
                        f"{opened}; the shard is malformed, re-extract it")
                lines, opened = [], number
            elif line == "</doc>":
                require(lines is not None, f"{path}:{number}: </doc> without <doc>; "
                        "the shard is malformed, re-extract it")
                sentences = [s for para in lines[1:] for s in split_sentences(html.unescape(para))]
                if sentences:
                    yield sentences
                lines = None
            elif lines is not None and line:
                lines.append(line)
            elif line:  # WikiExtractor writes nothing between documents
                raise UserError(f"{path}:{number}: text outside <doc> ... </doc> "
                                f"({line[:40]!r}); the shard is malformed or cut short: "
                                "re-extract it")
    require(opened, f"{path}: no <doc ...> line in {number} lines; not a WikiExtractor shard "
            "(an empty file, or another format): re-extract it or remove it")
    require(lines is None, f"{path}:{opened}: <doc> is not closed by </doc> before the end "
            "of the file; the shard is cut short: re-extract it")


def build_wikipedia(cfg: DataConfig, data_dir: Path) -> Corpus:
    root = resolve_path(cfg.path or "wikipedia_en_wikiextractor", data_dir, "data.path")
    shards = list_wikipedia_shards(root, cfg.fraction)

    def iter_documents() -> Iterator[Document]:
        for shard in shards:
            try:
                yield from iter_wikiextractor(shard)
            except UnicodeDecodeError as err:
                raise UserError(f"{shard}: not UTF-8 text; re-extract the shard") from err

    return Corpus("wikipedia", _fingerprint_files(shards, "wikipedia"), iter_documents)


# ---------------------------------------------------------------- plain files


def iter_plain_text(path: Path) -> Iterator[Document]:
    """BERT's pretraining text format: one sentence per line, blank line between documents."""
    document: Document = []
    for line in read_text(path).splitlines():
        if line.strip():
            document.append(line.strip())
        elif document:
            yield document
            document = []
    if document:
        yield document


def build_files(cfg: DataConfig, data_dir: Path) -> Corpus:
    require(bool(cfg.files), "data.files is empty; give files=[a.txt,b.txt] (globs allowed)")
    paths = [resolve_path(path, data_dir, "data.files")
             for path in expand_files(cfg.files, data_dir)]
    for path in paths:
        require(path.stat().st_size > 0, f"data.files: {path} is empty; remove it from the list")

    def iter_documents() -> Iterator[Document]:
        for path in paths:
            yield from iter_plain_text(path)

    return Corpus("files", _fingerprint_files(paths, "files"), iter_documents)


# ---------------------------------------------------------------- datasets.load_dataset


def build_hub(cfg: DataConfig, data_dir: Path) -> Corpus:
    import datasets  # imported here: slow to import and only this corpus needs it

    data_files = cfg.data_files
    if data_files is not None:
        files = [data_files] if isinstance(data_files, str) else list(data_files)
        data_files = [str(local_data_file(f, data_dir)) for f in files]

    source = f"data.data_files={data_files}" if data_files else f"data.path={cfg.path!r}"

    def iter_documents() -> Iterator[Document]:
        try:
            with quiet_logger("datasets"):  # its builders log the error this one line says
                rows = datasets.load_dataset(cfg.path, cfg.config_name, split=cfg.split,
                                             data_files=data_files, streaming=True)
                for row in rows:
                    require(cfg.text_column in row, f"data.text_column={cfg.text_column!r} is "
                            f"not a column of {cfg.path}; columns: {', '.join(row)}")
                    sentences = split_sentences(str(row[cfg.text_column]))
                    if sentences:
                        yield sentences
        except (FileNotFoundError, ValueError, ConnectionError) as err:
            raise UserError(f"{source}: cannot load ({str(err).splitlines()[0]}); check the "
                            "name and the files' format, or use local data_files offline"
                            ) from err

    key = f"hub:{cfg.path}:{cfg.config_name}:{cfg.split}:{cfg.text_column}:{data_files}"
    return Corpus("hub", hashlib.sha256(key.encode()).hexdigest()[:16], iter_documents)


@contextmanager
def quiet_logger(name: str) -> Iterator[None]:
    """A library's logger held to CRITICAL: its ERROR lines would be a second line on stderr
    beside the UserError that says the same."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def local_data_file(name: str, data_dir: Path) -> Path:
    """One of data.data_files: a non-empty file (datasets' own errors for a folder or an empty
    file are a vague "Unable to find" and a StopIteration deep in a generator)."""
    path = resolve_path(name, data_dir, "data.data_files")
    require(path.is_file(), f"data.data_files: {path} is a folder, not a file; list files")
    require(path.stat().st_size > 0, f"data.data_files: {path} is empty; remove it from the "
            "list")
    return path


CORPORA: dict[str, Callable[[DataConfig, Path], Corpus]] = {
    "synthetic": build_synthetic,
    "wikipedia": build_wikipedia,
    "files": build_files,
    "hub": build_hub,
}


def build_corpus(cfg: DataConfig, data_dir: Path) -> Corpus:
    if cfg.name not in CORPORA:
        raise UserError(f"data={cfg.name!r} is not a corpus; use one of: {', '.join(CORPORA)}")
    return CORPORA[cfg.name](cfg, data_dir)
