"""`make reproduce`: every study the findings read, at CPU scale, then `bertology report`.

    python -m bertology.reproduce [--out outputs/reproduce/<stamp>] [--only pos_layers ...]

A finding (conf/experiment/finding_<id>.yaml) reads the runs of a study
(conf/experiment/study_<name>.yaml), and several findings share one: each study runs once, as
one sweep, in order, in its own `bertology` process (so one failing step does not take the
others down; the summary names it). Studies that judge a fine-tuned model read MiniLM
fine-tuned on a sample of SST-2 first, once per seed (seed s's job reads the model fine-tuned
with seed s: data order and head initialisation differ, so the seeds replicate what the claims
are about, a fine-tuned model, rather than re-measure one), passed to them by the
`{sst2_model}` placeholder of their `reproduce:` overrides (the study block's CPU-budget
settings). Two steps run side by side where there are two cores (`--lanes`), each on one
thread, except the studies that time latency (`alone: true`), which run last, alone. The
report over every study dir lands in <out>/report/REPORT.md, with a verdict for every finding.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from omegaconf import OmegaConf

from bertology.errors import UserError, require
from bertology.findings.catalog import EXPERIMENTS, load_catalog
from bertology.reproduce.summary import write_summary

REPO = Path(__file__).resolve().parents[2]  # bertology/reproduce/studies.py -> the checkout

# The fine-tuned models: MiniLM on 4,000 SST-2 phrases, one epoch (~1 min each on 2 cores;
# 0.85-0.87 dev accuracy), one per seed of the studies' sweeps (their `seed: 0,1,2`).
SST2_MODEL = ["finetune", "model=minilm", "task=sst2", "trainer=finetune_cpu",
              "trainer.max_train_examples=4000", "trainer.epochs=1", "logger=none"]
SST2_SEEDS = (0, 1, 2)

log = logging.getLogger("bertology.reproduce")


def pipeline_of(bundle: Path) -> str:
    """The pipeline a bundle runs on, from the command its header gives."""
    match = re.search(rf"bertology (\w+) -m experiment={bundle.stem}\b", bundle.read_text())
    require(match is not None, f"{bundle}: the header must give `bertology <pipeline> -m "
            f"experiment={bundle.stem}`")
    return match.group(1)


def load_studies(only: list[str] | None) -> dict[str, dict]:
    """study name -> {pipeline, bundle, overrides, alone, findings} for every study that a
    finding (or one of `only`) reads."""
    studies: dict[str, dict] = {}
    for spec in load_catalog(EXPERIMENTS).values():
        if only and spec.id not in only:
            continue
        for name in spec.studies:
            if name not in studies:
                bundle = EXPERIMENTS / f"study_{name}.yaml"
                block = OmegaConf.to_container(OmegaConf.load(bundle))["study"]
                studies[name] = {"pipeline": pipeline_of(bundle), "bundle": bundle.stem,
                                 "overrides": list(block.get("reproduce", [])),
                                 "alone": bool(block.get("alone", False)), "findings": []}
            studies[name]["findings"].append(spec.id)
    require(bool(studies), f"no finding matches {only}")
    return studies


@dataclass
class Step:
    """One `bertology` process of the run: a fine-tuned model or a study's sweep."""

    name: str
    args: list[str]
    log_path: Path
    after: tuple[str, ...] = ()  # steps that must have finished first (the SST-2 models)
    alone: bool = False  # runs with no other step beside it, on every core (latency timing)


def bertology(args: list[str], log_path: Path, threads: int | None = None) -> tuple[int, float]:
    """Run `python -m bertology <args>` on `threads` intra-op threads (None: torch's default);
    its output goes to log_path. (exit status, seconds)"""
    env = dict(os.environ)
    if threads is not None:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    start = time.perf_counter()
    with log_path.open("w") as handle:
        status = subprocess.run([sys.executable, "-m", "bertology", *args], stdout=handle,
                                stderr=subprocess.STDOUT, cwd=REPO, env=env).returncode
    return status, time.perf_counter() - start


