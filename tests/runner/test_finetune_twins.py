"""The fine-tuned random-init twin (issue 38): finetuning_top_layers and special_token_gradients
are claims about fine-tuning a pretrained model, judged against the same architecture from
random init fine-tuned the same way, seed by seed.

- A finetune run with init=random and seed s starts from exactly the weights the probe of seed
  s uses as its twin (models/build.py twin_seed), so CKA between the probe's twin and the
  twin's fine-tuned copy (compare_to_twin) compares one network before and after fine-tuning.
- The probe writes that CKA as geometry/random/layer_*/cka; prune measures the special-token
  shares on its twin as prune/twin/special/* (fine-tuning the twin itself where it fine-tunes
  the model).
- A given twin is checked from its run's record: init=random, this run's seed, the model arm's
  recipe.
- The findings judge (model − twin): a world where the twin shows the model's effect does not
  hold.
"""

from __future__ import annotations

import copy
import csv

import numpy as np
import pytest
import torch
from conftest import compose_config
from fake_runs import World
from omegaconf import OmegaConf
from transformers import (
    AutoModel,
    AutoModelForSequenceClassification,
    BertConfig,
    BertModel,
    RobertaConfig,
)

from bertology.analysis.probe_context import random_like
from bertology.config.groups import HeadConfig
from bertology.config.twin_checks import check_fine_tuned_twin
from bertology.errors import UserError
from bertology.models.build import twin_seed
from bertology.models.task_model import build_task_model
from bertology.run.rundir import RunDir
from bertology.study.judge.catalog import load_catalog
from bertology.study.judge.verdicts import judge

pytestmark = pytest.mark.usefixtures("one_thread")

CATALOG = load_catalog()
TWINNED = ("finetuning_top_layers", "special_token_gradients")


def tiny(config_class=BertConfig):
    return config_class(vocab_size=120, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64)


@pytest.mark.parametrize("config_class", [BertConfig, RobertaConfig])
def test_a_finetune_twin_starts_from_the_probes_twin(config_class):
    """build_task_model(init=random, seed s)'s encoder is random_like(model, twin_seed(s)), the
    probe's twin of seed s, weight for weight (RoBERTa: its task class drops the pooler); the
    run's own random stream (the head, then training) goes on as before the twin was drawn."""
    for seed in (0, 2):
        torch.manual_seed(seed)
        task = build_task_model("unused", copy.deepcopy(tiny(config_class)), "classification",
                                ["a", "b"], HeadConfig(), random_init=True,
                                attn_implementation="eager", seed=seed)
        after = torch.rand(3)
        encoder = AutoModel.from_config(tiny(config_class), attn_implementation="eager")
        probe_twin = random_like(encoder, twin_seed(seed, "unused")).state_dict()
        weights = task.model.base_model.state_dict()
        assert set(weights) <= set(probe_twin)
        assert all(torch.equal(weights[k], probe_twin[k]) for k in weights)
        assert not torch.equal(weights["embeddings.word_embeddings.weight"],
                               encoder.state_dict()["embeddings.word_embeddings.weight"])
        torch.manual_seed(seed)
        config = copy.deepcopy(tiny(config_class))
        config.num_labels = 2
        AutoModelForSequenceClassification.from_config(config, attn_implementation="eager")
        assert torch.equal(torch.rand(3), after)


# ---------------------------------------------------------------- a given twin, checked


def save_run(root, tokenizer, record: dict, seed: int = 0) -> str:
    """A tiny BERT saved as a finetune run's model/, with the run's recorded config."""
    torch.manual_seed(seed)
    model = root / "model"
    BertModel(BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2,
                         num_attention_heads=2, intermediate_size=64)).save_pretrained(model)
    tokenizer.save_pretrained(model)
    (root / ".hydra").mkdir(parents=True)
    OmegaConf.save(OmegaConf.create(record), root / ".hydra" / "config.yaml")
    return str(model)


RECIPE = {"task": {"name": "sst2"}, "trainer": {"lr": 1e-4}, "head": {"mode": "finetune"}}


def test_a_given_twin_must_be_this_seeds_random_init_fine_tuned_as_the_model(
        tmp_path, synthetic_tokenizer):
    model = save_run(tmp_path / "model", synthetic_tokenizer, {**RECIPE, "init": "pretrained",
                                                               "seed": 1})
    twin = save_run(tmp_path / "twin", synthetic_tokenizer, {**RECIPE, "init": "random",
                                                             "seed": 1})
    check_fine_tuned_twin(twin, "compare_to_twin", 1, model, "compare_to")  # the right one
    cases = [(twin, 2, model, "seed=1"),  # another seed's twin: other starting weights
             (model, 1, model, "init=pretrained"),  # not a twin at all
             (save_run(tmp_path / "other", synthetic_tokenizer,
                       {**RECIPE, "trainer": {"lr": 3e-4}, "init": "random", "seed": 1}),
              1, model, "trainer differ")]  # fine-tuned another way
    for given, seed, arm, says in cases:
        with pytest.raises(UserError) as err:
            check_fine_tuned_twin(given, "compare_to_twin", seed, arm, "compare_to")
        assert says in str(err.value) and len(str(err.value).splitlines()) == 1


