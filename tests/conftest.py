"""Shared fixtures: the data root (the full data sets, or the excerpts in tests/fixtures/data
on a plain clone), an isolated tokenizer cache, the composed config."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURE_DATA = REPO / "tests" / "fixtures" / "data"


def find_data_root() -> tuple[Path, str]:
    """The data root the tests read, and a line saying why. BERTOLOGY_DATA_DIR (else
    ../shared/data beside the clone, as CI has it) when it holds every data set the tests
    read; otherwise the fixture excerpts, so a plain clone passes (the Makefile sets the
    variable to ../shared/data even where there is none: set but missing counts as absent)."""
    given = os.environ.get("BERTOLOGY_DATA_DIR")
    root = Path(given).expanduser() if given else REPO.parent / "shared" / "data"
    sets = sorted(p.name for p in FIXTURE_DATA.iterdir() if p.is_dir())
    missing = [name for name in sets if not (root / name).is_dir()]
    if not missing or root.resolve() == FIXTURE_DATA:
        return root, f"data: {root}"
    absent = "is missing" if not root.is_dir() else f"lacks {', '.join(missing)}"
    return FIXTURE_DATA, (f"data: the excerpts in {FIXTURE_DATA.relative_to(REPO)} ({root} "
                          f"{absent}); tests marked `data` skip")


DATA_DIR, DATA_NOTE = find_data_root()
FULL_DATA = DATA_DIR.resolve() != FIXTURE_DATA  # False: only the excerpts; `data` tests skip
os.environ["BERTOLOGY_DATA_DIR"] = str(DATA_DIR)  # runs and subprocesses read the same root
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def pytest_report_header(config) -> str:
    return DATA_NOTE


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if config.get_verbosity() < 0:  # -q (make test) leaves out the header: say it at the end
        terminalreporter.write_line(DATA_NOTE)


def pytest_collection_modifyitems(config, items) -> None:
    """`@pytest.mark.data("blimp", ...)`: the test needs those full data sets (counts,
    published numbers, sizes the excerpts lack); it skips when only the excerpts are here."""
    if FULL_DATA:
        return
    for item in items:
        marker = item.get_closest_marker("data")
        if marker:
            sets = " ".join(marker.args)
            item.add_marker(pytest.mark.skip(
                reason=f"needs the full data: run `bertology data fetch {sets}` and set "
                       "BERTOLOGY_DATA_DIR to its data root (only the excerpts in "
                       "tests/fixtures/data are here)"))


def fast_sample(cases, every: int, ids: list[str] | None = None) -> list:
    """Parameters of a generated walk of which every `every`-th case stays in `make test` and
    the others are marked slow: a sample is what an edit needs; CI runs them all."""
    params = []
    for i, case in enumerate(cases):
        values = case if isinstance(case, tuple) else (case,)
        marks = () if i % every == 0 else (pytest.mark.slow,)
        params.append(pytest.param(*values, marks=marks, id=None if ids is None else ids[i]))
    return params


@pytest.fixture(scope="session", autouse=True)
def _tokenizer_cache(tmp_path_factory):
    """Tokenizers trained by tests go to a cache of this session, not the user's."""
    os.environ["BERTOLOGY_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))


def write_vocab(path: Path, size: int) -> Path:
    """A WordPiece vocab.txt of `size` tokens (BERT's five specials, then fillers) beside a
    checkpoint saved without its tokenizer: a model dir must hold one (tokenizer_checks.py),
    and checks that only read config.json and the weights need no more than this."""
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokens = specials + [f"tok{i}" for i in range(size - len(specials))]
    (path / "vocab.txt").write_text("".join(f"{t}\n" for t in tokens))
    return path


def tiny_tokenizer():
    """A WordPiece tokenizer over a handful of words (no training: the checks read its files)."""
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    specials = {"unk_token": "[UNK]", "pad_token": "[PAD]", "cls_token": "[CLS]",
                "sep_token": "[SEP]", "mask_token": "[MASK]"}
    words = [*specials.values(), "the", "dog", "cat", "runs", "sleeps", "."]
    backend = Tokenizer(models.WordPiece({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=backend, **specials)


def run_cli(*args: str, cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    """`python -m bertology <args>` in a fresh process, as a user would run it."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, "-m", "bertology", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def compose_config(pipeline: str = "pretrain", overrides: list[str] | None = None,
                   return_hydra_config: bool = False):
    """The real composed config with overrides, as `bertology <pipeline>` would see it."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose(config_name=pipeline, overrides=overrides or [],
                       return_hydra_config=return_hydra_config)


@pytest.fixture(scope="session")
def synthetic_tokenizer(tmp_path_factory):
    """A WordPiece tokenizer trained on the default synthetic corpus."""
    from bertology.config.groups import DataConfig
    from bertology.data.corpora import build_corpus
    from bertology.data.tokenizers import train_tokenizer

    corpus = build_corpus(DataConfig(num_sentences=2000), DATA_DIR)
    return train_tokenizer(corpus, "wordpiece", 2000)


@pytest.fixture(scope="session")
def bpe_tokenizer():
    from bertology.config.groups import DataConfig
    from bertology.data.corpora import build_corpus
    from bertology.data.tokenizers import train_tokenizer

    corpus = build_corpus(DataConfig(num_sentences=2000), DATA_DIR)
    return train_tokenizer(corpus, "bpe", 2000)


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models gain nothing from intra-op threads, and on a shared CPU extra threads make
    them several times slower; modules that run many tiny forward passes ask for one."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# A small slice of the synthetic negation task: a tiny BERT learns it in ~100 steps.
NEGATION = ["task=synthetic_negation", "task.num_sentences=1500"]


@pytest.fixture(scope="session")
def negation_model(tmp_path_factory) -> Path:
    """A tiny BERT briefly fine-tuned on the synthetic negation task by `bertology finetune`:
    the teacher distillation tests use and the model pruning tests prune."""
    from bertology.pipelines import finetune

    out = tmp_path_factory.mktemp("negation_model")
    finetune.run(compose_config("finetune", ["logger=none", *NEGATION, "trainer.epochs=3",
                                             "trainer.lr=2e-3"]), out)
    return out / "model"


# ---------------------------------------------------------------- the reliability tables


TABLES_ENV = "BERTOLOGY_RELIABILITY_TABLES"  # set by tests/helpers/reliability_tables.py alone


def tables_wanted() -> bool:
    """Whether this run writes the reliability tables (tests/helpers/reliability_tables.py
    runs it)."""
    return bool(os.environ.get(TABLES_ENV))


def write_markdown_table(name: str, header: list[str], rows: list[list[str]]) -> None:
    """<dir>/<name>, a table docs/reliability.md shows, written only when the measuring tests
    run under tests/helpers/reliability_tables.py (which names the dir in
    BERTOLOGY_RELIABILITY_TABLES and runs every test of those files): a `make test`, or a `-k`
    run, writes no table, so a table never holds part of a run. Rows with the same first two
    cells keep the last."""
    if not tables_wanted() or not rows:
        return
    folder = os.environ[TABLES_ENV]
    table = {tuple(row[:2]): [cell.replace("|", "\\|") for cell in row] for row in rows}
    path = Path(folder) / name
    previous = path.read_text().splitlines()[2:] if path.exists() else []
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += previous + ["| " + " | ".join(row) + " |" for row in table.values()]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture
def fresh_logging():
    """Hydra's previous in-process run left log handlers on streams pytest has since closed;
    this test's run leaves its own (a FileHandler on <tmp>/<pipeline>.log), which a later test
    in the same worker would write through after its dir is gone: removed before and after."""
    import logging

    def remove_handlers() -> None:
        for handler in logging.root.handlers[:]:
            logging.root.removeHandler(handler)
            handler.close()

    remove_handlers()
    yield
    remove_handlers()


@dataclass
class FakeWandb:
    """What wandb.init was called with, and how many runs were finished."""

    calls: list[dict] = field(default_factory=list)
    finished: int = 0

    def init(self, **kwargs):
        self.calls.append(kwargs)
        fake = self

        class Run:
            summary: dict = {}

            def log(self, *args, **kwargs):
                pass

            def finish(self):
                fake.finished += 1

        return Run()


@pytest.fixture
def fake_wandb(monkeypatch) -> FakeWandb:
    """wandb.init replaced by a recorder: no W&B process, no files."""
    import wandb

    fake = FakeWandb()
    monkeypatch.setattr(wandb, "init", fake.init)
    return fake
