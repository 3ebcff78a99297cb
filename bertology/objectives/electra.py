"""Replaced-token detection (ELECTRA, Clark et al., 2020).

The generator is a small masked LM: it sees the masked input (15% chosen; the official code puts
[MASK] at 85% of them and leaves the rest as they were: conf/objective/electra.yaml) and its loss
is MLM at the chosen positions. Each masked position is then filled with
a token *sampled* from the generator's softmax (no gradient flows through the sampling), and
the discriminator labels every real token of that corrupted input as original (0) or replaced
(1). A sampled token that happens to equal the original counts as original (ELECTRA §2).
Loss = gen_loss + λ·disc_loss with λ = 50 (ELECTRA §2 and App. A).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import PreTrainedTokenizerBase

from bertology.config.groups import ObjectiveConfig
from bertology.objectives import mlm
from bertology.training.flops import classifier_app_d, encoder_app_d, encoder_flops, output_app_d
from bertology.training.objective import Objective


def generator_step(generator, batch: dict) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """Generator MLM at masked positions (mlm.masked_slots: a static count when the collate
    lists them); returns (loss, sampled tokens at those slots, logs)."""
    hidden = generator.electra(input_ids=batch["input_ids"],
                               attention_mask=batch["attention_mask"],
                               token_type_ids=batch["token_type_ids"]).last_hidden_state
    labels = batch["labels"]  # (batch, seq)
    positions, targets = mlm.masked_slots(batch)  # (count,) each
    # (count, vocab): the head runs only where a token is predicted
    logits = generator.generator_lm_head(
        generator.generator_predictions(hidden.flatten(0, 1)[positions]))
    loss = F.cross_entropy(logits.float(), targets, ignore_index=mlm.IGNORE)
    with torch.no_grad():  # sampling is not differentiable, and ELECTRA does not try
        sampled = torch.multinomial(F.softmax(logits.float(), dim=-1), 1).squeeze(-1)
    if generator.training:  # the counts are the eval's (mlm.py)
        return loss, sampled, {"gen_loss": loss.detach()}
    valid = targets != mlm.IGNORE
    correct = ((logits.argmax(-1) == targets) & valid).detach()
    rows = positions // labels.shape[1]  # (count,) each slot's sequence
    logs = {"gen_loss": loss.detach(), "gen_correct": correct.sum(), "gen_count": valid.sum(),
            "seq_gen_correct": mlm.per_row(rows, correct, labels.shape[0]),
            "seq_gen_count": (labels != mlm.IGNORE).sum(1)}
    return loss, sampled, logs


def corrupt(batch: dict, sampled: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The discriminator's input (the original text with the samples put in) and its labels:
    1 exactly where the token now differs from the original. sampled is aligned with
    mlm.masked_slots(batch), as generator_step's; a spare slot's sample is dropped."""
    labels = batch["labels"]
    positions, targets = mlm.masked_slots(batch)
    masked = labels != mlm.IGNORE
    original = torch.where(masked, labels, batch["input_ids"])  # (batch, seq)
    # spare slots write into one extra cell past the end, which is then cut off
    cells = original.numel()
    into = torch.where(targets != mlm.IGNORE, positions, cells)  # (count,)
    placed = original.new_zeros(cells + 1).scatter(0, into, sampled)[:cells]
    corrupted = torch.where(masked, placed.view_as(original), original)
    return corrupted, (corrupted != original).long()


def discriminator_step(discriminator, batch: dict, corrupted: torch.Tensor,
                       replaced: torch.Tensor, prior: float) -> tuple[torch.Tensor, dict]:
    logits = discriminator(input_ids=corrupted, attention_mask=batch["attention_mask"],
                           token_type_ids=batch["token_type_ids"]).logits  # (batch, seq)
    real = batch["attention_mask"].bool()
    # the mean over real tokens as a weighted sum: every position, a static shape
    weight = real.float()
    per_token = F.binary_cross_entropy_with_logits(logits.float(), replaced.float(),
                                                   reduction="none")  # (batch, seq)
    loss = (per_token * weight).sum() / weight.sum()
    if discriminator.training:  # the counts are the eval's (mlm.py)
        return loss, {"disc_loss": loss.detach()}
    predicted = (logits[real] > 0).long()
    correct = (predicted == replaced[real]).detach()
    logs = {"disc_loss": loss.detach(), "disc_correct": correct.sum(),
            "disc_count": real.sum(), "replaced": replaced[real].sum(),
            **class_counts(logits[real].detach().float(), replaced[real].bool(), prior),
            **class_counts_per_sequence(logits.detach().float(), replaced.bool(), real, prior),
            "seq_disc_correct": mlm.per_sequence(real, correct), "seq_disc_count": real.sum(1)}
    return loss, logs


def class_counts(logits: torch.Tensor, is_replaced: torch.Tensor, prior: float) -> dict:
    """What a constant predictor cannot fake. Accuracy rewards always saying "original" (it
    scores 1 - replaced rate), so the eval also counts, per class, the tokens called right at
    the threshold p > prior (the decision that maximises balanced accuracy for a calibrated
    model; the masking rate bounds the replaced rate from above), and the Mann-Whitney pairs
    of each batch (replaced scored above original: the AUC, threshold-free)."""
    flagged = torch.sigmoid(logits) > prior
    n_replaced, n_original = int(is_replaced.sum()), int((~is_replaced).sum())
    return {"replaced_flagged": flagged[is_replaced].sum(),
            "original_passed": (~flagged[~is_replaced]).sum(),
            "auc_above": mann_whitney_u(logits, is_replaced),
            "auc_pairs": torch.tensor(float(n_replaced * n_original))}


