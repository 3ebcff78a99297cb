"""One row per extension point: every row names code that exists, and a new analysis or a new
verb is its code, its row and its YAML, nothing else. A toy of each, registered here the way a
contributor would add one (its row monkeypatched into the table, its YAML in a copy of conf/),
shows up in the usage, the verb's help, completion, the config checks and the capability checks,
none of which names it."""

from __future__ import annotations

import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import REPO

from bertology.config.analysis_settings import ANALYSES, Analysis, analyses_needing
from bertology.config.checks import positive
from bertology.config.prune_settings import LAYER_STRATEGIES, PRUNE_EXPERIMENTS, PRUNE_SCORES
from bertology.config.rows import load_function
from bertology.config.verbs import VERBS, Verb, load_config_check, pipeline_names
from bertology.errors import UserError, require


def every_spec() -> list[str]:
    """Each "module:function" the rows name."""
    verbs = [s for v in VERBS.values() for s in (v.run, v.check, v.complete) if s is not None]
    return [*verbs, *(a.run for a in ANALYSES.values()),
            *(e.run for e in PRUNE_EXPERIMENTS.values()), *(s.run for s in PRUNE_SCORES.values())]


def test_every_row_names_a_function_that_exists():
    missing = []
    for spec in every_spec():
        try:
            assert callable(load_function(spec))
        except (ImportError, AttributeError):
            missing.append(spec)
    assert not missing, f"rows name code that is not there: {missing}"


def test_the_layer_strategies_are_the_ones_pruning_drops():
    from bertology.pruning.heads import LAYER_DROPPING

    assert set(LAYER_DROPPING) == set(LAYER_STRATEGIES)


def test_the_usage_lists_every_prune_experiment_and_score(capsys):
    from bertology.cli.entry import main

    assert main(["--help"]) == 0
    usage = " ".join(capsys.readouterr().out.split())  # unwrapped
    missing = [n for n in [*PRUNE_EXPERIMENTS, *PRUNE_SCORES, *ANALYSES] if f" {n}," not in
               usage and f" {n};" not in usage and f" {n})" not in usage]
    assert not missing, missing


# ---------------------------------------------------------------- a toy analysis and a toy verb


@dataclass
class ToySettings:
    """analysis=toy: counts the words it is shown."""

    words: int = 10  # words counted

    def __post_init__(self) -> None:
        positive(self.words, "analysis.toy.words")


def run_toy_analysis(ctx, settings: ToySettings) -> dict[str, float]:
    return {"probe/toy/words": float(settings.words)}


def load_toy_config(cfg):
    require(cfg.count >= 1, f"count={cfg.count} must be >= 1")
    return cfg


TOY_RUNS: list[Path] = []  # the run dirs run_toy ran in


def run_toy(cfg, out_dir: Path) -> dict[str, float]:
    TOY_RUNS.append(out_dir)
    return {"toy/count": float(cfg.count)}


# the toys' YAML (their first comment sentence is what --help shows beside them)
TOY_ANALYSIS_YAML = """# A toy analysis that counts words (tests/test_rows.py; never shipped).
toy:
  words: 10               # words counted
"""
TOY_VERB_YAML = """# bertology toy: counts to a number (tests/test_rows.py; never shipped).
defaults:
  - size: tiny
  - _self_

count: 3                  # how far it counts

hydra:
  job:
    name: toy
    chdir: false
  run:
    dir: outputs/toy/${now:%Y-%m-%d}/${now:%H-%M-%S}
  sweep:
    dir: outputs/toy/multirun/${now:%Y-%m-%d}/${now:%H-%M-%S}
    subdir: ${hydra.job.num}
"""


