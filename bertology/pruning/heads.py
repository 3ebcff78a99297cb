"""Attention heads: gating and structural removal for every family's encoder (transformers v5
`AutoModel` or `AutoModelFor*`), and whole-layer dropping; where the heads live in a layer is
the family table's Attention row (families.py).

v5 removed `head_mask` and `prune_heads`, so both live here. A head's output is its slice of
the attention output projection's input, (batch, seq, heads·head_dim) (BERT's
`layer.attention.output.dense`, ModernBERT's `layer.attn.Wo`): gating multiplies that slice by
the head's gate ξ_h (Michel et al., 2019, Eq. 2), pruning deletes it together with the head's
query/key/value rows (of a fused QKV projection: the head's rows in each of its three blocks).

Heads keep their original numbers for good: `config.pruned_heads` records {layer: [removed
heads]} exactly as transformers v4 did, gates and importance arrays are (layers,
config.num_attention_heads), and a removed head's gate has no effect. v5 no longer re-prunes
from `config.pruned_heads` when it loads, so a head-pruned checkpoint loads with `load_pruned`
(a layer-dropped one with plain `from_pretrained`).

A family whose architecture cannot have one layer's heads gated or removed alone (families.py's
`cannot`: ALBERT's shared layer, MPNet's per-head position bias shared by every layer) is refused
here too, not only by the config checks, so no caller gates or prunes it wrongly.

A layer may lose all of its heads: its attention then adds only the output projection's bias
(Michel et al. prune whole layers' heads this way). v5's attention forward cannot reshape zero
heads, so such a layer's self-attention skips its computation (`forward_without_heads`).
"""

from __future__ import annotations

import json
import logging
import warnings
from functools import partial
from operator import attrgetter
from pathlib import Path

import torch
from safetensors.torch import load_file
from torch import nn
from transformers import AutoConfig, PretrainedConfig, PreTrainedModel
from transformers.pytorch_utils import prune_linear_layer

from bertology.errors import UserError, require
from bertology.families import (
    Attention,
    attention_kernel,
    family_of_checkpoint,
    require_capability,
)
from bertology.models.weights import load_safetensors_model

log = logging.getLogger(__name__)


def encoder_layers(model: nn.Module) -> nn.ModuleList:
    """The transformer layers: `model.base_model.encoder.layer` in BERT, RoBERTa, ELECTRA,
    `model.base_model.layers` in ModernBERT (families.py's `layers`)."""
    return attrgetter(layers_path(model))(model.base_model)


def layers_path(model: nn.Module) -> str:
    return family_of_checkpoint(model.config.model_type).layers


def attention_layout(model: nn.Module) -> Attention:
    """Where the heads live inside one of the model's layers (families.py)."""
    return family_of_checkpoint(model.config.model_type).attention


def head_dim_of(layer: nn.Module, layout: Attention) -> int:
    return getattr(attrgetter(layout.core)(layer), layout.head_dim)


def heads_present(layer: nn.Module, layout: Attention) -> int:
    """The heads a layer has now: its core's count, or its output projection's input width
    over head_dim where the core keeps no count (ModernBERT reshapes with -1)."""
    if layout.head_count is not None:
        return getattr(attrgetter(layout.core)(layer), layout.head_count)
    return attrgetter(layout.output)(layer).in_features // head_dim_of(layer, layout)


def read_pruned_heads(config: PretrainedConfig) -> dict[int, list[int]]:
    """config.pruned_heads with int keys (a saved config.json makes them strings)."""
    pruned = getattr(config, "pruned_heads", None) or {}
    return {int(layer): sorted(int(h) for h in heads) for layer, heads in pruned.items() if heads}


def kept_heads(model: nn.Module) -> list[list[int]]:
    """Per layer, the original numbers of the heads still in the model."""
    config, layout = model.config, attention_layout(model)
    pruned = read_pruned_heads(config)
    kept = []
    for i, layer in enumerate(encoder_layers(model)):
        heads = [h for h in range(config.num_attention_heads) if h not in pruned.get(i, [])]
        present = heads_present(layer, layout)
        require(present == len(heads),
                f"layer {i} has {present} heads but config.pruned_heads leaves {len(heads)}: "
                "load head-pruned checkpoints with bertology.pruning.heads.load_pruned")
        kept.append(heads)
    return kept


