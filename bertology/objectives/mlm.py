"""Masked language modelling (Devlin et al., 2019, §3.1 Task #1).

Masking: `mask_prob` of the non-special tokens are chosen (an exact count per sequence, as in
BERT's create_pretraining_data.py), of which `mask_token_ratio` become [MASK] (or [UNK] with
mask_with=unk), `random_token_ratio` a random non-special token and the rest stay: each row of
BERT's Table 8 is a config. Whole-word masking picks words (runs that begin at a word start)
instead of tokens. Every mask is drawn from a generator seeded by (seed, example's mask_key), so
static masks repeat across epochs and a resumed run draws the masks it would have drawn.

Loss: the MLM head runs only at masked positions, ~15% of the tokens: with a small model and
a large vocabulary the head dominates the cost otherwise. It sees a fixed number of them per
batch shape, as Cramming's sparse prediction does (Geiping & Goldstein, 2023), so the step has
static shapes and no host synchronisation (a boolean mask's result has a size only the device
knows): the collate lists each row's masked positions in `mlm_positions` (batch, row_bound),
found on the host where it is free. Unlike Cramming, which keeps a fixed share and drops the
excess, row_bound is an upper bound and the spare slots are ignored targets, so the loss is that
of every masked token. In training mode the loss returns its losses only; the counts (argmax,
per-sequence sums) are the held-out evaluation's, which runs the model in eval mode.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from transformers import PreTrainedTokenizerBase

from bertology.config.groups import ObjectiveConfig
from bertology.data.encode import IGNORE
from bertology.data.formats import Specials
from bertology.errors import UserError
from bertology.models.structure import encoder_of, mlm_head_of
from bertology.training.objective import Objective


@dataclass(frozen=True)
class MaskingSpec:
    mask_prob: float
    mask_token_ratio: float
    random_token_ratio: float
    whole_word: bool
    replacement_id: int  # [MASK], or [UNK] for the mask_with=unk ablation
    special_ids: np.ndarray  # never chosen
    random_pool: np.ndarray  # ids a chosen token may be replaced with: the non-special vocab
    seed: int
    # (pool,) probability of each pool id (objective.random_tokens=unigram); None: uniform
    random_weights: np.ndarray | None = None

    @classmethod
    def build(cls, cfg: ObjectiveConfig, tokenizer: PreTrainedTokenizerBase, seed: int,
              token_counts: np.ndarray | None = None):
        """token_counts (vocab,): the training corpus's token counts, for random_tokens=unigram."""
        specials = Specials.of(tokenizer)
        special_ids = np.array(sorted(specials.all), dtype=np.int64)
        pool = np.setdiff1d(np.arange(len(tokenizer)), special_ids)
        replacement = specials.unk if cfg.mask_with == "unk" else specials.mask
        return cls(cfg.mask_prob, cfg.mask_token_ratio, cfg.random_token_ratio, cfg.whole_word,
                   replacement, special_ids, pool, seed,
                   unigram_weights(cfg, pool, token_counts))


def unigram_weights(cfg: ObjectiveConfig, pool: np.ndarray,
                    token_counts: np.ndarray | None) -> np.ndarray | None:
    """(pool,) each pool id's share of the corpus's non-special tokens, or None (uniform)."""
    if cfg.random_tokens == "uniform":
        return None
    if token_counts is None:
        raise ValueError("objective.random_tokens=unigram needs the corpus's token counts")
    counts = token_counts[pool].astype(np.float64)
    if counts.sum() == 0:
        raise UserError("objective.random_tokens=unigram: the training corpus has no "
                        "non-special tokens to count; use objective.random_tokens=uniform")
    return counts / counts.sum()


def _choose_words(word_ids: np.ndarray, candidates: np.ndarray, count: int,
                  rng: np.random.Generator) -> np.ndarray:
    """Whole words in random order until `count` tokens are covered; like BERT, a word that
    would overshoot is skipped."""
    words, sizes = np.unique(word_ids[candidates], return_counts=True)
    chosen_words, covered = [], 0
    for index in rng.permutation(len(words)):
        if covered + sizes[index] > count:
            continue
        chosen_words.append(words[index])
        covered += sizes[index]
        if covered == count:
            break
    return np.flatnonzero(candidates & np.isin(word_ids, chosen_words))