@pytest.fixture
def toys(tmp_path, monkeypatch):
    """The toy analysis's and the toy verb's rows in the tables, their YAML in a copy of
    conf/ that every reader of conf/ reads instead; the toy needs an MLM head."""
    import bertology.cli.completion
    import bertology.cli.entry
    import bertology.cli.suggest  # noqa: F401  (each reads CONF_DIR, patched below)

    conf = tmp_path / "conf"
    shutil.copytree(REPO / "conf", conf)
    (conf / "analysis" / "toy.yaml").write_text(TOY_ANALYSIS_YAML)
    (conf / "toy.yaml").write_text(TOY_VERB_YAML)
    for name, module in list(sys.modules.items()):
        if name.startswith("bertology") and hasattr(module, "CONF_DIR"):
            monkeypatch.setattr(module, "CONF_DIR", conf)
    monkeypatch.setitem(ANALYSES, "toy", Analysis("test_rows:run_toy_analysis", ToySettings,
                                                  needs="mlm_head"))
    monkeypatch.setitem(VERBS, "toy", Verb("test_rows:run_toy", "counts to a number (count=N)",
                                           check="test_rows:load_toy_config"))
    monkeypatch.chdir(tmp_path)
    return conf


def test_a_new_analysis_and_verb_show_in_the_usage_and_the_help(toys, capsys):
    from bertology.cli.entry import main

    assert main(["--help"]) == 0
    usage = capsys.readouterr().out
    assert "\n  toy        counts to a number (count=N)" in usage
    assert "erasure_use, toy;" in " ".join(usage.split())  # probe's analyses
    assert main(["toy", "--help"]) == 0
    help_text = capsys.readouterr().out
    assert help_text.startswith("usage: bertology toy [GROUP=OPTION ...]")
    assert "toy: counts to a number" in help_text and "\nsize:\n" in help_text
    assert main(["probe", "--help"]) == 0
    assert re.search(r"\n    toy +A toy analysis that counts words", capsys.readouterr().out)


def test_a_new_analysis_and_verb_are_completed(toys):
    from bertology.cli.completion import query

    assert query("bertology to") == ["toy"]
    assert query("bertology toy co") == ["count="]
    assert query("bertology toy size=ti") == ["size=tiny"]
    assert query("bertology probe analysis=[linear,to") == ["analysis=[linear,toy"]


def test_a_new_analysis_and_verb_pass_through_the_config_checks(toys, capsys):
    from hydra import compose, initialize_config_dir

    from bertology.cli.entry import main
    from bertology.config.family_checks import check_uses, probe_uses, render_family_table

    assert "toy" in pipeline_names()
    assert main(["toy", "count=0"]) == 2
    assert capsys.readouterr().err.strip() == "bertology toy: error: count=0 must be >= 1"
    assert main(["tyo"]) == 2 and "did you mean toy?" in capsys.readouterr().err
    assert main(["probe", "analysis=toy", "analysis.toy.words=0"]) == 2
    assert "analysis.toy.words=0" in capsys.readouterr().err
    with initialize_config_dir(config_dir=str(toys), version_base="1.3"):
        cfg = compose(config_name="probe", overrides=["analysis=[linear,toy]"])
    config = load_config_check("probe")(cfg)
    assert config.analyses["toy"] == ToySettings(words=10)
    # its capability flag, from its row: the MLM head, refused where a model type has none
    assert analyses_needing("mlm_head", config.analyses) == ["toy"]
    with pytest.raises(UserError, match="analysis=toy cannot run on"):
        check_uses({"model_type": "deberta-v2"}, probe_uses(config.analyses), "key", "path")
    assert "probe `cloze`, `amnesic`, `toy`" in render_family_table()


def test_a_new_verb_runs(toys, fresh_logging):
    from bertology.cli.entry import main
    from bertology.pipelines import load_pipeline

    assert load_pipeline("toy") is run_toy
    assert load_function(ANALYSES["toy"].run) is run_toy_analysis
    TOY_RUNS.clear()
    assert main(["toy", "count=5", "hydra.run.dir=outputs/toy/one"]) == 0
    assert [toys.parent / "outputs" / "toy" / "one"] == TOY_RUNS
