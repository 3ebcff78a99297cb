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
settings). The report over every
study dir lands in <out>/report/REPORT.md, with a verdict for every finding.
"""

from __future__ import annotations

import argparse
import logging
import re
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

from omegaconf import OmegaConf

from bertology.errors import require
from bertology.findings.catalog import EXPERIMENTS, load_catalog
from bertology.reproduce.summary import write_summary

REPO = Path(__file__).resolve().parents[2]  # bertology/reproduce/studies.py -> the checkout

# The fine-tuned models: MiniLM on 4,000 SST-2 phrases, 2 epochs (~2 min each on 2 cores),
# one per seed of the studies' sweeps (their `seed: 0,1,2`).
SST2_MODEL = ["finetune", "model=minilm", "task=sst2", "trainer=finetune_cpu",
              "trainer.max_train_examples=4000", "logger=none"]
SST2_SEEDS = (0, 1, 2)

log = logging.getLogger("bertology.reproduce")


def pipeline_of(bundle: Path) -> str:
    """The pipeline a bundle runs on, from the command its header gives."""
    match = re.search(rf"bertology (\w+) -m experiment={bundle.stem}\b", bundle.read_text())
    require(match is not None, f"{bundle}: the header must give `bertology <pipeline> -m "
            f"experiment={bundle.stem}`")
    return match.group(1)


def load_studies(only: list[str] | None) -> dict[str, dict]:
    """study name -> {pipeline, bundle, overrides, findings} for every study that a finding
    (or one of `only`) reads."""
    studies: dict[str, dict] = {}
    for spec in load_catalog(EXPERIMENTS).values():
        if only and spec.id not in only:
            continue
        for name in spec.studies:
            if name not in studies:
                bundle = EXPERIMENTS / f"study_{name}.yaml"
                block = OmegaConf.to_container(OmegaConf.load(bundle))["study"]
                studies[name] = {"pipeline": pipeline_of(bundle), "bundle": bundle.stem,
                                 "overrides": list(block.get("reproduce", [])), "findings": []}
            studies[name]["findings"].append(spec.id)
    require(bool(studies), f"no finding matches {only}")
    return studies


def bertology(args: list[str], log_path: Path) -> tuple[int, float]:
    """Run `python -m bertology <args>`; its output goes to log_path. (exit status, seconds)"""
    start = time.perf_counter()
    with log_path.open("w") as handle:
        status = subprocess.run([sys.executable, "-m", "bertology", *args], stdout=handle,
                                stderr=subprocess.STDOUT, cwd=REPO).returncode
    return status, time.perf_counter() - start


def sst2_model_of_the_job(out: Path) -> str:
    """The path the `{sst2_model}` placeholder becomes: the model fine-tuned with the job's
    own seed (an interpolation Hydra resolves per job of the sweep)."""
    return str(out / "sst2_model" / "seed_${seed}" / "model")


def fine_tune_sst2_models(out: Path) -> list[str]:
    """MiniLM fine-tuned on SST-2 once per seed (reused when present); the failed steps."""
    failed = []
    for seed in SST2_SEEDS:
        run_dir = out / "sst2_model" / f"seed_{seed}"
        if (run_dir / "metrics.json").exists():
            continue
        log.info("fine-tuning the SST-2 model of seed %d into %s", seed, run_dir)
        status, seconds = bertology([*SST2_MODEL, f"seed={seed}", f"hydra.run.dir={run_dir}"],
                                    out / "logs" / f"sst2_model_seed_{seed}.log")
        log.info("sst2_model seed %d: exit %d in %.0f s", seed, status, seconds)
        if status:
            failed.append(f"sst2_model seed {seed}")
    return failed


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(message)s")
    parser = argparse.ArgumentParser(prog="python -m bertology.reproduce",
                                     description="every finding, then the report")
    parser.add_argument("--out", type=Path,
                        default=REPO / "outputs" / "reproduce" / datetime.now().strftime(
                            "%Y-%m-%d_%H-%M-%S"))
    parser.add_argument("--only", nargs="*", help="finding ids (default: all)")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    (out / "logs").mkdir(parents=True, exist_ok=True)
    studies = load_studies(args.only)
    needs_model = any("{sst2_model}" in " ".join(f["overrides"]) for f in studies.values())
    failed, total = [], time.perf_counter()
    if needs_model:
        failed += fine_tune_sst2_models(out)
    for index, (study, spec) in enumerate(studies.items(), 1):
        overrides = [o.replace("{sst2_model}", sst2_model_of_the_job(out))
                     for o in spec["overrides"]]
        command = [spec["pipeline"], "-m", f"experiment={spec['bundle']}", "logger=none",
                   *overrides, f"hydra.sweep.dir={out / study}"]
        log.info("[%d/%d] %s (%s): bertology %s", index, len(studies), study,
                 ", ".join(spec["findings"]), " ".join(command))
        status, seconds = bertology(command, out / "logs" / f"{study}.log")
        log.info("[%d/%d] %s: exit %d in %.0f s", index, len(studies), study, status, seconds)
        if status:
            failed.append(study)
    status, _ = bertology(["report", *(str(out / s) for s in studies if (out / s).exists()),
                           f"hydra.run.dir={out / 'report'}"], out / "logs" / "report.log")
    if status == 0 and (out / "report" / "tables" / "findings.csv").exists():
        write_summary(out / "report")  # the front page's block, as this run wrote it
    log.info("report: %s (exit %d); all steps %.1f min; failed: %s", out / "report" /
             "REPORT.md", status, (time.perf_counter() - total) / 60, failed or "none")
    return 1 if failed or status else 0