def build_gates(model: nn.Module, value: float = 1.0) -> torch.Tensor:
    """(layers, heads) gates in the original head numbering, all `value`."""
    shape = (len(encoder_layers(model)), model.config.num_attention_heads)
    return torch.full(shape, value, device=next(model.parameters()).device)


def gate_heads(gates: torch.Tensor, layer: int, heads: list[int], head_dim: int,
               module: nn.Module, args: tuple) -> tuple[torch.Tensor]:
    """Forward pre-hook on the output projection: scale each present head's slice."""
    (hidden,) = args  # (batch, seq, heads * head_dim)
    gate = gates[layer, heads].to(hidden.dtype)  # (heads,)
    per_head = hidden.unflatten(-1, (len(heads), head_dim))  # (batch, seq, heads, head_dim)
    return ((per_head * gate[:, None]).flatten(-2),)  # (batch, seq, heads * head_dim)


class HeadGates:
    """Multiplies every head's output by its gate while attached (or inside `with`).

    gates: (layers, config.num_attention_heads), ones by default. A tensor that requires grad
    gives Michel et al.'s ∂L/∂ξ_h; 0/1 values mask heads. The tensor is read on every forward,
    so it can be edited in place between forwards. Prune only while detached: the hooks sit on
    the output projections that pruning replaces.
    """

    def __init__(self, model: nn.Module, gates: torch.Tensor | None = None):
        require_capability(model.config.model_type, "head_gates", "gating heads")
        self.model = model
        self.gates = build_gates(model) if gates is None else gates
        expected = (len(encoder_layers(model)), model.config.num_attention_heads)
        require(tuple(self.gates.shape) == expected,
                f"head gates have shape {tuple(self.gates.shape)}, the model needs {expected}")
        self.handles: list = []

    def attach(self) -> HeadGates:
        self.detach()
        layout = attention_layout(self.model)
        for i, (layer, heads) in enumerate(zip(encoder_layers(self.model), kept_heads(self.model))):
            if not heads:  # nothing to gate: the layer's attention is only the output bias
                continue
            hook = partial(gate_heads, self.gates, i, heads, head_dim_of(layer, layout))
            output = attrgetter(layout.output)(layer)
            self.handles.append(output.register_forward_pre_hook(hook))
        return self

    def detach(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []

    def __enter__(self) -> HeadGates:
        return self.attach()

    def __exit__(self, *exc) -> None:
        self.detach()


def forward_without_heads(output: nn.Linear | None, module: nn.Module,
                          hidden_states: torch.Tensor, *args, **kwargs):
    """Self-attention with zero heads: an empty context and empty attention weights, so
    output_attentions still returns one (batch, 0, seq, seq) entry per layer. `output`: the
    output projection, where the core applies it itself (ModernBERT); it then adds only its
    bias, as the layer's own projection would."""
    batch, seq = hidden_states.shape[:2]
    context = hidden_states.new_zeros(batch, seq, 0)  # (batch, seq, 0 heads * head_dim)
    if output is not None:
        context = output(context)  # (batch, seq, hidden): the bias, or zeros
    weights = hidden_states.new_zeros(batch, 0, seq, seq)  # (batch, 0 heads, q, k)
    return context, weights


def slice_linear(layer: nn.Linear, index: torch.Tensor, dim: int) -> nn.Linear:
    """prune_linear_layer, keeping the layer's dtype and requires_grad (it resets both)."""
    with warnings.catch_warnings():  # a layer losing every head has zero-size weights
        warnings.filterwarnings("ignore", "Initializing zero-element tensors")
        pruned = prune_linear_layer(layer, index, dim=dim).to(layer.weight.dtype)
    return pruned.requires_grad_(layer.weight.requires_grad)


def has_path(root: nn.Module, path: str) -> bool:
    try:
        attrgetter(path)(root)
    except AttributeError:
        return False
    return True


def set_path(root: nn.Module, path: str, module: nn.Module) -> None:
    parent, _, name = path.rpartition(".")
    setattr(attrgetter(parent)(root) if parent else root, name, module)


def fused_rows(index: torch.Tensor, width: int, parts: int) -> torch.Tensor:
    """The rows of the kept heads in each of a fused projection's `parts` blocks of `width`
    rows ([q; k; v]: the same heads' rows in every block)."""
    return torch.cat([index + part * width for part in range(parts)])  # (parts * kept * hd,)


def prune_attention(layer: nn.Module, layout: Attention, positions: list[int]) -> None:
    """Keep the heads at `positions` (current, not original, numbering) of one layer."""
    core = attrgetter(layout.core)(layer)
    head_dim = head_dim_of(layer, layout)
    present = heads_present(layer, layout)
    index = (torch.tensor(positions, dtype=torch.long)[:, None] * head_dim
             + torch.arange(head_dim)).flatten()  # (kept * head_dim,) rows of the kept heads
    rows = index if len(layout.qkv) > 1 else fused_rows(index, present * head_dim, 3)
    for path in (*layout.qkv, *(p for p in layout.per_head_rows if has_path(layer, p))):
        set_path(layer, path, slice_linear(attrgetter(path)(layer), rows, dim=0))
    set_path(layer, layout.output, slice_linear(attrgetter(layout.output)(layer), index, dim=1))
    if layout.head_count is not None:
        # v5's forward reshapes with attention_head_size and -1; the counts are kept true anyway
        setattr(core, layout.head_count, len(positions))
        if hasattr(core, "all_head_size"):
            core.all_head_size = len(positions) * head_dim
    if not positions:
        output = attrgetter(layout.output)(layer) if layout.core_applies_output else None
        core.forward = partial(forward_without_heads, output, core)


def prune_heads(model: nn.Module, heads: dict[int, list[int]]) -> None:
    """Remove heads for good: {layer: [original head numbers]}, as transformers v4's
    prune_heads. Heads already removed are skipped; config.pruned_heads records the union."""
    require_capability(model.config.model_type, "head_removal", "removing heads")
    config, layers, layout = model.config, encoder_layers(model), attention_layout(model)
    current, pruned = kept_heads(model), read_pruned_heads(config)
    for layer, remove in ((int(k), set(v)) for k, v in heads.items()):
        require(0 <= layer < len(layers),
                f"cannot prune heads of layer {layer}: the model has layers 0..{len(layers) - 1}")
        require(all(0 <= h < config.num_attention_heads for h in remove),
                f"cannot prune heads {sorted(remove)} of layer {layer}: "
                f"heads are numbered 0..{config.num_attention_heads - 1}")
        positions = [p for p, h in enumerate(current[layer]) if h not in remove]
        if len(positions) < len(current[layer]):
            prune_attention(layers[layer], layout, positions)
        pruned[layer] = sorted(set(pruned.get(layer, [])) | remove)
    config.pruned_heads = {layer: heads for layer, heads in sorted(pruned.items()) if heads}
    log.info("heads per layer after pruning: %s", [len(h) for h in kept_heads(model)])


def load_weights(model: PreTrainedModel, path: Path) -> None:
    """The safetensors weights save_pretrained wrote (one file or shards) into `model`."""
    index = path / "model.safetensors.index.json"
    files = (sorted(set(json.loads(index.read_text())["weight_map"].values()))
             if index.exists() else ["model.safetensors"])
    require((path / files[0]).exists(),
            f"{path} has no model.safetensors: save the model with save_pretrained")
    state = {}
    for name in files:
        state.update(load_file(str(path / name)))
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as error:
        problem = str(error).strip().splitlines()[-1].strip()
        raise UserError(f"{path} does not match its config.json: {problem}") from None
    untied = sorted(set(missing) - set(getattr(model, "all_tied_weights_keys", {})))
    require(not untied and not unexpected,
            f"{path} does not match its config.json: missing {untied}, unexpected {unexpected}")


def load_pruned(path: str | Path, auto_class, attn_implementation: str | None = None
                ) -> PreTrainedModel:
    """Load a checkpoint that prune_heads and/or drop_layers shaped, in eval mode, with an
    `AutoModel*` class (AutoModel, AutoModelForSequenceClassification, ...).

    v5 builds every layer at full size from config.json, so the model is built, pruned to
    config.pruned_heads, and only then given the saved weights. Without pruned heads this is
    plain `auto_class.from_pretrained`."""
    path = Path(path)
    config = AutoConfig.from_pretrained(path)
    pruned = read_pruned_heads(config)
    kwargs = ({"attn_implementation": attention_kernel(config.model_type, attn_implementation)}
              if attn_implementation else {})
    if not pruned:
        return load_safetensors_model(auto_class, path, **kwargs)
    config.pruned_heads = {}
    model = auto_class.from_config(config, **kwargs)
    prune_heads(model, pruned)
    load_weights(model, path)
    return model.eval()


def drop_layers(model: nn.Module, keep: list[int]) -> None:
    """Keep only the layers `keep` (0-based, increasing) - Sajjad et al. (2020) drop layers
    of a trained model, then fine-tune. Each kept layer keeps its modules and its attention
    kind (ModernBERT's global or local, config.layer_types). Plain from_pretrained reloads the
    result, except where layer 0 was dropped from a ModernBERT: transformers builds its first
    layer without an attention norm, so the new first layer's norm would not be read back."""
    require_capability(model.config.model_type, "layer_modules", "dropping layers")
    layers = encoder_layers(model)
    keep = list(keep)
    valid = bool(keep) and keep == sorted(set(keep)) and keep[0] >= 0 and keep[-1] < len(layers)
    require(valid,
            f"layers to keep must be increasing numbers in 0..{len(layers) - 1}, not {keep}")
    pruned = read_pruned_heads(model.config)
    set_path(model.base_model, layers_path(model), nn.ModuleList(layers[i] for i in keep))
    core = attention_layout(model).core
    for new, layer in enumerate(encoder_layers(model)):
        attrgetter(core)(layer).layer_idx = new  # cache slot; unused by encoders, kept consistent
    model.config.num_hidden_layers = len(keep)
    if getattr(model.config, "layer_types", None) is not None:  # ModernBERT: global or local
        model.config.layer_types = [model.config.layer_types[i] for i in keep]
    model.config.pruned_heads = {new: pruned[old] for new, old in enumerate(keep) if old in pruned}
    log.debug("kept layers %s", list(keep))


def alternate_layers(num_layers: int, count: int, start: int) -> list[int]:
    dropped = set(range(num_layers - 1 - start, -1, -2)[:count])
    return [i for i in range(num_layers) if i not in dropped]


def symmetric_layers(num_layers: int, count: int) -> list[int]:
    first = (num_layers - count) // 2
    return [i for i in range(num_layers) if not first <= i < first + count]


# Sajjad et al. (2020) §3 strategies, 0-based here: strategy -> (num_layers, count) -> kept
LAYER_DROPPING = {
    "top": lambda n, k: list(range(n - k)),
    "bottom": lambda n, k: list(range(k, n)),
    "alternate_even": lambda n, k: alternate_layers(n, k, 0),  # 12 layers, k=2: drop 12, 10
    "alternate_odd": lambda n, k: alternate_layers(n, k, 1),  # ... drop 11, 9 (1-based)
    "symmetric": symmetric_layers,  # the middle k, keeping the top and bottom layers
}


def compute_layers_to_keep(num_layers: int, strategy: str, count: int) -> list[int]:
    """The layers left after dropping `count` of `num_layers` by a Sajjad et al. strategy."""
    require(strategy in LAYER_DROPPING,
            f"unknown layer-dropping strategy {strategy!r}; valid: {', '.join(LAYER_DROPPING)}")
    require(0 <= count < num_layers,
            f"cannot drop {count} of {num_layers} layers: keep at least one")
    kept = LAYER_DROPPING[strategy](num_layers, count)
    require(len(kept) == num_layers - count,
            f"cannot drop {count} of {num_layers} layers by {strategy!r}: it drops every other "
            f"layer, at most {num_layers - len(kept)}")
    return kept
