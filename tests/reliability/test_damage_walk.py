"""The damage walk (issue 41): every file a pipeline reads from outside, damaged each way a
file is damaged in the wild (tests/helpers/damage_walk.py makes the cases), through `bertology ...`
in process (cli.main, as the console script runs it). Each case ends as docs/reliability.md
lists it:

    refuse  exit 2, one line on stderr naming the damaged file, no traceback, and no run dir
            that could pass for a run (no model/, no metrics.json)
    finish  exit 0, and the log (or the command's output) holds what was skipped, truncated or
            recomputed; a damaged cache entry is made again, and metrics.json counts it

`make test` (`-m "not slow"`) runs every 25th case of the walk; every other run (CI's
`-m slow`, `make tables`) runs them all, and `make tables` writes the table of outcomes.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path

import pytest
from conftest import fast_sample, write_markdown_table
from damage_walk import DAMAGES, RECOMPUTED, TARGETS, cases, damage

from bertology.cli import entry as cli

CASES = cases()
RESULTS: list[tuple[str, str, str]] = []


def pytest_generate_tests(metafunc):
    if "case" in metafunc.fixturenames:
        metafunc.parametrize("case", fast_sample(CASES, 25, ids=[c.id for c in CASES]))


@pytest.fixture
def walk_dir(tmp_path, monkeypatch, fresh_logging):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(pipeline: str, args: list[str], capsys) -> tuple[int, str, str]:
    for handler in logging.root.handlers[:]:  # Hydra's handlers of the set-up run
        logging.root.removeHandler(handler)
    try:
        status = cli.main([pipeline, *args])
    except SystemExit as stop:
        status = stop.code if isinstance(stop.code, int) else 1
    out = capsys.readouterr()
    return status, out.out, out.err


def names(line: str, file: Path) -> bool:
    """The line names the file, or its folder and its name (`no finished runs (metrics.json
    + .hydra/config.yaml) under <run>`)."""
    return str(file) in line or (str(file.parent.parent) in line and file.name in line)


def test_damaged_input_is_refused_or_said(case, walk_dir, capsys):
    world = case.target.build(walk_dir)
    capsys.readouterr()
    file = case.file(walk_dir)
    damage(file, case.damage, case.target.format)
    status, out, err = run(world.pipeline, world.args, capsys)
    errors = [line for line in err.splitlines() if line.startswith("bertology ")]
    assert "Traceback" not in err, err[-3000:]
    if case.outcome == "refuse":
        RESULTS.append((case.target.name, case.damage, f"exit {status}: " + " ".join(errors)))
        assert status == 2 and len(errors) == 1, err[-3000:]
        assert names(errors[0], file.resolve()) or names(errors[0], file), errors[0]
        run_dir = world.run_dir
        assert run_dir is None or not (run_dir / "metrics.json").exists()
        assert run_dir is None or not (run_dir / "model").exists()
        return
    note = case.target.finish[case.damage]
    said = out + err + "".join(p.read_text() for p in walk_dir.glob("run/*.log"))
    metrics = (json.loads((world.run_dir / "metrics.json").read_text())
               if world.run_dir is not None else {})
    recorded = sorted(k for k in metrics if k.startswith(("data/", "cache/")))
    RESULTS.append((case.target.name, case.damage,
                    f"exit {status}: {note.strip(':(')} said" + (f"; {', '.join(recorded)}"
                                                                 if recorded else "")))
    assert status == 0, err[-3000:]
    assert note in said, said[-3000:]
    if note == RECOMPUTED:
        assert any(k.startswith("cache/recomputed/") for k in metrics), metrics


def test_the_walk_covers_every_reader_and_damage():
    kinds = Counter(c.damage for c in CASES)
    assert set(kinds) == set(DAMAGES), kinds
    assert len(CASES) >= 150 and len({c.id for c in CASES}) == len(CASES)
    assert {t.name.split(": ")[0] for t in TARGETS} >= {"checkpoint", "cache", "run dir"}


@pytest.fixture(scope="module", autouse=True)
def _write_table():
    yield
    order = {c.id: i for i, c in enumerate(CASES)}
    rows = sorted(RESULTS, key=lambda r: order.get(f"{r[0]}:{r[1]}".replace(" ", "-"), 0))
    write_markdown_table("damage_walk.md", ["file", "damage", "outcome (measured)"],
                         [[name, kind, shorten(outcome)] for name, kind, outcome in rows])


def shorten(text: str) -> str:
    import re

    text = re.sub(r"/tmp/pytest-of-[^/]+/pytest-\d+/[^/ ']+", "<tmp>", text)
    text = text.replace("`", "'")
    return f"`{text[:300]}`"
