"""The run's steps (`python -m bertology.reproduce`): each a `bertology` process, run `lanes` at a
time, each lane on its share of the cores; a step starts when the steps it waits for have
finished. A study's sweep that an earlier run of the same command finished at the same code is
kept, so a killed `make reproduce` resumes where it stopped."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from bertology.run.atomic import write_json_atomic
from bertology.run.provenance import read_git

log = logging.getLogger("bertology.reproduce")


@dataclass
class Step:
    """One `bertology` process of the run: a fine-tuned model or a study's sweep."""

    name: str
    args: list[str]
    log_path: Path
    after: tuple[str, ...] = ()  # steps that must have finished first (the SST-2 models)
    alone: bool = False  # runs with no other step beside it, on every core (latency timing)
    done_in: Path | None = None  # a study's sweep dir: where its record of finishing goes
    # taken before every ready step that is not: a pretraining, the longest step, which others
    # wait for (a population's replacement draw, planned while studies already wait)
    first: bool = False


# A study's sweep writes this into its dir when it finished: the command and the code that ran
# it. A rerun of the same command into the same --out at the same code keeps that sweep rather
# than running it again, so a killed `make reproduce` resumes where it stopped (the SST-2 models
# are kept by their metrics.json, the pretrained encoders by their cache).
STEP_RECORD = "reproduce_step.json"


def code_identity() -> str | None:
    """The code a step ran under: the commit of a clean checkout, the version of an installed
    package; None for a checkout with changes (nothing is kept: the code may differ)."""
    git = read_git()
    if git["commit"] is None:
        with suppress(metadata.PackageNotFoundError):
            return f"bertology {metadata.version('bertology')}"
        return None
    return None if git["dirty"] else str(git["commit"])


def finished_before(step: Step, code: str | None) -> bool:
    """Whether an earlier run of this command, at this code, finished the step."""
    if code is None or step.done_in is None or not (step.done_in / STEP_RECORD).is_file():
        return False
    with suppress(OSError, ValueError):
        record = json.loads((step.done_in / STEP_RECORD).read_text())
        return record == {"args": step.args, "code": code}
    return False


def record_finished(step: Step, code: str | None) -> None:
    if code is not None and step.done_in is not None and step.done_in.is_dir():
        write_json_atomic(step.done_in / STEP_RECORD, {"args": step.args, "code": code})


def bertology(args: list[str], log_path: Path, threads: int | None = None) -> tuple[int, float]:
    """Run `python -m bertology <args>` on `threads` intra-op threads (None: torch's default);
    its output goes to log_path. (exit status, seconds)"""
    env = dict(os.environ)
    if threads is not None:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    start = time.perf_counter()
    with log_path.open("w") as handle:
        status = subprocess.run([sys.executable, "-m", "bertology", *args], stdout=handle,
                                stderr=subprocess.STDOUT, env=env).returncode
    return status, time.perf_counter() - start


def run_steps(steps: list[Step], lanes: int,
              then: Callable[[Step, int], list[Step]] | None = None
              ) -> dict[str, tuple[int, float]]:
    """Run the steps, `lanes` at a time, each lane on cores/lanes threads; a step starts when
    the steps it waits for have finished (the `first` ones, then list order, among the ready
    ones); the `alone` steps run last, one at a time, on every core. Small models use two
    cores poorly (the numbers: docs/reproduce.md, "Running it"), so two 1-thread lanes finish
    sooner than one 2-thread queue. `then(step, exit status)`, called as each step a lane ran
    finishes (not for the steps kept from an earlier run, nor the `alone` ones), gives the steps
    it leads to (a population's draws: members.Draws), planned as they come. An error in a
    lane (a step that could not start, a `then` that raised) stops the planning: the other
    lanes finish their steps, then it is raised here. name -> (exit status, seconds)."""
    cores = os.cpu_count() or 1
    threads = max(1, cores // lanes)
    code = code_identity()  # once per run (git three times), not per step
    results: dict[str, tuple[int, float]] = {}
    planned: list[Step] = []
    pending: list[Step] = []
    running = [0]  # steps a lane runs now: one may yet plan more (then)
    errors: list[Exception] = []  # raised in a lane: re-raised once every lane has stopped
    lock = threading.Lock()

    def plan(more: list[Step]) -> None:  # under the lock, or before the lanes start
        for step in more:
            planned.append(step)
            if finished_before(step, code):
                log.info("%s: kept (an earlier run of this command finished it at this code: "
                         "%s)", step.name, step.done_in / STEP_RECORD)
                results[step.name] = (0, 0.0)
            elif not step.alone:
                pending.append(step)

    def take_ready() -> Step | None:  # under the lock
        ready = [s for s in pending if all(d in results for d in s.after)]
        step = next((s for s in ready if s.first), ready[0] if ready else None)
        if step is not None:
            pending.remove(step)
            running[0] += 1
        return step

    def lane() -> None:
        while True:
            with lock:
                if errors or (not pending and not running[0]):
                    return
                step = take_ready()
            if step is None:  # what is left waits for a step another lane is running
                time.sleep(0.5)
                continue
            try:
                outcome = run_logged(step, threads if lanes > 1 else None, code)
                with lock:
                    results[step.name] = outcome
                    plan(then(step, outcome[0]) if then else [])
                    log_progress(results, planned)
            except Exception as err:  # raised in the caller's thread once the lanes stop
                with lock:
                    errors.append(err)
            finally:  # after planning what it leads to: no lane ends while more may come
                with lock:
                    running[0] -= 1

    plan(steps)
    workers = [threading.Thread(target=lane) for _ in range(lanes)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    if errors:
        raise errors[0]
    for step in (s for s in planned if s.alone and s.name not in results):
        results[step.name] = run_logged(step, None, code)
        log_progress(results, planned)
    return results


def log_progress(results: dict[str, tuple[int, float]], steps: list[Step]) -> None:
    """How far the run has come: a population runs for hours, and its log is what a person
    watches."""
    failed = sum(1 for status, _ in results.values() if status)
    log.info("%d of %d steps done%s", len(results), len(steps),
             f" ({failed} failed)" if failed else "")


def run_logged(step: Step, threads: int | None, code: str | None = None) -> tuple[int, float]:
    """Run one step; a study sweep that finished records it (code: code_identity())."""
    log.info("%s: bertology %s%s", step.name, " ".join(step.args),
             f" ({threads} thread(s))" if threads else "")
    status, seconds = bertology(step.args, step.log_path, threads)
    log.info("%s: exit %d in %.0f s", step.name, status, seconds)
    if status == 0:
        record_finished(step, code)
    return status, seconds
