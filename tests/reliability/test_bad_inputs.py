"""The bad-input suite (issue 9): every pipeline, fed bad config values, bad data files and bad
checkpoints, must answer with one line that names the problem, exit status 2, no traceback,
and leave no run dir that looks finished.

Each case runs `bertology <pipeline> ...` in process (cli.main, as the console script does),
in a fresh working dir. The outcome of every case is written to
outputs/reliability/bad_inputs.md, the table docs/reliability.md shows.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from conftest import DATA_DIR, REPO, fast_sample, write_markdown_table, write_vocab
from own_data_files import write_classification, write_tagging
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    BertForTokenClassification,
    PreTrainedModel,
)

from bertology.cli import entry as cli
from bertology.config.verbs import pipeline_names

RESULTS: list[dict[str, str]] = []
TINY = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)


@dataclass
class Case:
    id: str
    pipeline: str
    what: str                      # the bad input, for the table
    args: list[str]
    expect: str                    # a fragment the error line must contain
    setup: Callable[[Path, Path | None], list[str]] | None = None  # (tmp, model) -> more args
    needs_model: bool = False      # the session's fine-tuned negation model
    extra: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # environment variables set for the case


# ---------------------------------------------------------------- files the cases are fed


def sst2_root(tmp: Path, train: bytes, dev: bytes | None = None) -> list[str]:
    """A data root whose SST-2 files are the given bytes (dev: the real dev file)."""
    folder = tmp / "data" / "glue_sst2"
    folder.mkdir(parents=True)
    (folder / "train.tsv").write_bytes(train)
    (folder / "dev.tsv").write_bytes(dev if dev is not None else
                                     (DATA_DIR / "glue_sst2" / "dev.tsv").read_bytes())
    return [f"paths.data_dir={tmp / 'data'}"]


def ewt_root(tmp: Path, train: str) -> list[str]:
    folder = tmp / "data" / "ud_english_ewt"
    folder.mkdir(parents=True)
    (folder / "en_ewt-ud-train.conllu").write_text(train)
    (folder / "en_ewt-ud-dev.conllu").write_text(train)
    return [f"paths.data_dir={tmp / 'data'}"]


GOOD_TREE = ("# sent_id = s1\n# text = The dog barks .\n"
             "1\tThe\tthe\tDET\t_\t_\t2\tdet\t_\t_\n"
             "2\tdog\tdog\tNOUN\t_\t_\t3\tnsubj\t_\t_\n"
             "3\tbarks\tbark\tVERB\t_\t_\t0\troot\t_\t_\n"
             "4\t.\t.\tPUNCT\t_\t_\t3\tpunct\t_\t_\n\n")
BROKEN_TREE = GOOD_TREE + GOOD_TREE.replace("s1", "s2").replace("3\tbarks", "3\tbarks\textra")
BAD_LABEL_TREE = GOOD_TREE.replace("\tDET\t", "\tDETERMINER\t")
# sentence s2 (lines 10-13): "dog" (line 11) is a second root beside "barks" (line 12)
TWO_ROOTS = GOOD_TREE + GOOD_TREE.replace("s1", "s2").replace("NOUN\t_\t_\t3", "NOUN\t_\t_\t0")
# sentence s2: "The" (line 10) hangs from "dog" and "dog" from "The", a cycle beside the root
CYCLE = GOOD_TREE + GOOD_TREE.replace("s1", "s2").replace("NOUN\t_\t_\t3", "NOUN\t_\t_\t1")


def corpus_file(tmp: Path, content: bytes) -> list[str]:
    path = tmp / "corpus.txt"
    path.write_bytes(content)
    return [f"data.files=[{path}]"]


def own_files(tmp: Path, train: bytes, dev: bytes | None = None,
              suffix: str = ".csv") -> list[str]:
    """A user's own train file of these bytes (dev: a good one) in the working dir, read by
    task=own_classification (tests/helpers/own_data_files.py writes the good files)."""
    good_train, good_dev = write_classification(tmp / "own", suffix)
    good_train.write_bytes(train)
    if dev is not None:
        good_dev.write_bytes(dev)
    return [f"task.train_file={good_train}", f"task.eval_file={good_dev}"]


def own_typo(tmp: Path) -> list[str]:
    """task=own_classification's train.csv and dev.csv in the working dir, the train file's
    name mistyped."""
    write_classification(tmp)
    return ["task.train_file=trian.csv"]


def own_tagging_files(tmp: Path, train: bytes) -> list[str]:
    """task=own_tagging's train.jsonl and dev.jsonl in the working dir, train of these bytes."""
    good_train, _ = write_tagging(tmp)
    good_train.write_bytes(train)
    return []


