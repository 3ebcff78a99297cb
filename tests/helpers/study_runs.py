"""How tests/study/test_noise.py runs a study and judges it. Each arm × seed is composed as
`bertology <pipeline> -m experiment=study_<name>` composes it and saved as Hydra saves it, then
run here, one run after another, or on two lanes: one process per core, each on one thread as
the test module's own runs (the way `make reproduce` runs its studies side by side), so that
on 2 cores a study takes half the wall time. Every finding the runs answer is judged, and all
of them corrected as one suite, by the report's own code.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import Executor, ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

from conftest import compose_config
from omegaconf import OmegaConf

from bertology.pipelines import load_pipeline
from bertology.study.judge.catalog import load_catalog, load_studies, runs_of
from bertology.study.judge.results import find_runs
from bertology.study.judge.specs import ABOUT
from bertology.study.judge.suite import correct_suite
from bertology.study.judge.verdicts import judge

CATALOG = load_catalog()
SEEDS = (0, 1, 2)
LANES = 2


def plan_study(study: str, root: Path, overrides: list[str], seeds=SEEDS,
               arms: list[list[str]] = ([],)) -> list[tuple[str, Path]]:
    """Every arm × seed of a study as root/<n> with its saved config (as Hydra): the
    (pipeline, run dir) jobs that run it."""
    pipeline = load_studies()[study].pipeline
    jobs = []
    for index, (arm, seed) in enumerate((a, s) for a in arms for s in seeds):
        cfg = compose_config(pipeline, [f"experiment=study_{study}", f"seed={seed}",
                                        "logger=none", *overrides, *arm])
        run_dir = root / str(index)
        (run_dir / ".hydra").mkdir(parents=True)
        OmegaConf.save(cfg, run_dir / ".hydra" / "config.yaml")
        jobs.append((pipeline, run_dir))
    return jobs


def run_saved(pipeline: str, run_dir: Path) -> None:
    """The pipeline on the config saved in run_dir."""
    load_pipeline(pipeline)(OmegaConf.load(run_dir / ".hydra" / "config.yaml"), run_dir)


def run_study(study: str, root: Path, overrides: list[str], seeds=SEEDS,
              arms: list[list[str]] = ([],)) -> None:
    """Every arm × seed of a study into root/<n>, here, one after another."""
    for job in plan_study(study, root, overrides, seeds, arms):
        run_saved(*job)


def time_once(models: dict, batch: dict, **_) -> dict:
    """latency.compare_latency in one round of one repeat, whatever the caller asks."""
    from bertology.models.latency import compare_latency

    return compare_latency(models, batch, rounds=1, repeats=1)


def start_lane() -> None:
    """One thread per run, as the test module's. CPU latency (int8's, the student's speed-up)
    is timed once, not in 3 rounds of 7 or 20 repeats: no finding reads it, and in full it
    takes longer than the distillation it times."""
    import torch

    from bertology.pipelines import distill
    from bertology.pruning import prune_context

    torch.set_num_threads(1)
    prune_context.compare_latency = distill.compare_latency = time_once


def start_lanes() -> Executor:
    """The lanes: fresh processes (spawned, not forked from one that holds torch's threads),
    each started by start_lane."""
    return ProcessPoolExecutor(LANES, mp_context=get_context("spawn"), initializer=start_lane)


def run_in_lanes(lanes: Executor, jobs: Iterable[tuple[str, Path]]) -> None:
    """Every (pipeline, run dir) job, in the order given, as lanes free up; the first failure
    is raised, and the jobs not started yet are dropped."""
    futures = [lanes.submit(run_saved, *job) for job in jobs]
    try:
        for future in futures:
            future.result()
    finally:
        for future in futures:
            future.cancel()


def judge_studies(roots: list[Path], studies: set[str], only: tuple[str, ...] = ()) -> list:
    """Every finding the studies' runs under the roots answer (or `only` those), judged and
    corrected as one suite."""
    runs = find_runs(roots)
    results = [judge(spec, runs_of(spec, runs)) for spec in CATALOG.values()
               if set(spec.studies) <= studies and (not only or spec.id in only)]
    results = correct_suite(results)
    assert results, f"no finding reads {studies}"
    return results


def assert_no_finding_holds(root: Path | list[Path], studies: set[str],
                            about: tuple[str, ...] = ABOUT, only: tuple[str, ...] = ()) -> list:
    """Judge every finding the studies' runs under root (or roots) answer (or `only` those),
    correct them as one suite, and fail naming those that hold (only findings about `about`
    count)."""
    results = judge_studies(root if isinstance(root, list) else [root], studies, only)
    counted = {spec.id for spec in CATALOG.values() if spec.about in about}
    held = [(r.id, r.raw.label, r.corrected.label) for r in results
            if r.id in counted and "holds" in (r.raw.label, r.corrected.label)]
    assert not held, f"findings that hold on noise: {held}"
    return results
