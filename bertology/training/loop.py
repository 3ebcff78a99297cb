"""The one training loop: an explicit loop on accelerate.Accelerator (no HF Trainer).

AdamW without decay on biases and LayerNorm, linear warmup then linear decay (BERT §A.2),
gradient accumulation, clipping, mixed precision where the device has it, periodic held-out
evaluation, atomic checkpoints and exact resume. Resume is exact because everything random is
a function of (seed, step): the data cursor is saved, masks are seeded per example, and the
torch generator (dropout) is reseeded at every step.

Faults: resume skips a checkpoint that fails its checksum (with a warning) for the one before
it; SIGTERM (SLURM's preemption), Ctrl-C, and under submitit its own preemption signal, finish
the step, write a checkpoint and raise Interrupted, which the CLI hands to submitit to requeue;
a non-finite loss or gradient norm raises RunFailed at the next log step, evaluation or
checkpoint, whichever comes first, so the checkpoints on disk are all from finite steps.

No host synchronisation inside a step (a GPU runs ahead of the Python that feeds it): the
window's losses and gradient norms are summed on the device and read at log steps, the finite
check is a flag kept on the device and read at those same points, and the objectives compute
their counts only in eval mode (objectives/mlm.py).

Logs: every `log_every` steps one plain line (step, loss, lr, tokens/s, ETA) goes to the log
and so to the console and `<pipeline>.log`; the tqdm bar only when stderr is a terminal, so a
job under SLURM or nohup writes no carriage returns.

Read top to bottom, as nanoGPT's train.py: what train() takes (TrainJob), train() itself (set
up, then the loop), the step, logging and evaluation, checkpoints; then the optimizer, the
budget and the learning rate, the bar and the step line, the batches, the stop signals, and the
state a checkpoint holds. What stands on its own is a module beside this one, named where
the loop calls it: the precision choice (precision.py), checkpoint files (checkpoint.py),
FLOPs (flops.py), the held-out evaluation (evaluate.py), what processes exchange
(collectives.py), 16-bit dropout masks (dropout.py) and the Objective contract (objective.py).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import queue
import random
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, nullcontext, suppress
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState
from tqdm.auto import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from bertology.config.groups import TrainerConfig
from bertology.data.stream import Cursor, ExampleSource
from bertology.errors import Interrupted, RunFailed
from bertology.run.processes import accelerator_options, world_size
from bertology.run.tracking import Tracker
from bertology.training.checkpoint import (
    Export,
    Snapshot,
    find_damage,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
)
from bertology.training.collectives import (
    any_process,
    check_shardable,
    from_main,
    mean_over_processes,
    shard,
)
from bertology.training.dropout import restore_sdpa, use_bits_dropout, uses_bits
from bertology.training.evaluate import HeldOut
from bertology.training.flops import flops_counter
from bertology.training.objective import Objective
from bertology.training.precision import TimingTrial, resolve_precision

log = logging.getLogger(__name__)


# ----------------------------------------------------------------------- what train() takes


@dataclass(frozen=True)
class TrainOutput:
    """Where a training run writes and how it names what it reports: its run dir (checkpoints,
    precision.json, the eval replicates), the tracker it logs to, `export(dir)`, which writes
    the loadable model into each checkpoint (training/checkpoint.py), and the cache dir where
    mixed_precision=auto keeps its timings (None: the project's cache)."""

    out_dir: Path
    tracker: Tracker
    export: Export | None = None
    cache_dir: Path | None = None
    desc: str = "pretrain"  # the bar's label
    # the periodic evaluation's scope (training/evaluate.py HeldOut): eval_subset where the
    # pipeline evaluates the whole dev set after training
    eval_name: str = "eval"


@dataclass(frozen=True)
class TrainJob:
    """What train() trains: the model, its objective and examples, by the trainer settings,
    written and reported as `output` says. The seed makes dropout a function of (seed, step);
    lr_scale(parameter name) scales a parameter's rate (layer-wise decay when fine-tuning)."""

    model: torch.nn.Module
    objective: Objective
    data: ExampleSource
    trainer: TrainerConfig
    output: TrainOutput
    seed: int
    lr_scale: Callable[[str], float] | None = None


# ----------------------------------------------------------------------- the loop


def train(job: TrainJob) -> dict[str, float]:
    """Train until the first budget runs out; returns the final train/* and eval/* metrics."""
    cfg, out = job.trainer, job.output
    # The accelerator state is a process-wide singleton: a sweep runs its jobs in one process,
    # each with its own precision, so the previous job's state is cleared (the distributed
    # state it sits on is kept).
    AcceleratorState._reset_state()
    fast_dropout = uses_bits(cfg.dropout_masks)
    if fast_dropout:  # before the precision trial, which times the step the run will take
        swapped = use_bits_dropout(job.model)
        log.info("dropout masks from 16-bit random integers (%d dropout modules; "
                 "trainer.dropout_masks=torch for torch's)", swapped)
    # The trial draws the run's first batches from an iterator of its own: the run's data
    # position is untouched.
    trial = TimingTrial(job.model, job.objective, cfg,
                        stream=iter_batches(job.data, job.objective, LoopState(),
                                            cfg.batch_size),
                        make_optimizer=lambda copy: build_optimizer(copy, cfg, job.lr_scale),
                        processes=world_size())
    precision = resolve_precision(cfg, trial, out.out_dir, out.cache_dir)
    accelerator = Accelerator(mixed_precision=precision, **accelerator_options())
    check_shardable(cfg, accelerator.num_processes)
    optimizer = build_optimizer(job.model, cfg, job.lr_scale)
    state = _restore(out.out_dir, job.model, optimizer, accelerator.is_main_process)
    out.tracker.truncate_after(state.step)
    model = job.model.to(accelerator.device)
    if cfg.compile:
        compile_encoders(model)
    trainable, optimizer = accelerator.prepare(ObjectiveModule(model, job.objective.loss),
                                               optimizer)
    trainable.train()
    batches = iter_batches(job.data, job.objective, state, cfg.batch_size)
    if cfg.prefetch_batches:
        batches = prefetch(batches, cfg.prefetch_batches)
    loop = Loop(job, accelerator, trainable, optimizer, state, batches,
                flops_counter(job.objective, cfg.flops_convention),
                HeldOut(job.objective, job.data, cfg, accelerator, out.eval_name), Window())
    # exits run bottom-up: the signals restored, the bar closed, then the W&B run's last line
    with (out.tracker.ending_early(),
          BudgetBar(state, cfg, out.desc, enabled=accelerator.is_main_process) as progress,
          stop_signals() as stop):
        while budget_progress(state, cfg) < 1.0:
            torch.manual_seed(job.seed * 1_000_003 + state.step)  # dropout: f(seed, step)
            lr = compute_lr(state, cfg)
            for group in optimizer.param_groups:
                group["lr"] = lr * group.get("lr_scale", 1.0)  # absent in older checkpoints
            step_start = time.perf_counter()
            try:
                loop.window.tokens += loop.optimizer_step()
            except RuntimeError:
                # weights gone NaN since the last check can fail an op that checks its input
                # (torch.multinomial in ELECTRA's generator): report the cause, not the symptom
                state.health.check()
                raise
            state.step += 1
            state.train_seconds += time.perf_counter() - step_start
            if accelerator.num_processes > 1 and cfg.max_time_s is not None:
                state.train_seconds = from_main(state.train_seconds, accelerator)
            if cfg.warmup_ratio == 0 and state.step == cfg.warmup_steps:
                state.warmup_progress = budget_progress(state, cfg)
            loop.log_and_evaluate(lr, progress)
            stopping = any_process(stop.is_set(), accelerator)
            if state.step % cfg.save_every == 0 or stopping:
                loop.save()
            progress.update(state)
            if stopping:
                raise Interrupted(f"stopped by {stop.describe()}: checkpoint written at step "
                                  f"{state.step}", handover=stop.requeue_handler(),
                                  signum=stop.signum)
    loop.held_out.write_replicates(model, out.out_dir)  # the final eval's item replicates
    if fast_dropout:
        restore_sdpa(model)
    return _final_metrics(state)


@dataclass
class Loop:
    """What the step, the log line, the evaluation and the checkpoint share, built once by
    train(): the job, the accelerator with the wrapped module and optimizer it prepared, the
    run's state, its batches, the FLOPs count, the held-out evaluation and the log window."""

    job: TrainJob
    accelerator: Accelerator
    trainable: ObjectiveModule  # the model with its objective's loss, as accelerate wraps it
    optimizer: torch.optim.Optimizer
    state: LoopState
    batches: Iterator[tuple[dict, tuple[Cursor, int], int]]  # iter_batches
    count_flops: Callable[[torch.nn.Module, dict], float]  # flops.flops_counter
    held_out: HeldOut
    window: Window

    def optimizer_step(self) -> int:
        """One optimizer step over grad_accum_steps micro-batches; returns the tokens seen."""
        cfg, accelerator, state = self.job.trainer, self.accelerator, self.state
        tokens = 0
        for micro in range(cfg.grad_accum_steps):
            waited = time.perf_counter()
            batch, (group, served), batch_tokens = next(self.batches)
            state.data_seconds += time.perf_counter() - waited
            # FLOPs are counted on the global batch, so every process agrees on the budget.
            state.flops += self.count_flops(accelerator.unwrap_model(self.trainable).model,
                                            batch)
            batch = {k: v.to(accelerator.device) for k, v in shard(batch, accelerator).items()}
            with accelerator.autocast():
                loss, logs = self.trainable(batch)
            # Only the last micro-batch synchronises gradients across processes.
            sync = micro == cfg.grad_accum_steps - 1
            with nullcontext() if sync else accelerator.no_sync(self.trainable):
                accelerator.backward(loss / cfg.grad_accum_steps)
            _accumulate(state, {"loss": loss.detach(), **logs}, cfg.grad_accum_steps)
            state.epoch, state.offset, state.group_batches = group.epoch, group.offset, served
            state.tokens += batch_tokens
            tokens += batch_tokens
        grad_norm = accelerator.clip_grad_norm_(self.trainable.parameters(), cfg.max_grad_norm)
        grad_norm = torch.as_tensor(grad_norm)  # a float under some of accelerate's wrappers
        _accumulate(state, {"grad_norm": grad_norm}, 1)
        # read at the next log step or checkpoint (Health.check), not here: no host sync
        state.health.record(state.step + 1, loss, grad_norm, accelerator.scaler is not None)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        state.window_steps += 1
        return tokens

    def log_and_evaluate(self, lr: float, progress: BudgetBar) -> None:
        """Log the window and evaluate on schedule, and always at the last step."""
        state, cfg, tracker = self.state, self.job.trainer, self.job.output.tracker
        last = budget_progress(state, cfg) >= 1.0
        logging_now = state.step % cfg.log_every == 0 or last
        if logging_now or state.step % cfg.eval_every == 0:
            state.health.check()  # the step's one read of the device, with the window's
        if logging_now:
            state.window = mean_over_processes(read_window(state.window), self.accelerator)
            rate = self.window.tokens / max(1e-9, time.perf_counter() - self.window.start)
            state.last_train = _window_metrics(state, lr, rate)
            tracker.log(state.last_train, state.step)
            progress.set_postfix(loss=f"{state.last_train['train/loss']:.3f}",
                                 tok_s=f"{rate:,.0f}")
            if self.accelerator.is_main_process:
                log.info("%s", format_step_line(state, cfg, state.last_train))
            state.window, state.window_steps = {}, 0
            self.window.tokens, self.window.start = 0, time.perf_counter()
        if state.step % cfg.eval_every == 0 or last:
            state.last_eval = self.held_out.report(self.job.model, state.step)  # logs its line
            tracker.log(state.last_eval, state.step)

    def save(self) -> None:
        """A checkpoint of this step (rank 0 writes it; training/checkpoint.py)."""
        # A checkpoint taken mid-log-window holds the window's loss sums, and every process
        # resumes from rank 0's copy: make them the mean over processes first. The logged mean
        # is linear, so continuing from the mean logs what the processes' own sums would have.
        state = self.state
        state.health.check()  # never a checkpoint of weights a non-finite step has touched
        state.window = mean_over_processes(read_window(state.window), self.accelerator)
        if self.accelerator.is_main_process:
            out = self.job.output
            save_checkpoint(out.out_dir / "checkpoints", state.step,
                            Snapshot(self.job.model, self.optimizer, state.saved(), out.export),
                            self.job.trainer.keep_checkpoints)


def _accumulate(state: LoopState, logs: dict, divisor: int) -> None:
    """Sum the window's losses on the device (float64, as the Python floats they are read
    back into; MPS has no float64), so a step never waits for them."""
    for key, value in logs.items():
        if key.endswith("_loss") or key in ("loss", "grad_norm"):
            value = value.detach()
            wide = value.to(torch.float32 if value.device.type == "mps" else torch.float64)
            state.window[key] = state.window.get(key, 0.0) + wide / divisor


def _window_metrics(state: LoopState, lr: float, tokens_per_s: float) -> dict[str, float]:
    steps = max(1, state.window_steps)
    metrics = {f"train/{k}": v / steps for k, v in state.window.items()}
    metrics.update({"train/lr": lr, "train/tokens_per_s": tokens_per_s,
                    "train/tokens": float(state.tokens), "train/epoch": float(state.epoch),
                    "train/flops": state.flops})
    return metrics


def _final_metrics(state: LoopState) -> dict[str, float]:
    final = {k: v for k, v in state.last_train.items() if k != "train/lr"}
    final["train/steps"] = float(state.step)
    final["train/tokens_per_s"] = state.tokens / max(1e-9, state.train_seconds)
    final["train/data_wait_share"] = state.data_seconds / max(1e-9, state.train_seconds)
    final.update(state.last_eval)
    return final


def _restore(out_dir: Path, model, optimizer, main_process: bool = True) -> LoopState:
    """The newest checkpoint that passes its checksum; a damaged one is renamed out of the
    way (kept for inspection, by the main process only) and the one before it is tried."""
    for checkpoint in reversed(list_checkpoints(out_dir / "checkpoints")):
        damage = find_damage(checkpoint)
        if damage is None:
            return LoopState(**load_checkpoint(checkpoint, model, optimizer))
        if main_process:
            aside = checkpoint.with_name(f"damaged-{checkpoint.name}")
            log.warning("checkpoint %s is damaged (%s): moved to %s; resuming from the one "
                        "before it", checkpoint, damage, aside.name)
            checkpoint.rename(aside)
    return LoopState()


# ----------------------------------------------------------------------- model and optimizer


def build_optimizer(model: torch.nn.Module, cfg: TrainerConfig,
                    lr_scale: Callable[[str], float] | None = None) -> torch.optim.AdamW:
    """Biases and LayerNorm weights get no weight decay (BERT's AdamWeightDecayOptimizer).
    lr_scale(parameter name) multiplies the rate (layer-wise decay when fine-tuning)."""
    groups: dict[tuple[bool, float], list[torch.nn.Parameter]] = {}
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        exempt = param.ndim < 2 or "LayerNorm" in name or "layer_norm" in name
        scale = lr_scale(name) if lr_scale else 1.0
        groups.setdefault((exempt, scale), []).append(param)
    groups = [{"params": params, "weight_decay": 0.0 if exempt else cfg.weight_decay,
               "lr_scale": scale} for (exempt, scale), params in sorted(groups.items())]
    # The fused kernel, on CPU too: the fastest of the three AdamW implementations there
    # (bench/RESULTS.md, "Speed levers, one at a time").
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.adam_beta1, cfg.adam_beta2),
                             eps=cfg.adam_epsilon, fused=True)


