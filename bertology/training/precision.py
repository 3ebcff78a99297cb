"""trainer.mixed_precision=auto: the faster of fp32 and bf16 autocast, chosen by timing whole
training steps of the run's own model, batches and objective.

Why whole steps: which precision is faster depends on the shape. On a CPU with AMX, bf16
matmuls run several times faster than fp32 ones, yet at small widths the casts around each
matmul and the non-matmul work (LayerNorm, softmax, GELU, dropout, the optimizer) can make a
bf16 step slower than an fp32 one (measured per size in bench/RESULTS.md). Timing one matmul
would choose bf16 everywhere; timing the step chooses per shape.

So, where the device has native bf16 (a CUDA GPU that supports it, or a CPU whose flags show
amx_bf16 or avx512_bf16), `auto` runs WARMUP then REPEATS interleaved steps in each precision on
a copy of the model with a fresh optimizer (the run's own weights, optimizer and data position
are untouched) and keeps bf16 only when its median step is more than NOISE faster: within the
noise fp32 is kept, as it loses nothing in accuracy. The answer is cached per machine (CPU
model and flags or GPU name, torch version) and shape (model class and encoder sizes, sequence
length, batch, objective) in <cache dir>/precision/. Every run logs its choice and both
timings in one short line and writes the whole record (method and cache file included) to
precision.json in its run dir. A resumed run keeps the precision it began in. The copy runs
eager: under trainer.compile the timing is of the uncompiled step.

Where the CPU has no native bf16 (AVX2 only), oneDNN emulates bf16 matmuls through fp32, so
bf16 cannot be faster: `auto` is fp32 without timing and says why. A run of several processes
does not time (the processes would have to agree on one answer): it uses a cached answer for
its shape if there is one, else fp32 on a CPU and bf16 on a GPU. bf16 can cost accuracy
(ELECTRA's discriminator, docs/pipelines.md): `trainer.mixed_precision=no` or `bf16` forces one.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import os
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path

import torch

from bertology.config.groups import TrainerConfig
from bertology.config.hub_revisions import cache_root
from bertology.run.processes import is_main_process
from bertology.training.objective import Objective

log = logging.getLogger(__name__)

WARMUP = 1  # untimed steps per precision first: oneDNN and the allocator build their kernels
REPEATS = 3  # timed steps per precision, interleaved so a change in machine load hits both
TRIAL_BATCHES = 2  # distinct batches the timed steps take in turn
NOISE = 0.05  # bf16 must be this much faster (median step) to be chosen
NATIVE_BF16_FLAGS = ("amx_bf16", "avx512_bf16")  # x86 flags of bf16 matrix instructions
CPUINFO = Path("/proc/cpuinfo")
TIMING_METHOD = (f"median of {REPEATS} interleaved whole steps per precision, each after {WARMUP} "
          f"warm-up; bf16 only when more than {NOISE:.0%} faster")


def matmul_flops_per_s(shape: tuple[int, int, int], dtype: torch.dtype,
                       repeats: int = 10) -> float:
    """Measured FLOP/s of one (rows, inner) @ (inner, cols) matmul in dtype, shape (rows, inner,
    cols), best of repeats (the benchmarks' peak, for MFU)."""
    rows, inner, cols = shape
    a = torch.randn(rows, inner).to(dtype)
    b = torch.randn(inner, cols).to(dtype)
    a @ b  # oneDNN builds its kernel on the first call
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * rows * inner * cols / best


def _cpuinfo_field(name: str) -> str:
    """The first `name : value` line's value in /proc/cpuinfo ('' where there is none, as
    off Linux)."""
    try:
        for line in CPUINFO.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == name:
                return value.strip()
    except OSError:
        pass
    return ""


def cpu_flags() -> frozenset[str]:
    return frozenset(_cpuinfo_field("flags").split())


def cpu_model() -> str:
    return _cpuinfo_field("model name") or "unknown CPU"


def default_device() -> torch.device:
    """The device a run trains on: CUDA where there is one (accelerate's choice too)."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def native_bf16(device: torch.device) -> tuple[bool, str]:
    """(whether the device multiplies bf16 natively, the reason in words)."""
    if device.type == "cuda":
        if torch.cuda.is_bf16_supported():
            return True, f"{torch.cuda.get_device_name(device)} supports bf16"
        return False, f"{torch.cuda.get_device_name(device)} does not support bf16"
    found = sorted(set(NATIVE_BF16_FLAGS) & cpu_flags())
    if found:
        return True, f"native bf16: {', '.join(found)}"
    return False, "no native bf16 on this CPU (no amx_bf16 or avx512_bf16): emulated, not timed"


def machine_key(device: torch.device) -> dict[str, str]:
    """What a cached answer holds for: the chip and the torch build that runs it."""
    if device.type == "cuda":
        return {"device": "cuda", "name": torch.cuda.get_device_name(device),
                "torch": torch.__version__}
    flags = hashlib.sha256(" ".join(sorted(cpu_flags())).encode()).hexdigest()[:12]
    return {"device": "cpu", "name": cpu_model(), "flags": flags,
            "threads": str(torch.get_num_threads()), "torch": torch.__version__}


@dataclass
class TimingTrial:
    """What `auto` needs of a run to time it: the shape its answer is cached under, and the
    step timer (built only when timing: it copies the model). `stream` yields the run's
    batches from its start (the loop's iter_batches, a fresh iterator, so the run's own data
    position is untouched); the first TRIAL_BATCHES are drawn only when the shape is asked
    for. `processes`: a run of several does not time (the processes would have to agree)."""

    model: torch.nn.Module
    objective: Objective
    cfg: TrainerConfig
    stream: Iterator[tuple]  # (collated batch, position, tokens), as iter_batches yields them
    make_optimizer: Callable[[torch.nn.Module], torch.optim.Optimizer]
    processes: int = 1

    @cached_property
    def batches(self) -> list[dict]:
        return [next(self.stream)[0] for _ in range(TRIAL_BATCHES)]

    @property
    def shape(self) -> dict:
        return {"model": type(self.model).__name__, "encoders": encoder_shapes(self.model),
                "objective": self.objective.name, "batch_size": self.cfg.batch_size,
                "seq_length": max(int(b["input_ids"].shape[1]) for b in self.batches)}

    def make_timer(self, device: torch.device) -> Callable[[str], float]:
        return StepTimer(self, device)


@dataclass
class Choice:
    precision: str  # "no" | "bf16" (| "fp16" when asked for by name)
    requested: str
    reason: str
    fp32_step_s: list[float] = field(default_factory=list)  # the timed steps, in order
    bf16_step_s: list[float] = field(default_factory=list)
    cached: bool = False
    machine: dict = field(default_factory=dict)
    shape: dict = field(default_factory=dict)
    method: str = ""  # how the timings were taken (precision.json; the log line leaves it out)
    cache_file: str = ""  # where the timed answer is cached


def measure(time_step: Callable[[str], float], warmup: int = WARMUP,
            repeats: int = REPEATS) -> dict[str, list[float]]:
    """Seconds per step in each precision ("no", "bf16"): warm-up steps untimed, then the
    timed ones interleaved, the order alternating (no, bf16), (bf16, no), ... so neither
    precision always runs right after the other."""
    for precision in ("no", "bf16"):
        for _ in range(warmup):
            time_step(precision)
    times: dict[str, list[float]] = {"no": [], "bf16": []}
    for repeat in range(repeats):
        order = ("no", "bf16") if repeat % 2 == 0 else ("bf16", "no")
        for precision in order:
            times[precision].append(time_step(precision))
    return times


def decide(fp32_s: list[float], bf16_s: list[float], noise: float = NOISE) -> str:
    """bf16 when its median step is more than `noise` faster than fp32's; fp32 otherwise."""
    return "bf16" if statistics.median(bf16_s) < (1 - noise) * statistics.median(fp32_s) \
        else "no"


def _cache_file(cache_dir: Path, machine: dict, shape: dict) -> Path:
    key = json.dumps({"machine": machine, "shape": shape}, sort_keys=True)
    return cache_dir / "precision" / f"{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"


def _write_json(path: Path, payload: dict) -> None:
    """Whole or not at all: a crash mid-write leaves no half file to read back."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    partial.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")
    partial.replace(path)


def _read_cached(path: Path) -> dict | None:
    try:
        cached = json.loads(path.read_text())
    except (OSError, ValueError):
        return None  # none yet, or unreadable: time again
    return cached if cached.get("precision") in ("no", "bf16") else None


def choose(requested: str, device: torch.device, trial: TimingTrial | None,
           cache_dir: Path | None) -> Choice:
    """The precision a run trains in, with the evidence for it."""
    if requested != "auto":
        return Choice(requested, requested, "set by trainer.mixed_precision")
    native, why = native_bf16(device)
    if not native:
        return Choice("no", requested, why)
    if trial is None:  # no run to time (a caller outside the training loop)
        precision = "bf16" if device.type == "cuda" else "no"
        return Choice(precision, requested, f"{why}; nothing to time, the device's default")
    machine, shape = machine_key(device), trial.shape
    base = Choice("no", requested, why, machine=machine, shape=shape)
    path = _cache_file(cache_dir, machine, shape) if cache_dir is not None else None
    cached = _read_cached(path) if path is not None else None
    if cached is not None:
        return Choice(cached["precision"], requested, why, cached["fp32_step_s"],
                      cached["bf16_step_s"], True, machine, shape, cached.get("method", ""),
                      str(path))
    if trial.processes > 1:
        base.precision = "bf16" if device.type == "cuda" else "no"
        base.reason = f"{why}; not timed in a {trial.processes}-process run: the device's default"
        return base
    times = measure(trial.make_timer(device))
    base.fp32_step_s, base.bf16_step_s = times["no"], times["bf16"]
    base.precision = decide(times["no"], times["bf16"])
    base.method = TIMING_METHOD
    base.cache_file = str(path or "")
    if path is not None:
        _write_json(path, {"precision": base.precision, "fp32_step_s": base.fp32_step_s,
                           "bf16_step_s": base.bf16_step_s, "method": TIMING_METHOD,
                           "machine": machine, "shape": shape,
                           "timed_at": time.strftime("%Y-%m-%dT%H:%M:%S")})
    return base


def describe_choice(choice: Choice) -> str:
    """One short log line: the choice, both median timings where it timed, and why. How the
    steps were timed is in precision.json (`method`) and docs/pipelines.md, not in the line:
    a log line stays within the log contract (tests/reliability/test_logs.py) on every CPU."""
    name = {"no": "fp32", "bf16": "bf16", "fp16": "fp16"}[choice.precision]
    line = f"mixed precision {choice.requested}: {name}"
    if choice.fp32_step_s:
        line += (f" (fp32 {statistics.median(choice.fp32_step_s):.4f} s/step, bf16 "
                 f"{statistics.median(choice.bf16_step_s):.4f} s/step"
                 f"{', cached' if choice.cached else ''})")
    return f"{line}; {choice.reason}"


def resolve_precision(cfg, trial: TimingTrial | None = None, out_dir: Path | None = None,
                      cache_dir: Path | None = None) -> str:
    """The precision a run trains in on its device (default_device): cfg.mixed_precision, with
    `auto` resolved (above). With out_dir, the main process logs the choice and writes it to
    out_dir/precision.json; a resumed `auto` run (checkpoints in out_dir) keeps the precision
    precision.json says it began in."""
    device = default_device()
    record = out_dir / "precision.json" if out_dir is not None else None
    began = _began_in(record) if cfg.mixed_precision == "auto" else None
    if began is not None:
        log.info("mixed precision auto: %s, as this run began (its precision.json)",
                 "fp32" if began == "no" else began)
        return began
    if cache_dir is None:
        cache_dir = cache_root()
    choice = choose(cfg.mixed_precision, device, trial, cache_dir)
    if record is not None and is_main_process():
        log.info("%s", describe_choice(choice))
        _write_json(record, asdict(choice))
    return choice.precision


def _began_in(record: Path | None) -> str | None:
    """The precision a resumed run began in: only where it has checkpoints to resume."""
    if record is None or not any((record.parent / "checkpoints").glob("step_*")):
        return None
    try:
        return json.loads(record.read_text())["precision"]
    except (OSError, ValueError, KeyError):
        return None


def encoder_shapes(model: torch.nn.Module) -> list[dict]:
    """Layers, widths and vocabulary of every bare encoder in the model (ELECTRA has two)."""
    from transformers import PreTrainedModel

    shapes = []
    for module in model.modules():
        if isinstance(module, PreTrainedModel) and module.base_model is module:
            config = module.config
            shapes.append({key: getattr(config, key, None) for key in (
                "num_hidden_layers", "hidden_size", "intermediate_size",
                "num_attention_heads", "vocab_size", "embedding_size",
                "hidden_dropout_prob", "attention_probs_dropout_prob")})
    return shapes


class StepTimer:
    """Times one whole training step (forward with the objective's loss, backward, clipping,
    the optimizer) in a precision, on a copy of the model with its own optimizer: the run's
    weights and optimizer state stay as they were. Batches are used in turn."""

    def __init__(self, trial: TimingTrial, device: torch.device):
        self.model = copy.deepcopy(trial.model).to(device).train()
        self.optimizer = trial.make_optimizer(self.model)
        self.loss, self.batches = trial.objective.loss, trial.batches
        self.max_grad_norm, self.device = trial.cfg.max_grad_norm, device
        self.steps = 0

    def __call__(self, precision: str) -> float:
        batch = self.batches[self.steps % len(self.batches)]
        batch = {key: value.to(self.device) for key, value in batch.items()}
        self.steps += 1
        start = time.perf_counter()
        with torch.autocast(self.device.type, dtype=torch.bfloat16,
                            enabled=precision == "bf16"):
            loss, _ = self.loss(self.model, batch)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
        float(loss.detach()), float(norm)  # the loop reads both every step (finite check)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter() - start
