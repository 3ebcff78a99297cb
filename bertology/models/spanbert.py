"""SpanBERT's span-boundary head (Joshi et al., 2020, §3.2) and how it travels with the model.

SpanBERT is BERT's encoder and MLM head (a plain BertForMaskedLM) plus the SBO head, which
predicts each token of a masked span from the encoder states of the two tokens just outside
the span and the token's position in it:

    h0 = [x_{s-1}; x_{e+1}; p_{i-s+1}]
    h1 = LayerNorm(GeLU(W1 h0)),  y_i = LayerNorm(GeLU(W2 h1)),  logits = E y_i + b

The head is a submodule of the BertForMaskedLM (`model.sbo_head`), so the training loop's
optimizer (built from model.parameters()) trains it and checkpoints (safetensors of the whole
module) hold and restore it. `model/` keeps it out of model.safetensors, so plain
`AutoModelForMaskedLM.from_pretrained(model/)` loads with no unexpected keys; it is saved
beside the weights as sbo_head.safetensors + sbo_head.json and restored from there when a run
continues from that dir.
"""

from __future__ import annotations

import json
import logging
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import PreTrainedModel

log = logging.getLogger(__name__)

ATTRIBUTE = "sbo_head"  # where the head hangs on the BertForMaskedLM
WEIGHTS_FILE = "sbo_head.safetensors"
CONFIG_FILE = "sbo_head.json"


class SpanBoundaryHead(nn.Module):
    """A 2-layer feed-forward network with GeLU and LayerNorm (Joshi et al. §3.2) over the two
    boundary states and a relative-position embedding, then the vocabulary projection.

    The projection is the input word-embedding matrix, passed in at call time, plus a bias of
    the head's own: the official code ties it the same way (as BERT ties its MLM decoder), it
    saves vocab x hidden parameters, and the head's weights stay a standalone file."""

    def __init__(self, hidden_size: int, vocab_size: int, position_embeddings: int,
                 layer_norm_eps: float = 1e-12, initializer_range: float = 0.02):
        super().__init__()
        self.config = {"hidden_size": hidden_size, "vocab_size": vocab_size,
                       "position_embeddings": position_embeddings,
                       "layer_norm_eps": layer_norm_eps, "initializer_range": initializer_range}
        # The official code uses 200-d position embeddings at H=1024; H-d here scales with size=.
        self.position_embeddings = nn.Embedding(position_embeddings, hidden_size)
        self.linear1 = nn.Linear(3 * hidden_size, hidden_size)
        self.layer_norm1 = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.linear2 = nn.Linear(hidden_size, hidden_size)
        self.layer_norm2 = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(vocab_size))
        # BERT's initialisation: N(0, initializer_range) weights, zero biases.
        for module in (self.position_embeddings, self.linear1, self.linear2):
            nn.init.normal_(module.weight, std=initializer_range)
        for linear in (self.linear1, self.linear2):
            nn.init.zeros_(linear.bias)

    def forward(self, left: torch.Tensor, right: torch.Tensor, positions: torch.Tensor,
                output_embeddings: torch.Tensor) -> torch.Tensor:
        """left, right: (n, hidden) states of the tokens just outside each target's span;
        positions: (n,) 1-based position of the target in its span (positions past the last
        embedding share it); output_embeddings: (vocab, hidden). Returns logits (n, vocab)."""
        index = positions.clamp(1, self.position_embeddings.num_embeddings) - 1
        h = torch.cat([left, right, self.position_embeddings(index)], dim=-1)  # (n, 3 hidden)
        h = self.layer_norm1(F.gelu(self.linear1(h)))
        h = self.layer_norm2(F.gelu(self.linear2(h)))  # (n, hidden)
        return F.linear(h, output_embeddings, self.bias)  # (n, vocab)


def attach_sbo_head(model: PreTrainedModel, position_embeddings: int,
                    name_or_path: str | None) -> PreTrainedModel:
    """Hang an SBO head on a BertForMaskedLM: the one saved in `name_or_path` when it has one,
    else a new one (random init, or continuing from a checkpoint without a head)."""
    saved = Path(name_or_path) / WEIGHTS_FILE if name_or_path else None
    if saved is not None and saved.is_file():
        head = load_sbo_head(saved.parent)
        log.info("SBO head restored from %s", saved)
    else:
        config = model.config
        head = SpanBoundaryHead(config.hidden_size, config.vocab_size, position_embeddings,
                                config.layer_norm_eps, config.initializer_range)
        if name_or_path:
            log.info("%s has no %s: the SBO head is newly initialised", name_or_path,
                     WEIGHTS_FILE)
    setattr(model, ATTRIBUTE, head)
    return model


def has_sbo_head(model: nn.Module) -> bool:
    return isinstance(getattr(model, ATTRIBUTE, None), SpanBoundaryHead)


@contextmanager
def without_sbo_head(model: nn.Module):
    """The model as plain transformers knows it, for the length of a save_pretrained."""
    head = getattr(model, ATTRIBUTE)
    delattr(model, ATTRIBUTE)
    try:
        yield model
    finally:
        setattr(model, ATTRIBUTE, head)


def save_sbo_head(head: SpanBoundaryHead, path: Path) -> None:
    tensors = {k: v.detach().contiguous().cpu() for k, v in head.state_dict().items()}
    save_file(tensors, str(path / WEIGHTS_FILE), metadata={"format": "pt"})
    (path / CONFIG_FILE).write_text(json.dumps(head.config, indent=2) + "\n")


def load_sbo_head(path: Path) -> SpanBoundaryHead:
    """The head saved in a model dir (its config from sbo_head.json, weights strict)."""
    head = SpanBoundaryHead(**json.loads((Path(path) / CONFIG_FILE).read_text()))
    head.load_state_dict(load_file(str(Path(path) / WEIGHTS_FILE)))
    return head