class ObjectiveModule(torch.nn.Module):
    """The model with its objective's loss as forward. Losses reach into the model's parts
    (the MLM head runs only at masked positions), and DDP or FSDP see, and synchronise, only
    the work done inside the forward of the module they wrap: this one."""

    def __init__(self, model: torch.nn.Module, loss: Callable):
        super().__init__()
        self.model, self.loss = model, loss

    def forward(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict]:
        return self.loss(self.model, batch)


def compile_encoders(model: torch.nn.Module) -> None:
    """torch.compile every bare encoder in the model (BertModel, ElectraModel, ...: ELECTRA has
    two), in place, so parameter names and checkpoints stay as they were. The encoders, not
    the model: losses call the encoder and then a head only at masked positions, a shape that
    changes every step and would recompile."""
    from transformers import PreTrainedModel

    for module in model.modules():
        if isinstance(module, PreTrainedModel) and module.base_model is module:
            module.compile()


# ----------------------------------------------------------------------- budget and lr


def budget_progress(state: LoopState, cfg: TrainerConfig) -> float:
    """How much of the run is spent, 0..1: the largest share of any budget (steps, FLOPs,
    seconds), so the run ends, and the learning rate reaches zero, with the first to run out."""
    shares = [state.step / cfg.max_steps]
    if cfg.max_flops is not None:
        shares.append(state.flops / cfg.max_flops)
    if cfg.max_time_s is not None:
        shares.append(state.train_seconds / cfg.max_time_s)
    return min(1.0, max(shares))


