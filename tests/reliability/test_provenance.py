"""Every run writes env.json (versions, git commit and dirty flag, device, CPU, the command),
whatever the logger, and every file a run writes is readable by the group (the modes a plain
open() gives: 0644 files and 0755 dirs under umask 022)."""

from __future__ import annotations

import json
import os
import platform
import stat
import subprocess
from pathlib import Path

import pytest
import torch
import transformers
from conftest import REPO

from bertology.cli import entry as cli
from bertology.run.atomic import UMASK
from bertology.run.provenance import read_cpu, read_git, write_env

pytestmark = pytest.mark.usefixtures("fresh_logging")

SECRET = "hf_not-a-real-token-but-it-must-not-leak"
NEGATION = ["logger=none", "task=synthetic_negation", "task.num_sentences=200",
            "trainer=finetune_tiny", "trainer.epochs=1", "trainer.save_every=5"]
# The cheapest run of each pipeline (the finetune run's model/ is the teacher and the model
# pruned; the pretrain run is what the report reads).
PIPELINES = {
    "pretrain": ["logger=none", "trainer=smoke", "trainer.max_steps=4", "trainer.save_every=2",
                 "data.num_sentences=300", "data.eval_docs=10"],
    "finetune": NEGATION,
    "probe": ["logger=none", "init=random", "seeds=[0]", "max_train_sentences=100",
              "max_eval_sentences=50", "analysis.linear.max_iter=50"],
    "prune": [*NEGATION, "model.name_or_path={finetune}/model", "prune.experiments=[int8]"],
    "distill": [*NEGATION, "teacher.name_or_path={finetune}/model"],
    "report": ["{pretrain}"],
}


def run_pipeline(name: str, dirs: dict[str, Path]) -> None:
    """`bertology <name> ...` in this process, with a secret in the environment that must
    stay out of env.json."""
    args = [a.format(**dirs) for a in PIPELINES[name]]
    os.environ["HF_TOKEN"] = SECRET
    try:
        status = cli.main([name, *args, f"hydra.run.dir={dirs[name]}"])
    except SystemExit as stop:
        status = stop.code
    finally:
        del os.environ["HF_TOKEN"]
    assert status == 0, name


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("provenance")


@pytest.fixture(scope="module")
def pretrain_run(root) -> dict[str, Path]:
    dirs = {name: root / name for name in PIPELINES}
    run_pipeline("pretrain", dirs)
    return dirs


@pytest.fixture(scope="module")
def runs(pretrain_run) -> dict[str, Path]:
    for name in PIPELINES:
        if name != "pretrain":
            run_pipeline(name, pretrain_run)
    return pretrain_run


def check_env(run_dir: Path, pipeline: str) -> None:
    text = (run_dir / "env.json").read_text()
    env = json.loads(text)
    assert SECRET not in text
    assert env["python"] == platform.python_version()
    assert env["versions"]["torch"] == torch.__version__
    assert env["versions"]["transformers"] == transformers.__version__
    assert env["versions"]["bertology"]
    assert env["command"].startswith(f"bertology {pipeline} ")
    assert f"hydra.run.dir={run_dir}" in env["command"]
    assert env["device"]["type"] == ("cuda" if torch.cuda.is_available() else "cpu")
    assert env["cpu"]["cores"] == os.cpu_count()
    assert_git_matches_checkout(env["git"])


def check_modes(run_dir: Path) -> None:
    files, dirs = 0o666 & ~UMASK, 0o777 & ~UMASK
    if UMASK == 0o022:  # the usual: the 0644 / 0755
        assert (files, dirs) == (0o644, 0o755)
    wrong = []
    for path in [run_dir, *run_dir.rglob("*")]:
        mode = stat.S_IMODE(os.stat(path).st_mode)
        if mode != (dirs if path.is_dir() else files):
            wrong.append(f"{oct(mode)} {path.relative_to(run_dir)}")
    assert not wrong, wrong


def test_a_pretrain_run_writes_env_json_and_files_the_group_can_read(pretrain_run):
    run_dir = pretrain_run["pretrain"]
    check_env(run_dir, "pretrain")
    check_modes(run_dir)  # model/ and checkpoints/ included: safetensors wrote them 0600
    assert (run_dir / "model" / "model.safetensors").exists()
    assert len(list((run_dir / "checkpoints").glob("step_*/model.safetensors"))) == 2


@pytest.mark.slow
@pytest.mark.parametrize("pipeline", list(PIPELINES))
def test_every_pipeline_writes_env_json_and_files_the_group_can_read(runs, pipeline):
    check_env(runs[pipeline], pipeline)
    check_modes(runs[pipeline])
    if pipeline in ("finetune", "distill"):  # a model dir and checkpoints, as pretrain's
        assert list((runs[pipeline] / "checkpoints").glob("step_*/model.safetensors"))


def assert_git_matches_checkout(git: dict) -> None:
    """A commit of this checkout (another engineer may commit while the tests run, so any of
    its commits), or None in a plain copy without .git."""
    if not (REPO / ".git").exists():
        assert git == {"commit": None, "dirty": None}
        return
    known = subprocess.run(["git", "-C", str(REPO), "cat-file", "-e",
                            f"{git['commit']}^{{commit}}"])
    assert known.returncode == 0, git
    assert isinstance(git["dirty"], bool)


# ---------------------------------------------------------------- the parts, without a run


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                    *args], check=True, capture_output=True)


def test_git_commit_and_dirty_flag(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "a.py").write_text("x = 1\n")
    git(repo, "add", "a.py")
    git(repo, "commit", "-q", "-m", "one")
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert read_git(repo) == {"commit": head, "dirty": False}
    (repo / "notes.txt").write_text("untracked files do not count\n")
    assert read_git(repo)["dirty"] is False
    (repo / "a.py").write_text("x = 2\n")
    assert read_git(repo) == {"commit": head, "dirty": True}
    # a folder inside someone else's checkout is not a checkout of bertology
    (repo / "site-packages").mkdir()
    assert read_git(repo / "site-packages") == {"commit": None, "dirty": None}


def test_outside_a_git_checkout_both_are_none(tmp_path):
    assert read_git(tmp_path) == {"commit": None, "dirty": None}


def test_cpu_model_and_flags_from_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: Example CPU @ 2.0GHz\n"
                       "flags\t\t: fpu sse2 avx2 avx512f\n\nprocessor\t: 1\n"
                       "model name\t: Example CPU @ 2.0GHz\nflags\t\t: fpu sse2 avx2 avx512f\n")
    cpu = read_cpu(cpuinfo)
    assert cpu["model"] == "Example CPU @ 2.0GHz"
    assert cpu["flags"] == "fpu sse2 avx2 avx512f"
    assert cpu["cores"] == os.cpu_count()


def test_a_resumed_run_keeps_the_earlier_attempts(tmp_path):
    first = write_env(tmp_path, ["bertology", "pretrain"], [])
    write_env(tmp_path, ["bertology", "pretrain", "trainer.max_steps=20"],
              ["trainer.max_steps=20"])
    env = json.loads((tmp_path / "env.json").read_text())
    assert env["command"] == "bertology pretrain trainer.max_steps=20"
    assert env["earlier_attempts"] == [json.loads(json.dumps(first))]
    assert stat.S_IMODE(os.stat(tmp_path / "env.json").st_mode) == 0o666 & ~UMASK