def class_counts_per_sequence(logits: torch.Tensor, is_replaced: torch.Tensor,
                              real: torch.Tensor, prior: float) -> dict:
    """(batch,) counts of each class and of its tokens called right at p > prior: the items the
    eval's bootstrap resamples for the interval of balanced accuracy (sequences are the unit, so
    the tokens of one sequence move together)."""
    flagged = torch.sigmoid(logits) > prior  # (batch, seq)
    replaced, original = is_replaced & real, ~is_replaced & real
    return {"seq_replaced": replaced.sum(1), "seq_replaced_flagged": (flagged & replaced).sum(1),
            "seq_original": original.sum(1), "seq_original_passed": (~flagged & original).sum(1)}


def mann_whitney_u(scores: torch.Tensor, positive: torch.Tensor) -> torch.Tensor:
    """The (positive, negative) pairs with the positive scored higher, ties counted half:
    the rank sum of the positives minus its minimum, with tied scores given their average
    rank (O(n log n); bf16 logits tie often)."""
    _, inverse, counts = torch.unique(scores, return_inverse=True, return_counts=True)
    ends = counts.cumsum(0).double()
    average_rank = ends - (counts.double() - 1) / 2  # 1-based ranks, averaged over ties
    n = positive.sum().double()
    return average_rank[inverse][positive].sum() - n * (n + 1) / 2


def electra_metrics(sums: dict[str, float], batches: int) -> dict[str, float]:
    originals = sums["disc_count"] - sums["replaced"]
    recall = sums["replaced_flagged"] / max(1, sums["replaced"])
    passed = sums["original_passed"] / max(1, originals)
    return {"gen_loss": sums["gen_loss"] / batches, "disc_loss": sums["disc_loss"] / batches,
            "gen_accuracy": sums["gen_correct"] / max(1, sums["gen_count"]),
            "disc_accuracy": sums["disc_correct"] / max(1, sums["disc_count"]),
            "disc_balanced_accuracy": 0.5 * (recall + passed),
            "disc_replaced_recall": recall, "disc_original_pass_rate": passed,
            "disc_auc": sums["auc_above"] / max(1, sums["auc_pairs"]),
            "replaced_rate": sums["replaced"] / max(1, sums["disc_count"])}


def electra_flops(model, batch: dict) -> float:
    """Generator encoder and head at masked positions (plus the projection of the shared
    embeddings to its width), discriminator encoder and its per-token head."""
    generator_config, discriminator_config = model.generator.config, model.discriminator.config
    lengths = batch["attention_mask"].sum(dim=1)
    tokens = float(lengths.sum())
    masked = float((batch["labels"] != mlm.IGNORE).sum())
    emb, gen_h = generator_config.embedding_size, generator_config.hidden_size
    vocab, disc_h = generator_config.vocab_size, discriminator_config.hidden_size
    total = encoder_flops(generator_config, lengths) + 6.0 * emb * gen_h * tokens
    total += 6.0 * (gen_h * emb + emb * vocab) * masked
    total += encoder_flops(discriminator_config, lengths)
    return total + 6.0 * (disc_h * disc_h + disc_h) * tokens


def electra_flops_app_d(model, batch: dict) -> float:
    """The same by ELECTRA's App. D (training/flops.py; get_electra_train_flops): twice the
    forward of the discriminator (dense embedding look-ups, a classifier at every token) and
    of the generator, which looks the shared embeddings up again and projects them to its
    width, with its MLM head at the masked positions."""
    generator_config, discriminator_config = model.generator.config, model.discriminator.config
    lengths = batch["attention_mask"].sum(dim=1)
    masked = float((batch["labels"] != mlm.IGNORE).sum())
    discriminator = encoder_app_d(discriminator_config, lengths) + classifier_app_d(
        discriminator_config.hidden_size, float(lengths.sum()))
    generator = encoder_app_d(generator_config, lengths) + output_app_d(
        generator_config.hidden_size, generator_config.embedding_size,
        generator_config.vocab_size, masked)
    return 2.0 * (discriminator + generator)


def build(cfg: ObjectiveConfig, tokenizer: PreTrainedTokenizerBase, family: str,
          seed: int) -> Objective:
    spec = mlm.MaskingSpec.build(cfg, tokenizer, seed)
    pad_id = tokenizer.pad_token_id

    def collate(examples: list[dict]) -> dict[str, torch.Tensor]:
        return mlm.pad_batch(examples, spec, pad_id)

    def loss(model, batch: dict) -> tuple[torch.Tensor, dict]:
        gen_loss, sampled, logs = generator_step(model.generator, batch)
        corrupted, replaced = corrupt(batch, sampled)
        disc_loss, disc_logs = discriminator_step(model.discriminator, batch, corrupted, replaced,
                                                  prior=cfg.mask_prob)
        return gen_loss + cfg.disc_weight * disc_loss, {**logs, **disc_logs}

    items = {"gen_accuracy": ("seq_gen_correct", "seq_gen_count"),
             "disc_accuracy": ("seq_disc_correct", "seq_disc_count"),
             "disc_replaced_recall": ("seq_replaced_flagged", "seq_replaced"),
             "disc_original_pass_rate": ("seq_original_passed", "seq_original")}
    # balanced accuracy is the mean of the two class rates, resample by resample
    means = {"disc_balanced_accuracy": ("disc_replaced_recall", "disc_original_pass_rate")}
    return Objective("electra", None, collate, loss, electra_metrics, electra_flops, items,
                     item_means=means, flops_app_d=electra_flops_app_d)