def compute_lr(state: LoopState, cfg: TrainerConfig) -> float:
    """Linear warmup, then linear decay to zero at the end of the budget (BERT §A.2). The
    warmup runs over warmup_steps (with only a step budget this is HF's
    get_linear_schedule_with_warmup) or, where a warmup_ratio is left unresolved (pretraining,
    whose budget may be FLOPs or seconds: resolve_budget turns it into steps for fine-tuning),
    over that share of the budget."""
    progress = budget_progress(state, cfg)
    if cfg.warmup_ratio > 0:
        if progress < cfg.warmup_ratio:
            return cfg.lr * progress / cfg.warmup_ratio
        warmed = cfg.warmup_ratio
    elif state.step < cfg.warmup_steps:
        return cfg.lr * state.step / cfg.warmup_steps
    else:
        warmed = state.warmup_progress  # the budget spent when warmup ended
    return cfg.lr * max(0.0, 1.0 - progress) / max(1e-12, 1.0 - warmed)


def resolve_budget(trainer: TrainerConfig, num_examples: int) -> TrainerConfig:
    """A fine-tuning budget in epochs (BERT §A.3: 2-4 epochs), once the training set's size is
    known: trainer.epochs → max_steps (whichever is smaller); warmup_ratio → warmup_steps."""
    if trainer.epochs is not None:
        per_step = trainer.batch_size * trainer.grad_accum_steps
        steps = max(1, math.ceil(trainer.epochs * num_examples / per_step))
        trainer = dataclasses.replace(trainer, max_steps=min(trainer.max_steps, steps))
    if trainer.warmup_ratio > 0:  # in steps from here on: HF's schedule exactly
        trainer = dataclasses.replace(trainer, warmup_ratio=0.0,
                                      warmup_steps=round(trainer.warmup_ratio * trainer.max_steps))
    return trainer


