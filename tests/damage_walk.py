"""The damage walk's cases (issue 41): every file a pipeline reads from outside, and each kind
of damage a file meets in the wild. tests/test_damage_walk.py runs them.

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
from functools import cache
from pathlib import Path

DAMAGES = ("missing", "empty", "truncated", "not the format", "not UTF-8",
           "label out of set", "long line", "folder for a file", "file for a folder")
# What a download that went wrong leaves in place of the file: the server's error page.
ERROR_PAGE = b"<html>\n<head><title>404 Not Found</title></head>\n<body>Not Found</body>\n</html>\n"
LONG_WORDS = 2000  # a sentence far past any model's positions (BERT's are 512)


@dataclass(frozen=True)
class World:
    """An intact set-up: the pipeline, its arguments, and the run dir it writes (if any)."""
    pipeline: str
    args: list[str]
    run_dir: Path | None


@dataclass(frozen=True)
class Target:
    name: str                                   # "checkpoint: config.json", for the table
    build: Callable[[Path], World]              # makes the intact world under tmp
    path: str | Callable[[Path], str]           # the damaged file, relative to tmp
    damages: tuple[str, ...]
    finish: dict[str, str] = field(default_factory=dict)  # damage -> the log's note
    format: str = "text"                        # what label/long damages rewrite
    metric: dict[str, str] = field(default_factory=dict)  # damage -> metrics.json key it sets


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
        cut = max(1, len(data) * 2 // 3)
        while cut > 1 and data[cut - 1: cut] in (b"\n", b" ", b"\t"):  # end mid-record
            cut -= 1
        path.write_bytes(data[:cut])
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


def remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink()


def long_sentence() -> list[str]:
    return [f"w{i % 50}" if i % 7 else "dog" for i in range(LONG_WORDS)]


def add_line(text: str, line: str) -> str:
    """`line` as the file's second record (after a header or the first record)."""
    first, rest = text.split("\n", 1)
    return f"{first}\n{line}\n{rest}"


def conllu_block(words: list[str], tag: str = "NOUN") -> str:
    rows = [f"{i}\t{w}\t{w}\t{tag if i > 1 else 'DET'}\t_\t_\t{0 if i == 1 else 1}\t"
            f"{'root' if i == 1 else 'dep'}\t_\t_" for i, w in enumerate(words, 1)]
    return "# sent_id = damaged\n" + "\n".join(rows) + "\n"


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


# ---------------------------------------------------------------- the intact worlds

WORDS = ["the", "a", "dog", "dogs", "cat", "cats", "runs", "run", "sleeps", "sleep", "is", "are",
         "not", "big", "small", "red", "blue", "and", "it", "fine", "bad", "good", "odd", "John",
         "Mary", "sees", ".", ","]


@cache
def tiny_checkpoint() -> Path:
    """A 1-layer BERT with its MLM head and 64 positions, saved as a researcher brings one
    from the hub: config.json, model.safetensors, tokenizer.json, vocab.txt,
    tokenizer_config.json, special_tokens_map.json. Built once; each case copies it."""
    import tempfile

    from transformers import BertConfig, BertForMaskedLM, BertTokenizer

    path = Path(tempfile.mkdtemp(prefix="bertology-damage-")) / "checkpoint"
    path.mkdir()
    letters = "abcdefghijklmnopqrstuvwxyz0123456789"
    vocab = list(dict.fromkeys(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
                                *(w.lower() for w in WORDS), *letters,
                                *(f"##{c}" for c in letters)]))
    tokenizer = BertTokenizer(vocab={token: i for i, token in enumerate(vocab)})
    config = BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=32, max_position_embeddings=64)
    BertForMaskedLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    specials = {name: getattr(tokenizer, name) for name in
                ("unk_token", "sep_token", "pad_token", "cls_token", "mask_token")}
    (path / "special_tokens_map.json").write_text(json.dumps(specials))
    return path


