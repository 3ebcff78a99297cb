"""Experiment bundles: every conf/experiment/*.yaml composes, each job of its sweep passes the
config checks and sets what the bundle is about, and each bundle's first job runs a step."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, compose_config
from omegaconf import OmegaConf

from bertology.config.pretrain_config import load_pretrain_config
from bertology.pipelines import pretrain

BUNDLES = sorted(p.stem for p in (REPO / "conf" / "experiment").glob("pretrain_*.yaml"))
ONE_STEP = ["logger=none", "trainer.max_steps=1", "trainer.batch_size=2",
            "trainer.eval_batches=1", "data.num_sentences=300", "data.eval_docs=5",
            "data.max_seq_length=64"]


def sweep_jobs(bundle: str, pipeline: str = "pretrain") -> list[list[str]]:
    """The override list of every job `bertology <pipeline> -m experiment=<bundle>` launches."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(pipeline, overrides=[f"experiment={bundle}"], return_hydra_config=True)
    params = OmegaConf.to_container(cfg.hydra.sweeper.params)
    keys = list(params)
    grid = itertools.product(*(str(params[k]).split(",") for k in keys))
    return [[f"experiment={bundle}", *(f"{k}={v}" for k, v in zip(keys, job))] for job in grid]


def test_every_pretrain_ablation_of_the_issue_has_a_bundle():
    assert {"pretrain_table8", "pretrain_masking", "pretrain_pair_task", "pretrain_input_format",
            "pretrain_whole_word", "pretrain_unk_mask", "pretrain_mask_rate",
            "pretrain_sizes_table6", "pretrain_sizes_turc", "pretrain_mlm_vs_electra"} \
        <= set(BUNDLES)


@pytest.mark.parametrize("bundle", BUNDLES)
def test_bundle_header_gives_the_command_that_runs_it(bundle):
    text = (REPO / "conf" / "experiment" / f"{bundle}.yaml").read_text()
    assert f"bertology pretrain -m experiment={bundle}" in text


@pytest.mark.slow
@pytest.mark.parametrize("bundle", BUNDLES)
def test_every_job_of_a_bundle_composes_and_differs(bundle):
    jobs = [load_pretrain_config(compose_config("pretrain", job)) for job in sweep_jobs(bundle)]
    assert len(jobs) >= 2
    views = [repr((j.model, j.size, j.objective)) for j in jobs]
    assert len(set(views)) == len(views), "two jobs of the sweep are the same run"


def test_table8_jobs_set_the_paper_ratios():
    rows = {(j.objective.mask_token_ratio, j.objective.keep_ratio, j.objective.random_token_ratio)
            for j in (load_pretrain_config(compose_config("pretrain", job))
                      for job in sweep_jobs("pretrain_table8"))}
    assert rows == {(0.8, 0.1, 0.1), (1.0, 0.0, 0.0), (0.8, 0.0, 0.2), (0.8, 0.2, 0.0),
                    (0.0, 0.2, 0.8), (0.0, 0.0, 1.0)}


@pytest.mark.parametrize("bundle", BUNDLES)
def test_first_job_of_each_bundle_runs_one_step(bundle, tmp_path):
    job = sweep_jobs(bundle)[0]
    metrics = pretrain.run(compose_config("pretrain", job + ONE_STEP), tmp_path)
    assert metrics["train/steps"] == 1.0 and metrics["train/flops"] > 0
    assert (tmp_path / "model" / "config.json").exists()


@pytest.mark.slow
def test_a_bundle_sweeps_from_the_command_line(tmp_path):
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    result = subprocess.run([sys.executable, "-m", "bertology", "pretrain", "-m",
                             "experiment=pretrain_unk_mask", *ONE_STEP], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    jobs = sorted(Path(tmp_path, "outputs", "pretrain", "multirun").glob("*/*/[0-9]"))
    choices = [OmegaConf.load(j / ".hydra" / "config.yaml").objective.mask_with for j in jobs]
    assert choices == ["mask", "unk"]


def test_table7_bundle_sweeps_every_feature_choice_on_a_frozen_minilm():
    from bertology.config.finetune_config import load_finetune_config
    from bertology.config.groups import FEATURES

    configs = [load_finetune_config(compose_config("finetune", job))
               for job in sweep_jobs("finetune_table7", "finetune")]
    assert sorted(c.head.features for c in configs) == sorted(FEATURES)
    assert {(c.task.name, c.head.mode, c.model.name_or_path) for c in configs} == {
        ("conll03", "feature", "sentence-transformers/all-MiniLM-L6-v2")}