# ----------------------------------------------------------------------- progress


class BudgetBar:
    """The bar a person waits on: steps when `max_steps` is the only budget, else the percent
    of the budget spent (a FLOPs or time budget ends the run long before `max_steps`). Used as
    a context: while the bar is shown, the console's log lines go through tqdm.write (each
    clears the bar, prints its line, and redraws it below, instead of landing on the bar), and
    the bar is closed on the way out, before an interruption's closing lines print."""

    def __init__(self, state: LoopState, cfg: TrainerConfig, desc: str, enabled: bool):
        self.cfg = cfg
        self.by_steps = cfg.max_flops is None and cfg.max_time_s is None
        if self.by_steps:
            options = dict(total=cfg.max_steps, initial=state.step, unit="step")
        else:
            options = dict(total=100.0, initial=100.0 * budget_progress(state, cfg), unit="%",
                           bar_format="{l_bar}{bar}| {n:.1f}/100% of the budget "
                                      "[{elapsed}<{remaining}{postfix}]")
        # Only for a person at a terminal: redirected, each redraw is a carriage return in
        # one endless line of the job's log; the plain step lines say the same there.
        self.shown = enabled and sys.stderr.isatty()
        self.bar = tqdm(desc=desc, disable=not self.shown, dynamic_ncols=True, **options)
        self.redirect = ExitStack()

    def __enter__(self) -> BudgetBar:
        if self.shown:
            self.redirect.enter_context(logging_redirect_tqdm())
        return self

    def __exit__(self, *exc) -> None:
        self.close()
        self.redirect.close()

    def update(self, state: LoopState) -> None:
        if self.by_steps:
            self.bar.update(1)
        else:
            self.bar.update(100.0 * budget_progress(state, self.cfg) - self.bar.n)

    def set_postfix(self, **values) -> None:
        self.bar.set_postfix(**values)

    def close(self) -> None:
        self.bar.close()


