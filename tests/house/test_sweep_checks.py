"""The command line checked as a whole before Hydra makes a dir (issue 30.4): every job of a
`-m` sweep, Hydra's own run and sweep dirs, and lists that name an entry twice."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import compose_config

from bertology.cli.entry import main
from bertology.cli.sweep import check_no_repeats, sweep_jobs
from bertology.config.verbs import load_config_check
from bertology.errors import UserError


def run(args: list[str], cwd: Path, monkeypatch, capsys) -> tuple[int, list[str]]:
    monkeypatch.chdir(cwd)
    status = main(args)
    return status, capsys.readouterr().err.strip().splitlines()


def test_a_sweep_with_one_bad_combination_exits_2_before_any_job_dir(tmp_path, monkeypatch,
                                                                      capsys):
    status, err = run(["pretrain", "-m", "logger=none", "trainer=smoke", "seed=0,1",
                       "trainer.max_steps=5,0"], tmp_path, monkeypatch, capsys)
    assert status == 2
    assert err == ["bertology pretrain: error: sweep job 2 of 4 (logger=none trainer=smoke "
                   "seed=0 trainer.max_steps=0): trainer.max_steps=0 must be positive; no job "
                   "was started"]
    assert not (tmp_path / "outputs").exists()


def test_a_sweep_that_lists_a_value_twice_is_refused_before_any_job(tmp_path, monkeypatch,
                                                                    capsys):
    status, err = run(["pretrain", "-m", "logger=none", "trainer=smoke", "seed=0,1,0"],
                      tmp_path, monkeypatch, capsys)
    assert status == 2 and len(err) == 1
    assert "sweep jobs 1 and 3 are the same run" in err[0] and "seed=0" in err[0], err
    assert not (tmp_path / "outputs").exists()


def test_a_bundle_sweep_is_checked_job_by_job_with_its_own_parameters(tmp_path, monkeypatch,
                                                                        capsys):
    # pretrain_masking sweeps +masking over three values; each job gets the bad trainer value
    status, err = run(["pretrain", "-m", "experiment=pretrain_masking", "trainer.lr=-1"],
                      tmp_path, monkeypatch, capsys)
    assert status == 2 and len(err) == 1
    assert "sweep job 1 of 3 (+masking=static experiment=pretrain_masking" in err[0]
    assert "trainer.lr=-1" in err[0]
    assert not (tmp_path / "outputs").exists()


def test_a_misspelt_option_in_a_sweep_is_named_with_its_job(tmp_path, monkeypatch, capsys):
    status, err = run(["pretrain", "-m", "model=bert,robreta"], tmp_path, monkeypatch, capsys)
    assert status == 2 and len(err) == 1
    assert "sweep job 2 of 2 (model=robreta)" in err[0] and "did you mean model=roberta?" \
        in err[0]


def test_the_jobs_are_those_hydra_launches():
    jobs, _ = sweep_jobs("pretrain", ["experiment=pretrain_masking", "seed=0,1"])
    assert [job[0] for job in jobs] == ["+masking=static"] * 2 + ["+masking=static_x10"] * 2 \
        + ["+masking=dynamic"] * 2
    assert [job[-1] for job in jobs] == ["seed=0", "seed=1"] * 3


def test_a_good_sweep_passes_every_check():
    jobs, _ = sweep_jobs("pretrain", ["model=bert,roberta", "objective=mlm"])
    for job in jobs:
        load_config_check("pretrain")(compose_config("pretrain", job))


@pytest.mark.parametrize("key", ["hydra.sweep.dir", "hydra.run.dir"])
def test_hydras_dirs_are_checked_before_hydra_makes_them(key, tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    sweep = ["-m", "seed=0,1"] if key == "hydra.sweep.dir" else []
    status, err = run(["pretrain", *sweep, "logger=none", f"{key}={blocker}/out"], tmp_path,
                      monkeypatch, capsys)
    assert status == 2
    assert err == [f"bertology pretrain: error: {key}: {blocker} is a file, not a folder, so "
                   f"{blocker}/out cannot be made; set {key} to a folder you can write to"]


@pytest.mark.parametrize("args,line", [
    (["probe", "analysis=[linear,mlp,linear]"], "analysis=[linear,mlp,linear] lists linear "
     "twice; list each once"),
    (["prune", "prune.sparsities=[0.5,0.9,0.5]"], "prune.sparsities=[0.5,0.9,0.5] lists 0.5 "
     "twice; list each once"),
    (["pretrain", "logger.tags=[a,b,a]"], "lists a twice"),
    (["pretrain", "-m", "seed=0,1", "logger.tags=[a,a]"], "sweep job 1 of 2"),
])
def test_a_list_that_names_an_entry_twice_is_refused(args, line, tmp_path, monkeypatch,
                                                     capsys):
    status, err = run(args, tmp_path, monkeypatch, capsys)
    assert status == 2 and len(err) == 1 and line in err[0], err
    assert not (tmp_path / "outputs").exists()


def test_repeats_are_found_at_any_depth_and_allowed_where_they_mean_something():
    with pytest.raises(UserError, match=r"a\.b\[1\]\.c=\[x,y,x\] lists x twice"):
        check_no_repeats({"a": {"b": [{"c": ["z"]}, {"c": ["x", "y", "x"]}]}})
    check_no_repeats({"data": {"sentences_per_doc": [8, 8]}})  # [low, high]: exactly 8
    check_no_repeats({"a": [1, 2, "1.0"]})  # distinct values
