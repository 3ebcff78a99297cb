"""A training step's time split by kind of work, from torch.profiler's per-op self times.

Each aten op's self time (its own, not its children's: on CPU, the wall time the calling thread
spends in it, intra-op threads included) goes to one kind by its name; what no aten op accounts
for (the autograd engine's and optimizer's Python wrappers, the loop, the collate) is host
overhead: the recorded steps' wall time minus every op's self time.

    kind         ops
    matmul       mm, addmm, bmm, matmul, linear, baddbmm (the FLOPs the MFU counts)
    attention    SDPA's fused kernel and its backward; softmax in the math path
    dropout RNG  the random numbers of dropout masks (bernoulli_, random_)
    elementwise  GELU, LayerNorm, residual adds, dropout's multiply, bias sums, fills
    casts        copy_/_to_copy: dtype casts (bf16 autocast) and layout copies (contiguous)
    loss         log_softmax, nll_loss and their backwards, over the masked positions
    embedding    embedding lookups and their scatter-add backward, index ops
    views and allocation   views, transposes and empty tensors (dispatch cost, no arithmetic)
    optimizer    fused AdamW, gradient clipping's norms and scaling, zeroing
"""

from __future__ import annotations

KINDS = {
    "matmul": ("mm", "addmm", "bmm", "matmul", "linear", "baddbmm", "_addmm_activation"),
    "attention": ("_scaled_dot_product_flash_attention_for_cpu",
                  "_scaled_dot_product_flash_attention_for_cpu_backward",
                  "_softmax", "_softmax_backward_data", "softmax", "masked_fill", "masked_fill_",
                  "all", "isneginf",  # the math path's safe softmax checks rows all -inf
                  "_safe_softmax", "_scaled_dot_product_attention_math",
                  "scaled_dot_product_attention",
                  "bitwise_and", "bitwise_not"),  # the padding mask's boolean ops
    "dropout RNG": ("bernoulli_", "random_", "native_dropout", "uniform_", "dropout"),
    "elementwise": ("mul", "mul_", "add", "add_", "div", "div_", "sub", "gelu", "gelu_backward",
                    "native_layer_norm", "native_layer_norm_backward", "tanh", "tanh_backward",
                    "where", "ge", "eq", "ne", "lt", "gt", "sum", "fill_", "zero_", "neg",
                    "threshold_backward", "native_dropout_backward", "clamp", "clamp_", "abs",
                    "layer_norm"),
    "casts": ("copy_", "_to_copy", "to", "contiguous", "clone"),
    "loss": ("_log_softmax", "_log_softmax_backward_data", "nll_loss_forward",
             "nll_loss_backward", "argmax", "cross_entropy_loss", "log_softmax"),
    "embedding": ("embedding", "embedding_backward", "embedding_dense_backward", "index",
                  "index_select", "index_add_", "index_put_", "_index_put_impl_", "gather",
                  "scatter_add_", "_embedding_bag", "take_along_dim", "cumsum"),
    "views and allocation": ("view", "empty", "empty_strided", "t", "transpose", "reshape",
                             "expand", "permute", "as_strided", "unsqueeze", "squeeze", "slice",
                             "select", "split", "unbind", "_unsafe_view", "detach", "alias",
                             "empty_like", "zeros", "zeros_like", "ones_like", "resize_",
                             "resolve_conj", "arange"),
    "optimizer": ("_fused_adamw_", "_foreach_norm", "_foreach_mul_", "_foreach_add_",
                  "_foreach_div_", "linalg_vector_norm", "clamp_max", "_foreach_zero_",
                  "stack", "norm"),
}
KIND_OF = {f"aten::{op}": kind for kind, ops in KINDS.items() for op in ops}
HOST = "host overhead"
OTHER = "other aten ops"


def split(events, wall_us: float) -> dict[str, float]:
    """{kind: microseconds} over the recorded steps, host overhead and other aten ops
    included, from profiler.key_averages() and the steps' wall time (the ProfilerStep* events'
    total)."""
    kinds = {kind: 0.0 for kind in (*KINDS, OTHER)}
    for event in events:
        name = event.key
        if not name.startswith("aten::"):
            continue  # wrappers: their self time is host overhead, the remainder below
        kinds[KIND_OF.get(name, OTHER)] += event.self_cpu_time_total
    kinds[HOST] = max(0.0, wall_us - sum(kinds.values()))
    return kinds


def unmatched(events, top: int = 5) -> list[tuple[str, float]]:
    """The largest aten ops no kind names (to extend KINDS when a new op shows up)."""
    rest = [(e.key, e.self_cpu_time_total) for e in events
            if e.key.startswith("aten::") and e.key not in KIND_OF]
    return sorted(rest, key=lambda item: -item[1])[:top]


def step_wall_us(events) -> float:
    return sum(e.cpu_time_total for e in events if e.key.startswith("ProfilerStep"))


def table(splits: dict[str, dict[str, float]]) -> list[str]:
    """Markdown rows: one column per profiled setting, each kind's share of its step."""
    names = list(splits)
    kinds = [*KINDS, OTHER, HOST]
    lines = ["| kind | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for kind in kinds:
        shares = [splits[n][kind] / max(1e-9, sum(splits[n].values())) for n in names]
        lines.append(f"| {kind} | " + " | ".join(f"{s:.1%}" for s in shares) + " |")
    return lines