def test_a_twin_needs_the_model_arm_and_its_experiment():
    for pipeline, overrides, says in (
            ("probe", ["compare_to_twin=sentence-transformers/all-MiniLM-L6-v2"],
             "set compare_to too"),
            ("prune", ["twin_name_or_path=sentence-transformers/all-MiniLM-L6-v2"],
             "attention_gradients")):
        from bertology.config.verbs import load_config_check

        with pytest.raises(UserError, match=says):
            load_config_check(pipeline)(compose_config(pipeline, overrides))


# ---------------------------------------------------------------- the pipelines write the twin


def geometry_against_itself(tmp_path, tokenizer, eval_sentences: int = 60):
    """A probe config of geometry on a tiny BERT with compare_to=itself and compare_to_twin its
    own twin (random_like at twin_seed, as the probe builds it)."""
    model = save_run(tmp_path / "m", tokenizer, {})
    twin = tmp_path / "twin"
    random_like(BertModel.from_pretrained(model), twin_seed(0, str(model))).save_pretrained(twin)
    tokenizer.save_pretrained(twin)
    return compose_config("probe", [
        "analysis=geometry", "logger=none", "max_train_sentences=20",
        f"max_eval_sentences={eval_sentences}", "seeds=[0]",
        f"paths.cache_dir={tmp_path / 'cache'}", f"model.name_or_path={model}",
        f"compare_to={model}", f"compare_to_twin={twin}"])


def test_the_probe_writes_the_twins_cka_against_compare_to_twin(tmp_path, synthetic_tokenizer):
    """compare_to_twin saved from the probe's own twin (random_like at twin_seed): the twin's
    CKA with it is 1 at every layer, as the model's with compare_to=itself, and no geometry of
    compare_to_twin's own is measured."""
    from bertology.pipelines.probe import run

    metrics = run(geometry_against_itself(tmp_path, synthetic_tokenizer), tmp_path / "run")
    for layer in range(3):
        assert metrics[f"geometry/layer_{layer:02d}/cka"] == pytest.approx(1.0)
        assert metrics[f"geometry/random/layer_{layer:02d}/cka"] == pytest.approx(1.0)
    assert not any("compare_twin" in key for key in metrics)
    with (tmp_path / "run" / "tables" / "geometry_synthetic_pos.csv").open() as handle:
        assert {row["model"] for row in csv.DictReader(handle)} == {"model", "random", "compare"}


def test_prune_measures_special_token_gradients_on_the_twin_it_fine_tunes(tmp_path):
    """The default prune (a random tiny BERT fine-tuned first) fine-tunes the twin the same way
    (init=random) and writes the twin's shares beside the model's, with replicates over the
    same examples."""
    from bertology.pipelines import prune

    cfg = compose_config("prune", ["logger=none", "task.num_sentences=300", "trainer.max_steps=3",
                                   "prune.experiments=[attention_gradients]"])
    out = tmp_path / "run"
    metrics = prune.run(cfg, out)
    for arm in ("special", "twin/special"):
        for key in ("attention_share", "gradient_share", "share_gap"):
            assert 0.0 <= abs(metrics[f"prune/{arm}/{key}"]) <= 1.0, (arm, key)
    assert metrics["prune/special/attention_share"] != metrics["prune/twin/special/attention_share"]
    assert "prune/twin/original/accuracy" in metrics
    assert (out / "finetune_twin" / "model" / "config.json").exists()
    run = RunDir(out, metrics, {"seed": 0})
    model = run.replicates["prune/special/attention_share"]
    twin = run.replicates["prune/twin/special/attention_share"]
    assert model.shape == twin.shape and np.isfinite(twin).all()
    # the examples they resample, by id, as prune.csv's (every eval example within the window)
    ids = run.item_ids
    assert ids["prune/special/attention_share"] == ids["prune/twin/special/attention_share"]
    assert ids["prune/special/attention_share"] == ids["prune/original/accuracy"]


# ---------------------------------------------------------------- the findings judge model − twin


@pytest.mark.parametrize("finding", TWINNED)
def test_the_findings_are_model_claims_judged_against_the_twin(finding):
    spec = CATALOG[finding]
    assert spec.about == "model" and spec.unit == "checkpoint" and not spec.caveat
    contrast = spec.comparisons[-1]
    assert contrast.twin is not None and contrast.margin == 0.0
    assert all("/random/" in x.metric or "/twin/" in x.metric for x in contrast.twin
               if not isinstance(x, float))


@pytest.mark.parametrize("finding", TWINNED)
def test_a_twin_with_the_models_effect_does_not_hold(finding):
    """Fake runs where the model shows the paper's effect and the twin the same (the
    difference in differences 0): not "holds"; the twin's effect smaller: "holds", with the
    difference measured as built."""
    spec = CATALOG[finding]
    first, contrast = spec.comparisons
    past = 0.1 if first.expect == "greater" else -0.1
    guards = [(g, g.margin + 0.1) for g in spec.guards]
    rng = np.random.default_rng(38)
    same = World(spec, [(first, first.margin + past), (contrast, 0.0), *guards], rng).runs()
    result = judge(spec, same)
    assert result.raw.label != "holds"
    assert result.tests[1].estimate.mean == pytest.approx(0.0, abs=1e-9)
    beyond = World(spec, [(first, first.margin + past), (contrast, past), *guards], rng).runs()
    result = judge(spec, beyond)
    assert result.raw.label == "holds" and result.tests[1].estimate.mean == pytest.approx(past)
