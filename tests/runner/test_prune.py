"""Pruning: the schedule and its summaries against hand computations, magnitude pruning's
statistics, and `bertology prune` end to end on a briefly fine-tuned tiny BERT: curves, the
structurally pruned model that equals the masked one and reloads, layers, magnitude, int8 and
the compression matrix; a schedule that would remove every head is a one-line error."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import NEGATION, compose_config, run_cli
from transformers import AutoModelForSequenceClassification, BertConfig, BertModel

from bertology.config.prune_config import load_prune_config
from bertology.errors import UserError
from bertology.pipelines import prune
from bertology.pruning.heads import HeadGates, build_gates, kept_heads, load_pruned
from bertology.pruning.schedules import (
    compute_curve_area,
    compute_fraction_within_loss,
    compute_step_counts,
    encoder_linear_weights,
    prune_magnitude,
    select_heads_to_mask,
)

QUIET = ["logger=none"]
TASK = NEGATION

pytestmark = pytest.mark.usefixtures("one_thread")


# ---------------------------------------------------------------- the schedule


def test_steps_are_ten_percent_of_all_heads_and_never_all():
    assert compute_step_counts(144, 0.1) == [14, 29, 43, 58, 72, 86, 101, 115, 130]
    assert compute_step_counts(4, 0.1) == [1, 2, 3]  # repeats dropped, one head always stays
    assert compute_step_counts(2, 0.5) == [1]


def test_the_lowest_scoring_heads_still_on_are_masked_next():
    scores = np.array([[0.5, 0.1, np.nan], [0.3, 0.2, 0.9]])
    gates = torch.ones(2, 3)
    gates[0, 1] = 0.0  # masked already: not chosen again, whatever its score
    assert select_heads_to_mask(scores, gates, 2) == [(1, 1), (1, 0)]
    with pytest.raises(UserError, match="only 4 are left"):
        select_heads_to_mask(scores, gates, 5)  # the NaN head was removed before


def test_curve_area_is_the_mean_over_the_range():
    fractions, values = [0.0, 0.25, 0.5, 0.75], [0.9, 0.9, 0.7, 0.5]
    assert compute_curve_area(fractions, [0.8] * 4, 0.75) == pytest.approx(0.8)
    # trapezoids: 0.25·0.9 + 0.25·0.8 + 0.25·0.6 over 0.75
    assert compute_curve_area(fractions, values, 0.75) == pytest.approx(0.575 / 0.75)
    # cut between points: linear interpolation at 0.375 gives 0.8
    assert compute_curve_area(fractions, values, 0.375) == pytest.approx(
        (0.25 * 0.9 + 0.125 * 0.85) / 0.375)


def test_fraction_within_loss_stops_at_the_first_drop():
    fractions = [0.0, 0.1, 0.2, 0.3, 0.4]
    values = [0.90, 0.895, 0.88, 0.90, 0.70]  # recovers at 0.3, but 0.2 broke the budget
    assert compute_fraction_within_loss(fractions, values, 0.90, 0.01) == 0.1
    assert compute_fraction_within_loss(fractions, values, 0.90, 0.05) == 0.3
    assert compute_fraction_within_loss(fractions, [0.9, 0.5], 0.9, 0.01) == 0.0


def test_magnitude_pruning_zeroes_the_smallest_weights_globally():
    torch.manual_seed(0)
    model = BertModel(BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2,
                                 num_attention_heads=4, intermediate_size=64))
    before = torch.cat([w.detach().abs().flatten() for w in encoder_linear_weights(model)])
    embeddings = model.embeddings.word_embeddings.weight.clone()
    zeroed = prune_magnitude(model, 0.4)
    after = torch.cat([w.detach().abs().flatten() for w in encoder_linear_weights(model)])
    assert zeroed == pytest.approx(0.4, abs=1e-3)
    assert (after == 0).float().mean().item() == pytest.approx(0.4, abs=1e-3)
    kept = before[after != 0]
    assert kept.min() >= before[after == 0].max()  # every survivor beats every zeroed weight
    assert torch.equal(model.embeddings.word_embeddings.weight, embeddings)  # left alone


# ---------------------------------------------------------------- the pipeline


@pytest.fixture(scope="module")
def prune_run(negation_model, tmp_path_factory):
    out = tmp_path_factory.mktemp("prune")
    cfg = compose_config("prune", QUIET + TASK + [
        f"model.name_or_path={negation_model}", "prune.importance_examples=64",
        "prune.experiments=[heads,removal,layers,magnitude,int8,matrix]",
        "prune.scores=[gradient,confidence,random]", "prune.random_seeds=[0,1]",
        "prune.sparsities=[0.3,0.9]", "trainer.max_steps=10"])
    return out, prune.run(cfg, out)


def read_csv(path: Path) -> list[dict]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


@pytest.mark.slow
def test_heads_curves_start_at_the_original_and_mask_in_steps(prune_run):
    out, metrics = prune_run
    rows = read_csv(out / "tables" / "head_pruning.csv")
    original = metrics["prune/original/accuracy"]
    assert original > 0.8  # fine-tuned, far above the majority class
    for score, seed in {(r["score"], r["seed"]) for r in rows}:
        curve = [r for r in rows if (r["score"], r["seed"]) == (score, seed)]
        assert float(curve[0]["metric"]) == original and curve[0]["heads_masked"] == "0"
        masked = [int(r["heads_masked"]) for r in curve]
        assert masked == sorted(masked) and masked[-1] < metrics["prune/heads/total"]
    assert {r["score"] for r in rows} == {"gradient", "confidence", "random"}
    assert {r["seed"] for r in rows if r["score"] == "random"} == {"0", "1"}
    for score in ("gradient", "confidence", "random"):
        assert 0.0 <= metrics[f"prune/heads/{score}/fraction_within_loss"] < 1.0
        assert 0.0 < metrics[f"prune/heads/{score}/area"] <= 1.0
    assert metrics["prune/heads/gradient/area_over_random"] == pytest.approx(
        metrics["prune/heads/gradient/area"] - metrics["prune/heads/random/area"])
    for plot in ("head_pruning", "head_importance", "layer_dropping", "magnitude_pruning",
                 "compression_pareto"):
        assert (out / "plots" / f"{plot}.png").stat().st_size > 0


@pytest.mark.slow
def test_removed_heads_give_the_masked_logits_and_reload(prune_run, negation_model):
    out, metrics = prune_run
    assert metrics["prune/removal/max_logit_diff"] < 1e-5
    assert metrics["prune/removal/accuracy"] == metrics["prune/removal/masked/accuracy"]
    assert metrics["prune/removal/parameters"] < metrics["prune/original/parameters"]
    # model/ reloads pruned, and equals the original model with those heads gated off
    pruned = load_pruned(out / "model", AutoModelForSequenceClassification)
    heads = kept_heads(pruned)
    assert sum(len(h) for h in heads) == metrics["prune/heads_remaining"] < 4
    original = AutoModelForSequenceClassification.from_pretrained(negation_model).eval()
    gates = build_gates(original)
    for layer, kept in enumerate(heads):
        gates[layer] = torch.tensor([float(h in kept) for h in range(gates.shape[1])])
    batch = {"input_ids": torch.randint(5, 40, (3, 9)), "attention_mask": torch.ones(3, 9,
                                                                                     dtype=torch.long)}
    with torch.no_grad(), HeadGates(original, gates):
        expected = original(**batch).logits
    with torch.no_grad():
        assert torch.allclose(pruned(**batch).logits, expected, atol=1e-5)


@pytest.mark.slow
def test_layers_magnitude_and_int8_are_measured(prune_run):
    out, metrics = prune_run
    layers = read_csv(out / "tables" / "layer_dropping.csv")
    assert {r["strategy"] for r in layers} == {"none", "top", "bottom", "alternate_even",
                                               "symmetric"}
    assert "prune/layers/top/dropped_01/accuracy" in metrics
    magnitude = read_csv(out / "tables" / "magnitude_pruning.csv")
    assert [float(r["zeroed"]) for r in magnitude] == pytest.approx([0.0, 0.3, 0.9], abs=1e-3)
    assert 0.0 <= metrics["prune/magnitude/fraction_within_loss"] <= 0.9
    assert metrics["prune/int8/linear_weight_ratio"] <= 0.30
    assert metrics["prune/int8/disk_mb"] < metrics["prune/int8/fp32_disk_mb"]
    assert metrics["prune/int8/metric_change"] == pytest.approx(
        metrics["prune/int8/accuracy"] - metrics["prune/original/accuracy"])


@pytest.mark.slow
def test_the_compression_matrix_has_every_combination_and_a_pareto_front(prune_run):
    out, metrics = prune_run
    rows = read_csv(out / "tables" / "compression_matrix.csv")
    names = {"original", "heads pruned", "student", "student + heads pruned"}
    assert {r["model"] for r in rows} == names | {f"{n} + int8" for n in names}
    assert any(r["pareto"] == "True" for r in rows)
    assert (out / "distill" / "model" / "model.safetensors").exists()  # distilled in the run
    params = {r["model"]: float(r["parameters"]) for r in rows}
    assert params["student"] < params["original"] and params["heads pruned"] < params["original"]
    assert json.loads((out / "metrics.json").read_text()) == pytest.approx(metrics)


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize("overrides, words", [
    (["prune.step_fraction=1.0"], "remove every head"),
    (["prune.remove_fraction=1.0"], "remove every head"),
    (["prune.experiments=[heads,prune_everything]"], "prune.experiments"),
    (["prune.scores=[michel]"], "prune.scores"),
    (["prune.scores=[random,gradient]"], "first"),
    (["prune.layer_strategies=[middle_out]"], "prune.layer_strategies"),
    (["prune.sparsities=[1.0]"], "prune.sparsities"),
    (["compression.kd.alpha=2"], "kd.alpha"),
])
def test_bad_config_is_a_user_error(overrides, words):
    with pytest.raises(UserError, match=words):
        load_prune_config(compose_config("prune", overrides))


@pytest.mark.slow
def test_a_schedule_removing_every_head_is_one_line_exit_2(tmp_path):
    # size=tiny has 2 layers × 2 heads: 0.9 of 4 rounds to all 4
    result = run_cli("prune", "logger=none", *TASK, "task.num_sentences=300",
                     "trainer.max_steps=5", "prune.experiments=[removal]",
                     "prune.remove_fraction=0.9", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(lines) == 1 and "would remove every head" in lines[0], result.stderr
    assert "Traceback" not in result.stderr and "finetune" not in result.stderr  # before work
    assert not list((tmp_path / "outputs").rglob("*.yaml")), "a half-written run dir remains"


def test_the_default_config_is_checked_and_composes():
    config = load_prune_config(compose_config("prune"))
    assert config.name_or_path is None and config.prune.step_fraction == 0.1
    assert config.prune.scores[0] == "gradient" and "random" in config.prune.scores


def test_the_compression_matrix_bundle_composes_and_asks_for_every_experiment():
    text = (Path(__file__).parents[2] / "conf" / "experiment" /
            "compression_matrix.yaml").read_text()
    assert "bertology prune experiment=compression_matrix" in text
    config = load_prune_config(compose_config("prune", ["experiment=compression_matrix"]))
    assert set(config.prune.experiments) == {"heads", "removal", "layers", "magnitude", "int8",
                                             "matrix"}
    assert config.task.name == "sst2" and config.distill_cfg.student.num_layers == 2
