"""The damage walk's intact worlds (tests/helpers/damage_walk.py damages one file of each): a tiny
checkpoint as a researcher brings one from the hub, small data files of every format the
readers accept, runs that fill the cache, a finished run dir. Each `World` is the pipeline,
its arguments (a cache and a run dir of the case's own) and the run dir it writes."""

from __future__ import annotations

import atexit
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

LONG_WORDS = 2000  # a sentence far past any model's positions (BERT's are 512)


@dataclass(frozen=True)
class World:
    """An intact set-up: the pipeline, its arguments, and the run dir it writes (if any)."""
    pipeline: str
    args: list[str]
    run_dir: Path | None


def long_sentence() -> list[str]:
    return [f"w{i % 50}" if i % 7 else "dog" for i in range(LONG_WORDS)]


def conllu_block(words: list[str], tag: str = "NOUN") -> str:
    rows = [f"{i}\t{w}\t{w}\t{tag if i > 1 else 'DET'}\t_\t_\t{0 if i == 1 else 1}\t"
            f"{'root' if i == 1 else 'dep'}\t_\t_" for i, w in enumerate(words, 1)]
    return "# sent_id = damaged\n" + "\n".join(rows) + "\n"


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

    root = Path(tempfile.mkdtemp(prefix="bertology-damage-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)  # gone when the session ends
    path = root / "checkpoint"
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
                           "analysis.cloze.max_items=16", *SAMPLE, "task.num_sentences=80",
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