@dataclass
class Window:
    """Tokens and wall time since the last log line (for tokens/s)."""

    tokens: int = 0
    start: float = field(default_factory=time.perf_counter)


def format_step_line(state: LoopState, cfg: TrainerConfig, metrics: dict[str, float]) -> str:
    """One plain line a person or a cluster's log reads: where the run is, the window's mean
    loss, the rate now and the time left at the mean rate so far (evaluation time aside)."""
    spent = budget_progress(state, cfg)
    where = (f"step {state.step}/{cfg.max_steps}" if cfg.max_flops is None and
             cfg.max_time_s is None else f"step {state.step} ({100 * spent:.0f}% of the budget)")
    left = state.train_seconds * (1.0 - spent) / spent if spent > 0 else float("nan")
    return (f"{where}  loss {metrics['train/loss']:.4f}  lr {metrics['train/lr']:.3g}  "
            f"{metrics['train/tokens_per_s']:,.0f} tok/s  ETA {format_duration(left)}")


def format_duration(seconds: float) -> str:
    """h:mm:ss, as tqdm shows it; '?' before there is a rate to go by."""
    if not math.isfinite(seconds):
        return "?"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


# ----------------------------------------------------------------------- batches

GROUP_BATCHES = 16  # batches drawn together and sorted by length, so little is padding


