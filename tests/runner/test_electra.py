"""ELECTRA: replaced-token labels, shared embeddings, no gradient through sampling, FLOP
accounting, and a run whose model/ and generator/ load in plain transformers."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import torch
from conftest import compose_config
from sklearn.metrics import roc_auc_score
from torch.utils.flop_counter import FlopCounterMode
from transformers import AutoModelForMaskedLM, AutoModelForPreTraining

from bertology.config.groups import ObjectiveConfig
from bertology.models.electra_pair import build_electra_pair, electra_configs
from bertology.objectives import OBJECTIVES
from bertology.objectives.electra import (
    class_counts,
    class_counts_per_sequence,
    corrupt,
    discriminator_step,
    electra_metrics,
    generator_step,
    mann_whitney_u,
)
from bertology.objectives.mlm import IGNORE
from bertology.pipelines import pretrain
from bertology.run.replicates import compute_ratio_replicates, read_replicates

# A fixed split for the unit tests, which do not depend on it (the default, 85% [MASK] and 15%
# kept, is checked by test_masking's test_electra_masks_as_its_official_code)
ELECTRA = ObjectiveConfig(name="electra", mask_token_ratio=1.0, random_token_ratio=0.0,
                          keep_ratio=0.0)


def tiny_pair(vocab: int, attn: str = "sdpa"):
    torch.manual_seed(0)
    configs = electra_configs(vocab, 0, 2, 64, 4, 256, 64, 0.25, 0.0, 0.0)
    return build_electra_pair(*configs, attn)


def masked_batch(tokenizer, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """8 sequences of 20 tokens (no padding), positions 2..7 masked with [MASK]."""
    original = torch.randint(5, len(tokenizer), (8, 20), generator=generator)
    labels = torch.full_like(original, IGNORE)
    labels[:, 2:8] = original[:, 2:8]
    input_ids = original.clone()
    input_ids[:, 2:8] = tokenizer.mask_token_id
    return {"input_ids": input_ids, "labels": labels,
            "attention_mask": torch.ones_like(original),
            "token_type_ids": torch.zeros_like(original)}


def test_generator_is_a_quarter_as_wide_and_shares_the_embeddings(synthetic_tokenizer):
    pair = tiny_pair(len(synthetic_tokenizer))
    assert pair.generator.config.hidden_size == 16 and pair.discriminator.config.hidden_size == 64
    shared = pair.discriminator.electra.embeddings
    assert pair.generator.electra.embeddings is shared
    assert pair.generator.generator_lm_head.weight is shared.word_embeddings.weight


def test_labels_are_one_exactly_where_the_sample_differs(synthetic_tokenizer):
    pair = tiny_pair(len(synthetic_tokenizer))
    batch = masked_batch(synthetic_tokenizer, torch.Generator().manual_seed(1))
    torch.manual_seed(2)
    _, sampled, _ = generator_step(pair.generator, batch)
    corrupted, replaced = corrupt(batch, sampled)
    masked = batch["labels"] != IGNORE
    original = torch.where(masked, batch["labels"], batch["input_ids"])
    assert torch.equal(corrupted[~masked], original[~masked])  # unmasked tokens untouched
    assert torch.equal(corrupted[masked], sampled)
    assert torch.equal(replaced.bool(), corrupted != original)
    assert not replaced[~masked].any()
    # Force some samples to equal the original: those count as original (label 0).
    sampled[::2] = batch["labels"][masked][::2]
    _, replaced = corrupt(batch, sampled)
    assert not replaced[masked][::2].any() and replaced.sum() > 0


def test_discriminator_loss_sends_no_gradient_into_the_generator(synthetic_tokenizer):
    pair = tiny_pair(len(synthetic_tokenizer))
    batch = masked_batch(synthetic_tokenizer, torch.Generator().manual_seed(3))
    _, sampled, _ = generator_step(pair.generator, batch)
    corrupted, replaced = corrupt(batch, sampled)
    disc_loss, _ = discriminator_step(pair.discriminator, batch, corrupted, replaced,
                                      prior=0.15)
    disc_loss.backward()
    own = [p for n, p in pair.generator.named_parameters() if not n.startswith("electra.emb")
           and "generator_lm_head" not in n]
    assert own and all(p.grad is None or not p.grad.any() for p in own)
    assert pair.discriminator.electra.embeddings.word_embeddings.weight.grad.abs().sum() > 0


def test_flop_estimate_matches_counted_matmuls(synthetic_tokenizer):
    pair = tiny_pair(len(synthetic_tokenizer), attn="eager")
    objective = OBJECTIVES["electra"](ELECTRA, synthetic_tokenizer, "electra", 0)
    batch = masked_batch(synthetic_tokenizer, torch.Generator().manual_seed(4))
    with FlopCounterMode(display=False) as counter:
        loss, _ = objective.loss(pair, batch)
        loss.backward()
    assert objective.flops(pair, batch) == pytest.approx(counter.get_total_flops(), rel=0.02)


def test_electra_run_writes_discriminator_and_generator(tmp_path):
    overrides = ["model=electra", "logger=none", "trainer=smoke", "data.num_sentences=800",
                 "data.eval_docs=20", "trainer.max_steps=30", "trainer.log_every=5"]
    metrics = pretrain.run(compose_config("pretrain", overrides), tmp_path)
    for key in ("train/gen_loss", "train/disc_loss", "train/flops", "eval/disc_accuracy",
                "eval/replaced_rate"):
        assert math.isfinite(metrics[key]), key
    assert 0.0 < metrics["eval/replaced_rate"] < 0.15  # at most the masked share is replaced
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    gen = [r["train/gen_loss"] for r in rows if "train/gen_loss" in r]
    assert gen[-1] < gen[0]
    discriminator = AutoModelForPreTraining.from_pretrained(tmp_path / "model")
    generator = AutoModelForMaskedLM.from_pretrained(tmp_path / "generator")
    assert type(discriminator).__name__ == "ElectraForPreTraining"
    assert type(generator).__name__ == "ElectraForMaskedLM"
    assert torch.equal(generator.electra.embeddings.word_embeddings.weight,
                       discriminator.electra.embeddings.word_embeddings.weight)


def test_mann_whitney_counts_pairs_and_halves_ties():
    # replaced {0.4, 0.8} against original {0.1, 0.35, 0.4}: 0.4 beats two and ties one (2.5),
    # 0.8 beats all three (3): 5.5 of 6 pairs, worked out by hand
    scores = torch.tensor([0.1, 0.4, 0.35, 0.8, 0.4])
    replaced = torch.tensor([False, True, False, True, False])
    assert float(mann_whitney_u(scores, replaced)) == 5.5
    rng = np.random.default_rng(0)  # and sklearn's AUC on rounded (tied) scores
    scores, labels = np.round(rng.normal(size=400), 1), rng.random(400) < 0.2
    u = float(mann_whitney_u(torch.tensor(scores), torch.tensor(labels)))
    assert u / (labels.sum() * (~labels).sum()) == pytest.approx(roc_auc_score(labels, scores))


def test_a_constant_discriminator_scores_chance_on_the_balanced_metrics():
    """Always "original" (the prior, as a discriminator that learned nothing) has accuracy
    1 - replaced rate but balanced accuracy and AUC 0.5."""
    replaced = torch.rand(2000, generator=torch.Generator().manual_seed(0)) < 0.14
    logits = torch.full((2000,), float(np.log(0.14 / 0.86)))  # the calibrated prior
    counts = {k: float(v) for k, v in class_counts(logits, replaced, prior=0.15).items()}
    sums = {"gen_loss": 0.0, "disc_loss": 0.0, "gen_correct": 0, "gen_count": 1,
            "disc_correct": float((~replaced).sum()), "disc_count": 2000.0,
            "replaced": float(replaced.sum()), **counts}
    metrics = electra_metrics(sums, 1)
    assert metrics["disc_accuracy"] == pytest.approx(1 - float(replaced.float().mean()))
    assert metrics["disc_balanced_accuracy"] == 0.5 and metrics["disc_auc"] == 0.5


def balanced_accuracy_replicates(logits, replaced, real, prior=0.15):
    """The eval's replicates of balanced accuracy: each class rate resampled over sequences,
    then their mean, resample by resample (training/evaluate.py, item_means)."""
    counts = {k: v.numpy() for k, v in
              class_counts_per_sequence(logits, replaced, real, prior).items()}
    recall = compute_ratio_replicates(counts["seq_replaced_flagged"], counts["seq_replaced"])
    passed = compute_ratio_replicates(counts["seq_original_passed"], counts["seq_original"])
    return 0.5 * (recall + passed)


def test_balanced_accuracy_per_sequence_counts_worked_by_hand():
    # two sequences, pads excluded; flagged where p > 0.15, i.e. logit > -1.73
    logits = torch.tensor([[3.0, -5.0, 2.0, 0.0], [-5.0, -5.0, 4.0, 9.0]])
    replaced = torch.tensor([[True, False, False, False], [True, False, True, False]])
    real = torch.tensor([[True, True, True, False], [True, True, True, True]])
    counts = class_counts_per_sequence(logits, replaced, real, prior=0.15)
    # seq 0: replaced {3.0} flagged; originals {-5, 2}: -5 passed. seq 1: replaced {-5, 4}:
    # 4 flagged; originals {-5, 9}: -5 passed
    assert counts["seq_replaced"].tolist() == [1, 2]
    assert counts["seq_replaced_flagged"].tolist() == [1, 1]
    assert counts["seq_original"].tolist() == [2, 2]
    assert counts["seq_original_passed"].tolist() == [1, 1]
    # pooled: recall 2/3, originals passed 2/4, balanced accuracy (2/3 + 1/2) / 2
    pooled = {k: float(v.sum()) for k, v in counts.items()}
    assert 0.5 * (pooled["seq_replaced_flagged"] / pooled["seq_replaced"]
                  + pooled["seq_original_passed"] / pooled["seq_original"]) \
        == pytest.approx(7 / 12)


def test_random_scores_give_a_balanced_accuracy_interval_around_chance():
    """Noise cannot pass for detection: scores unrelated to the labels put 0.5 inside the 95%
    bootstrap interval, while the same labels scored by a weak real signal do not."""
    gen = torch.Generator().manual_seed(0)
    replaced = torch.rand(256, 100, generator=gen) < 0.12
    real = torch.ones(256, 100, dtype=torch.bool)
    noise = torch.randn(256, 100, generator=gen) - 1.7
    low, high = np.percentile(balanced_accuracy_replicates(noise, replaced, real), [2.5, 97.5])
    assert low < 0.5 < high
    signal = noise + 0.3 * replaced  # replaced tokens score 0.3 standard deviations higher
    low, _ = np.percentile(balanced_accuracy_replicates(signal, replaced, real), [2.5, 97.5])
    assert low > 0.5


@pytest.mark.slow
def test_default_discriminator_beats_its_constant_predictor(tmp_path):
    """`bertology pretrain model=electra` as it comes (size=tiny, 1,000 steps, synthetic corpus),
    in fp32 so that `auto`'s timing of fp32 against bf16 cannot change the numbers, on seeds 0
    and 1: each generator leaves the unigram plateau (accuracy above 0.2), and across the two
    seeds the discriminator beats the constant predictor: the whole 95% bootstrap interval of
    their mean held-out balanced accuracy (the seeds' replicates averaged, over the same
    held-out sequences) lies above 0.5, and their mean AUC above 0.55. A claim about the recipe,
    replicated over seeds: at this budget one seed can sit at chance (seed 1 in fp32 on an AMD
    EPYC: balanced accuracy 0.5004, AUC 0.53; 0.56 in bf16; BA 0.51-0.64 over seeds 0-4 on a
    Xeon), so no one seed is asked to. The old recipe, [MASK] at every chosen position, fails
    (docs/pipelines.md, ELECTRA notes)."""
    runs = []
    for seed in (0, 1):
        config = compose_config("pretrain", ["model=electra", "logger=none", f"seed={seed}",
                                             "trainer.mixed_precision=no"])
        metrics = pretrain.run(config, tmp_path / str(seed))
        replicates = read_replicates(tmp_path / str(seed))["eval/disc_balanced_accuracy"]
        low, high = np.percentile(replicates, [2.5, 97.5])
        assert low <= metrics["eval/disc_balanced_accuracy"] <= high
        assert metrics["eval/gen_accuracy"] > 0.2  # left the unigram plateau (0.12)
        runs.append((metrics, replicates))
    mean = np.mean([r for _, r in runs], axis=0)  # (replicates,): the two seeds' mean
    low = np.percentile(mean, 2.5)
    assert low > 0.5, [m["eval/disc_balanced_accuracy"] for m, _ in runs]
    assert np.mean([m["eval/disc_auc"] for m, _ in runs]) > 0.55


def test_a_mean_of_an_unknown_item_ratio_is_refused_when_the_objective_is_built(
        synthetic_tokenizer):
    built = OBJECTIVES["electra"](ELECTRA, synthetic_tokenizer, "electra", 0)
    assert built.item_means == {"disc_balanced_accuracy": ("disc_replaced_recall",
                                                           "disc_original_pass_rate")}
    misspelt = {"disc_balanced_accuracy": ("disc_replaced_recall", "disc_original_pass")}
    with pytest.raises(ValueError, match="disc_original_pass"):
        dataclasses.replace(built, item_means=misspelt)
