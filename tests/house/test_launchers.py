"""Sweeps on Hydra launchers (issue 8, part 1): submitit's local executor (the SLURM code path,
runnable here) and joblib run real sweeps; the SLURM preset composes and becomes a valid sbatch
script."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import compose_config
from omegaconf import OmegaConf

from bertology.run.rundir import is_finished
from bertology.run.tracking import without_wall_clock

SWEEP = ["logger=none", "trainer.max_steps=20", "data.num_sentences=400", "data.eval_docs=10"]


def sweep(args: list[str], sweep_dir: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, "-m", "bertology", "pretrain", "-m", *args, *SWEEP,
                           f"hydra.sweep.dir={sweep_dir}"], cwd=sweep_dir.parent, env=env,
                          capture_output=True, text=True, timeout=900)


def job_dirs(sweep_dir: Path) -> list[Path]:
    return sorted(p for p in sweep_dir.iterdir() if p.name.isdigit())


@pytest.mark.slow
def test_submitit_local_runs_each_model_as_its_own_job(tmp_path):
    sweep_dir = tmp_path / "sweep"
    result = sweep(["hydra/launcher=submitit_local", "model=bert,electra",
                    "hydra.launcher.timeout_min=15"], sweep_dir)
    assert result.returncode == 0, result.stderr[-2000:]
    jobs = job_dirs(sweep_dir)
    assert len(jobs) == 2 and all(is_finished(job) for job in jobs)
    families = [OmegaConf.load(job / ".hydra" / "config.yaml").model.family for job in jobs]
    assert families == ["bert", "electra"]
    assert (jobs[1] / "generator").is_dir()  # ELECTRA's generator, written by its own job
    assert len(list((sweep_dir / ".submitit").glob("*/*_result.pkl"))) == 2


@pytest.mark.slow
def test_joblib_runs_seeds_in_parallel(tmp_path):
    sweep_dir = tmp_path / "sweep"
    result = sweep(["hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "seed=0,1"], sweep_dir)
    assert result.returncode == 0, result.stderr[-2000:]
    jobs = job_dirs(sweep_dir)
    assert len(jobs) == 2 and all(is_finished(job) for job in jobs)
    losses = [json.loads((job / "metrics.json").read_text())["train/loss"] for job in jobs]
    assert losses[0] != losses[1]  # each job ran its own seed


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGUSR2], ids=["SIGTERM", "SIGUSR2"])
def test_a_preempted_submitit_job_checkpoints_and_the_requeued_job_resumes(signum, tmp_path,
                                                                           fresh_logging):
    """SLURM preempts with SIGTERM, and submitit signals USR2 before a time limit. Either way
    the job finishes its step, writes a checkpoint, and hands over to submitit, which requeues
    it (the local executor restarts it, as SLURM would); the requeued job resumes and ends with
    the metrics of a run never interrupted."""
    from bertology.cli import entry as cli

    budget = ["trainer=smoke", "trainer.max_steps=60", "trainer.save_every=5"]
    sweep_dir = tmp_path / "sweep"
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    proc = subprocess.Popen([sys.executable, "-m", "bertology", "pretrain", "-m",
                             "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=15",
                             *SWEEP, *budget, f"hydra.sweep.dir={sweep_dir}"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    job = sweep_dir / "0"
    deadline = time.monotonic() + 300
    while not list(job.glob("checkpoints/step_*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    first_pid = json.loads((job / "status.json").read_text())["pid"]
    os.kill(first_pid, signum)
    output = proc.communicate(timeout=600)[0]
    assert proc.returncode == 0, output[-3000:]
    status = json.loads((job / "status.json").read_text())
    assert is_finished(job) and status["pid"] != first_pid  # a second process finished it
    logs = "".join(p.read_text() for p in (sweep_dir / ".submitit").rglob("*.out"))
    logs += "".join(p.read_text() for p in (sweep_dir / ".submitit").rglob("*.err"))
    stopped = re.search(r"checkpoint written at step (\d+)", logs)
    assert stopped and "Requeued job" in logs, logs[-3000:]
    assert 0 < int(stopped.group(1)) < 60  # stopped mid-run, not at the end

    plain = tmp_path / "plain"
    assert cli.main(["pretrain", *SWEEP, *budget, f"hydra.run.dir={plain}"]) == 0
    resumed = without_wall_clock(json.loads((job / "metrics.json").read_text()))
    assert resumed == without_wall_clock(json.loads((plain / "metrics.json").read_text()))


def test_the_slurm_preset_makes_a_valid_sbatch_script(tmp_path, monkeypatch):
    """Compose hydra/launcher=slurm, map its fields as hydra-submitit-launcher does, and let
    submitit validate them and write the sbatch script (a stub `srun` stands in for a
    cluster)."""
    import submitit

    srun = tmp_path / "bin" / "srun"
    srun.parent.mkdir()
    srun.write_text("#!/bin/sh\n")
    srun.chmod(0o755)
    monkeypatch.setenv("PATH", f"{srun.parent}{os.pathsep}{os.environ['PATH']}")
    cfg = compose_config("pretrain", ["hydra/launcher=slurm", "hydra.launcher.partition=gpu",
                                      "hydra.sweep.dir=" + str(tmp_path / "sweep")],
                         return_hydra_config=True)
    params = OmegaConf.to_container(cfg.hydra.launcher, resolve=True)
    assert params.pop("_target_").endswith("SlurmLauncher")
    assert params["max_num_timeout"] == 3  # requeues on preemption
    executor = submitit.AutoExecutor(folder=params.pop("submitit_folder"), cluster="slurm",
                                     slurm_max_num_timeout=params.pop("max_num_timeout"))
    base = {"timeout_min", "nodes", "tasks_per_node", "gpus_per_node", "cpus_per_task",
            "mem_gb", "name", "stderr_to_stdout"}
    executor.update_parameters(**{k if k in base else f"slurm_{k}": v
                                  for k, v in params.items() if v is not None})
    script = executor._executor._make_submission_file_text("python -m bertology", "uid")
    for line in ("--partition=gpu", "--time=240", "--gpus-per-node=1", "--cpus-per-task=8",
                 "--mem=64GB", "--signal=USR2@120", "--nodes=1"):
        assert f"#SBATCH {line}" in script, script


# ---------------------------------------------------------------- W&B sweeps

WANDB_SWEEP = Path(__file__).parents[2] / "conf" / "wandb_sweep" / "pretrain_masking.yaml"


def agent_command(sweep_config: dict, args: dict, monkeypatch, tmp_path) -> list[str]:
    """The command line a `wandb agent` runs for one point of the sweep: wandb's own Agent
    builds it (macros expanded, ${args_no_hyphens} filled in); only the process start is
    replaced, to capture it."""
    from wandb import wandb_agent

    captured = []

    class Capture:
        def __init__(self, command=None, **kwargs):
            captured.append(command)

    monkeypatch.setattr(wandb_agent, "AgentProcess", Capture)
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    agent = wandb_agent.Agent.__new__(wandb_agent.Agent)  # no server: only the command part
    agent._sweep_command, agent._function, agent._in_jupyter = sweep_config["command"], None, False
    agent._run_processes, agent._forward_signals = {}, False
    agent._command_run({"run_id": "run0", "program": sweep_config["program"],
                        "args": {key: {"value": value} for key, value in args.items()}})
    return captured[0]


@pytest.mark.slow
def test_the_wandb_sweep_file_drives_the_cli_with_hydra_overrides(tmp_path, monkeypatch,
                                                                   fresh_logging, fake_wandb):
    import itertools

    import yaml

    from bertology.cli import entry as cli

    sweep_config = yaml.safe_load(WANDB_SWEEP.read_text())
    grid = sweep_config["parameters"]
    points = [dict(zip(grid, values))
              for values in itertools.product(*(grid[key]["values"] for key in grid))]
    command = agent_command(sweep_config, points[-1], monkeypatch, tmp_path)
    assert command[:3] == ["/usr/bin/env", "bertology", "pretrain"]
    overrides = command[3:]
    assert overrides[-3:] == ["model=roberta", "objective.mask_prob=0.4", "seed=2"]
    for point in points:  # every point of the grid composes
        fixed = [o for o in overrides if o.split("=")[0] not in point]
        compose_config("pretrain", [*fixed, *(f"{k}={v}" for k, v in point.items())])

    monkeypatch.setenv("WANDB_SWEEP_ID", "sweep0")  # what the agent sets for its child
    run_dir = tmp_path / "run"
    tiny = ["trainer.max_steps=4", "data.num_sentences=300", "data.eval_docs=5"]
    assert cli.main([*command[2:], *tiny, f"hydra.run.dir={run_dir}"]) == 0
    [call] = fake_wandb.calls
    assert fake_wandb.finished == 1 and call["group"] is None
    assert set(overrides) <= set(call["tags"])
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert sweep_config["metric"]["name"] in metrics  # the metric the sweep optimises exists