def iter_batches(data: ExampleSource, objective: Objective, start: LoopState,
                 batch_size: int) -> Iterator[tuple[dict, tuple[Cursor, int], int]]:
    """(collated batch, position after it, real tokens in it), from where `start` says the run
    stands. Examples come in groups of GROUP_BATCHES batches, sorted by length within the group
    (as HF's group_by_length) and served in a seeded random order; a position is (start of the
    group, batches served from it), so a resumed run rebuilds the group and skips what it had
    served."""
    position, skip = Cursor(start.epoch, start.offset), start.group_batches
    stream = data.iter_train(position)
    while True:
        chunk = list(islice(stream, batch_size * GROUP_BATCHES))
        # Sorted by length within each epoch, epochs kept in order: a group that spans an
        # epoch boundary (every group, on a small corpus) must not put an example beside its
        # copy from the next epoch, which static masking gives the same mask.
        examples = [e for e, _ in sorted(chunk, key=lambda item: (
            item[1].epoch, len(item[0]["input_ids"]), item[0]["id"]))]
        batches = [examples[i: i + batch_size] for i in range(0, len(examples), batch_size)]
        random.Random(f"{data.seed}:{position.epoch}:{position.offset}").shuffle(batches)
        for index in range(skip, len(batches)):
            tokens = sum(len(e["input_ids"]) for e in batches[index])
            yield objective.collate(batches[index]), (position, index + 1), tokens
        position, skip = chunk[-1][1], 0