def copy_checkpoint(tmp: Path) -> Path:
    return Path(shutil.copytree(tiny_checkpoint(), tmp / "checkpoint"))


def base(tmp: Path) -> list[str]:
    """Every case: no W&B, a cache of its own, its own run dir."""
    return ["logger=none", f"paths.cache_dir={tmp / 'cache'}", f"hydra.run.dir={tmp / 'run'}"]


SAMPLE = ["seeds=[0]", "max_train_sentences=40", "max_eval_sentences=16"]
PROBE = [*SAMPLE, "analysis.linear.max_iter=20"]
FINETUNE = ["trainer=smoke", "trainer.max_steps=4", "trainer.eval_every=4",
            "trainer.save_every=4", "trainer.batch_size=4", "task.source=local"]


def probe_world(tmp: Path) -> World:
    """A probe of the tiny checkpoint on a slice of the synthetic POS task."""
    return World("probe", [f"model.name_or_path={copy_checkpoint(tmp)}", "task.num_sentences=80",
                           *PROBE, *base(tmp)], tmp / "run")


def sentence(i: int) -> list[str]:
    subject, verb = [("the dog", "runs"), ("a cat", "sleeps"), ("John", "sees Mary")][i % 3]
    return [*subject.split(), *verb.split(), *(["not"] if i % 2 else []), "."]


def sst2_text(count: int) -> str:
    rows = [f"{' '.join(sentence(i))}\t{i % 2}" for i in range(count)]
    return "sentence\tlabel\n" + "\n".join(rows) + "\n"


def conll03_text(count: int) -> str:
    blocks = ["".join(f"{w} NN B-NP {'B-PER' if w in ('John', 'Mary') else 'O'}\n"
                      for w in sentence(i)) for i in range(count)]
    return "-DOCSTART- -X- -X- O\n\n" + "\n".join(blocks)


def conllu_text(count: int) -> str:
    return "\n".join(conllu_block(sentence(i)).replace("damaged", f"s{i}")
                     for i in range(count)) + "\n"


def squad_text(articles: int) -> str:
    data = []
    for a in range(articles):
        context = f"Article {a} says the dog runs here and the cat sleeps there."
        qas = [{"id": f"{a}-{q}", "question": f"Where does the {animal} {verb}?",
                "answers": [{"text": place, "answer_start": context.index(place)}]}
               for q, (animal, verb, place) in enumerate([("dog", "run", "here"),
                                                          ("cat", "sleep", "there")])]
        data.append({"title": f"A{a}", "paragraphs": [{"context": context, "qas": qas}]})
    return json.dumps({"version": "1.1", "data": data})


def data_root(tmp: Path, files: dict[str, str]) -> Path:
    root = tmp / "data"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def task_world(pipeline: str, task: str, folder: str, train: str, eval_: str, text: str,
               extra: tuple[str, ...] = ()) -> Callable[[Path], World]:
    def build(tmp: Path) -> World:
        root = data_root(tmp, {f"{folder}/{train}": text, f"{folder}/{eval_}": text})
        args = [f"task={task}", f"paths.data_dir={root}",
                f"model.name_or_path={copy_checkpoint(tmp)}", *extra,
                *(PROBE if pipeline == "probe" else FINETUNE), *base(tmp)]
        return World(pipeline, args, tmp / "run")
    return build


def corpus_world(extra: list[str], files: dict[str, str]) -> Callable[[Path], World]:
    """A pretrain of a random tiny BERT on a corpus under the data root."""
    def build(tmp: Path) -> World:
        root = data_root(tmp, files)
        return World("pretrain", [f"paths.data_dir={root}", *extra, "trainer=smoke",
                                  "trainer.max_steps=4", "trainer.eval_every=4",
                                  "trainer.save_every=4", "trainer.batch_size=4",
                                  "model.vocab_size=200", "data.eval_docs=4", *base(tmp)],
                     tmp / "run")
    return build


