"""The damage walk's cases (issue 41): every file a pipeline reads from outside, and each kind
of damage a file meets in the wild. tests/reliability/test_damage_walk.py runs them.

A `Target` is one file (or folder) of a small intact world made under a temporary dir: a
checkpoint dir (config.json, the weights, the tokenizer files), a data file of each format the
readers accept, a cache entry, a finished run dir that `bertology report` and `bertology runs`
read. Its `damages` are the kinds that make sense for it (a binary file has no line to make
too long; a folder cannot be cut short), and each (target, damage) case expects one outcome:

    refuse  exit 2, one line on stderr naming the file, no traceback, nothing half-written
    finish  exit 0, and the log (and, for a run, metrics.json) says what was skipped,
            truncated or recomputed: `note` is a fragment the log must hold
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from damage_worlds import (
    World,
    cloze_world,
    conll03_text,
    conllu_block,
    conllu_text,
    corpus_text,
    corpus_world,
    document,
    finished_run,
    listed_run,
    long_sentence,
    probe_world,
    random_probe_world,
    squad_text,
    sst2_text,
    task_world,
    warm,
    wiki_shard,
)

DAMAGES = ("missing", "empty", "truncated", "not the format", "not UTF-8",
           "label out of set", "long line", "folder for a file", "file for a folder")
# What a download that went wrong leaves in place of the file: the server's error page.
ERROR_PAGE = b"<html>\n<head><title>404 Not Found</title></head>\n<body>Not Found</body>\n</html>\n"


@dataclass(frozen=True)
class Target:
    name: str                                   # "checkpoint: config.json", for the table
    build: Callable[[Path], World]              # makes the intact world under tmp
    path: str | Callable[[Path], str]           # the damaged file, relative to tmp
    damages: tuple[str, ...]
    finish: dict[str, str] = field(default_factory=dict)  # damage -> the log's note
    format: str = "text"                        # what label/long damages rewrite


@dataclass(frozen=True)
class Case:
    target: Target
    damage: str

    @property
    def id(self) -> str:
        return f"{self.target.name}:{self.damage}".replace(" ", "-")

    @property
    def outcome(self) -> str:
        return "finish" if self.damage in self.target.finish else "refuse"

    def file(self, tmp: Path) -> Path:
        path = self.target.path
        return tmp / (path(tmp) if callable(path) else path)


# ---------------------------------------------------------------- the damages


def damage(path: Path, kind: str, fmt: str) -> None:
    """Damage the file (or folder) at `path` in place, the way `kind` says."""
    if kind == "missing":
        remove(path)
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "truncated":  # a copy or download stopped part-way: mid-line, mid-token
        data = path.read_bytes()
        path.write_bytes(data[:cut_point(data)])
    elif kind == "not the format":
        path.write_bytes(ERROR_PAGE)
    elif kind == "not UTF-8":  # one Latin-1 byte where an ASCII letter was, past the header
        data = bytearray(path.read_bytes())
        start = data.find(b"\n") + 1 if fmt not in ("json", "squad") else 2
        at = next(i for i in range(start, len(data)) if chr(data[i]).isalpha())
        data[at] = 0xE9
        path.write_bytes(bytes(data))
    elif kind in ("label out of set", "long line"):
        path.write_bytes(REWRITES[fmt, kind](path.read_bytes().decode()).encode())
    elif kind == "folder for a file":
        remove(path)
        path.mkdir()
        (path / "part-0").write_text("a file inside\n")
    elif kind == "file for a folder":
        remove(path)
        path.write_text("a file where a folder belongs\n")
    else:
        raise ValueError(kind)


def cut_point(data: bytes) -> int:
    """Mid-record, about two thirds in: halfway through the first record line (not blank,
    not a comment) that reaches that far. A cut between records leaves a shorter file that is
    whole, which no reader can tell from one."""
    target, start = len(data) * 2 // 3, 0
    for line in data.split(b"\n"):
        if start + len(line) >= target and line.strip() and not line.startswith(b"#"):
            cut = start + max(1, len(line) // 2)
            while cut > start + 1 and data[cut - 1: cut].isspace():
                cut -= 1
            return cut
        start += len(line) + 1
    return max(1, target)


def remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink()


def add_line(text: str, line: str) -> str:
    """`line` as the file's second record (after a header or the first record)."""
    first, rest = text.split("\n", 1)
    return f"{first}\n{line}\n{rest}"


def squad_long(text: str) -> str:
    data = json.loads(text)
    context = " ".join(long_sentence()) + " The answer is here."
    data["data"][0]["paragraphs"][0] = {"context": context, "qas": [{
        "id": "long", "question": "Where is the answer?",
        "answers": [{"text": "here", "answer_start": context.index("here")}]}]}
    return json.dumps(data)


def squad_label(text: str) -> str:
    data = json.loads(text)
    data["data"][0]["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"] = 10_000
    return json.dumps(data)