def prefetch(batches: Iterator, depth: int) -> Iterator:
    """The same batches in the same order, collated by a background thread while the model
    computes: masking and padding are Python and numpy, and torch releases the GIL in its
    kernels, so the two overlap. An error in the thread is raised at the step that needed
    the batch; the thread stops when the consumer is gone (a daemon, blocked at most on a
    full queue)."""
    ready: queue.Queue = queue.Queue(maxsize=depth)
    done = threading.Event()
    end = object()

    def hand_over(entry: tuple) -> bool:
        """Put, unless the consumer is gone; False then."""
        while not done.is_set():
            try:
                ready.put(entry, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def fill() -> None:
        try:
            for item in batches:
                if not hand_over((item, None)):
                    return
            hand_over((end, None))
        except BaseException as err:  # handed to the consumer, raised there
            hand_over((None, err))

    worker = threading.Thread(target=fill, name="bertology-prefetch", daemon=True)
    worker.start()
    try:
        while True:
            item, err = ready.get()
            if err is not None:
                raise err
            if item is end:
                return
            yield item
    finally:
        done.set()


# ----------------------------------------------------------------------- preemption
# Stopping between steps on a signal: SIGTERM (how SLURM preempts), SIGINT (Ctrl-C) and, under
# a submitit job, submitit's own preemption signal, whose handler then requeues the job. A
# second Ctrl-C stops at once (KeyboardInterrupt), for a step that takes too long.


def preempt_signal() -> signal.Signals:
    """The signal submitit sends a job before its time limit or on preemption (USR2 unless
    SUBMITIT_PREEMPT_SIGNAL says otherwise)."""
    name = os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2")
    return getattr(signal, f"SIG{name.removeprefix('SIG')}", signal.SIGUSR2)


@dataclass
class StopRequest:
    """Set by SIGTERM, SIGINT (or the preemption signal) for the loop to check between steps: a
    handler that raised mid-step could leave the optimizer half-updated. `handover` is the
    handler the preemption signal had before the loop started (submitit's checkpoint and
    requeue, under a submitit job), to be called once the checkpoint is written."""

    event: threading.Event = field(default_factory=threading.Event)
    handover: Callable | None = None
    signum: int = signal.SIGTERM  # the signal that asked: the exit status is 128 + signum

    def is_set(self) -> bool:
        return self.event.is_set()

    def request(self, signum: int, frame=None) -> None:
        """The handler: a first Ctrl-C asks for a checkpoint, a second one stops at once."""
        if signum == signal.SIGINT and self.event.is_set() and self.signum == signal.SIGINT:
            raise KeyboardInterrupt
        if signum == signal.SIGINT:  # os.write: a print here could re-enter stderr's buffer
            with suppress(OSError):
                os.write(2, b"\nCtrl-C: stopping after this step to write a checkpoint "
                         b"(Ctrl-C again to stop at once)\n")
        self.signum = signum
        self.event.set()

    def requeue_handler(self) -> Callable | None:
        """submitit's handler when a scheduler's signal stopped the run; a person's Ctrl-C
        is not a preemption, so it requeues nothing."""
        return None if self.signum == signal.SIGINT else self.handover

    def describe(self) -> str:
        return "Ctrl-C" if self.signum == signal.SIGINT else signal.Signals(self.signum).name


@contextmanager
def stop_signals() -> Iterator[StopRequest]:
    """SIGTERM, SIGINT, and under submitit its preemption signal, set the stop request. Outside
    the main thread, where Python allows no handlers, it is never set. A SIGINT the process
    was started ignoring (`nohup ... &`) stays ignored."""
    stop = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    preempt = preempt_signal()
    previous_preempt = signal.getsignal(preempt)
    # A Python handler on the preemption signal means a submitit job (submitit installs one).
    if callable(previous_preempt):
        stop.handover = previous_preempt
    watched = [signal.SIGTERM, preempt] if stop.handover else [signal.SIGTERM]
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        watched.append(signal.SIGINT)
    previous = {signum: signal.signal(signum, stop.request) for signum in watched}
    try:
        yield stop
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


# ----------------------------------------------------------------------- the state


class Health:
    """The first step whose loss (or, without fp16's loss scaler, gradient norm) is not finite,
    with both values, kept as device tensors so recording it never waits for the device."""

    def __init__(self):
        self.step = self.loss = self.grad_norm = None

    def record(self, step: int, loss: torch.Tensor, grad_norm: torch.Tensor,
               scaled: bool) -> None:
        loss, grad_norm = loss.detach().float(), grad_norm.detach().float().to(loss.device)
        bad = ~torch.isfinite(loss)
        if not scaled:  # under fp16 an inf gradient is routine: the scaler skips that step
            bad = bad | ~torch.isfinite(grad_norm)
        if self.step is None:
            self.step = torch.full_like(loss, -1.0)
            self.loss, self.grad_norm = torch.zeros_like(loss), torch.zeros_like(loss)
        first = bad & (self.step < 0)
        self.step = torch.where(first, torch.full_like(loss, float(step)), self.step)
        self.loss = torch.where(first, loss, self.loss)
        self.grad_norm = torch.where(first, grad_norm, self.grad_norm)

    def check(self) -> None:
        """Raise RunFailed if a step since the run started was not finite (reads the device)."""
        if self.step is None or float(self.step) < 0:
            return
        raise RunFailed(f"non-finite training loss ({float(self.loss):g}, gradient norm "
                        f"{float(self.grad_norm):g}) at step {int(self.step)}; lower trainer.lr "
                        "or raise trainer.warmup_steps, the checkpoints written before it are "
                        "kept")


@dataclass
class LoopState:
    """Everything besides weights and optimizer a resumed run needs to continue exactly."""

    step: int = 0
    epoch: int = 0  # the data position: the group of examples starting `offset` into `epoch`
    offset: int = 0
    group_batches: int = 0  # batches already served from that group
    tokens: int = 0
    train_seconds: float = 0.0
    data_seconds: float = 0.0  # of train_seconds, spent waiting for the next batch
    flops: float = 0.0  # estimated training FLOPs so far (training/flops.py)
    warmup_progress: float = 0.0  # budget spent when warmup ended: the decay starts from there
    window: dict[str, float] = field(default_factory=dict)  # sums since the last log line
    window_steps: int = 0
    last_train: dict[str, float] = field(default_factory=dict)
    last_eval: dict[str, float] = field(default_factory=dict)
    # not checkpointed: the first non-finite step since the last check, kept on the device
    health: Health = field(default_factory=Health, compare=False, repr=False)

    def saved(self) -> dict:
        """What a checkpoint holds: every field but the device-side health flag, the window
        read back to floats."""
        fields = {k: v for k, v in vars(self).items() if k != "health"}
        return {**fields, "window": read_window(self.window)}


def read_window(window: dict) -> dict[str, float]:
    """The window's sums as floats: the one read of the device per log step."""
    return {key: float(value) for key, value in window.items()}
