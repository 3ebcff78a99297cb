"""trainer.dropout_masks=bits: dropout whose masks come from 16-bit random integers, on CPU.

Why: PyTorch's CPU dropout draws one random number per element (bernoulli_), and that draw
costs more than the matmul it follows at these widths: at size=small, aten::bernoulli_ is a
visible share of a bf16 training step (bench/RESULTS.md, "Where bertology's pretraining step
spends its time"). A 64-bit draw holds four 16-bit integers, so filling an int64 buffer a
quarter of the tensor's length and comparing its 16-bit halves against a threshold gives the
same Bernoulli mask from a quarter of the draws (bench/bench_levers.py times the two).

The mask is exact up to the drop probability's resolution: p is rounded to a multiple of
1/65536 (0.1 becomes 0.100006), and the kept units are scaled by 1/(1 - that p), so the
expectation is preserved exactly, as inverted dropout requires (Srivastava et al., 2014).

Attention dropout: SDPA's fused CPU kernel has no dropout, so with dropout > 0 PyTorch falls back
to its math path, which draws the mask with bernoulli_. The attention function registered here
(`bertology_sdpa`) runs that same math path with this mask while training with dropout, and
is SDPA itself otherwise (evaluation, dropout 0, or a shape it does not cover: causal, grouped
query heads, position bias).

`auto` uses these masks on CPU only: on a GPU, PyTorch's dropout is a fused Philox kernel and
nothing is left to save. Masks come from the default generator, seeded per step by the loop, so a
resumed run draws the masks it would have drawn.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from bertology.training.precision import default_device

LEVELS = 1 << 16  # a 16-bit integer's values: the drop probability's resolution is 1/LEVELS
ATTENTION = "bertology_sdpa"


def keep_mask(shape: torch.Size, p: float, device: torch.device) -> tuple[torch.Tensor, float]:
    """A Bernoulli(1 - p) mask of `shape` from 16-bit random integers, and the scale that keeps
    the expectation: 1 / (1 - p rounded to a multiple of 1/LEVELS)."""
    dropped = round(p * LEVELS)
    count = shape.numel()
    # random_(min, None) fills all 64 bits (the full int64 range); each int64 is four int16s
    bits = torch.empty((count + 3) // 4, dtype=torch.int64, device=device)
    bits.random_(torch.iinfo(torch.int64).min, None)
    uniform16 = bits.view(torch.int16)[:count].view(shape)  # uniform on [-32768, 32767]
    keep = uniform16 >= dropped - LEVELS // 2  # false for `dropped` of the LEVELS values
    return keep, LEVELS / (LEVELS - dropped)


class _BitsDropout(torch.autograd.Function):
    """Inverted dropout with a mask from keep_mask; backward reuses the saved mask (bool, a
    quarter of a float mask's memory)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, p: float) -> torch.Tensor:
        keep, scale = keep_mask(x.shape, p, x.device)
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return x * keep * scale

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        (keep,) = ctx.saved_tensors
        return grad * keep * ctx.scale, None


def bits_dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    if not training or p == 0.0:
        return x
    if p >= 1.0:
        return torch.zeros_like(x)
    return _BitsDropout.apply(x, p)


class BitsDropout(nn.Dropout):
    """nn.Dropout with bits_dropout's mask (the same p and the same .p attribute, which the
    attention modules read)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return bits_dropout(x, self.p, self.training)


def bits_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor,
                   value: torch.Tensor, attention_mask: torch.Tensor | None,
                   dropout: float = 0.0, scaling: float | None = None,
                   is_causal: bool | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """SDPA's math path with bits_dropout on the attention probabilities. query, key, value:
    (batch, heads, seq, head_dim); the mask is SDPA's (bool: True attends; or additive float),
    broadcast to (batch, heads, seq, seq). Anything else is SDPA's own."""
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    plain = (dropout > 0.0 and not (causal and attention_mask is None)
             and getattr(module, "num_key_value_groups", 1) == 1
             and kwargs.get("position_bias") is None and kwargs.get("softcap") is None)
    if not plain:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, is_causal=is_causal, **kwargs)
    scale = query.shape[-1] ** -0.5 if scaling is None else scaling
    scores = torch.matmul(query, key.transpose(-1, -2)) * scale  # (batch, heads, seq, seq)
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
        else:
            scores = scores + attention_mask
    probs = bits_dropout(torch.softmax(scores, dim=-1), dropout)
    output = torch.matmul(probs, value)  # (batch, heads, seq, head_dim)
    return output.transpose(1, 2).contiguous(), None  # (batch, seq, heads, head_dim)


AttentionInterface.register(ATTENTION, bits_attention)
AttentionMaskInterface.register(ATTENTION, sdpa_mask)  # the same masks SDPA is given


def uses_bits(setting: str, device: torch.device | None = None) -> bool:
    """trainer.dropout_masks: `bits` or `torch` as asked; `auto` is bits on CPU only (the
    device the run trains on: CUDA where there is one, as the precision choice assumes)."""
    device = default_device() if device is None else device
    return setting == "bits" or (setting == "auto" and device.type == "cpu")


def use_bits_dropout(model: nn.Module) -> int:
    """Swap every nn.Dropout in the model for BitsDropout (dropout has no weights: the state
    dict and checkpoints are unchanged) and route SDPA attention through bits_attention.
    Returns how many dropout modules were swapped."""
    swapped = 0
    for parent in list(model.modules()):
        for name, child in parent.named_children():
            if type(child) is nn.Dropout:
                setattr(parent, name, BitsDropout(child.p, child.inplace))
                swapped += 1
    switch_attention(model, "sdpa", ATTENTION)
    return swapped


def restore_sdpa(model: nn.Module) -> None:
    """The model's attention back to plain SDPA (after training: analyses read the config)."""
    switch_attention(model, ATTENTION, "sdpa")


def switch_attention(model: nn.Module, current: str, new: str) -> None:
    """Every (sub)model config whose attention implementation is `current` set to `new`."""
    for module in model.modules():
        config = getattr(module, "config", None)
        if getattr(config, "_attn_implementation", None) == current:
            config._attn_implementation = new