REWRITES: dict[tuple[str, str], Callable[[str], str]] = {
    ("tsv", "label out of set"): lambda t: add_line(t, "it is odd\t7"),
    ("tsv", "long line"): lambda t: add_line(t, " ".join(long_sentence()) + "\t1"),
    ("conll03", "label out of set"): lambda t: t.replace("\n\n", "\nJohn NNP B-NP X-ACT\n\n", 1),
    ("conll03", "long line"):
        lambda t: t + "\n" + "".join(f"{w} NN B-NP O\n" for w in long_sentence()),
    ("conllu", "label out of set"): lambda t: t.replace("\tNOUN\t", "\tNOUNISH\t", 1),
    ("conllu", "long line"): lambda t: t + "\n" + conllu_block(long_sentence()),
    ("squad", "label out of set"): squad_label,
    ("squad", "long line"): squad_long,
    ("text", "long line"): lambda t: " ".join(long_sentence()) + "\n" + t,
    ("jsonl", "long line"): lambda t: json.dumps({"text": " ".join(long_sentence())}) + "\n" + t,
    ("blimp", "long line"): lambda t: json.dumps({
        "sentence_good": " ".join(long_sentence()), "sentence_bad": " ".join(long_sentence()[::-1]),
        "linguistics_term": "long"}) + "\n" + t,
}


# ---------------------------------------------------------------- the targets

FILE = ("missing", "empty", "truncated", "not the format", "not UTF-8", "folder for a file")
BINARY = ("missing", "empty", "truncated", "not the format", "folder for a file")
DATA = (*FILE, "label out of set", "long line")
FOLDER = ("missing", "file for a folder")
# a config.yaml that reads but holds no mapping is met only where the command reads the whole
# config (a study's runs); a single run's row and report read it otherwise: not cases here
CONFIG_YAML = ("missing", "not UTF-8", "folder for a file")
DAMAGED_ROW = "damaged ("  # `bertology runs` lists a damaged run with what is wrong
CKPT = "checkpoint"
# What a long line leaves in the log (and metrics.json): cut to the positions (fine-tuning, as
# run_glue / run_ner, and BERT's pretraining pairs: truncate_seq_pair, counted as
# data/truncated_long/sentences), left out whole (probes need every word); packed formats split
# it into sequence-sized pieces (data/split_long/sentences)
TRUNCATED = {"long line": "truncated:"}
LEFT_OUT = {"long line": "left out:"}
RECOMPUTED = "recomputed"  # the log line of a damaged cache entry (never served)


def entry_of(tmp: Path, kind: str, name: str) -> str:
    """The path of the one cache entry of this kind (tokenizers, features), relative to tmp."""
    entries = sorted((tmp / "cache" / kind).iterdir())
    return str((entries[0] / name).relative_to(tmp))