def run_steps(steps: list[Step], lanes: int) -> dict[str, tuple[int, float]]:
    """Run the steps, `lanes` at a time, each lane on cores/lanes threads; a step starts when
    the steps it waits for have finished (in list order among the ready ones); the `alone`
    steps run last, one at a time, on every core. Small models use two cores poorly (a tiny
    BERT runs 1.3x faster on 2 threads than on 1), so two 1-thread lanes finish sooner than one
    2-thread queue. name -> (exit status, seconds)."""
    cores = os.cpu_count() or 1
    threads = max(1, cores // lanes)
    pending = [s for s in steps if not s.alone]
    results: dict[str, tuple[int, float]] = {}
    lock = threading.Lock()

    def next_ready() -> Step | None:
        with lock:
            step = next((s for s in pending if all(d in results for d in s.after)), None)
            if step is not None:
                pending.remove(step)
            return step

    def lane() -> None:
        while True:
            with lock:
                if not pending:
                    return
            step = next_ready()
            if step is None:  # what is left waits for a step another lane is running
                time.sleep(0.5)
                continue
            outcome = run_logged(step, threads if lanes > 1 else None)
            with lock:
                results[step.name] = outcome

    workers = [threading.Thread(target=lane) for _ in range(lanes)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    for step in (s for s in steps if s.alone):
        results[step.name] = run_logged(step, None)
    return results


def run_logged(step: Step, threads: int | None) -> tuple[int, float]:
    log.info("%s: bertology %s%s", step.name, " ".join(step.args),
             f" ({threads} thread(s))" if threads else "")
    status, seconds = bertology(step.args, step.log_path, threads)
    log.info("%s: exit %d in %.0f s", step.name, status, seconds)
    return status, seconds


def reads_sst2_model(spec: dict) -> bool:
    """Whether a study's `reproduce:` overrides read the fine-tuned SST-2 models."""
    return any("{sst2_model}" in override for override in spec["overrides"])


def sst2_model_of_the_job(out: Path) -> str:
    """The path the `{sst2_model}` placeholder becomes: the model fine-tuned with the job's
    own seed (an interpolation Hydra resolves per job of the sweep)."""
    return str(out / "sst2_model" / "seed_${seed}" / "model")


def sst2_model_steps(out: Path) -> list[Step]:
    """MiniLM fine-tuned on SST-2 once per seed; a model made by an earlier run is reused."""
    steps = []
    for seed in SST2_SEEDS:
        run_dir = out / "sst2_model" / f"seed_{seed}"
        if not (run_dir / "metrics.json").exists():
            steps.append(Step(f"sst2_model seed {seed}",
                              [*SST2_MODEL, f"seed={seed}", f"hydra.run.dir={run_dir}"],
                              out / "logs" / f"sst2_model_seed_{seed}.log"))
    return steps


def study_steps(studies: dict[str, dict], out: Path, models: list[Step]) -> list[Step]:
    steps = []
    for study, spec in studies.items():
        overrides = [o.replace("{sst2_model}", sst2_model_of_the_job(out))
                     for o in spec["overrides"]]
        command = [spec["pipeline"], "-m", f"experiment={spec['bundle']}", "logger=none",
                   *overrides, f"hydra.sweep.dir={out / study}"]
        log.info("%s reads %s", study, ", ".join(spec["findings"]))
        steps.append(Step(study, command, out / "logs" / f"{study}.log",
                          after=tuple(m.name for m in models) if reads_sst2_model(spec) else (),
                          alone=spec["alone"]))
    return steps


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(message)s")
    parser = argparse.ArgumentParser(prog="python -m bertology.reproduce",
                                     description="every finding, then the report")
    parser.add_argument("--out", type=Path,
                        default=REPO / "outputs" / "reproduce" / datetime.now().strftime(
                            "%Y-%m-%d_%H-%M-%S"))
    parser.add_argument("--only", nargs="*", help="finding ids (default: all)")
    parser.add_argument("--lanes", type=int, default=min(2, os.cpu_count() or 1),
                        help="steps run side by side, each on cores/lanes threads (default: "
                             "2 where there are 2 cores; 1: one after another on every core)")
    args = parser.parse_args(argv)
    try:  # a bad --lanes or --only: one line, exit 2, before any step runs
        require(args.lanes >= 1, f"--lanes {args.lanes} must be 1 or more")
        return reproduce(args.out.resolve(), load_studies(args.only), args.lanes)
    except UserError as err:
        parser.exit(2, f"{parser.prog}: error: {err}\n")


def reproduce(out: Path, studies: dict[str, dict], lanes: int) -> int:
    """The SST-2 models and the studies' sweeps into out, then the report; the exit status."""
    (out / "logs").mkdir(parents=True, exist_ok=True)
    models = sst2_model_steps(out) if any(map(reads_sst2_model, studies.values())) else []
    total = time.perf_counter()
    results = run_steps([*models, *study_steps(studies, out, models)], lanes)
    failed = [name for name, (status, _) in results.items() if status]
    status, _ = bertology(["report", *(str(out / s) for s in studies if (out / s).exists()),
                           f"hydra.run.dir={out / 'report'}"], out / "logs" / "report.log")
    if status == 0 and (out / "report" / "tables" / "findings.csv").exists():
        write_summary(out / "report")  # the front page's block, as this run wrote it
    log.info("report: %s (exit %d); all steps %.1f min; failed: %s", out / "report" /
             "REPORT.md", status, (time.perf_counter() - total) / 60, failed or "none")
    return 1 if failed or status else 0