def unwritable_run_dir(tmp: Path) -> list[str]:
    """A run dir under a regular file: nothing can be made there, even by root."""
    (tmp / "a_file").write_text("not a folder\n")
    return [f"hydra.run.dir={tmp / 'a_file' / 'run'}"]


def copy_model(model: Path, tmp: Path) -> Path:
    target = tmp / "model"
    target.mkdir()
    for file in model.iterdir():
        if file.is_file():
            (target / file.name).write_bytes(file.read_bytes())
    return target


def truncated_weights(tmp: Path, model: Path) -> list[str]:
    target = copy_model(model, tmp)
    weights = target / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    return [f"model.name_or_path={target}"]


def garbage_weights(tmp: Path, model: Path) -> list[str]:
    target = copy_model(model, tmp)
    (target / "model.safetensors").write_bytes(os.urandom(4096))
    return [f"model.name_or_path={target}"]


def pickled_weights_only(tmp: Path, model: Path) -> list[str]:
    """A .bin (pickle) checkpoint: refused, never unpickled."""
    target = copy_model(model, tmp)
    (target / "model.safetensors").unlink()
    torch.save({"x": torch.zeros(1)}, target / "pytorch_model.bin")
    return [f"model.name_or_path={target}"]


def no_weights(tmp: Path, model: Path) -> list[str]:
    target = copy_model(model, tmp)
    (target / "model.safetensors").unlink()
    return [f"model.name_or_path={target}"]


def tagging_model(tmp: Path, model: Path) -> Path:
    """A token-classification model: the wrong architecture for a sentence task."""
    tokenizer_files = [f for f in model.iterdir() if "token" in f.name or f.name == "vocab.txt"]
    config = BertConfig(vocab_size=json.loads((model / "config.json").read_text())["vocab_size"],
                        num_labels=2, **TINY)
    target = tmp / "tagger"
    BertForTokenClassification(config).save_pretrained(target)
    for file in tokenizer_files:
        (target / file.name).write_bytes(file.read_bytes())
    return target


def other_vocab_student(tmp: Path) -> Path:
    target = tmp / "student"
    BertForSequenceClassification(BertConfig(vocab_size=97, num_labels=2, **TINY)) \
        .save_pretrained(target)
    return write_vocab(target, 97)  # its own (smaller) vocabulary, as a saved student has


# ---------------------------------------------------------------- the cases