def compute_mask(input_ids: np.ndarray, word_starts: np.ndarray, spec: MaskingSpec,
                 rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Returns (corrupted input ids, labels): labels hold the original id where a loss is
    taken and IGNORE elsewhere."""
    candidates = ~np.isin(input_ids, spec.special_ids)
    count = int(round(candidates.sum() * spec.mask_prob))
    count = max(1, count) if candidates.any() else 0
    if spec.whole_word:
        word_ids = np.cumsum(word_starts) - 1  # (seq,) word number of every token
        positions = _choose_words(word_ids, candidates, count, rng)
    else:
        positions = rng.choice(np.flatnonzero(candidates), size=count, replace=False)
    labels = np.full(len(input_ids), IGNORE, dtype=np.int64)
    labels[positions] = input_ids[positions]
    corrupted = input_ids.astype(np.int64)
    draw = rng.random(len(positions))
    to_mask = positions[draw < spec.mask_token_ratio]
    to_random = positions[(draw >= spec.mask_token_ratio)
                          & (draw < spec.mask_token_ratio + spec.random_token_ratio)]
    corrupted[to_mask] = spec.replacement_id
    corrupted[to_random] = rng.choice(spec.random_pool, size=len(to_random),
                                      p=spec.random_weights)
    return corrupted, labels


def pad_batch(examples: list[dict], spec: MaskingSpec, pad_id: int) -> dict[str, torch.Tensor]:
    """Mask each example with its own seeded generator and pad to the longest in the batch."""
    length = max(len(e["input_ids"]) for e in examples)
    shape = (len(examples), length)
    input_ids = np.full(shape, pad_id, dtype=np.int64)
    labels = np.full(shape, IGNORE, dtype=np.int64)
    attention = np.zeros(shape, dtype=np.int64)
    token_types = np.zeros(shape, dtype=np.int64)
    for row, example in enumerate(examples):
        rng = np.random.default_rng([spec.seed, *example["mask_key"]])
        ids, lab = compute_mask(example["input_ids"], example["word_starts"], spec, rng)
        n = len(ids)
        input_ids[row, :n], labels[row, :n], attention[row, :n] = ids, lab, 1
        token_types[row, :n] = example["token_type_ids"]
    batch = {"input_ids": input_ids, "labels": labels, "attention_mask": attention,
             "token_type_ids": token_types,
             "mlm_positions": list_positions(labels, row_bound(length, spec.mask_prob))}
    return {key: torch.from_numpy(value) for key, value in batch.items()}


def row_bound(length: int, mask_prob: float) -> int:
    """The most tokens compute_mask chooses in a row of `length` tokens: the count is
    round(candidates x mask_prob), at least 1, and candidates <= length (whole words never
    overshoot it)."""
    return max(1, round(length * mask_prob))


def list_positions(labels: np.ndarray, width: int) -> np.ndarray:
    """(batch, width) each row's masked positions in order, -1 in the spare slots. The width
    must bound every row, or the loss would silently drop targets."""
    positions = np.full((labels.shape[0], width), -1, dtype=np.int64)
    for row, masked in enumerate(labels != IGNORE):
        found = np.flatnonzero(masked)
        if len(found) > width:
            raise RuntimeError(f"{len(found)} masked tokens in a row, more than the {width} "
                               "slots of the MLM head")
        positions[row, : len(found)] = found
    return positions


def masked_slots(batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """(flat indices into the (batch * seq) positions, their targets), both (count,), in
    row-major order (that of labels[labels != IGNORE]). From the collate's mlm_positions: a
    static count, spare slots index position 0 of their row with an IGNORE target; without
    them (a batch made elsewhere): exactly the masked positions, a size the host must read."""
    labels = batch["labels"]  # (batch, seq)
    if "mlm_positions" not in batch:
        flat = labels.flatten().ne(IGNORE).nonzero().squeeze(1)  # (n_masked,)
        return flat, labels.flatten()[flat]
    listed = batch["mlm_positions"]  # (batch, width), -1 spare
    within = listed.clamp(min=0)
    rows = torch.arange(labels.shape[0], device=labels.device).unsqueeze(1)  # (batch, 1)
    flat = (rows * labels.shape[1] + within).flatten()  # (batch * width,)
    targets = torch.where(listed >= 0, labels.gather(1, within), IGNORE).flatten()
    return flat, targets


def encode_and_mlm(model: torch.nn.Module, family: str, batch: dict):
    """Run the encoder, then the MLM head at masked positions only (masked_slots). Returns the
    encoder output, the MLM loss and its logs (summed counts, so eval can pool batches; in
    training mode the loss only)."""
    encoded = encoder_of(model)(input_ids=batch["input_ids"],
                                attention_mask=batch["attention_mask"],
                                token_type_ids=batch["token_type_ids"])
    labels = batch["labels"]  # (batch, seq)
    positions, targets = masked_slots(batch)  # (count,) each
    hidden = encoded.last_hidden_state.flatten(0, 1)[positions]  # (count, hidden)
    logits = mlm_head_of(model, family)(hidden)  # (count, vocab)
    loss = F.cross_entropy(logits.float(), targets, ignore_index=IGNORE)
    if model.training:
        return encoded, loss, {"mlm_loss": loss.detach()}
    valid = targets != IGNORE
    correct = (logits.argmax(-1) == targets) & valid  # (count,)
    rows = positions // labels.shape[1]  # (count,) each slot's sequence
    logs = {"mlm_loss": loss.detach(), "mlm_correct": correct.sum(), "mlm_count": valid.sum(),
            "seq_mlm_correct": per_row(rows, correct, labels.shape[0]),
            "seq_mlm_count": (labels != IGNORE).sum(1)}
    return encoded, loss, logs


def per_row(rows: torch.Tensor, values: torch.Tensor, n_rows: int) -> torch.Tensor:
    """(n_rows,) sums of values by the row each belongs to."""
    out = torch.zeros(n_rows, device=values.device)
    return out.index_add_(0, rows, values.float())


def per_sequence(positions: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """(batch,) sums of per-target values, given in the order of positions.nonzero(): the
    counts a per-sequence bootstrap of the eval resamples."""
    rows = positions.nonzero(as_tuple=True)[0]  # (n,) each target's sequence
    return per_row(rows, values, positions.shape[0])


# eval metric -> the per-sequence counts it is the pooled ratio of
MLM_ITEMS = {"mlm_accuracy": ("seq_mlm_correct", "seq_mlm_count")}


def mlm_metrics(sums: dict[str, float], batches: int) -> dict[str, float]:
    """Eval metrics from summed logs: accuracy over masked tokens, perplexity of the MLM."""
    loss = sums["mlm_loss"] / batches
    return {"mlm_loss": loss, "mlm_accuracy": sums["mlm_correct"] / max(1, sums["mlm_count"]),
            "perplexity": float(np.exp(min(loss, 50.0)))}


def build(cfg: ObjectiveConfig, tokenizer: PreTrainedTokenizerBase, family: str,
          seed: int) -> Objective:
    spec = MaskingSpec.build(cfg, tokenizer, seed)
    pad_id = tokenizer.pad_token_id

    def collate(examples: list[dict]) -> dict[str, torch.Tensor]:
        return pad_batch(examples, spec, pad_id)

    def loss(model: torch.nn.Module, batch: dict) -> tuple[torch.Tensor, dict]:
        _, mlm_loss, logs = encode_and_mlm(model, family, batch)
        return mlm_loss, logs

    return Objective("mlm", None, collate, loss, mlm_metrics, item_ratios=MLM_ITEMS)
