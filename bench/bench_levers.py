"""Each pretraining speed lever on its own, against bertology's step, interleaved and repeated.

One training step (forward, backward, optimizer) of the size's BERT with an MLM head and
BERT's 30,522-token vocabulary, on 32 sequences of 128 tokens with 15% of positions masked and
dropout 0.1, timed as the median of --steps steps after two warm-up steps. An arm is bertology's
step with one lever switched to its alternative; every arm runs once per repeat, in an order
rotated by the repeat, so a change in machine load spreads over the arms (median and range over
--repeats). Levers:

  dropout masks  16-bit random integers, four per 64-bit draw (training/dropout.py) vs torch's
                 bernoulli_, one draw per element
  attention      SDPA (PyTorch's fused kernel where nothing is dropped) vs eager softmax(QK^T)V
  MLM head       the decoder at the masked positions only vs at every position (BertForMaskedLM)
  optimizer      fused AdamW vs foreach (multi-tensor) AdamW
  fused QKV      three projections (BERT's layout) vs one [q;k;v] projection (the alternative
                 is built here, not in bertology: it is measured before it is adopted)
  compile        eager vs torch.compile of the encoder (steady state; compile time reported)
  bf16 weights   (bf16 only) fp32 weights that autocast casts for each forward vs weights kept
                 in bf16 with fp32 master copies that AdamW steps and copies back (built here)
  precision      per --precisions: fp32 vs bf16 autocast (bf16 only where the CPU has native
                 bf16 unless asked: emulated bf16 says nothing about the lever)

    python bench/bench_levers.py [--size mini] [--steps 5] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import types
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import BertForMaskedLM
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.bert.modeling_bert import BertSelfAttention

REPO = Path(__file__).resolve().parent
sys.path.insert(0, str(REPO))
import bench_pretrain as base  # noqa: E402

from bertology.config.groups import ModelConfig, SizeConfig  # noqa: E402
from bertology.config.path_checks import resolve_checkpoint  # noqa: E402
from bertology.data.tokenizers import load_pretrained_tokenizer  # noqa: E402
from bertology.models.build import build_config  # noqa: E402
from bertology.models.structure import encoder_of, mlm_head_of  # noqa: E402
from bertology.training.dropout import use_bits_dropout  # noqa: E402
from bertology.training.precision import native_bf16  # noqa: E402

SEQ_LEN, BATCH, MASKED, DROPOUT = 128, 32, 0.15, 0.1
SECTION = "## Speed levers, one at a time"


@dataclass(frozen=True)
class Arm:
    """One step's settings; Arm() is bertology's own."""
    masks: str = "bits"
    attention: str = "sdpa"
    head: str = "masked"
    fused_adamw: bool = True
    fused_qkv: bool = False
    compiled: bool = False
    bf16_weights: bool = False  # bf16 parameters, fp32 master copies in the optimizer
    dtype: torch.dtype | None = None  # autocast dtype; None is fp32


# lever -> (bertology's choice, the alternative, the arm that switches to it)
LEVERS = {
    "dropout masks": ("16-bit integers", "torch bernoulli_", Arm(masks="torch")),
    "attention": ("SDPA", "eager", Arm(attention="eager")),
    "MLM head": ("masked positions", "every position", Arm(head="every")),
    "optimizer": ("fused AdamW", "foreach AdamW", Arm(fused_adamw=False)),
    "fused QKV": ("three projections", "one [q;k;v] projection", Arm(fused_qkv=True)),
    "compile": ("eager", "torch.compile", Arm(compiled=True)),
    "bf16 weights": ("fp32 weights, autocast", "bf16 weights, fp32 master",
                     Arm(bf16_weights=True)),
}
ONLY_IN = {"bf16 weights": "bf16"}  # levers that exist in one precision only


def sizes(name: str) -> SizeConfig:
    return SizeConfig(**{key: value for key, value in
                         base.compose_pretrain([f"size={name}"]).size.items()})


def build(size: SizeConfig, arm: Arm) -> BertForMaskedLM:
    tokenizer = load_pretrained_tokenizer(resolve_checkpoint(base.TOKENIZER))
    model_config = ModelConfig(family="bert", hidden_dropout_prob=DROPOUT,
                               attention_probs_dropout_prob=DROPOUT)
    torch.manual_seed(0)
    model = BertForMaskedLM._from_config(build_config(model_config, size, tokenizer),
                                         attn_implementation=arm.attention)
    if arm.fused_qkv:
        fuse_qkv(model)
    if arm.masks == "bits":
        use_bits_dropout(model)
    return model


def fuse_qkv(model: torch.nn.Module) -> None:
    """Every BertSelfAttention's query, key and value as one (3H, H) projection, the same
    weights stacked, and a forward that splits its output."""
    for module in model.modules():
        if isinstance(module, BertSelfAttention):
            parts = (module.query, module.key, module.value)
            fused = torch.nn.Linear(parts[0].in_features, 3 * parts[0].out_features)
            with torch.no_grad():
                fused.weight.copy_(torch.cat([p.weight for p in parts]))
                fused.bias.copy_(torch.cat([p.bias for p in parts]))
            module.qkv = fused
            del module.query, module.key, module.value
            module.forward = types.MethodType(fused_forward, module)


def fused_forward(self, hidden_states, attention_mask=None, **kwargs):
    batch, seq, _ = hidden_states.shape
    # (batch, seq, 3H) -> (3, batch, heads, seq, head_dim)
    qkv = self.qkv(hidden_states).view(batch, seq, 3, -1, self.attention_head_size)
    query, key, value = qkv.permute(2, 0, 3, 1, 4)
    attend = ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation, None)
    output, weights = attend(self, query, key, value, attention_mask,
                             dropout=self.dropout.p if self.training else 0.0,
                             scaling=self.scaling)
    return output.reshape(batch, seq, -1), weights


def batch_for(vocab: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(5, vocab, (BATCH, SEQ_LEN), generator=generator)
    labels = torch.full_like(ids, -100)
    masked = torch.rand(ids.shape, generator=generator) < MASKED
    labels[masked] = ids[masked]
    return {"input_ids": ids, "labels": labels, "attention_mask": torch.ones_like(ids),
            "token_type_ids": torch.zeros_like(ids)}


def loss_of(model, batch, head: str) -> torch.Tensor:
    if head == "every":  # BertForMaskedLM's own forward: logits at every position
        return model(**batch).loss
    hidden = encoder_of(model)(input_ids=batch["input_ids"],
                               attention_mask=batch["attention_mask"],
                               token_type_ids=batch["token_type_ids"]).last_hidden_state
    where = batch["labels"] != -100
    logits = mlm_head_of(model, "bert")(hidden[where])
    return F.cross_entropy(logits.float(), batch["labels"][where])


class MasterWeights:
    """bf16 parameters for the forward and backward, fp32 master copies that AdamW steps: after
    each step the grads are widened into the masters and the masters narrowed back into the
    model (mixed-precision training as in Micikevicius et al., 2018, with bf16's range needing
    no loss scale). Under autocast this removes the cast of every weight in each forward; it
    adds a widening of every grad and a narrowing of every weight per step instead."""

    def __init__(self, model: torch.nn.Module, fused: bool) -> None:
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.masters = [p.detach().float().clone().requires_grad_() for p in self.params]
        model.to(torch.bfloat16)
        self.optimizer = adamw(self.masters, fused)

    def step(self) -> None:
        for master, param in zip(self.masters, self.params):
            master.grad = param.grad.float()
        self.optimizer.step()
        with torch.no_grad():
            torch._foreach_copy_(self.params, self.masters)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for param in self.params:
            param.grad = None
        self.optimizer.zero_grad(set_to_none=set_to_none)


def adamw(params, fused: bool) -> torch.optim.AdamW:
    """Fused AdamW, or the foreach (multi-tensor) one: the optimizer lever's two arms."""
    return torch.optim.AdamW(params, lr=1e-4, fused=fused, foreach=None if fused else True)