TINY_RUN = ["trainer=smoke", "logger=none"]
OWN = ["task=own_classification", *TINY_RUN]
CSV_TRAIN = b"text,label\nfine,pos\ndull,neg\n"
NEG = ["task=synthetic_negation", "task.num_sentences=200", "logger=none"]
CASES = [
    # config values: out of range, wrong type, unknown keys and options
    Case("pretrain-steps-zero", "pretrain", "trainer.max_steps=0", ["trainer.max_steps=0"],
         "trainer.max_steps"),
    Case("pretrain-lr-type", "pretrain", "trainer.lr=fast (not a number)", ["trainer.lr=fast"],
         "trainer.lr"),
    Case("pretrain-unknown-key", "pretrain", "+trainer.max_step=5 (a typo)",
         ["+trainer.max_step=5"], "trainer.max_step"),
    Case("pretrain-unknown-model", "pretrain", "model=bertt", ["model=bertt"],
         "model=bertt is not an option of model; did you mean model=bert?"),
    Case("pretrain-mask-prob", "pretrain", "objective.mask_prob=1.5",
         ["objective.mask_prob=1.5"], "objective.mask_prob"),
    Case("pretrain-heads", "pretrain", "hidden size not divisible by heads",
         ["size.hidden_size=130", "size.num_attention_heads=4"], "not divisible"),
    Case("pretrain-seq-len", "pretrain", "data.max_seq_length beyond the positions",
         ["data.max_seq_length=1024"], "max_position_embeddings"),
    Case("pretrain-unknown-size", "pretrain", "size=gigantic", ["size=gigantic"],
         "size=gigantic is not an option of size"),
    Case("pretrain-mask-ratios", "pretrain", "mask/random/keep ratios that do not sum to 1",
         ["objective.mask_token_ratio=0.7"], "sum to 1"),
    Case("finetune-unknown-task", "finetune", "task=nosuchtask", ["task=nosuchtask"],
         "task=nosuchtask is not an option of task"),
    Case("finetune-batch-zero", "finetune", "trainer.batch_size=0", ["trainer.batch_size=0"],
         "trainer.batch_size"),
    Case("finetune-head-mode", "finetune", "head.mode=sideways", ["head.mode=sideways"],
         "head.mode"),
    Case("finetune-epochs", "finetune", "trainer.epochs=-1", ["trainer.epochs=-1"],
         "trainer.epochs=-1 must be positive"),
    Case("finetune-features", "finetune", "head.features=top", ["head.features=top"],
         "head.features='top' is not an option"),
    Case("finetune-seeds-repeat", "finetune", "seeds=[0,0]", ["seeds=[0,0]"],
         "lists 0 twice"),
    Case("probe-unknown-analysis", "probe", "analysis=nosuch", ["analysis=nosuch"],
         "analysis"),
    Case("probe-seeds-type", "probe", "seeds=[a] (not integers)", ["seeds=[a]"], "seeds"),
    Case("probe-mlp-dropout", "probe", "analysis=mlp analysis.mlp.dropout=1.0",
         ["analysis=mlp", "analysis.mlp.dropout=1.0"], "analysis.mlp.dropout"),
    Case("probe-sentence-task", "probe", "task=sst2 (no word labels to probe)",
         ["task=sst2", "task.source=local"], "no word labels"),
    Case("probe-cloze-no-mlm-head", "probe", "analysis=cloze on MiniLM (no MLM head)",
         ["model=minilm", "analysis=cloze"], "no masked-LM head"),
    Case("prune-step-fraction", "prune", "prune.step_fraction=1.5",
         ["prune.step_fraction=1.5"], "prune.step_fraction"),
    Case("prune-unknown-score", "prune", "prune.scores=[magic]", ["prune.scores=[magic]"],
         "magic"),
    Case("distill-temperature", "distill", "kd.temperature=0", ["kd.temperature=0"],
         "kd.temperature"),
    Case("distill-alpha", "distill", "kd.alpha=2", ["kd.alpha=2"], "kd.alpha"),
    Case("report-no-dirs", "report", "no run dirs", [], "no run dirs"),
    Case("report-missing-dir", "report", "a run dir that does not exist",
         ["/no/such/sweep"], "/no/such/sweep"),
    # data files: missing, empty, not UTF-8, wrong columns, broken lines, unknown labels
    Case("finetune-data-missing", "finetune", "SST-2 with an empty data root",
         ["task=sst2", "task.source=local", *TINY_RUN], "does not exist",
         lambda tmp, _: [f"paths.data_dir={tmp / 'nowhere'}"]),
    Case("finetune-tsv-empty", "finetune", "an empty train.tsv",
         ["task=sst2", "task.source=local", *TINY_RUN], "is empty",
         lambda tmp, _: sst2_root(tmp, b"")),
    Case("finetune-tsv-latin1", "finetune", "a train.tsv that is not UTF-8",
         ["task=sst2", "task.source=local", *TINY_RUN], "UTF-8",
         lambda tmp, _: sst2_root(tmp, "sentence\tlabel\ncaf\xe9 noir\t1\n".encode("latin-1"))),
    Case("finetune-tsv-columns", "finetune", "a train.tsv without the label column",
         ["task=sst2", "task.source=local", *TINY_RUN], "label",
         lambda tmp, _: sst2_root(tmp, b"sentence\tscore\nit is fine\t1\n")),
    Case("finetune-tsv-label", "finetune", "a label outside the label set (7)",
         ["task=sst2", "task.source=local", *TINY_RUN], "'7'",
         lambda tmp, _: sst2_root(tmp, b"sentence\tlabel\nit is fine\t1\nit is bad\t7\n")),
    Case("finetune-conllu-line", "finetune", "a CoNLL-U line (line 12) with 11 fields",
         ["task=ud_pos", "task.source=local", *TINY_RUN], ":12:",
         lambda tmp, _: ewt_root(tmp, BROKEN_TREE)),
    Case("probe-conllu-line", "probe", "a CoNLL-U line (line 12) with 11 fields",
         ["task=ud_pos", "task.source=local", "logger=none"], ":12:",
         lambda tmp, _: ewt_root(tmp, BROKEN_TREE)),
    Case("probe-conllu-two-roots", "probe", "a CoNLL-U sentence with two roots (lines 11, 12)",
         ["task=ud_pos", "task.source=local", "logger=none"], ":12: sentence s2",
         lambda tmp, _: ewt_root(tmp, TWO_ROOTS)),
    Case("probe-conllu-cycle", "probe", "a CoNLL-U sentence whose heads form a cycle (line 10)",
         ["task=ud_pos", "task.source=local", "logger=none"], ":10: sentence s2",
         lambda tmp, _: ewt_root(tmp, CYCLE)),
    Case("distill-layers-after-teacher", "distill",
         "student.layers beyond the built-in teacher's 2 layers",
         [*NEG, "student.layers=[0,5]"], "student.layers"),
    Case("pretrain-top-level-typo", "pretrain", "+sed=1 (an unknown top-level key)",
         ["+sed=1", *TINY_RUN], "did you mean seed?"),
    Case("pretrain-option-typo", "pretrain", "model=robreta (a misspelt group option)",
         ["model=robreta", *TINY_RUN], "did you mean model=roberta?"),
    Case("pretrain-key-typo", "pretrain", "trainer.max_step=5 (a misspelt key, no +)",
         ["trainer.max_step=5", *TINY_RUN], "did you mean trainer.max_steps?"),
    Case("probe-list-repeat", "probe", "analysis=[linear,mlp,linear] (an entry listed twice)",
         ["analysis=[linear,mlp,linear]", "logger=none"], "lists linear twice"),
    Case("pretrain-sweep-bad-job", "pretrain",
         "-m seed=0,1 trainer.max_steps=5,0 (one bad combination of a sweep)",
         ["-m", "seed=0,1", "trainer.max_steps=5,0", *TINY_RUN], "sweep job 2 of 4"),
    Case("pretrain-seed-type", "pretrain", "seed=abc", ["seed=abc", *TINY_RUN], "seed='abc'"),
    Case("pretrain-out-unwritable", "pretrain", "hydra.run.dir under a file",
         [*TINY_RUN], "hydra.run.dir", lambda tmp, _: unwritable_run_dir(tmp)),
    Case("finetune-conllu-label", "finetune", "a UPOS tag outside the label set",
         ["task=ud_pos", "task.source=local", *TINY_RUN], "DETERMINER",
         lambda tmp, _: ewt_root(tmp, BAD_LABEL_TREE)),
    Case("probe-treebank-missing", "probe", "task.path to a treebank that does not exist",
         ["task=ud_pos", "task.path=no_such_treebank", "task.source=local"],
         "no_such_treebank"),
    Case("pretrain-wikipedia-missing", "pretrain", "data=wikipedia with a missing corpus",
         ["data=wikipedia", "data.path=no_such_corpus", *TINY_RUN], "no_such_corpus"),
    Case("pretrain-corpus-missing", "pretrain", "data=files with a missing file",
         ["data=files", "data.files=[missing.txt]", *TINY_RUN], "missing.txt"),
    Case("pretrain-corpus-empty", "pretrain", "data=files with an empty file",
         ["data=files", *TINY_RUN], "empty", lambda tmp, _: corpus_file(tmp, b"")),
    Case("pretrain-corpus-binary", "pretrain", "data=files with a non-UTF-8 file",
         ["data=files", *TINY_RUN], "UTF-8",
         lambda tmp, _: corpus_file(tmp, b"\xff\xfe\x00bad bytes\x81\n" * 50)),
    # checkpoints: missing, wrong architecture, damaged, pickled, mismatched vocabularies
    Case("pretrain-ckpt-missing", "pretrain", "model.name_or_path that does not exist",
         ["model.name_or_path=/no/such/checkpoint", *TINY_RUN], "model.name_or_path"),
    Case("pretrain-tokenizer-missing", "pretrain",
         "model.tokenizer_name_or_path that does not exist",
         ["model.tokenizer_name_or_path=/no/such/tokenizer", *TINY_RUN],
         "model.tokenizer_name_or_path: /no/such/tokenizer does not exist"),
    Case("pretrain-tokenizer-hub-offline", "pretrain",
         "a tokenizer hub id not in the cache, the hub offline",
         ["model.tokenizer_name_or_path=bertology-tests/never-downloaded", *TINY_RUN],
         "'bertology-tests/never-downloaded' is not in the local Hugging Face cache",
         env={"HF_HUB_OFFLINE": "1"}),
    Case("finetune-ckpt-missing", "finetune", "model.name_or_path that does not exist",
         ["model.name_or_path=/no/such/checkpoint", *NEG, "trainer=finetune_tiny"],
         "model.name_or_path"),
    Case("finetune-hub-offline", "finetune", "a hub id not in the cache, the hub offline",
         ["model.name_or_path=bertology-tests/never-downloaded", *NEG, "trainer=finetune_tiny"],
         "'bertology-tests/never-downloaded' is not in the local Hugging Face cache",
         env={"HF_HUB_OFFLINE": "1"}),
    Case("finetune-hub-id-malformed", "finetune", "neither a folder nor a valid hub id, offline",
         ["model.name_or_path='not a..hub id'", *NEG, "trainer=finetune_tiny"],
         "is neither a folder nor a hub id", env={"HF_HUB_OFFLINE": "1"}),
    Case("finetune-ckpt-truncated", "finetune", "a truncated model.safetensors",
         [*NEG, "trainer=finetune_tiny"], "is cut short", truncated_weights,
         needs_model=True),
    Case("finetune-ckpt-garbage", "finetune", "a model.safetensors of random bytes",
         [*NEG, "trainer=finetune_tiny"], "is not a safetensors file", garbage_weights,
         needs_model=True),
    Case("finetune-ckpt-pickle", "finetune", "weights only as pytorch_model.bin (a pickle)",
         [*NEG, "trainer=finetune_tiny"], "has no model.safetensors", pickled_weights_only,
         needs_model=True),
    Case("probe-ckpt-no-weights", "probe", "a model dir without weights",
         ["task=synthetic_pos", "logger=none"], "has no model.safetensors", no_weights,
         needs_model=True),
    Case("prune-ckpt-architecture", "prune", "a tagging student for a sentence task",
         [*NEG, "prune.experiments=[matrix]"], "is not a classification model",
         lambda tmp, model: [f"model.name_or_path={model}",
                             f"compression.student_path={tagging_model(tmp, model)}"],
         needs_model=True),
    Case("distill-ckpt-architecture", "distill", "a tagging teacher for a sentence task",
         [*NEG], "is not a classification model",
         lambda tmp, model: [f"teacher.name_or_path={tagging_model(tmp, model)}"],
         needs_model=True),
    Case("distill-teacher-missing", "distill", "teacher.name_or_path that does not exist",
         ["teacher.name_or_path=/no/such/teacher", *NEG], "/no/such/teacher"),
    Case("prune-student-vocab", "prune", "a student whose vocabulary differs from the teacher's",
         [*NEG, "prune.experiments=[matrix]"], "vocabulary",
         lambda tmp, model: [f"model.name_or_path={model}",
                             f"compression.student_path={other_vocab_student(tmp)}"],
         needs_model=True),
    Case("pretrain-resume-nothing", "pretrain", "resume=true with no unfinished run",
         ["resume=true", *TINY_RUN], "resume=true"),
    # a user's own files (task=own_classification, own_tagging: docs/howto/own-data.md)
    Case("finetune-own-path-typo", "finetune", "task.train_file=trian.csv (a typo)", OWN,
         "trian.csv does not exist; give the file's path, absolute or from the working dir",
         lambda tmp, _: own_typo(tmp)),
    Case("finetune-own-dev-label", "finetune", "a dev label the train file lacks (line 3)",
         OWN, "dev.csv:3: label 'meh' is not among the train file's labels (neg, pos)",
         lambda tmp, _: own_files(tmp, CSV_TRAIN, b"text,label\nfine,pos\nso-so,meh\n")),
    Case("finetune-own-empty", "finetune", "an empty train.csv", OWN,
         "train.csv (the train file) is empty", lambda tmp, _: own_files(tmp, b"")),
    Case("finetune-own-header-only", "finetune", "a train.csv with a header and no rows", OWN,
         "train.csv (the train file) holds a header and no examples",
         lambda tmp, _: own_files(tmp, b"text,label\n")),
    Case("finetune-own-column", "finetune", "a train.csv without the text column", OWN,
         "train.csv: no column 'text' (header: sentence, label)",
         lambda tmp, _: own_files(tmp, b"sentence,label\nfine,pos\ndull,neg\n")),
    Case("finetune-own-latin1", "finetune", "a train.csv that is not UTF-8 (line 3)", OWN,
         "train.csv:3: not UTF-8 text",
         lambda tmp, _: own_files(tmp, "text,label\nfine,pos\ncaf\xe9 noir,neg\n"
                                  .encode("latin-1"))),
    Case("finetune-own-json-line", "finetune", "a malformed JSON line (line 2)",
         [*OWN, "task.format=jsonl"], "train.jsonl:2: not JSON",
         lambda tmp, _: own_files(tmp, b'{"text": "fine", "label": "pos"}\n{"text": "dull", '
                                  b'"label": neg}\n', suffix=".jsonl")),
    Case("probe-own-tags", "probe", "a tagging line with fewer tags than tokens (line 2)",
         ["task=own_tagging", "logger=none"], "train.jsonl:2: 2 tokens but 1 tags",
         lambda tmp, _: own_tagging_files(tmp, b'{"tokens": ["a"], "tags": ["O"]}\n'
                                          b'{"tokens": ["a", "b"], "tags": ["O"]}\n')),
]


