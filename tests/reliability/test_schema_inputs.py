"""The generated bad-input suite: every leaf key of every pipeline's config, walked
from the composed configs (tests/helpers/schema_walk.py), is fed values derived from its own
value and kind, never from a hand list:

- a value of the wrong type (a string for a number or a flag, a list for a string, a mapping
  for a null, a fraction for an integer);
- out of range: -1 for a number, 1.5 for a number that lies in (0, 1), an unknown word for a
  string (an option key's range is its options);
- for a list: the empty list and a repeated element;
- for a path: a missing path, a folder where a file belongs, a file where a folder belongs, and
  a location under a file (nothing can be written or read there).

Each must be refused by `bertology <pipeline> ...` (cli.main, in process) with exit 2 and one
line naming the key, before Hydra is handed the run (so before any model, data set or nested
run), and with no traceback. A case the schema accepts on purpose is listed in ACCEPTED with the
reason; a new key whose bad values are accepted, and not listed, fails the suite.

The whole walk composes every option of every group (~225 Hydra compositions, half a minute
before the first case runs), so it is made only where its cases are run: `make test`
(`-m "not slow"`) walks each pipeline's default config and runs every 25th of its cases; any
other run (`make tables`, `-m slow`, a plain `pytest`) walks everything and runs every case not
deselected (pytest_generate_tests below).
"""

from __future__ import annotations

import fnmatch
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from conftest import fast_sample, tables_wanted, write_markdown_table
from schema_walk import PIPELINES, walk

from bertology.cli import entry as cli

# The keys that name files or folders, by kind. dir/file: read; out: written (created if
# missing); model: a checkpoint dir with config.json (or a hub id); files: a list of files.
PATH_KEYS = {
    "paths.data_dir": "dir",
    "paths.cache_dir": "out",
    "model.name_or_path": "model",
    "teacher.name_or_path": "model",
    "teacher.model.name_or_path": "model",
    "model.tokenizer_name_or_path": "model",
    "teacher.model.tokenizer_name_or_path": "model",
    "compare_to": "model",
    "compression.student_path": "model",
    "task.path": "dir",
    "task.train_file": "file",
    "task.eval_file": "file",
    "data.path": "dir",
    "data.files": "files",
    "runs": "dirs",
    "findings_dir": "dir",
}

# (key pattern, case) -> why the schema accepts that value on purpose.
ACCEPTED = {
    ("*trainer.lr", "1.5"): "a learning rate's range is (0, inf): 1.5 is large, not invalid",
    ("analysis.*.lr", "1.5"): "a learning rate's range is (0, inf): 1.5 is large, not invalid",
    ("*trainer.adam_epsilon", "1.5"): "Adam's epsilon is any positive number",
    ("*trainer.weight_decay", "1.5"): "AdamW's decoupled weight decay is any number >= 0",
    ("*trainer.epochs", "a fraction for an integer"):
        "passes over the training set may be fractional (0.5: half a pass)",
    ("logger.project", "unknown word"): "free text: the W&B project's name",
    ("logger.tags", "empty list"): "no tags",
    ("task.name", "unknown word"): "a display name (tables, W&B); task.path and task.format "
                                   "say what is read",
    ("paths.data_dir", "missing path"): "only tasks and corpora under it read it, and they "
                                        "name the missing folder; synthetic data reads nothing",
    ("data.sentences_per_doc", "repeated element"): "[n, n]: every document has n sentences",
    ("analysis.cloze.blimp_paradigms", "empty list"): "[]: every BLiMP paradigm",
    # Names inside a data set: checked against the file's header or the hub data set's
    # features when the task or corpus is read, which every pipeline does before it builds a
    # model (test_bad_inputs.py's "no column 'label'" case shows the refusal).
    ("task.label_column", "unknown word"): "a column of the data file, read from its header",
    ("task.hub", "unknown word"): "a hub data set name, known once the hub is asked",
    ("task.hub_config", "unknown word"): "a configuration of the hub data set",
    ("task.hub_revision", "unknown word"): "a branch, tag or commit of the hub data set",
    ("task.hub_data_dir", "unknown word"): "a folder of the hub data set",
    ("task.hub_label_column", "unknown word"): "a column of the hub data set",
    ("data.split", "unknown word"): "a split of the hub data set",
    ("data.text_column", "unknown word"): "a column of the hub data set",
    ("task.hub_eval_split", "unknown word"): "a split of the hub data set",
}