def optimizer_for(model: torch.nn.Module, arm: Arm):
    if arm.bf16_weights:
        return MasterWeights(model, arm.fused_adamw)
    return adamw(model.parameters(), arm.fused_adamw)


def time_arm(size: SizeConfig, arm: Arm, batch, steps: int) -> tuple[float, float]:
    """(median seconds per step, seconds to compile or 0) of a fresh model in this arm."""
    model = build(size, arm).train()
    compile_s = 0.0
    optimizer = optimizer_for(model, arm)

    def step() -> None:
        with torch.autocast("cpu", dtype=arm.dtype, enabled=arm.dtype is not None):
            loss = loss_of(model, batch, arm.head)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    if arm.compiled:
        start = time.perf_counter()
        encoder_of(model).compile()
        step()  # compiles forward and backward
        compile_s = time.perf_counter() - start
    times = []
    for index in range(steps + 2):  # two warm-up steps
        torch.manual_seed(index)
        start = time.perf_counter()
        step()
        if index >= 2:
            times.append(time.perf_counter() - start)
    return statistics.median(times), compile_s


def arms_for(precisions: list[str]) -> dict[str, Arm]:
    """Every lever's arm in each precision, and bertology's own step in each."""
    arms = {}
    for precision in precisions:
        dtype = torch.bfloat16 if precision == "bf16" else None
        arms[f"bertology {precision}"] = Arm(dtype=dtype)
        arms.update({f"{lever} {precision}": replace(arm, dtype=dtype)
                     for lever, (_, _, arm) in LEVERS.items()
                     if ONLY_IN.get(lever, precision) == precision})
    return arms


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    size = sizes(args.size)
    native, why = native_bf16(torch.device("cpu"))
    precisions = args.precisions or (["fp32", "bf16"] if native else ["fp32"])
    arms = arms_for(precisions)
    batch = batch_for(30522)
    times: dict[str, list[float]] = {name: [] for name in arms}
    compile_s: list[float] = []
    loads = []
    names = list(arms)
    for repeat in range(args.repeats):
        for name in names[repeat % len(names):] + names[:repeat % len(names)]:
            loads.append(os.getloadavg()[0])
            seconds, compiling = time_arm(size, arms[name], batch, args.steps)
            times[name].append(seconds)
            if compiling:
                compile_s.append(compiling)
            print(f"repeat {repeat + 1}: {name} {seconds * 1000:,.0f} ms/step", flush=True)
    rows = table_rows(times, precisions, compile_s)
    print("\n".join(rows))
    write_results(args, why, precisions, rows, loads)


