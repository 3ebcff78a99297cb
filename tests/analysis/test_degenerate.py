"""Degenerate data reaching an analysis (issue 31.3): every probe analysis that reads the
task's sentences, and fine-tuning, fed a family of data sets their estimators cannot use (one
label, one word type, one sentence, one-word sentences, an eval split emptied by filtering),
through the real CLI. None may end in a traceback: each either refuses in one line (exit 2)
or skips what it cannot estimate with a note in the log and in metrics (exit 0). Outcomes go
to outputs/reliability/degenerate.md.

cloze (BLiMP, Marvin & Linzen) and numeracy (generated numbers) read no task sentences, so
they are outside this family; their inputs are checked by their readers (test_bad_inputs).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from conftest import write_markdown_table
from transformers import BertConfig, BertForMaskedLM

from bertology.cli import entry as cli

ROWS: list[list[str]] = []
pytestmark = pytest.mark.usefixtures("fresh_logging", "one_thread")

TAGS = ["DET", "NOUN", "VERB", "ADP", "ADJ", "PUNCT"]
WORDS = ["the", "dog", "barks", "at", "a", "red", "cat", "in", "park", "."]


@dataclass(frozen=True)
class Sentence:
    words: list[str]
    tags: list[str]
    heads: list[int]  # 1-based, 0: root
    rels: list[str]


def chain(words: list[str], tags: list[str], rel: str = "dep") -> Sentence:
    """Word 1 is the root; every later word hangs from the word before it (a valid tree)."""
    heads = [0] + list(range(1, len(words)))
    return Sentence(words, tags, heads, ["root"] + [rel] * (len(words) - 1))


def varied(n: int, length: int = 6) -> list[Sentence]:
    """n ordinary sentences: several word types, several tags, several relations."""
    out = []
    for i in range(n):
        words = [WORDS[(i + k) % len(WORDS)] for k in range(length)]
        tags = [TAGS[(i + k) % len(TAGS)] for k in range(length)]
        sentence = chain(words, tags)
        rels = ["root"] + [("nmod", "det", "obj")[(i + k) % 3] for k in range(1, length)]
        out.append(Sentence(sentence.words, sentence.tags, sentence.heads, rels))
    return out


def to_conllu(sentences: list[Sentence]) -> str:
    blocks = []
    for n, s in enumerate(sentences):
        lines = [f"# sent_id = s{n}", f"# text = {' '.join(s.words)}"]
        lines += [f"{i}\t{w}\t{w}\t{t}\t_\t_\t{h}\t{r}\t_\t_"
                  for i, (w, t, h, r) in enumerate(zip(s.words, s.tags, s.heads, s.rels), 1)]
        blocks.append("\n".join(lines) + "\n")
    return "\n".join(blocks) + "\n"


# name -> (train sentences, eval sentences, extra overrides, what it is)
FAMILIES = {
    "one-label": ([chain(s.words, ["NOUN"] * len(s.words), "nmod") for s in varied(30)],
                  [chain(s.words, ["NOUN"] * len(s.words), "nmod") for s in varied(10)], [],
                  "every word tagged NOUN (and every relation nmod)"),
    "one-word-type": ([Sentence(["dog"] * 6, s.tags, s.heads, s.rels) for s in varied(30)],
                      [Sentence(["dog"] * 6, s.tags, s.heads, s.rels) for s in varied(10)], [],
                      "every word is 'dog' (the control task has one class)"),
    "one-sentence": (varied(1), varied(1), [], "one train and one eval sentence"),
    "one-word-sentences": ([chain([w], [t]) for w, t in zip(WORDS * 3, TAGS * 5)],
                           [chain([w], [t]) for w, t in zip(WORDS, TAGS * 2)], [],
                           "every sentence one word (no pairs, no arcs)"),
    "eval-too-long": (varied(30), varied(10, length=40), ["task.max_seq_length=24"],
                      "every eval sentence longer than task.max_seq_length: filtered to none"),
}
# (analysis, task): linear also as edge probing of relations (ud_deps: a dependent and its head)
ANALYSES = [("linear", "ud_pos"), ("linear", "ud_deps"), ("mlp", "ud_pos"),
            ("structural", "ud_pos"), ("position", "ud_pos"), ("attention", "ud_pos"),
            ("geometry", "ud_pos"), ("amnesic", "ud_pos")]


@pytest.fixture(scope="module")
def tiny_mlm(tmp_path_factory, synthetic_tokenizer) -> Path:
    """A random tiny BERT with its MLM head and a WordPiece tokenizer: what the analyses
    read (amnesic needs the head); seconds to run, and no pretraining."""
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("degenerate") / "mlm"
    config = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, vocab_size=len(synthetic_tokenizer),
                        max_position_embeddings=128)
    BertForMaskedLM(config).save_pretrained(path)
    synthetic_tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module", autouse=True)
def _write_table():
    yield
    write_markdown_table("degenerate.md", ["data", "analysis", "outcome (measured)"], ROWS)


def data_root(tmp: Path, family: str) -> Path:
    train, evaluation, _, _ = FAMILIES[family]
    folder = tmp / "data" / "ud_english_ewt"
    folder.mkdir(parents=True)
    (folder / "en_ewt-ud-train.conllu").write_text(to_conllu(train))
    (folder / "en_ewt-ud-dev.conllu").write_text(to_conllu(evaluation))
    return tmp / "data"


def run(args: list[str], run_dir: Path) -> int:
    try:
        return cli.main([*args, f"hydra.run.dir={run_dir}"])
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else 1


def outcome(code: int, err: str, run_dir: Path, pipeline: str = "probe") -> str:
    """What the run did, in the table's words; fails the test on a traceback or a crash."""
    assert "Traceback" not in err, err[-3000:]
    lines = [line for line in err.splitlines() if "error:" in line]
    if code == 2:
        assert len(lines) == 1, err[-3000:]
        return f"exit 2: {lines[0].split('error: ', 1)[1]}"
    assert code == 0, f"exit {code}: {err[-3000:]}"
    metrics = json.loads((run_dir / "metrics.json").read_text())
    skipped = sorted(k for k in metrics if "/skipped" in k)
    log_file = run_dir / f"{pipeline}.log"
    log = log_file.read_text() if log_file.exists() else ""
    notes = [line.split("skipped: ", 1)[1] for line in log.splitlines() if "skipped: " in line]
    assert len(skipped) == len(notes), (skipped, notes)  # every skip is in both
    return f"exit 0, {len(metrics)} metrics" + (f"; skipped {'; '.join(notes)}" if notes else "")