def case_args(case: Case, tmp: Path, model: Path | None) -> list[str]:
    """The case's arguments, its files made (which may build a model to save)."""
    args = [*case.args, *(case.setup(tmp, model) if case.setup else [])]
    if case.pipeline != "report" and "resume=true" not in args \
            and not any(a.startswith("hydra.run.dir=") for a in args):
        args.append(f"hydra.run.dir={tmp / 'run'}")
    return args


def run_case(case: Case, args: list[str], capsys) -> tuple[int, str]:
    try:
        status = cli.main([case.pipeline, *args])
    except SystemExit as stop:
        status = stop.code if isinstance(stop.code, int) else 1
    return status, capsys.readouterr().err


def looks_finished(tmp: Path) -> list[Path]:
    """Run dirs with metrics.json, or a status that says finished."""
    found = list(tmp.rglob("metrics.json"))
    for status in tmp.rglob("status.json"):
        if json.loads(status.read_text()).get("status") == "finished":
            found.append(status)
    return found


@pytest.fixture
def model_for(request, fresh_logging):
    """The negation model only for the cases that need one (it costs a fine-tuning run)."""
    return lambda case: request.getfixturevalue("negation_model") if case.needs_model else None


@pytest.fixture
def models_built(monkeypatch) -> list[str]:
    """The class of every transformers model constructed from now on (a nested run's too):
    a bad input must be refused before the first one."""
    built: list[str] = []
    original = PreTrainedModel.__init__

    def counting_init(self, *args, **kwargs):
        built.append(type(self).__name__)
        original(self, *args, **kwargs)

    monkeypatch.setattr(PreTrainedModel, "__init__", counting_init)
    return built


