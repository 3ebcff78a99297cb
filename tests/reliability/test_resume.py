"""A resume never mixes two configs (issue 31): a run dir with training state continues only
under the config it was made under, save for the result-neutral keys; resume=force continues
and records the change. Outcomes go to outputs/reliability/faults.md."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import write_markdown_table
from omegaconf import OmegaConf

from bertology.cli import entry as cli
from bertology.errors import UserError
from bertology.run.resume import (
    CHANGES,
    RESULT_NEUTRAL,
    SNAPSHOT,
    check_resume_config,
    compute_changes,
)
from bertology.run.rundir import read_status
from bertology.training.checkpoint import find_damage, list_checkpoints

ROWS: list[list[str]] = []
pytestmark = pytest.mark.usefixtures("fresh_logging")

PRETRAIN = ["pretrain", "logger=none", "trainer=smoke", "data.num_sentences=400",
            "data.eval_docs=10", "trainer.save_every=3", "trainer.log_every=3"]


@pytest.fixture(scope="module", autouse=True)
def _write_table():
    yield
    write_markdown_table("faults.md", ["fault", "pipeline", "outcome (measured)"], ROWS)


def main(args: list[str], run_dir: Path) -> int:
    try:
        return cli.main([*args, f"hydra.run.dir={run_dir}"])
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else 1


def fingerprint(run_dir: Path) -> dict[str, str]:
    """Every file's sha256 and mtime: 'untouched' means neither changed and none came or went."""
    return {str(p.relative_to(run_dir)): f"{hashlib.sha256(p.read_bytes()).hexdigest()} "
            f"{p.stat().st_mtime_ns}" for p in sorted(run_dir.rglob("*")) if p.is_file()}


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if "error:" in line]