def corpus_text(documents: int) -> str:
    return "\n".join("\n".join(" ".join(sentence(d + i)) for i in range(4)) + "\n"
                     for d in range(documents))


def document(d: int) -> str:
    """Four sentences as prose (the hub and WikiExtractor readers split them)."""
    return " ".join(" ".join(sentence(d + i)).capitalize() for i in range(4))


def wiki_shard(documents: int) -> str:
    return "".join(f'<doc id="{d}" url="u" title="T{d}">\nT{d}\n{document(d)}\n</doc>\n'
                   for d in range(documents))


def blimp_text(pairs: int) -> str:
    return "".join(json.dumps({"sentence_good": "the dog runs .", "sentence_bad": "the dog run .",
                               "linguistics_term": "agreement", "pairID": str(i)}) + "\n"
                   for i in range(pairs))


def cloze_world(tmp: Path) -> World:
    root = data_root(tmp, {"blimp/agreement.jsonl": blimp_text(8)})
    return World("probe", [f"paths.data_dir={root}", f"model.name_or_path={copy_checkpoint(tmp)}",
                           "analysis=cloze", "analysis.cloze.suites=[blimp]",
                           "analysis.cloze.blimp_paradigms=[agreement]",
                           "analysis.cloze.max_items=8", *SAMPLE, "task.num_sentences=80",
                           *base(tmp)], tmp / "run")


def warm(build: Callable[[Path], World]) -> Callable[[Path], World]:
    """The world after one run has filled its cache: the damaged entry is read by the next."""
    def warmed(tmp: Path) -> World:
        world = build(tmp)
        run_quietly(world.pipeline, [*world.args[:-1], f"hydra.run.dir={tmp / 'warm-up'}"])
        return world
    return warmed


def run_quietly(pipeline: str, args: list[str]) -> None:
    """A set-up run (the cache's first fill): it must finish."""
    import contextlib
    import io

    from bertology.cli import entry

    with contextlib.redirect_stderr(io.StringIO()) as err:
        try:
            status = entry.main([pipeline, *args])
        except SystemExit as stop:
            status = stop.code
    assert status in (0, None), f"the set-up run failed: {err.getvalue()[-2000:]}"


def random_probe_world(tmp: Path) -> World:
    """A probe of a random-init tiny BERT: its tokenizer is trained into the cache
    (tokenizers/<key>/) and its features extracted into it (features/<key>/)."""
    return World("probe", ["init=random", "task.num_sentences=80", "size.num_hidden_layers=1",
                           *PROBE, *base(tmp)], tmp / "run")


def finished_run(tmp: Path) -> World:
    """A finished probe run that `bertology report` reads (its metrics.json, status.json,
    .hydra/config.yaml and replicates)."""
    world = probe_world(tmp)
    run_quietly(world.pipeline, world.args)
    return World("report", [str(tmp / "run"), f"hydra.run.dir={tmp / 'report'}"], tmp / "report")


def listed_run(tmp: Path) -> World:
    """The same finished run, listed by `bertology runs`."""
    finished_run(tmp)
    return World("runs", [str(tmp / "run")], None)


# ---------------------------------------------------------------- the targets

