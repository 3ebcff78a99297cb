"""Post-training dynamic int8 quantisation of a model's nn.Linear layers, for CPU inference.

The survey (Rogers et al., 2020, §6.2) lists quantisation beside pruning and distillation as a
way to compress BERT: Q8BERT (Zafrir et al., 2019) keeps fine-tuned accuracy with 8-bit weights
(there with quantisation-aware training). This is the no-training variant: each linear layer's
weight is stored as int8 with one scale per output row (symmetric, per channel), and its input
activations are quantised per batch at run time. Embeddings, LayerNorm and biases stay fp32.

Backends (`BACKENDS`):
- "torch_ao": torch.ao.quantization.quantize_dynamic with per-channel weights (per-tensor scales
  gave MiniLM's [CLS] state 0.25 relative error, per-channel 0.17), fbgemm/x86 int8 kernels. The
  default while torch ships it: its kernels make int8 faster than fp32 on CPU (bench/RESULTS.md,
  "Pruning, int8 and distillation latency on CPU").
- "torchao": torchao's quantize_(model, Int8DynamicActivationInt8WeightConfig()), the API that
  torch.ao's deprecation notice points to (tested with torchao 0.18.0 on torch 2.13 CPU). Its
  per-token activation scales are more faithful (MiniLM [CLS] relative error 0.07), but on CPU
  its int8 matmul (aten::_int_mm) is a slow reference kernel, many times slower than fp32 on a
  CPU without VNNI, so int8 would report a slowdown. "auto" picks it only once torch.ao's
  quantize_dynamic is gone.

Saving: a quantised model cannot be written as safetensors (torch.ao stores packed-weight
ScriptObjects, torchao stores tensor subclasses; safetensors takes plain tensors only), so
pipelines report the int8 metrics and save only the fp32 model. `size_on_disk` uses torch.save
to measure the size; it never loads the file back.
"""

from __future__ import annotations

import copy
import logging
import warnings
from pathlib import Path

import torch
from torch import nn

from bertology.errors import UserError, require

log = logging.getLogger(__name__)


def torch_ao_available() -> bool:
    """torch.ao.quantization is deprecated in favour of torchao and may leave a future torch."""
    return hasattr(getattr(torch.ao, "quantization", None), "quantize_dynamic")


def quantize_with_torch_ao(model: nn.Module) -> nn.Module:
    """Swaps every nn.Linear for a dynamically quantised one, in place."""
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    with warnings.catch_warnings():
        # Deprecation notices (torch.ao -> torchao, quantized tensor creation) on every call.
        warnings.filterwarnings("ignore", message="torch.ao.quantization is deprecated")
        warnings.filterwarnings("ignore", message="torch.quantize_per_")
        # by module name: a linear layer with no weights (a layer that lost all its heads,
        # pruning/heads.py) has no channels to scale and stays as it is
        spec = {name: per_channel_dynamic_qconfig for name, module in model.named_modules()
                if isinstance(module, nn.Linear) and module.weight.numel() > 0}
        return quantize_dynamic(model, spec, dtype=torch.qint8, inplace=True)


def quantize_with_torchao(model: nn.Module) -> nn.Module:
    """Replaces every nn.Linear weight with torchao's int8 tensor (per-row scales), in place."""
    try:
        from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_
    except ImportError as error:
        raise UserError("quantization backend 'torchao' needs torchao: pip install torchao "
                        "(or use backend 'torch_ao')") from error
    quantize_(model, Int8DynamicActivationInt8WeightConfig())
    return model


BACKENDS = {"torch_ao": quantize_with_torch_ao, "torchao": quantize_with_torchao}


def quantize_int8(model: nn.Module, backend: str = "auto") -> nn.Module:
    """An int8 copy of `model` on CPU in eval mode; `model` itself is left untouched."""
    if backend == "auto":
        backend = "torch_ao" if torch_ao_available() else "torchao"
    require(backend in BACKENDS,
            f"unknown quantization backend {backend!r}; choose one of: auto, {', '.join(BACKENDS)}")
    quantized = copy.deepcopy(model).to("cpu", torch.float32).eval()
    quantized = BACKENDS[backend](quantized)
    log.info("quantized the linear layers to int8 with %s: %d -> %d weight bytes", backend,
             linear_weight_bytes(model), linear_weight_bytes(quantized))
    return quantized


def linear_layer_types() -> tuple[type, ...]:
    """nn.Linear and, while torch ships it, torch.ao's dynamically quantised Linear (which
    does not subclass nn.Linear). torchao keeps nn.Linear and swaps only the weight."""
    if not torch_ao_available():
        return (nn.Linear,)
    from torch.ao.nn.quantized.dynamic import Linear as DynamicQuantizedLinear

    return (nn.Linear, DynamicQuantizedLinear)


def stored_bytes(weight: torch.Tensor) -> int:
    """Bytes of a weight as stored: its elements, or int8 values plus their scales and
    zero points (torch.ao's quantized tensors, torchao's tensor subclasses)."""
    if weight.is_quantized:
        if weight.qscheme() in (torch.per_channel_affine, torch.per_channel_symmetric):
            qparams = (weight.q_per_channel_scales().nbytes
                       + weight.q_per_channel_zero_points().nbytes)
        else:
            qparams = 16  # one float64 scale and one int64 zero point
        return weight.int_repr().nbytes + qparams
    if type(weight) not in (torch.Tensor, nn.Parameter) and hasattr(weight, "__tensor_flatten__"):
        names, _ = weight.__tensor_flatten__()
        inner = (getattr(weight, name) for name in names)
        return sum(stored_bytes(tensor) for tensor in inner if tensor is not None)
    return weight.numel() * weight.element_size()


def linear_weight_bytes(model: nn.Module) -> int:
    """Bytes of all linear layers' weights (biases excluded: they stay fp32 either way)."""
    types = linear_layer_types()
    total = 0
    for module in model.modules():
        if isinstance(module, types):
            weight = module.weight() if callable(module.weight) else module.weight
            total += stored_bytes(weight)
    return total


def size_on_disk(model: nn.Module, tmp_dir: str | Path) -> int:
    """Bytes of the model's state dict written with torch.save (the file is removed again).
    torch.save because safetensors cannot hold quantised weights; this is for measuring only,
    and the file is never loaded back."""
    path = Path(tmp_dir) / "state_dict.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), path)
    size = path.stat().st_size
    path.unlink()
    return size
