"""Help that explains (issue 30.2): `bertology <pipeline> --help` puts a line beside every group
option and experiment; a misspelt pipeline, option or key is one line with the closest valid
names and exit 2; bash completion, run in a real bash, completes pipelines, options and keys."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, run_cli

from bertology.cli.completion import query
from bertology.cli.entry import main
from bertology.cli.help import offered
from bertology.config.options import (
    EXPERIMENT,
    all_groups,
    closest,
    describe,
    describe_option,
    group_options,
    pipeline_experiments,
    pipeline_groups,
)
from bertology.config.verbs import pipeline_names


def test_every_config_file_says_what_it_is_on_its_first_comment_line():
    files = [*(REPO / "conf").glob("*.yaml")]
    files += [REPO / "conf" / g / f"{o}.yaml" for g in all_groups() for o in group_options(g)]
    undescribed = [str(f.relative_to(REPO)) for f in files if not describe(f)]
    assert not undescribed, f"no leading comment: {undescribed}"


def test_the_description_is_the_first_sentence_of_the_leading_comment(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text("# @package _global_\n# BERT Table 8 (Devlin et al., 2019, App. C.2): what\n"
                    "# the chosen tokens become. More here.\n#   bertology pretrain -m ...\n"
                    "key: 1\n")
    assert describe(path) == ("BERT Table 8 (Devlin et al., 2019, App. C.2): what the chosen "
                              "tokens become.")
    assert describe(path, width=30) == "BERT Table 8 (Devlin et ..."


@pytest.mark.parametrize("pipeline", sorted(pipeline_names()))
def test_help_shows_a_description_beside_every_group_option(pipeline, capsys):
    assert main([pipeline, "--help"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for group in pipeline_groups(pipeline):
        options = (pipeline_experiments(pipeline) if group == EXPERIMENT
                   else offered(pipeline, group))  # the options it can run (probe: tagging tasks)
        for option in options:
            row = [line for line in lines if line[4:].split(" ", 1)[0] == option
                   and describe_option(group, option)[:12] in line]
            assert row, f"{group}={option}: no line with its description"
    assert max(len(line) for line in lines) <= 100


def test_pretrain_help_marks_the_defaults_and_lists_only_its_own_experiments(capsys):
    main(["pretrain", "--help"])
    out = capsys.readouterr().out
    assert "  * bert " in out and "  * tiny " in out and "    roberta " in out
    assert "pretrain_masking" in out and "study_probe_pos" not in out
    assert "task:" not in out.splitlines()  # a probe/finetune group


# ---------------------------------------------------------------- did you mean


def test_the_closest_names_are_one_clear_winner_or_near_ties():
    # difflib ratio 2M/T: robreta/roberta share 6 of 14 letters in order (r-o-b-e-r-a... ) well
    # above the rest; pretrain_mask is as near to two bundles and farther from the others
    assert closest("robreta", ["bert", "electra", "minilm", "roberta", "spanbert"]) == ["roberta"]
    assert closest("max_step", ["max_steps", "max_flops", "lr"]) == ["max_steps"]
    assert closest("zzz", ["bert", "roberta"]) == []


@pytest.mark.parametrize("args,line", [
    (["pretrain", "model=robreta"], "bertology pretrain: error: model=robreta is not an option "
     "of model; did you mean model=roberta? (options: bert, electra, minilm, modernbert, "
     "roberta, spanbert)"),
    (["pretrain", "trainer.max_step=5"], "bertology pretrain: error: trainer.max_step is not a "
     "key of the pretrain config; did you mean trainer.max_steps?"),
], ids=["option", "key"])
def test_a_misspelt_option_or_key_is_one_line_with_the_suggestion_exit_2(args, line, tmp_path):
    """Through the console script, as a shell sees it."""
    result = run_cli(*args, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [line]
    assert "+" not in result.stderr  # never Hydra's advice to append the key with +key=
    assert not (tmp_path / "outputs").exists()


@pytest.mark.parametrize("args,words", [
    (["pretrian"], "did you mean pretrain?"),
    (["rnus"], "did you mean runs?"),  # the commands beside the pipelines too
    (["dtaa"], "did you mean data?"),
    (["pretrain", "modle=bert"], "did you mean model?"),
    (["pretrain", "trainr.max_steps=5"], "did you mean trainer.max_steps?"),
    (["pretrain", "+trainer.max_step=5"], "did you mean trainer.max_steps?"),
    (["pretrain", "+sed=1"], "did you mean seed?"),
    (["pretrain", "model=electra", "model.generator_frac=0.3"],
     "did you mean model.generator_fraction?"),
    (["pretrain", "hydra/launcher=slrum"], "did you mean hydra/launcher=slurm?"),
    (["probe", "analysis=[linear,structral]"], "did you mean analysis=structural?"),
    (["pretrain", "trainer.zzzzz=1"], "trainer has: adam_beta1"),
    (["pretrain", "trainer=smoke,default"], "add -m"),
    # a group of other pipelines is named as one, never "did you mean model?" for `model`
    (["report", "model=bert"], "model is a config group of other pipelines, not of the report"),
    (["distill", "model=bert"], "write model@teacher.model=<option>"),
])
def test_misspellings_name_the_closest_valid_names(args, words, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err


# ---------------------------------------------------------------- bash completion


@pytest.mark.parametrize("line,expected", [
    ("bertology pre", ["pretrain"]),
    ("bertology pretrain mod", ["model.", "model="]),
    ("bertology pretrain model=ro", ["model=roberta"]),
    ("bertology pretrain -m model=bert,ro", ["model=bert,roberta"]),
    ("bertology pretrain trainer.max_st", ["trainer.max_steps="]),
    ("bertology pretrain model=electra model.generator_f", ["model.generator_fraction="]),
    ("bertology probe analysis=str", ["analysis=structural"]),
    ("bertology pretrain --he", ["--help"]),
    ("bertology ru", ["runs"]),
    ("bertology runs --f", ["--format"]),
    ("bertology runs --format=c", ["--format=csv"]),
    ("bertology runs outputs/pro", []),  # a path: bash completes it (-o default)
])
def test_completion_candidates(line, expected):
    assert query(line) == expected


def bash_complete(tmp_path: Path, words: list[str], cword: int) -> list[str]:
    """COMPREPLY from the generated script's function, run by bash as a TAB would run it:
    COMP_WORDS split as bash splits them (at '='), COMP_LINE and COMP_POINT set."""
    wrapper = tmp_path / "bertology"  # the command the user types, on PATH
    wrapper.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m bertology \"$@\"\n")
    wrapper.chmod(0o755)
    line = " ".join(words[:2]) + " " + "".join(words[2:]) if len(words) > 2 else " ".join(words)
    script = (f'eval "$(bertology completion bash)"\n'
              "complete -p bertology >/dev/null || exit 3\n"
              f"COMP_WORDS=({' '.join(shlex.quote(w) for w in words)})\n"
              f"COMP_CWORD={cword}\nCOMP_LINE={shlex.quote(line)}\nCOMP_POINT=${{#COMP_LINE}}\n"
              '_bertology_complete\nprintf "%s\\n" "${COMPREPLY[@]}"\n')
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "PYTHONWARNINGS": "ignore"}
    result = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    return [w for w in result.stdout.splitlines() if w]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_bash_completes_pipelines_options_and_keys(tmp_path):
    assert bash_complete(tmp_path, ["bertology", "pre"], 1) == ["pretrain"]
    assert bash_complete(tmp_path, ["bertology", "ru"], 1) == ["runs"]
    # bash splits `model=ro` into model, =, ro: the reply replaces only the last word
    assert bash_complete(tmp_path, ["bertology", "pretrain", "model", "=", "ro"], 4) == \
        ["roberta"]
    assert bash_complete(tmp_path, ["bertology", "pretrain", "model", "="], 3) == \
        [f"={o}" for o in group_options("model")]
    assert bash_complete(tmp_path, ["bertology", "pretrain", "trainer.max_st"], 2) == \
        ["trainer.max_steps="]


def test_hydra_shell_completion_flag_gives_the_bertology_script(capsys):
    """`bertology -sc install=bash` failed with "unknown pipeline '-sc'"."""
    assert main(["-sc", "install=bash"]) == 0
    assert "complete -o default -F _bertology_complete bertology" in capsys.readouterr().out
    assert main(["completion", "zsh"]) == 2


def test_the_usage_names_every_model_and_the_version(capsys):
    """`bertology --help` offers every model= option a run can pretrain; `--version` answers."""
    from bertology import __version__
    from bertology.cli import entry
    from bertology.study.judge.encoders import pretrainable

    assert entry.main(["--help"]) == 0
    usage = capsys.readouterr().out
    missing = [name for name in pretrainable() if name not in usage]
    assert not missing, f"bertology --help does not name {missing}"
    assert entry.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"bertology {__version__}"


def test_data_help_says_usage_once(capsys):
    from bertology.cli.data_command import main as data_main

    with pytest.raises(SystemExit) as stop:
        data_main(["--help"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.count("usage:") == 1


def test_report_help_offers_only_what_report_takes(tmp_path, monkeypatch, capsys):
    """No sweep over models, and `--cfg job` (which the help recommends) works: the word after
    a Hydra flag that takes a value is that flag's, not a run dir."""
    from bertology.cli import entry
    from bertology.cli.help import format_help

    text = format_help("report")
    assert "model=bert" not in text and "findings_dir" in text and "--cfg job" in text
    assert entry.dirs_overrides(["--cfg", "job", "runs_a", "findings_dir=f"], "runs") == [
        "runs=['runs_a']", "--cfg", "job", "findings_dir=f"]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs_a").mkdir()
    assert entry.main(["report", "runs_a", "--cfg", "job"]) == 0
    assert "runs:" in capsys.readouterr().out


def test_probe_help_offers_only_the_tasks_it_can_probe():
    """Issue 42: `probe --help` offered task=sst2, which the probe then refused; it lists the
    tagging tasks only (word labels), and the pipelines that read sentence tasks keep them."""
    from bertology.cli.help import format_help

    probe = format_help("probe").split("\ntask:\n")[1].split("\nanalysis:")[0]
    assert "ud_pos" in probe and "synthetic_pos" in probe and "conll03" in probe
    assert not any(f" {name} " in probe for name in ("sst2", "mrpc", "squad",
                                                     "synthetic_negation"))
    assert " sst2 " in format_help("finetune")