FILE = ("missing", "empty", "truncated", "not the format", "not UTF-8", "folder for a file")
BINARY = ("missing", "empty", "truncated", "not the format", "folder for a file")
DATA = (*FILE, "label out of set", "long line")
FOLDER = ("missing", "file for a folder")
CKPT = "checkpoint"
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
           "dev.tsv", sst2_text(24)), "data/glue_sst2/train.tsv", DATA, format="tsv"),
    Target("CoNLL-2003 (finetune conll03)", task_world(
        "finetune", "conll03", "conll2003_ner", "train.txt", "dev.txt", conll03_text(24)),
        "data/conll2003_ner/train.txt", DATA, format="conll03"),
    Target("CoNLL-2003 (probe conll03)", task_world(
        "probe", "conll03", "conll2003_ner", "train.txt", "dev.txt", conll03_text(24)),
        "data/conll2003_ner/train.txt", DATA, format="conll03"),
    Target("CoNLL-U (finetune ud_pos)", task_world(
        "finetune", "ud_pos", "ud_english_ewt", "en_ewt-ud-train.conllu", "en_ewt-ud-dev.conllu",
        conllu_text(24)), "data/ud_english_ewt/en_ewt-ud-train.conllu", DATA, format="conllu"),
    Target("CoNLL-U (probe ud_pos)", task_world(
        "probe", "ud_pos", "ud_english_ewt", "en_ewt-ud-train.conllu", "en_ewt-ud-dev.conllu",
        conllu_text(24)), "data/ud_english_ewt/en_ewt-ud-train.conllu", DATA, format="conllu"),
    Target("task folder (probe ud_pos)", task_world(
        "probe", "ud_pos", "ud_english_ewt", "en_ewt-ud-train.conllu", "en_ewt-ud-dev.conllu",
        conllu_text(24)), "data/ud_english_ewt", FOLDER),
    Target("SQuAD JSON (finetune squad)", task_world(
        "finetune", "squad", "squad_v1.1", "unused.json", "dev-v1.1.json", squad_text(6),
        ("task.eval_articles=2", "task.max_seq_length=64", "task.max_query_length=16",
         "task.doc_stride=16")), "data/squad_v1.1/dev-v1.1.json", DATA, format="squad"),
    Target("plain text corpus (pretrain data=files)", corpus_world(
        ["data=files", "data.files=[corpus.txt]"], {"corpus.txt": corpus_text(30)}),
        "data/corpus.txt", ("missing", "empty", "not UTF-8", "long line", "folder for a file")),
    Target("JSON lines corpus (pretrain data=hub, json)", corpus_world(
        ["data=hub", "data.path=json", "data.data_files=[corpus.jsonl]"],
        {"corpus.jsonl": "".join(json.dumps({"text": document(i)}) + "\n" for i in range(30))}),
        "data/corpus.jsonl", (*FILE, "long line"), format="jsonl"),
    Target("WikiExtractor shard (pretrain data=wikipedia)", corpus_world(
        ["data=wikipedia", "data.path=wiki"], {"wiki/AA/wiki_00": wiki_shard(30)}),
        "data/wiki/AA/wiki_00", ("empty", "truncated", "not the format", "not UTF-8",
                                 "folder for a file")),
    Target("WikiExtractor folder (pretrain data=wikipedia)", corpus_world(
        ["data=wikipedia", "data.path=wiki"], {"wiki/AA/wiki_00": wiki_shard(30)}),
        "data/wiki", FOLDER),
    Target("cloze suite: BLiMP JSON lines (probe cloze)", cloze_world,
           "data/blimp/agreement.jsonl", (*FILE, "long line"), format="blimp"),
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
    Target("run dir: metrics.json (report)", finished_run, "run/metrics.json", FILE,
           format="json"),
    Target("run dir: status.json (report)", finished_run, "run/status.json", FILE,
           format="json"),
    Target("run dir: .hydra/config.yaml (report)", finished_run, "run/.hydra/config.yaml", FILE),
    Target("run dir: replicates/*.csv (report)", finished_run,
           "run/replicates/linear_synthetic_pos.csv", FILE),
    Target("run dir: replicates/*.items.json (report)", finished_run,
           "run/replicates/linear_synthetic_pos.items.json", FILE, format="json"),
    Target("run dir: metrics.json (runs)", listed_run, "run/metrics.json", FILE, format="json"),
    Target("run dir: status.json (runs)", listed_run, "run/status.json", FILE, format="json"),
    Target("run dir: .hydra/config.yaml (runs)", listed_run, "run/.hydra/config.yaml", FILE),
]


def cases() -> list[Case]:
    """Every (target, damage) pair, in a fixed order."""
    return [Case(target, kind) for target in TARGETS for kind in target.damages]