@pytest.fixture(scope="module")
def killed_run(tmp_path_factory) -> Path:
    """`bertology pretrain` SIGKILLed after its first checkpoint (a real process, as a user's
    run dies): the dir a rerun would resume."""
    run_dir = tmp_path_factory.mktemp("resume") / "run"
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen([sys.executable, "-m", "bertology", *PRETRAIN,
                                "trainer.max_steps=400", f"hydra.run.dir={run_dir}"],
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while not list_checkpoints(run_dir / "checkpoints"):
        assert process.poll() is None and time.time() < deadline, "no checkpoint was written"
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    return run_dir


@pytest.fixture(scope="module")
def short_run(tmp_path_factory) -> Path:
    """A 6-step run with checkpoints at steps 3 and 6: a dir a rerun continues in seconds."""
    run_dir = tmp_path_factory.mktemp("short") / "run"
    assert main([*PRETRAIN, "trainer.max_steps=6"], run_dir) == 0
    return run_dir


def copy_of(run_dir: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    subprocess.run(["cp", "-a", str(run_dir), str(copy)], check=True)
    return copy


def rerun(killed: Path, tmp_path: Path, args: list[str]) -> tuple[int, Path]:
    """A copy of the killed run dir, rerun with args (each test gets its own copy)."""
    run_dir = copy_of(killed, tmp_path)
    return main([*PRETRAIN, "trainer.max_steps=400", *args], run_dir), run_dir


def refused(run_dir: Path, args: list[str], capsys) -> str:
    """`bertology <args>` into run_dir is refused: exit 2, one line and no traceback, every
    file of the dir byte- and mtime-identical. Returns the line."""
    before = fingerprint(run_dir)
    code = main(args, run_dir)
    err = capsys.readouterr().err
    lines = error_lines(err)
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert fingerprint(run_dir) == before, "a refused start touched the run dir"
    return lines[0]


@pytest.mark.slow
def test_resume_with_another_lr_is_refused_and_the_dir_untouched(killed_run, tmp_path, capsys):
    run_dir = copy_of(killed_run, tmp_path)
    line = refused(run_dir, [*PRETRAIN, "trainer.max_steps=400", "trainer.lr=1e-3"], capsys)
    assert "trainer.lr: 0.002 -> 0.001" in line and "resume=force" in line, line
    before = fingerprint(run_dir)
    saved = list_checkpoints(run_dir / "checkpoints")[-1].name
    ROWS.append(["killed after its first checkpoint, rerun with trainer.lr changed", "pretrain",
                 f"exit 2, one line naming trainer.lr with both values (0.002 -> 0.001); all "
                 f"{len(before)} files of the run dir byte- and mtime-identical ({saved} kept)"])


@pytest.mark.slow
def test_several_changes_are_all_named(killed_run, tmp_path, capsys):
    code, _ = rerun(killed_run, tmp_path, ["trainer.lr=1e-3", "trainer.batch_size=4",
                                           "seed=3", "trainer.log_every=1"])
    line = error_lines(capsys.readouterr().err)[0]
    assert code == 2
    for named in ("trainer.lr: 0.002 -> 0.001", "trainer.batch_size: 8 -> 4", "seed: 0 -> 3"):
        assert named in line, line
    assert "log_every" not in line, "a result-neutral key was refused"


def test_result_neutral_keys_and_a_longer_budget_resume(short_run, tmp_path):
    run_dir = copy_of(short_run, tmp_path)
    code = main([*PRETRAIN, "trainer.max_steps=9", "trainer.log_every=1",
                 "trainer.eval_every=7"], run_dir)
    assert code == 0 and read_status(run_dir)["status"] == "finished"
    assert "resumed from" in (run_dir / "pretrain.log").read_text()
    assert json.loads((run_dir / "metrics.json").read_text())["train/steps"] == 9
    recorded = json.loads((run_dir / CHANGES).read_text())[-1]
    assert {c["key"] for c in recorded["changes"]} == {
        "trainer.max_steps", "trainer.log_every", "trainer.eval_every"}
    assert all(c["result_neutral"] for c in recorded["changes"])
    ROWS.append(["killed, rerun with a higher max_steps and other log/eval frequencies",
                 "pretrain", "resumed and finished; the changes recorded in "
                 "resume_changes.json as result-neutral"])


@pytest.mark.slow
def test_a_lower_budget_is_refused(killed_run, tmp_path, capsys):
    code, _ = rerun(killed_run, tmp_path, ["trainer.max_steps=300"])
    assert code == 2
    assert "trainer.max_steps: 400 -> 300" in error_lines(capsys.readouterr().err)[0]


def test_resume_false_is_refused_before_anything_in_the_dir_is_touched(short_run, tmp_path,
                                                                      capsys):
    """Issue 42: `resume=false` into a dir with checkpoints was refused after Hydra and the
    run had rewritten .hydra/, env.json, run_config.json and the status (interrupted became
    failed). Now it is refused first: one line, exit 2, every file as it was."""
    run_dir = copy_of(short_run, tmp_path)
    line = refused(run_dir, [*PRETRAIN, "trainer.max_steps=2000", "resume=false"], capsys)
    assert "already holds checkpoints and resume=false" in line
    ROWS.append(["rerun with resume=false into a dir with checkpoints", "pretrain",
                 "refused in one line, exit 2, before Hydra: every file of the dir unchanged"])


@pytest.mark.slow  # a resumed pretraining run: make test stays under 3 minutes
def test_a_plain_resume_logs_nothing_about_neutral_changes(short_run, tmp_path):
    """resume=true, logger=none or a larger budget are result-neutral: the resumed run's log
    has no "changed key" warning (resume_changes.json still records them)."""
    run_dir = copy_of(short_run, tmp_path)
    assert main([*PRETRAIN, "trainer.max_steps=9", "resume=true"], run_dir) == 0
    log = (run_dir / "pretrain.log").read_text()
    assert "resumed from" in log and "changed key" not in log and "result-changing" not in log
    assert all(c["result_neutral"] for c in json.loads((run_dir / CHANGES).read_text())[-1][
        "changes"])


def test_resume_force_continues_and_records_the_change(short_run, tmp_path):
    run_dir = copy_of(short_run, tmp_path)
    code = main([*PRETRAIN, "trainer.max_steps=9", "trainer.lr=1e-3", "resume=force"], run_dir)
    assert code == 0, "resume=force did not continue"
    log = (run_dir / "pretrain.log").read_text()
    assert "resumed from" in log and "trainer.lr: 0.002 -> 0.001" in log
    entry = json.loads((run_dir / CHANGES).read_text())[-1]
    lr = next(c for c in entry["changes"] if c["key"] == "trainer.lr")
    assert (lr["saved"], lr["new"], lr["result_neutral"], entry["resume"]) == (
        0.002, 0.001, False, "force")
    assert json.loads((run_dir / SNAPSHOT).read_text())["trainer"]["lr"] == 0.001
    assert all(find_damage(c) is None for c in list_checkpoints(run_dir / "checkpoints"))
    ROWS.append(["killed, rerun with trainer.lr changed and resume=force", "pretrain",
                 "resumed and finished; a warning line in pretrain.log and the change (both "
                 "values) in resume_changes.json"])


def test_a_sweep_job_is_checked_against_its_saved_config(tmp_path):
    """A sweep's jobs are not prechecked (Hydra fills their dirs first): the job checks its
    dir's run_config.json, which each start writes."""
    run_dir = tmp_path / "job"
    (run_dir / "checkpoints" / "step_00000003").mkdir(parents=True)
    saved = {"trainer": {"lr": 0.002, "log_every": 3}, "logger": {"name": "none"},
             "resume": "auto"}
    (run_dir / SNAPSHOT).write_text(json.dumps(saved))
    new = OmegaConf.create({**saved, "trainer": {"lr": 0.001, "log_every": 1},
                            "logger": {"name": "wandb"}})
    with pytest.raises(UserError, match=r"trainer\.lr: 0\.002 -> 0\.001") as refused:
        check_resume_config(run_dir, new)
    assert "log_every" not in str(refused.value) and "logger" not in str(refused.value)
    new.resume = "force"
    assert [c.key for c in check_resume_config(run_dir, new)] == [
        "logger.name", "resume", "trainer.log_every", "trainer.lr"]


def test_changes_cover_added_removed_and_nested_keys():
    saved = {"a": 1, "teacher": {"trainer": {"log_every": 5, "lr": 1.0}}, "gone": [1, 2]}
    new = {"a": 1, "teacher": {"trainer": {"log_every": 9, "lr": 1.0}}, "added": None}
    changes = {c.key: c for c in compute_changes(saved, new)}
    assert set(changes) == {"teacher.trainer.log_every", "gone", "added"}
    assert changes["teacher.trainer.log_every"].allowed  # nested runs' blocks match too
    assert not changes["gone"].allowed and str(changes["gone"]) == "gone: [1, 2] -> (absent)"
    assert "logger.*" in RESULT_NEUTRAL
