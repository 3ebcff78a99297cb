"""`make reproduce`: every study the findings read, at CPU scale, then `bertology report`.

    python -m bertology.reproduce [--out outputs/reproduce/<stamp>] [--only pos_layers ...]

A finding (conf/experiment/finding_<id>.yaml) reads the runs of a study
(conf/experiment/study_<name>.yaml), and several findings share one: each study runs once, as
one sweep, in order, in its own `bertology` process (so one failing step does not take the
others down; the summary names it). Studies that judge a fine-tuned model share one: MiniLM
fine-tuned on a sample of SST-2 first, passed to them by the `{sst2_model}` placeholder of
their `reproduce:` overrides (the study block's CPU-budget settings). The report over every
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

REPO = Path(__file__).resolve().parent.parent

# The shared fine-tuned model: MiniLM on 4,000 SST-2 phrases, 2 epochs (~2 min on 2 cores).
SST2_MODEL = ["finetune", "model=minilm", "task=sst2", "trainer=finetune_cpu",
              "trainer.max_train_examples=4000", "logger=none"]

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


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(message)s")
    parser = argparse.ArgumentParser(description="every finding, then the report")
    parser.add_argument("--out", type=Path,
                        default=REPO / "outputs" / "reproduce" / datetime.now().strftime(
                            "%Y-%m-%d_%H-%M-%S"))
    parser.add_argument("--only", nargs="*", help="finding ids (default: all)")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    (out / "logs").mkdir(parents=True, exist_ok=True)
    studies = load_studies(args.only)
    needs_model = any("{sst2_model}" in " ".join(f["overrides"]) for f in studies.values())
    sst2_model = out / "sst2_model"
    failed, total = [], time.perf_counter()
    if needs_model and not (sst2_model / "metrics.json").exists():
        log.info("fine-tuning the shared SST-2 model into %s", sst2_model)
        status, seconds = bertology([*SST2_MODEL, f"hydra.run.dir={sst2_model}"],
                                    out / "logs" / "sst2_model.log")
        log.info("sst2_model: exit %d in %.0f s", status, seconds)
        if status:
            failed.append("sst2_model")
    for index, (study, spec) in enumerate(studies.items(), 1):
        overrides = [o.replace("{sst2_model}", str(sst2_model / "model"))
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
    log.info("report: %s (exit %d); all steps %.1f min; failed: %s", out / "report" /
             "REPORT.md", status, (time.perf_counter() - total) / 60, failed or "none")
    return 1 if failed or status else 0


if __name__ == "__main__":
    sys.exit(main())