TARGETS = [
    Target("checkpoint: the folder", probe_world, CKPT, FOLDER),
    Target("checkpoint: config.json", probe_world, f"{CKPT}/config.json", FILE, format="json"),
    Target("checkpoint: model.safetensors", probe_world, f"{CKPT}/model.safetensors", BINARY),
    Target("checkpoint: tokenizer.json", probe_world, f"{CKPT}/tokenizer.json", FILE,
           {"missing": "no tokenizer.json: the tokenizer is built from"}, format="json"),
    # v5's save_pretrained writes neither vocab.txt nor special_tokens_map.json: their absence
    # is no damage, so only a damaged copy is a case
    Target("checkpoint: vocab.txt", probe_world, f"{CKPT}/vocab.txt", FILE[1:]),
    Target("checkpoint: tokenizer_config.json", probe_world, f"{CKPT}/tokenizer_config.json",
           FILE, format="json"),
    Target("checkpoint: special_tokens_map.json", probe_world,
           f"{CKPT}/special_tokens_map.json", FILE[1:], format="json"),
    Target("GLUE TSV (finetune sst2)", task_world("finetune", "sst2", "glue_sst2", "train.tsv",
           "dev.tsv", sst2_text(24)), "data/glue_sst2/train.tsv", DATA, TRUNCATED, format="tsv"),
    Target("CoNLL-2003 (finetune conll03)", task_world(
        "finetune", "conll03", "conll2003_ner", "train.txt", "dev.txt", conll03_text(24)),
        "data/conll2003_ner/train.txt", DATA, TRUNCATED, format="conll03"),
    Target("CoNLL-2003 (probe conll03)", task_world(
        "probe", "conll03", "conll2003_ner", "train.txt", "dev.txt", conll03_text(24)),
        "data/conll2003_ner/train.txt", DATA, LEFT_OUT, format="conll03"),
    Target("CoNLL-U (finetune ud_pos)", task_world(
        "finetune", "ud_pos", "ud_english_ewt", "en_ewt-ud-train.conllu", "en_ewt-ud-dev.conllu",
        conllu_text(24)), "data/ud_english_ewt/en_ewt-ud-train.conllu", DATA, TRUNCATED,
        format="conllu"),
    Target("CoNLL-U (probe ud_pos)", task_world(
        "probe", "ud_pos", "ud_english_ewt", "en_ewt-ud-train.conllu", "en_ewt-ud-dev.conllu",
        conllu_text(24)), "data/ud_english_ewt/en_ewt-ud-train.conllu", DATA, LEFT_OUT,
        format="conllu"),
    Target("task folder (probe ud_pos)", task_world(
        "probe", "ud_pos", "ud_english_ewt", "en_ewt-ud-train.conllu", "en_ewt-ud-dev.conllu",
        conllu_text(24)), "data/ud_english_ewt", FOLDER),
    Target("SQuAD JSON (finetune squad)", task_world(
        "finetune", "squad", "squad_v1.1", "unused.json", "dev-v1.1.json", squad_text(6),
        ("task.eval_articles=2", "task.max_seq_length=64", "task.max_query_length=16",
         "task.doc_stride=16")), "data/squad_v1.1/dev-v1.1.json", DATA,
        {"long line": "windowed:"}, format="squad"),
    Target("plain text corpus (pretrain data=files)", corpus_world(
        ["data=files", "data.files=[corpus.txt]"], {"corpus.txt": corpus_text(30)}),
        "data/corpus.txt", ("missing", "empty", "not UTF-8", "long line", "folder for a file"),
        TRUNCATED),
    Target("JSON lines corpus (pretrain data=hub, json)", corpus_world(
        ["data=hub", "data.path=json", "data.data_files=[corpus.jsonl]"],
        {"corpus.jsonl": "".join(json.dumps({"text": document(i)}) + "\n" for i in range(30))}),
        "data/corpus.jsonl", (*FILE, "long line"), TRUNCATED, format="jsonl"),
    Target("WikiExtractor shard (pretrain data=wikipedia)", corpus_world(
        ["data=wikipedia", "data.path=wiki"], {"wiki/AA/wiki_00": wiki_shard(30)}),
        "data/wiki/AA/wiki_00", ("empty", "truncated", "not the format", "not UTF-8",
                                 "folder for a file")),
    Target("WikiExtractor folder (pretrain data=wikipedia)", corpus_world(
        ["data=wikipedia", "data.path=wiki"], {"wiki/AA/wiki_00": wiki_shard(30)}),
        "data/wiki", FOLDER),
    Target("cloze suite: BLiMP JSON lines (probe cloze)", cloze_world,
           "data/blimp/agreement.jsonl", (*FILE, "long line"),
           {"long line": "too long for the model"}, format="blimp"),
    Target("cache: a trained tokenizer's tokenizer.json (probe init=random)",
           warm(random_probe_world), lambda tmp: entry_of(tmp, "tokenizers", "tokenizer.json"),
           FILE[1:], {d: RECOMPUTED for d in FILE[1:]}, format="json"),
    Target("cache: a tokenizer entry's folder", warm(random_probe_world),
           lambda tmp: entry_of(tmp, "tokenizers", "."), ("file for a folder",),
           {"file for a folder": RECOMPUTED}),
    Target("cache: features meta.json (probe)", warm(probe_world),
           lambda tmp: entry_of(tmp, "features", "meta.json"), FILE,
           {d: RECOMPUTED for d in FILE}, format="json"),
    Target("cache: features hidden.npy (probe)", warm(probe_world),
           lambda tmp: entry_of(tmp, "features", "hidden.npy"), BINARY,
           {d: RECOMPUTED for d in BINARY}),
    Target("cache: features offsets.npy (probe)", warm(probe_world),
           lambda tmp: entry_of(tmp, "features", "offsets.npy"), BINARY,
           {d: RECOMPUTED for d in BINARY}),
    Target("cache: a features entry's folder", warm(probe_world),
           lambda tmp: entry_of(tmp, "features", "."), ("file for a folder",),
           {"file for a folder": RECOMPUTED}),
    # status.json missing: a run from before status files, counted finished by design (RunDir);
    # .hydra/config.yaml cut at any line is still a YAML mapping, a shorter config: not cases
    Target("run dir: metrics.json (report)", finished_run, "run/metrics.json", FILE,
           format="json"),
    Target("run dir: status.json (report)", finished_run, "run/status.json", FILE[1:],
           format="json"),
    Target("run dir: .hydra/config.yaml (report)", finished_run, "run/.hydra/config.yaml",
           CONFIG_YAML),
    Target("run dir: metrics.json (runs)", listed_run, "run/metrics.json", FILE,
           {"missing": DAMAGED_ROW}, format="json"),
    Target("run dir: status.json (runs)", listed_run, "run/status.json", FILE[1:],
           {d: DAMAGED_ROW for d in FILE[1:]}, format="json"),
    Target("run dir: .hydra/config.yaml (runs)", listed_run, "run/.hydra/config.yaml",
           CONFIG_YAML),
]


def cases() -> list[Case]:
    """Every (target, damage) pair, in a fixed order."""
    return [Case(target, kind) for target in TARGETS for kind in target.damages]
