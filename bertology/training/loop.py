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

Read top to bottom: TrainJob and train() here, then the step; where the run is (its state,
budget and learning rate) in state.py; save and restore in checkpoint.py; the precision choice
in precision.py. The other modules are helpers named where the loop calls them.

Logs: every `log_every` steps one plain line (step, loss, lr, tokens/s, ETA) goes to the log
and so to the console and `<pipeline>.log`; the tqdm bar only when stderr is a terminal, so a
job under SLURM or nohup writes no carriage returns.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState

from bertology.config.groups import TrainerConfig
from bertology.data.stream import Cursor, ExampleSource
from bertology.errors import Interrupted
from bertology.run.processes import accelerator_options, is_main_process, world_size
from bertology.run.tracking import Tracker
from bertology.training.batches import iter_batches, prefetch
from bertology.training.checkpoint import (
    Export,
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
from bertology.training.preemption import stop_signals
from bertology.training.progress import BudgetBar, Window, format_step_line
from bertology.training.state import LoopState, budget_progress, compute_lr, read_window

log = logging.getLogger(__name__)


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


def _window_metrics(state: LoopState, lr: float, tokens_per_s: float) -> dict[str, float]:
    steps = max(1, state.window_steps)
    metrics = {f"train/{k}": v / steps for k, v in state.window.items()}
    metrics.update({"train/lr": lr, "train/tokens_per_s": tokens_per_s,
                    "train/tokens": float(state.tokens), "train/epoch": float(state.epoch),
                    "train/flops": state.flops})
    return metrics


@dataclass
class TrainJob:
    """What train() trains and where: the model, its objective and examples, the trainer
    settings, the run dir its checkpoints go to and the tracker it logs to. The seed makes
    dropout a function of (seed, step); lr_scale(parameter name) scales a parameter's rate
    (layer-wise decay when fine-tuning); export(dir) writes the loadable model into each
    checkpoint (training/checkpoint.py); cache_dir keeps mixed_precision=auto's timings."""

    model: torch.nn.Module
    objective: Objective
    data: ExampleSource
    cfg: TrainerConfig
    out_dir: Path
    tracker: Tracker
    seed: int
    desc: str = "pretrain"  # the bar's label
    lr_scale: Callable[[str], float] | None = None
    export: Export | None = None
    cache_dir: Path | None = None
    # the periodic evaluation's scope (training/evaluate.py HeldOut): eval_subset where the
    # pipeline evaluates the whole dev set after training
    eval_name: str = "eval"


def train(job: TrainJob) -> dict[str, float]:
    """Train until the first budget runs out; returns the final train/* and eval/* metrics."""
    model, objective, data, cfg, out_dir = (job.model, job.objective, job.data, job.cfg,
                                            job.out_dir)
    # The accelerator state is a process-wide singleton: a sweep runs its jobs in one process,
    # each with its own precision, so the previous job's state is cleared (the distributed
    # state it sits on is kept).
    AcceleratorState._reset_state()
    fast_dropout = uses_bits(cfg.dropout_masks)
    if fast_dropout:  # before the precision trial, which times the step the run will take
        swapped = use_bits_dropout(model)
        log.info("dropout masks from 16-bit random integers (%d dropout modules; "
                 "trainer.dropout_masks=torch for torch's)", swapped)
    trial = TimingTrial(model, objective, data,
                        lambda copy: build_optimizer(copy, cfg, job.lr_scale), cfg)
    precision = resolve_precision(cfg, trial, out_dir, job.cache_dir, processes=world_size(),
                                  write=is_main_process())
    accelerator = Accelerator(mixed_precision=precision, **accelerator_options())
    check_shardable(cfg, accelerator.num_processes)
    optimizer = build_optimizer(model, cfg, job.lr_scale)
    state = _restore(out_dir, model, optimizer, accelerator.is_main_process)
    job.tracker.truncate_after(state.step)
    model = model.to(accelerator.device)
    if cfg.compile:
        compile_encoders(model)
    trainable, optimizer = accelerator.prepare(ObjectiveModule(model, objective.loss), optimizer)
    trainable.train()
    batches = iter_batches(data, objective, Cursor(state.epoch, state.offset),
                           state.group_batches, cfg.batch_size)
    if cfg.prefetch_batches:
        batches = prefetch(batches, cfg.prefetch_batches)
    count_flops = flops_counter(objective, cfg.flops_convention)
    window = Window()
    held_out = HeldOut(objective, data, cfg, accelerator, job.eval_name)
    # exits run bottom-up: the signals restored, the bar closed, then the W&B run's last line
    with (job.tracker.ending_early(),
          BudgetBar(state, cfg, job.desc, enabled=accelerator.is_main_process) as progress,
          stop_signals() as stop):
        while budget_progress(state, cfg) < 1.0:
            torch.manual_seed(job.seed * 1_000_003 + state.step)  # dropout: f(seed, step)
            lr = compute_lr(state, cfg)
            for group in optimizer.param_groups:
                group["lr"] = lr * group.get("lr_scale", 1.0)  # absent in older checkpoints
            step_start = time.perf_counter()
            try:
                window.tokens += _optimizer_step(trainable, optimizer, batches, cfg,
                                                 accelerator, state, count_flops)
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
            _after_step(state, cfg, lr, window, progress, job.tracker, accelerator,
                        lambda: held_out.report(model, state.step))
            stopping = any_process(stop.is_set(), accelerator)
            if state.step % cfg.save_every == 0 or stopping:
                _save(out_dir, state, model, optimizer, cfg, accelerator, job.export)
            progress.update(state)
            if stopping:
                raise Interrupted(f"stopped by {stop.describe()}: checkpoint written at step "
                                  f"{state.step}", handover=stop.requeue_handler(),
                                  signum=stop.signum)
    held_out.write_replicates(model, out_dir)  # the final eval's item replicates; rank 0 writes
    if fast_dropout:
        restore_sdpa(model)
    return _final_metrics(state)


def _save(out_dir: Path, state: LoopState, model, optimizer, cfg: TrainerConfig,
          accelerator: Accelerator, export: Export | None = None) -> None:
    # A checkpoint taken mid-log-window holds the window's loss sums, and every process
    # resumes from rank 0's copy: make them the mean over processes first. The logged mean
    # is linear, so continuing from the mean logs what the processes' own sums would have.
    state.health.check()  # never a checkpoint of weights a non-finite step has touched
    state.window = mean_over_processes(read_window(state.window), accelerator)
    if accelerator.is_main_process:
        save_checkpoint(out_dir / "checkpoints", state.step, model,
                        optimizer, state.saved(), cfg.keep_checkpoints, export)


def _after_step(state, cfg, lr, window, progress, tracker, accelerator, run_eval) -> None:
    """Log the window and evaluate on schedule, and always at the last step."""
    last = budget_progress(state, cfg) >= 1.0
    logging_now = state.step % cfg.log_every == 0 or last
    if logging_now or state.step % cfg.eval_every == 0:
        state.health.check()  # the step's one read of the device, with the window's
    if logging_now:
        state.window = mean_over_processes(read_window(state.window), accelerator)
        rate = window.tokens / max(1e-9, time.perf_counter() - window.start)
        state.last_train = _window_metrics(state, lr, rate)
        tracker.log(state.last_train, state.step)
        progress.set_postfix(loss=f"{state.last_train['train/loss']:.3f}", tok_s=f"{rate:,.0f}")
        if accelerator.is_main_process:
            log.info("%s", format_step_line(state, cfg, state.last_train))
        state.window, state.window_steps = {}, 0
        window.tokens, window.start = 0, time.perf_counter()
    if state.step % cfg.eval_every == 0 or last:
        state.last_eval = run_eval()  # logs its line
        tracker.log(state.last_eval, state.step)


def compile_encoders(model: torch.nn.Module) -> None:
    """torch.compile every bare encoder in the model (BertModel, ElectraModel, ...: ELECTRA has
    two), in place, so parameter names and checkpoints stay as they were. The encoders, not
    the model: losses call the encoder and then a head only at masked positions, a shape that
    changes every step and would recompile."""
    from transformers import PreTrainedModel

    for module in model.modules():
        if isinstance(module, PreTrainedModel) and module.base_model is module:
            module.compile()


class ObjectiveModule(torch.nn.Module):
    """The model with its objective's loss as forward. Losses reach into the model's parts
    (the MLM head runs only at masked positions), and DDP or FSDP see, and synchronise, only
    the work done inside the forward of the module they wrap: this one."""

    def __init__(self, model: torch.nn.Module, loss: Callable):
        super().__init__()
        self.model, self.loss = model, loss

    def forward(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict]:
        return self.loss(self.model, batch)


def _optimizer_step(trainable, optimizer, batches, cfg, accelerator, state,
                    count_flops) -> int:
    """One optimizer step over grad_accum_steps micro-batches; returns the tokens seen."""
    tokens = 0
    for micro in range(cfg.grad_accum_steps):
        waited = time.perf_counter()
        batch, (group, served), batch_tokens = next(batches)
        state.data_seconds += time.perf_counter() - waited
        # FLOPs are counted on the global batch, so every process agrees on the budget.
        state.flops += count_flops(accelerator.unwrap_model(trainable).model, batch)
        batch = {k: v.to(accelerator.device) for k, v in shard(batch, accelerator).items()}
        with accelerator.autocast():
            loss, logs = trainable(batch)
        # Only the last micro-batch synchronises gradients across processes.
        sync = micro == cfg.grad_accum_steps - 1
        with nullcontext() if sync else accelerator.no_sync(trainable):
            accelerator.backward(loss / cfg.grad_accum_steps)
        _accumulate(state, {"loss": loss.detach(), **logs}, cfg.grad_accum_steps)
        state.epoch, state.offset, state.group_batches = group.epoch, group.offset, served
        state.tokens += batch_tokens
        tokens += batch_tokens
    grad_norm = accelerator.clip_grad_norm_(trainable.parameters(), cfg.max_grad_norm)
    grad_norm = torch.as_tensor(grad_norm)  # a float under some of accelerate's wrappers
    _accumulate(state, {"grad_norm": grad_norm}, 1)
    # read at the next log step or checkpoint (Health.check), not here: no host sync
    state.health.record(state.step + 1, loss, grad_norm, accelerator.scaler is not None)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    state.window_steps += 1
    return tokens


def _accumulate(state: LoopState, logs: dict, divisor: int) -> None:
    """Sum the window's losses on the device (float64, as the Python floats they are read
    back into; MPS has no float64), so a step never waits for them."""
    for key, value in logs.items():
        if key.endswith("_loss") or key in ("loss", "grad_norm"):
            value = value.detach()
            wide = value.to(torch.float32 if value.device.type == "mps" else torch.float64)
            state.window[key] = state.window.get(key, 0.0) + wide / divisor


def _final_metrics(state: LoopState) -> dict[str, float]:
    final = {k: v for k, v in state.last_train.items() if k != "train/lr"}
    final["train/steps"] = float(state.step)
    final["train/tokens_per_s"] = state.tokens / max(1e-9, state.train_seconds)
    final["train/data_wait_share"] = state.data_seconds / max(1e-9, state.train_seconds)
    final.update(state.last_eval)
    return final