@pytest.mark.parametrize("case", fast_sample(CASES, 8, ids=[c.id for c in CASES]))
def test_bad_input_is_one_line_exit_2(case, tmp_path, monkeypatch, capsys, model_for,
                                      request):
    monkeypatch.chdir(tmp_path)
    for name, value in case.env.items():
        monkeypatch.setenv(name, value)
    args = case_args(case, tmp_path, model_for(case))
    built = request.getfixturevalue("models_built")  # counting starts once the files are made
    status, err = run_case(case, args, capsys)
    error_lines = [line for line in err.splitlines() if "error:" in line]
    outcome = {"case": case.id, "pipeline": case.pipeline, "bad input": case.what,
               "exit": str(status), "message": error_lines[0] if error_lines else err.strip()}
    RESULTS.append(outcome)
    assert status == 2, err
    assert "Traceback" not in err, err
    assert len(error_lines) == 1 and case.expect in error_lines[0], err
    assert not looks_finished(tmp_path), "a run dir that looks finished was left"
    assert not built, f"refused only after building {built}"


def test_the_suite_covers_every_pipeline_with_30_cases():
    assert len(CASES) >= 30
    assert {c.pipeline for c in CASES} == set(pipeline_names())
    assert len({c.id for c in CASES}) == len({(c.pipeline, c.what) for c in CASES}) == len(CASES)


@pytest.fixture(scope="module", autouse=True)
def _write_table():
    """After the module: the table of outcomes (docs/reliability.md shows it)."""
    yield
    rows = sorted(RESULTS, key=lambda r: CASES_ORDER[r["case"]])
    write_markdown_table("bad_inputs.md", ["pipeline", "bad input", "exit", "the error line"],
                         [[r["pipeline"], r["bad input"], r["exit"],
                           code_span(shorten(r["message"]))]
                          for r in rows])


def code_span(text: str) -> str:
    """Markdown code; a message that quotes a command in backticks needs a double fence."""
    return f"`` {text} ``" if "`" in text else f"`{text}`"


CASES_ORDER = {c.id: i for i, c in enumerate(CASES)}


def shorten(message: str) -> str:
    """Paths vary per machine and run: `<tmp>` stands for pytest's temporary dir and `…` for
    the checkout's parent. pytest's dir goes first: a checkout under /tmp would hide it."""
    message = re.sub(r"/tmp/pytest-of-[^/]+/pytest-\d+/[^/ ']+", "<tmp>", message)
    return message.replace(str(REPO.parent), "…")