def path_cases(kind: str, tmp: Path) -> list[tuple[str, object]]:
    """The wrong things a path key can point at, per kind."""
    missing, folder, file = str(tmp / "missing"), str(tmp / "folder"), str(tmp / "file.txt")
    under_file = str(tmp / "file.txt" / "sub")
    if kind == "file":
        return [("missing path", missing), ("a folder for a file", folder),
                ("under a file", under_file)]
    if kind in ("files", "dirs"):
        wrong = folder if kind == "files" else file
        return [("missing path", [missing]), ("wrong kind of path", [wrong]),
                ("under a file", [under_file])]
    cases = [("a file for a folder", file), ("under a file", under_file)]
    return cases if kind == "out" else [("missing path", missing), *cases]


def value_cases(value: object) -> list[tuple[str, object]]:
    """Wrong type and out-of-range values derived from a key's own value."""
    if isinstance(value, bool):
        return [("wrong type", "maybe")]
    if isinstance(value, (int, float)):
        cases = [("wrong type", "abc"), ("-1", -1)]
        if isinstance(value, int):
            cases.append(("a fraction for an integer", 1.5))
        elif 0 < value < 1:
            cases.append(("1.5", 1.5))
        return cases
    if isinstance(value, str):
        return [("wrong type", [1, 2]), ("unknown word", "no_such_value")]
    if isinstance(value, list):
        cases = [("wrong type", {"a": 1}), ("empty list", [])]
        if value:
            cases.append(("repeated element", [value[0], value[0]]))
        return cases
    if isinstance(value, dict):
        return [("wrong type", "abc")]
    return [("wrong type", {"a": 1})]  # null: no value takes a mapping


def override(key: str, value: object) -> str:
    """key=value as Hydra's override grammar spells it."""
    return f"{key}={spell(value)}"