def spread(values: list[float]) -> str:
    return (f"{statistics.median(values) * 1000:,.0f} "
            f"({min(values) * 1000:,.0f}-{max(values) * 1000:,.0f})")


def table_rows(times: dict[str, list[float]], precisions: list[str],
               compile_s: list[float]) -> list[str]:
    rows = ["| lever | precision | bertology | ms/step | alternative | ms/step | ratio |",
            "|---|---|---|---:|---|---:|---:|"]
    for precision in precisions:
        own = times[f"bertology {precision}"]
        for lever, (choice, alternative, _) in LEVERS.items():
            if ONLY_IN.get(lever, precision) != precision:
                continue
            other = times[f"{lever} {precision}"]
            if lever == "compile" and compile_s:  # later compiles reuse the process's caches
                alternative += f" ({compile_s[0]:.0f} s to compile the first time)"
            rows.append(f"| {lever} | {precision} | {choice} | {spread(own)} | {alternative} "
                        f"| {spread(other)} | "
                        f"{statistics.median(other) / statistics.median(own):.2f}x |")
    if len(precisions) == 2:
        fp32, bf16 = times["bertology fp32"], times["bertology bf16"]
        ratio = statistics.median(bf16) / statistics.median(fp32)
        rows.append(f"| precision | both | fp32 | {spread(fp32)} | bf16 autocast "
                    f"| {spread(bf16)} | {ratio:.2f}x |")
    return rows


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="mini")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--precisions", nargs="+", choices=["fp32", "bf16"],
                        help="default: fp32, and bf16 where the CPU has native bf16")
    parser.add_argument("--out", type=Path, default=REPO / "RESULTS.md")
    args = parser.parse_args()
    if args.steps < 1 or args.repeats < 1:
        parser.error("--steps and --repeats must be at least 1")
    return args


def write_results(args, why: str, precisions: list[str], rows: list[str],
                  loads: list[float]) -> None:
    heading = f"{SECTION}: size={args.size}, {base.cpu_model()}"
    lines = [
        "", heading, "",
        f"`python bench/bench_levers.py --size {args.size} --steps {args.steps} --repeats "
        f"{args.repeats}{' --precisions ' + ' '.join(args.precisions) if args.precisions else ''}`"
        f" on {base.machine()}; {why}; load average {min(loads):.2f}-{max(loads):.2f} before "
        f"the arms. One training step (forward, backward, AdamW) of size={args.size} BERT with "
        f"an MLM head and the 30,522-token vocabulary on {BATCH} sequences of {SEQ_LEN} with "
        f"{MASKED:.0%} masked, dropout {DROPOUT}; per arm the median of {args.steps} steps after "
        f"two warm-up, each arm {args.repeats} times interleaved: median (range) of those. The "
        "ratio is the alternative's median over bertology's (above 1: bertology's choice is "
        "faster).", "",
        *rows,
    ]
    base.replace_section(args.out, heading, lines)


if __name__ == "__main__":
    sys.exit(main())
