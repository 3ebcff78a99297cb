"""A masked-LM head fitted on a frozen encoder, for checkpoints that cannot predict a word
themselves (all-MiniLM-L6-v2, an ELECTRA discriminator): the readout of
analysis=agreement_interchange with `head: fitted` (or `auto` where the head is missing).

The head is the family's own (BERT's transform and a decoder tied to the input embeddings),
freshly initialised and trained with the masked-LM loss on the probe task's train sentences
while every encoder weight stays frozen. It reads one position's top-layer state and nothing
else, so whatever it predicts at a masked verb is what the encoder carried to that position:
an interchange at the subject that changes its prediction changed what the encoder routed
there. The random-init twin gets a head fitted the same way, so the twin's contrast asks
whether an untrained encoder's mixing carries the subject's number to the verb too (with its
head left at random, the twin's readout would be noise that no interchange could move).

Deviation from the papers: Finlayson et al. (2021) read the model's own pretrained head. A
fitted head is trained on the task's sentences, where the masked verb's form follows the
subject; the verb accuracy it reaches on held-out pairs is the guard's, as for an own head.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from bertology.analysis.features import word_spans
from bertology.analysis.probe_context import device
from bertology.data.probe_sentences import ProbeSentence
from bertology.families import family_of_checkpoint

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HeadFit:
    """How the head was fitted, for metrics.json."""

    steps: int
    masked_words: int  # masked words whose states the head was fitted on
    first_loss: float  # the first batch's masked-LM loss
    last_loss: float  # the mean over the last tenth of the steps


def encoder_parameters(model: PreTrainedModel) -> set[int]:
    """ids of the encoder's parameters (model.base_model): the decoder tied to the input
    embeddings is one of them and stays frozen with them."""
    return {id(p) for p in model.base_model.parameters()}


def head_parameters(model: PreTrainedModel) -> list[torch.nn.Parameter]:
    """The parameters outside the encoder: the head's transform and the decoder's bias."""
    frozen = encoder_parameters(model)
    return [p for p in model.parameters() if id(p) not in frozen]


def reset_head(model: PreTrainedModel) -> None:
    """Every head weight drawn afresh as BERT initialises it (linear weights N(0, the config's
    initializer_range), LayerNorm at 1 and 0, biases 0); the encoder's and the tied embeddings'
    weights untouched. Explicit: transformers marks loaded modules initialised and its own
    initialiser then leaves them as they are."""
    frozen = encoder_parameters(model)
    std = getattr(model.config, "initializer_range", 0.02)
    with torch.no_grad():
        for module in model.modules():
            own = {name: p for name, p in module.named_parameters(recurse=False)
                   if id(p) not in frozen}
            for name, p in own.items():
                if name == "weight" and isinstance(module, torch.nn.Linear):
                    p.normal_(0.0, std)
                elif name == "weight" and p.dim() == 1:  # a norm's scale
                    p.fill_(1.0)
                else:
                    p.zero_()


def mask_words(tokenizer: PreTrainedTokenizerBase, sentences: list[ProbeSentence],
               rate: float, max_length: int, rng: np.random.Generator
               ) -> list[tuple[list[int], list[int]]]:
    """(input ids, targets) per sentence: `rate` of its one-sub-word words (at least one)
    replaced by the mask token, the targets their ids (-100 elsewhere)."""
    rows = []
    for sentence in sentences:
        encoded = tokenizer(list(sentence.words), is_split_into_words=True,
                            truncation=True, max_length=max_length)
        ids = list(encoded["input_ids"])
        spans = word_spans(encoded.word_ids(), len(sentence.words))
        single = [start for start, end in spans if end - start == 1]
        if not single:
            continue
        chosen = rng.choice(single, size=max(1, round(rate * len(single))), replace=False)
        targets = [-100] * len(ids)
        for position in chosen:
            targets[position], ids[position] = ids[position], tokenizer.mask_token_id
        rows.append((ids, targets))
    return rows


def collate_masked(rows: list[tuple[list[int], list[int]]], pad_id: int
                   ) -> dict[str, torch.Tensor]:
    """A right-padded batch: (batch, tokens) input_ids, attention_mask and labels."""
    width = max(len(ids) for ids, _ in rows)
    batch = {"input_ids": torch.full((len(rows), width), pad_id, dtype=torch.long),
             "attention_mask": torch.zeros((len(rows), width), dtype=torch.long),
             "labels": torch.full((len(rows), width), -100, dtype=torch.long)}
    for r, (ids, targets) in enumerate(rows):
        batch["input_ids"][r, :len(ids)] = torch.tensor(ids)
        batch["attention_mask"][r, :len(ids)] = 1
        batch["labels"][r, :len(ids)] = torch.tensor(targets)
    return {k: v.to(device()) for k, v in batch.items()}


def head_logits(model: PreTrainedModel, states: torch.Tensor) -> torch.Tensor:
    """(n, hidden) top-layer states → (n, vocab) logits through the family's head, and the
    output embeddings where the head stops before them (ELECTRA's, ModernBERT's)."""
    family = family_of_checkpoint(model.config.model_type)
    out = model.get_submodule(family.mlm_head)(states)
    if out.shape[-1] != model.config.vocab_size:
        out = model.get_output_embeddings()(out)
    return out


@torch.no_grad()
def extract_masked_states(model: PreTrainedModel, rows: list[tuple[list[int], list[int]]],
                          pad_id: int, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The frozen encoder's top-layer states at every masked position of the rows, (n, hidden),
    and their target ids, (n,): computed once, since no encoder weight changes during the fit."""
    states, targets = [], []
    for start in range(0, len(rows), batch_size):
        batch = collate_masked(rows[start:start + batch_size], pad_id)
        labels = batch.pop("labels")
        hidden = model.base_model(**batch).last_hidden_state  # (batch, tokens, hidden)
        masked = labels != -100
        states.append(hidden[masked])
        targets.append(labels[masked])
    return torch.cat(states), torch.cat(targets)


def fit_head(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
             sentences: list[ProbeSentence], seed: int, steps: int = 1000,
             copies: int = 10, batch_size: int = 256, lr: float = 1e-2, rate: float = 0.15,
             max_length: int = 128) -> HeadFit:
    """Train the model's head (reset first) on `sentences` with the encoder frozen: each
    sentence masked `copies` times (`rate` of its words), the encoder's states at the masks
    extracted once, then `steps` batches of `batch_size` of them, Adam at `lr`. The model is
    left in eval mode, every parameter trainable as it was."""
    rng = np.random.default_rng([seed, 2])
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        reset_head(model)
    model.eval()  # no dropout: the encoder is read as the interchange reads it
    rows = [row for _ in range(copies)
            for row in mask_words(tokenizer, sentences, rate, max_length, rng)]
    states, targets = extract_masked_states(model, rows, tokenizer.pad_token_id, 64)
    frozen = [p for p in model.parameters() if id(p) in encoder_parameters(model)]
    for p in frozen:
        p.requires_grad_(False)
    optimizer = torch.optim.Adam(head_parameters(model), lr=lr)
    generator = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(steps):
        picked = torch.randint(len(targets), (batch_size,), generator=generator)
        loss = torch.nn.functional.cross_entropy(head_logits(model, states[picked]),
                                                 targets[picked])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    for p in frozen:
        p.requires_grad_(True)
    tail = losses[-max(1, steps // 10):]
    fit = HeadFit(steps, len(targets), losses[0], float(np.mean(tail)))
    log.info("head fitted on the frozen encoder: %d steps over %d masked words, loss %.3f -> "
             "%.3f", fit.steps, fit.masked_words, fit.first_loss, fit.last_loss)
    return fit
