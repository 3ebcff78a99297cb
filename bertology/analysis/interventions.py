"""Interventions on an encoder's activations: at a site (a layer's output, or one attention
head's output) and at chosen token positions, replace the activations by a function of them.
Where a family keeps its layers and heads is its row in families.py, so every family with
layers of its own (all but ALBERT, whose one layer serves every depth) is handled alike.

A site's activations at a batch's positions are (n, dim) rows, n the positions of all examples
in order (example 0's positions first); an intervention is an object whose
`apply(values)` returns their (n, dim) replacements:

- ZeroAblation, MeanAblation: the zero vector, or a given mean (of a reference set, say);
- Interchange: the site's values in a counterfactual run at aligned positions (Geiger et al.,
  2021's interchange intervention): extract_site collects them from the source input;
- erasure.Erasure (LEACE, INLP's projection) and erasure.AlterRep (a push along a concept).

`intervene` applies one while its block runs and removes its hook however the block ends.
Nested blocks compose, the inner one acting on what the outer one left.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from operator import attrgetter
from typing import Protocol

import numpy as np
import torch
from torch import nn

from bertology.analysis.amnesic import layer_module
from bertology.errors import require
from bertology.families import family_of_checkpoint, require_capability


@dataclass(frozen=True)
class Site:
    """Where an intervention acts. `layer` counts as output_hidden_states does: 0 is the
    embeddings' output (ELECTRA's after its projection to the hidden size), L the residual
    stream after transformer layer L (ModernBERT's last: before its final norm). With a
    `head`, the site is head `head` (original numbering, as in config.pruned_heads) of layer
    L's attention: its slice of the attention output projection's input, where
    pruning/heads.py gates heads (Michel et al., 2019)."""

    layer: int
    head: int | None = None


class Intervention(Protocol):
    def apply(self, values: torch.Tensor) -> torch.Tensor:
        """(n, dim) activations at the site's positions → (n, dim) replacements."""
        ...


@dataclass(frozen=True)
class ZeroAblation:
    def apply(self, values: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(values)


@dataclass(frozen=True)
class MeanAblation:
    mean: np.ndarray | torch.Tensor  # (dim,) the site's mean over a reference set

    def apply(self, values: torch.Tensor) -> torch.Tensor:
        mean = torch.as_tensor(self.mean, device=values.device)
        require(mean.shape == values.shape[1:],
                f"a mean of shape {tuple(mean.shape)} cannot replace {values.shape[1]}-wide values")
        return mean.to(values.dtype).expand_as(values)


@dataclass(frozen=True)
class Interchange:
    """The values a counterfactual (source) input has at the site, row i replacing the base's
    row i: the source's positions are aligned with the base's, example by example."""

    source: torch.Tensor  # (n, dim), from extract_site on the source input

    def apply(self, values: torch.Tensor) -> torch.Tensor:
        require(self.source.shape == values.shape,
                f"the source has {tuple(self.source.shape)} values at the site, the base run "
                f"{tuple(values.shape)}: give both the same number of positions per example")
        return self.source.to(device=values.device, dtype=values.dtype)


@dataclass
class Recording:
    """Leaves the values as they are and keeps a copy (what extract_site returns)."""

    seen: list[torch.Tensor]

    def apply(self, values: torch.Tensor) -> torch.Tensor:
        self.seen.append(values.detach().clone())
        return values


# ---------------------------------------------------------------- where a site lives


def encoder_layer_list(model: nn.Module) -> nn.ModuleList:
    return attrgetter(family_of_checkpoint(model.config.model_type).layers)(model.base_model)


def transformer_layer(model: nn.Module, site: Site) -> nn.Module:
    """The transformer layer whose output is hidden state `site.layer` (≥ 1)."""
    return encoder_layer_list(model)[site.layer - 1]


def check_site(model: nn.Module, site: Site) -> None:
    where = (f"layer {site.layer}" if site.head is None
             else f"head {site.head} of layer {site.layer}")
    require_capability(model.config.model_type, "layer_modules", f"an intervention on {where}")
    count = len(encoder_layer_list(model))
    lowest = 0 if site.head is None else 1
    require(lowest <= site.layer <= count,
            f"site layer {site.layer} is not in {lowest}..{count}: 0 is the embeddings' "
            f"output, L the output of layer L, and a head lives in layers 1..{count}")
    if site.head is not None:
        require_capability(model.config.model_type, "head_gates", f"an intervention on {where}")
        heads = model.config.num_attention_heads
        require(0 <= site.head < heads, f"head {site.head} is not in 0..{heads - 1}")


def head_slot(model: nn.Module, site: Site) -> tuple[int, int]:
    """(the head's place among the heads its layer still has, head_dim)."""
    row = family_of_checkpoint(model.config.model_type)
    head_dim = getattr(attrgetter(row.attention.core)(transformer_layer(model, site)),
                       row.attention.head_dim)
    pruned = {int(k): {int(h) for h in v}
              for k, v in (getattr(model.config, "pruned_heads", None) or {}).items()}
    kept = [h for h in range(model.config.num_attention_heads)
            if h not in pruned.get(site.layer - 1, set())]
    require(site.head in kept, f"head {site.head} of layer {site.layer} was pruned")
    return kept.index(site.head), head_dim


def compute_site_index(positions: list[list[int]], batch: int, seq: int
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per example a list of token positions → (n,) example and (n,) position indices, in
    order; each position within the sequence and named once."""
    require(len(positions) == batch,
            f"positions name {len(positions)} examples, the batch has {batch}")
    for i, chosen in enumerate(positions):
        require(all(0 <= p < seq for p in chosen) and len(set(chosen)) == len(chosen),
                f"example {i}'s positions {list(chosen)} must be distinct, in 0..{seq - 1}")
    rows = [i for i, chosen in enumerate(positions) for _ in chosen]
    cols = [p for chosen in positions for p in chosen]
    return torch.tensor(rows, dtype=torch.long), torch.tensor(cols, dtype=torch.long)


def compute_edited(hidden: torch.Tensor, positions: list[list[int]], head: int | None,
                   head_dim: int, intervention: Intervention) -> torch.Tensor:
    """hidden (batch, seq, width) with the site's values at `positions` replaced (a new
    tensor; the model's own is untouched). A head's values are its head_dim slice."""
    rows, cols = compute_site_index(positions, hidden.shape[0], hidden.shape[1])
    rows, cols = rows.to(hidden.device), cols.to(hidden.device)
    if head is None:
        new = intervention.apply(hidden[rows, cols])  # (n, width)
        return hidden.index_put((rows, cols), new.to(hidden.dtype))
    per_head = hidden.unflatten(-1, (-1, head_dim))  # (batch, seq, heads, head_dim)
    index = (rows, cols, torch.full_like(rows, head))
    new = intervention.apply(per_head[index])  # (n, head_dim)
    return per_head.index_put(index, new.to(hidden.dtype)).flatten(-2)  # (batch, seq, width)


# ---------------------------------------------------------------- hooks


def attach(model: nn.Module, site: Site, positions: list[list[int]],
           intervention: Intervention) -> torch.utils.hooks.RemovableHandle:
    """A layer site: a forward hook on the module whose output is the hidden state (layers
    that return a tuple have it first). A head site: a forward pre-hook on the attention
    output projection, whose input is (batch, seq, heads · head_dim)."""
    check_site(model, site)
    if site.head is None:
        def edit_output(_module, _inputs, output):
            hidden = output[0] if isinstance(output, tuple) else output
            edited = compute_edited(hidden, positions, None, 0, intervention)
            return (edited, *output[1:]) if isinstance(output, tuple) else edited

        return layer_module(model, site.layer).register_forward_hook(edit_output)
    slot, head_dim = head_slot(model, site)

    def edit_input(_module, args):
        return (compute_edited(args[0], positions, slot, head_dim, intervention), *args[1:])

    output = family_of_checkpoint(model.config.model_type).attention.output
    return attrgetter(output)(transformer_layer(model, site)).register_forward_pre_hook(edit_input)


@contextlib.contextmanager
def intervene(model: nn.Module, site: Site, positions: list[list[int]],
              intervention: Intervention):
    """Apply `intervention` at `site` and `positions` (per example of every batch run inside
    the block, a list of token positions) on each forward pass inside the block. The hook is
    removed however the block ends, an exception inside it included."""
    handle = attach(model, site, positions, intervention)
    try:
        yield
    finally:
        handle.remove()


@torch.no_grad()
def extract_site(model: nn.Module, inputs: dict[str, torch.Tensor], site: Site,
                 positions: list[list[int]]) -> torch.Tensor:
    """(n, dim) the site's activations at `positions` in one forward pass on `inputs` (the
    source of an Interchange, or a reference set's values for a MeanAblation)."""
    recording = Recording([])
    with intervene(model, site, positions, recording):
        model(**inputs)
    require(len(recording.seen) == 1, f"the site was reached {len(recording.seen)} times in "
            "one forward pass")
    return recording.seen[0]


def extract_interchange(model: nn.Module, source: dict[str, torch.Tensor], site: Site,
                        positions: list[list[int]]) -> Interchange:
    """The interchange intervention of a counterfactual input: its values at `positions`,
    to be patched into the base run at the base's aligned positions."""
    return Interchange(extract_site(model, source, site, positions))
