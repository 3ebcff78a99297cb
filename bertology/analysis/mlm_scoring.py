"""Scoring words through a masked-LM head: pseudo-log-likelihood of a sentence (Salazar et
al., 2020) and log-probabilities at a single mask, batched; shared by the cloze suites.

Masks: the word under test is put in its sentence, tokenised, and its sub-words replaced by a
single tokenizer.mask_token_id, so WordPiece ([MASK]) and byte-level BPE (<mask>) are handled
alike.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from bertology.data import cloze_suites as data
from bertology.families import family_of_checkpoint


@dataclass
class Scorer:
    model: PreTrainedModel  # AutoModelForMaskedLM, eval mode
    tokenizer: PreTrainedTokenizerBase
    batch_size: int  # masked sequences per forward pass
    top_k: int


# ---------------------------------------------------------------- scoring


def max_tokens(model: PreTrainedModel) -> int:
    """The longest input the position embeddings take (RoBERTa's start after padding_idx)."""
    config = model.config
    return config.max_position_embeddings - family_of_checkpoint(config.model_type).position_offset


def forward_at(scorer: Scorer, inputs: list[list[int]], positions: list[int]) -> torch.Tensor:
    """Log-probabilities over the vocabulary at one position of each input: (batch, vocab)."""
    pad = scorer.tokenizer.pad_token_id or 0
    ids = torch.full((len(inputs), max(map(len, inputs))), pad, dtype=torch.long)
    attention = torch.zeros_like(ids)  # (batch, length)
    for row, sequence in enumerate(inputs):
        ids[row, : len(sequence)] = torch.tensor(sequence)
        attention[row, : len(sequence)] = 1
    device = scorer.model.device
    with torch.no_grad():
        logits = scorer.model(input_ids=ids.to(device), attention_mask=attention.to(device)).logits
    rows = torch.arange(len(inputs), device=device)
    picked = logits[rows, torch.tensor(positions, device=device)]  # (batch, vocab)
    return picked.float().log_softmax(-1).cpu()


def compute_pll(scorer: Scorer, sentences: list[str], desc: str) -> list[float | None]:
    """Salazar et al. (2020) §2: PLL(W) = Σ_t log P(w_t | W with only position t masked), over
    every sub-word token ([CLS]/[SEP] and <s>/</s> excluded). The masked copies of all the
    sentences are batched together. None: longer than the position embeddings."""
    tokenizer = scorer.tokenizer
    encoded = tokenizer(sentences, return_special_tokens_mask=True)
    limit = max_tokens(scorer.model)
    totals: list[float | None] = []
    rows = []  # (sentence, position) of every masked copy
    for i, (ids, special) in enumerate(zip(encoded["input_ids"], encoded["special_tokens_mask"])):
        fits = len(ids) <= limit
        totals.append(0.0 if fits else None)
        rows += [(i, t) for t in range(len(ids)) if fits and not special[t]]
    for start in tqdm(range(0, len(rows), scorer.batch_size), desc=desc, leave=False):
        chunk = rows[start: start + scorer.batch_size]
        inputs = []
        for i, t in chunk:
            ids = list(encoded["input_ids"][i])
            ids[t] = tokenizer.mask_token_id
            inputs.append(ids)
        log_probs = forward_at(scorer, inputs, [t for _, t in chunk])  # (batch, vocab)
        original = torch.tensor([encoded["input_ids"][i][t] for i, t in chunk])
        scores = log_probs.gather(1, original[:, None]).squeeze(1)  # (batch,)
        for (i, _), score in zip(chunk, scores.tolist()):
            totals[i] += score
    return totals


def token_id(tokenizer: PreTrainedTokenizerBase, word: str) -> int | None:
    """`word`'s id when it is one vocabulary token after a space (as at every gap here)."""
    ids = tokenizer(" " + word, add_special_tokens=False)["input_ids"]
    return ids[0] if len(ids) == 1 and ids[0] != tokenizer.unk_token_id else None


def encode_cloze(scorer: Scorer, cloze: data.Cloze, filler: str) -> tuple[list[int], int] | None:
    """Input ids of the sentence with `filler`'s sub-words replaced by one mask, and the mask's
    position; None when the gap holds no token or the input is too long."""
    text, (start, end) = cloze.fill(filler)
    encoded = scorer.tokenizer(text, return_offsets_mapping=True, return_special_tokens_mask=True)
    # a byte-level BPE word that is not in the vocabulary may start with a lone "Ġ" (its space,
    # offsets (start, start)): it belongs to the word, as the mask then stands for "Ġword"
    inside = [t for t, ((a, b), special) in enumerate(zip(encoded["offset_mapping"],
                                                          encoded["special_tokens_mask"]))
              if not special and (a < end and b > start or a == b == start)]
    if not inside:
        return None
    ids = encoded["input_ids"]
    masked = ids[: inside[0]] + [scorer.tokenizer.mask_token_id] + ids[inside[-1] + 1:]
    return (masked, inside[0]) if len(masked) <= max_tokens(scorer.model) else None


def compute_mask_scores(scorer: Scorer, inputs: list[tuple[list[int], int]],
                        candidates: list[list[int]], desc: str
                        ) -> tuple[np.ndarray, list[list[float]]]:
    """At each input's mask: the top-k token ids, special tokens excluded, (n, k), and the
    log-probabilities of that input's candidate ids."""
    special = torch.tensor(sorted(set(scorer.tokenizer.all_special_ids)), dtype=torch.long)
    k = min(scorer.top_k, len(scorer.tokenizer))
    tops, scores = [], []
    for start in tqdm(range(0, len(inputs), scorer.batch_size), desc=desc, leave=False):
        chunk = inputs[start: start + scorer.batch_size]
        log_probs = forward_at(scorer, [ids for ids, _ in chunk], [p for _, p in chunk])
        scores += [log_probs[row, wanted].tolist()
                   for row, wanted in enumerate(candidates[start: start + scorer.batch_size])]
        log_probs[:, special] = -float("inf")
        tops.append(log_probs.topk(k, dim=-1).indices)  # (batch, k)
    return (torch.cat(tops).numpy() if tops else np.zeros((0, k), dtype=np.int64)), scores