def spell(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ",".join(spell(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{spell(v)}" for k, v in value.items()) + "}"
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return repr(value)


def accepted(key: str, case: str) -> str | None:
    for (pattern, name), reason in ACCEPTED.items():
        if name == case and fnmatch.fnmatchcase(key, pattern):
            return reason
    return None


def cases_of(leaves) -> list[tuple]:
    """Each leaf's wrong values; a "wrong" value that is the leaf's own value under its base
    (an added key's schema default, e.g. probe's task.text_columns=[] on a tagging task,
    which reads no text columns) is what the config already says, so no case."""
    return [(leaf, case, value) for leaf in leaves
            for case, value in (path_cases(PATH_KEYS[leaf.key], Path("<tmp>"))
                                if leaf.key in PATH_KEYS else value_cases(leaf.value))
            if not (leaf.added and value == leaf.value)]


def case_id(leaf, case, _value) -> str:
    return f"{leaf.pipeline}:{leaf.key}:{case}"


def fast_run(config) -> bool:
    """The run is `make test`'s: slow tests deselected."""
    return (config.getoption("markexpr") or "").replace(" ", "") == "notslow"


def pytest_generate_tests(metafunc):
    """The generated cases, from the walk this run needs (module docstring)."""
    if "case" not in metafunc.fixturenames:
        return
    if fast_run(metafunc.config):
        cases = cases_of(walk(every_option=False))[::25]
        params = [pytest.param(*c, id=case_id(*c)) for c in cases]
    elif metafunc.function.__name__ == "test_console_script_refuses_a_sample":
        cases = cases_of(walk())
        cases = cases[:: max(1, len(cases) // 24)]  # every k-th case: ~24, all pipelines
        params = [pytest.param(*c, id=case_id(*c)) for c in cases]
    else:
        cases = cases_of(walk())
        params = fast_sample(cases, 25, ids=[case_id(*c) for c in cases])
    metafunc.parametrize("leaf,case,value", params)


RESULTS: list[tuple[str, str, str, str]] = []


class Handed(Exception):
    """The run was handed to Hydra: the config passed every check."""


@pytest.fixture
def refusing_cli(monkeypatch, tmp_path):
    """cli.main that stops where Hydra would take over, in a working dir of its own, with
    the path fixtures of path_cases."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "folder").mkdir()
    (tmp_path / "file.txt").write_text("a line of text\n")

    def launch(pipeline, overrides):
        raise Handed(" ".join(overrides))

    monkeypatch.setattr(cli, "launch", launch)
    return tmp_path


def materialise(value: object, tmp: Path) -> object:
    if isinstance(value, str):
        return value.replace("<tmp>", str(tmp))
    if isinstance(value, list):
        return [materialise(v, tmp) for v in value]
    return value


def test_bad_value_is_refused_before_work(leaf, case, value, refusing_cli, capsys):
    bad = ("+" if leaf.added else "") + override(leaf.key, materialise(value, refusing_cli))
    reason = accepted(leaf.key, case)
    try:
        status = cli.main([leaf.pipeline, *leaf.base, bad])
    except Handed:
        status = None
    err = capsys.readouterr().err.strip()
    RESULTS.append((leaf.pipeline, leaf.key, case, "accepted" if status is None else str(status)))
    if reason is not None:
        assert status is None, f"{bad} is listed as accepted ({reason}) but refused: {err}"
        return
    assert status == 2, f"{bad} was not refused"
    assert len(err.splitlines()) == 1, err
    group, name = leaf.key.split(".")[0], leaf.key.split(".")[-1]
    assert group in err and name in err, f"the error does not name {leaf.key}: {err}"


@pytest.mark.slow
def test_every_pipeline_and_key_is_walked():
    counts = Counter(leaf.pipeline for leaf in walk())
    assert set(counts) == set(PIPELINES)
    assert all(counts[p] >= 50 for p in PIPELINES if p != "report"), counts
    stale = [pattern for pattern, _ in ACCEPTED
             if not any(fnmatch.fnmatchcase(leaf.key, pattern) for leaf in walk())]
    assert not stale, f"ACCEPTED lists keys the schema no longer has: {stale}"


@pytest.fixture(scope="module", autouse=True)
def _write_table():
    yield
    if not RESULTS or not tables_wanted():
        return
    keys = Counter(leaf.pipeline for leaf in walk())
    rows = []
    for pipeline in PIPELINES:
        mine = [r for r in RESULTS if r[0] == pipeline]
        refused = sum(r[3] == "2" for r in mine)
        rows.append([pipeline, str(keys[pipeline]), str(len(mine)), str(refused),
                     str(len(mine) - refused)])
    write_markdown_table("schema_inputs.md", ["pipeline", "leaf keys", "generated cases",
                                              "refused (exit 2)", "accepted on purpose"], rows)


def test_the_output_location_must_be_writable(refusing_cli, capsys):
    status = cli.main(["pretrain", f"hydra.run.dir={refusing_cli / 'file.txt' / 'run'}"])
    err = capsys.readouterr().err
    assert status == 2 and "hydra.run.dir" in err and len(err.strip().splitlines()) == 1, err
    assert re.search(r"not a (folder|directory)", err), err


@pytest.mark.slow
def test_console_script_refuses_a_sample(leaf, case, value, tmp_path):
    """The same cases through the installed `bertology` script, as a user meets them: exit 2,
    one line, no traceback, and no run dir left behind."""
    if accepted(leaf.key, case):
        pytest.skip("accepted on purpose")
    (tmp_path / "folder").mkdir()
    (tmp_path / "file.txt").write_text("a line of text\n")
    bad = ("+" if leaf.added else "") + override(leaf.key, materialise(value, tmp_path))
    script = Path(sys.executable).parent / "bertology"
    result = subprocess.run([str(script), leaf.pipeline, *leaf.base, bad], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert not (tmp_path / "outputs").exists(), "a run dir was left behind"