# The cases `make test` runs (each family once, where it bites); the rest are marked slow
FAST = {("one-label", "linear", "ud_deps"), ("one-word-type", "linear", "ud_pos"),
        ("one-sentence", "geometry", "ud_pos"), ("one-word-sentences", "position", "ud_pos"),
        ("one-word-sentences", "structural", "ud_pos"), ("eval-too-long", "attention", "ud_pos")}
CASES = [pytest.param(family, analysis, task, id=f"{family}-{analysis}-{task}",
                      marks=() if (family, analysis, task) in FAST else pytest.mark.slow)
         for family in FAMILIES for analysis, task in ANALYSES]


@pytest.mark.parametrize("family,analysis,task", CASES)
def test_every_analysis_on_degenerate_data_refuses_or_skips(family, analysis, task, tiny_mlm,
                                                            tmp_path, capsys):
    root = data_root(tmp_path, family)
    args = ["probe", "logger=none", f"task={task}", f"analysis={analysis}", "seeds=[0]",
            f"model.name_or_path={tiny_mlm}", f"paths.data_dir={root}",
            f"paths.cache_dir={tmp_path / 'cache'}", *FAMILIES[family][2]]
    code = run(args, tmp_path / "run")
    result = outcome(code, capsys.readouterr().err, tmp_path / "run")
    ROWS.append([f"{family}: {FAMILIES[family][3]}", f"probe {analysis} ({task})",
                 re.sub(r"/tmp/\S+", "<tmp>", result)])


FINETUNE_FAMILIES = [pytest.param(f, marks=() if f == "one-label" else pytest.mark.slow)
                     for f in ("one-label", "one-word-type", "one-sentence", "eval-too-long")]


@pytest.mark.parametrize("family", FINETUNE_FAMILIES)
def test_finetuning_on_degenerate_data_refuses_or_runs(family, tiny_mlm, tmp_path, capsys):
    """Fine-tuning a token classifier (ud_pos): one class in the training split is refused
    (a classifier learns a constant, and its eval accuracy would read as a result); the
    others are estimable (truncation keeps over-long sentences)."""
    root = data_root(tmp_path, family)
    args = ["finetune", "logger=none", "task=ud_pos", f"model.name_or_path={tiny_mlm}",
            "trainer=finetune_tiny", "trainer.epochs=1", f"paths.data_dir={root}",
            f"paths.cache_dir={tmp_path / 'cache'}", *FAMILIES[family][2]]
    code = run(args, tmp_path / "run")
    result = outcome(code, capsys.readouterr().err, tmp_path / "run", "finetune")
    if family == "one-label":
        assert code == 2 and "at least two classes" in result, result
    ROWS.append([f"{family}: {FAMILIES[family][3]}", "finetune (ud_pos)",
                 re.sub(r"/tmp/\S+", "<tmp>", result)])
