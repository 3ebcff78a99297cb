"""Stopping a run between steps on a signal: SIGTERM (how SLURM preempts), SIGINT (Ctrl-C)
and, under a submitit job, submitit's own preemption signal, whose handler then requeues the job.
A second Ctrl-C stops at once (KeyboardInterrupt), for a step that takes too long.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field


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
