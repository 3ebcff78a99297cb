"""What a person and a cluster's log see of a training run: the bar (only at a terminal) and
the plain step line (step, loss, lr, tokens/s, ETA) the loop logs every `log_every` steps."""

from __future__ import annotations

import math
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, field

from tqdm.auto import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from bertology.config.groups import TrainerConfig
from bertology.training.state import LoopState, budget_progress


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
