"""Stopping a run between steps on a signal: SIGTERM (how SLURM preempts) and, under a
submitit job, submitit's own preemption signal, whose handler then requeues the job.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


def preempt_signal() -> signal.Signals:
    """The signal submitit sends a job before its time limit or on preemption (USR2 unless
    SUBMITIT_PREEMPT_SIGNAL says otherwise)."""
    name = os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2")
    return getattr(signal, f"SIG{name.removeprefix('SIG')}", signal.SIGUSR2)


@dataclass
class StopRequest:
    """Set by SIGTERM (or the preemption signal) for the loop to check between steps: a
    handler that raised mid-step could leave the optimizer half-updated. `handover` is the
    handler the preemption signal had before the loop started (submitit's checkpoint and
    requeue, under a submitit job), to be called once the checkpoint is written."""

    event: threading.Event = field(default_factory=threading.Event)
    handover: Callable | None = None

    def is_set(self) -> bool:
        return self.event.is_set()


@contextmanager
def stop_signals() -> Iterator[StopRequest]:
    """SIGTERM, and under submitit its preemption signal, set the stop request. Outside the
    main thread, where Python allows no handlers, it is never set."""
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
    previous = {signum: signal.signal(signum, lambda signum, frame: stop.event.set())
                for signum in watched}
    try:
        yield stop
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
