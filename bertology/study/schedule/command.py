"""`make reproduce`: every study the findings read, at CPU scale, then `bertology report`.

    python -m bertology.reproduce [--out outputs/reproduce/<stamp>] [--only pos_layers ...]

A finding (findings/<id>.yaml) reads the runs of a study (the bundle
conf/experiment/study_<name>.yaml, with its settings in findings/studies.yaml), and several
findings share one: each study runs once, as
one sweep, in order, in its own `bertology` process (so one failing step does not take the
others down; the summary names it). Studies that judge a fine-tuned model read MiniLM
fine-tuned on a sample of SST-2 first, once per seed (seed s's job reads the model fine-tuned
with seed s: data order and head initialisation differ, so the seeds replicate what the claims
are about, a fine-tuned model, rather than re-measure one), passed to them by the
`{sst2_model}` placeholder of their `reproduce:` overrides (the catalogue's CPU-budget
settings). Beside each, its random-init twin is fine-tuned the same way (init=random: the same
recipe, data and seed, from the weights a probe of that seed contrasts with), passed by
`{sst2_twin}`: the twin arm of finetuning_top_layers and special_token_gradients. Two steps
run side by side where there are two cores (`--lanes`), each on one thread, except the studies
that time latency (`alone: true`), which run last, alone (runner.py). The report over every
study dir lands in <out>/report/REPORT.md, with a verdict for every finding. Rerun into the same
--out, a killed run resumes: the sweeps it finished at the same commit are kept.

`--encoders minilm bert modernbert` also pretrains each encoder named after MiniLM and reruns
on it the studies that read a model (encoders.py), each judged in its own report, and adds the
finding x encoder matrix to the report (matrix.py). `--population K` instead pretrains K
members of one recipe and judges the findings across them (members.py); `--checkpoints A B ...`
judges them across checkpoints pretrained elsewhere (external.py). The steps an encoder
runs are built in steps.py.
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from datetime import datetime
from pathlib import Path

from bertology.errors import UserError, require
from bertology.study.judge import catalog, encoders
from bertology.study.pages.matrix import write_matrix
from bertology.study.pages.publish import record_run
from bertology.study.pages.summary import write_summary
from bertology.study.schedule import runner
from bertology.study.schedule.external import reproduce_checkpoints
from bertology.study.schedule.members import reproduce_population
from bertology.study.schedule.runner import Step, run_steps
from bertology.study.schedule.steps import (
    EncoderSteps,
    encoder_steps,
    model_reading,
    pretraining_step,
)

log = logging.getLogger("bertology.reproduce")


def studies_to_run(only: list[str] | None) -> dict[str, dict]:
    """study name -> {pipeline, bundle, overrides, alone, seeds, member_seeds, findings} for
    every study
    that a finding (or one of `only`) reads, with the catalogue's settings (findings/)."""
    catalogue = catalog.load_studies()
    studies: dict[str, dict] = {}
    for spec in catalog.load_catalog().values():
        if only and spec.id not in only:
            continue
        for name in spec.studies:
            require(name in catalogue, f"finding {spec.id} reads study {name!r}, which "
                    f"findings/{catalog.STUDIES_FILE} does not list")
            study = catalogue[name]
            studies.setdefault(name, {"pipeline": study.pipeline, "bundle": study.bundle,
                                      "overrides": list(study.reproduce),
                                      "alone": study.alone,
                                      "seeds": tuple(range(study.seeds)),
                                      "member_seeds": study.member_seeds, "findings": []})
            studies[name]["findings"].append(spec.id)
    require(bool(studies), f"no finding matches {only}")
    return studies


def pretrained_encoder(name: str, studies: dict[str, dict], out: Path, cache: Path | None
                       ) -> tuple[EncoderSteps, list[Step], list[Step]]:
    """An encoder the run pretrains: its pretraining step (none when cached), and the studies
    of encoders.ENCODER_STUDIES on it, into out/<name>, which wait for it."""
    run_dir = encoders.encoder_dir(name, cache)
    pretrain = pretraining_step(f"pretrain {name}", encoders.pretrain_args(name), run_dir,
                                out / "logs" / f"pretrain_{name}.log")
    encoder = EncoderSteps(out / name, out / "logs", f"{name}_",
                      (f"model.name_or_path={run_dir / 'model'}",),
                      tuple(s.name for s in pretrain))
    return encoder, pretrain, encoder_steps(model_reading(studies), encoder)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(message)s")
    parser = argparse.ArgumentParser(prog="python -m bertology.reproduce",
                                     description="every finding, then the report")
    parser.add_argument("--out", type=Path,
                        default=Path.cwd() / "outputs" / "reproduce" / datetime.now().strftime(
                            "%Y-%m-%d_%H-%M-%S"))
    parser.add_argument("--only", nargs="*", help="finding ids (default: all)")
    parser.add_argument("--lanes", type=int, default=min(2, os.cpu_count() or 1),
                        help="steps run side by side, each on cores/lanes threads (default: "
                             "2 where there are 2 cores; 1: one after another on every core)")
    parser.add_argument("--encoders", nargs="+", default=[encoders.DEFAULT],
                        help="judge the findings that read a model on each: minilm (default) "
                             "and encoders the run pretrains at equal FLOPs on Wikipedia ("
                             f"{', '.join(encoders.pretrainable())}), each against its own "
                             "random-init twin; the report gains a finding x encoder matrix")
    parser.add_argument("--population", type=int, metavar="K",
                        help="instead: pretrain K BERTs that differ in their seed (cached), "
                             "run the findings that read a model on each, and judge them "
                             "across the K (out/population/report; docs/reproduce.md)")
    parser.add_argument("--checkpoints", nargs="+", metavar="CHECKPOINT",
                        help="instead: judge the findings that read a model across these "
                             "checkpoints, each a population member: hub ids, org/name@revision, "
                             "local folders, or suite:<name>[:<step>] (conf/suites; the cached "
                             "seeds); prints the cost first (study/schedule/external.py)")
    parser.add_argument("--dry-run", action="store_true",
                        help="with --checkpoints: check them and print the cost, run nothing")
    parser.add_argument("--member", nargs="*", default=[], metavar="OVERRIDE",
                        help="with --population: pretraining overrides of every member "
                             "(e.g. size=base trainer.max_flops=1e17 on a GPU)")
    parser.add_argument("--member-seeds", type=int, metavar="R",
                        help="with --population: each member's studies run R seeds (default: "
                             "each study's member_seeds in findings/studies.yaml), which "
                             "average out the probe and fine-tuning noise within a member")
    parser.add_argument("--first-member", type=int, default=0, metavar="N",
                        help="with --population: the members' seeds start at N (default 0), "
                             "so a confirmatory population shares no member with a run whose "
                             "results were seen")
    parser.add_argument("--replace-failed", action="store_true",
                        help="with --population: pretrain the members first and replace each "
                             "whose held-out MLM accuracy ends at or below its floor by the "
                             "next seed, until K have learned (at most 2K drawn); only those "
                             "get studies")
    args = parser.parse_args(argv)
    started = time.time()
    try:  # a bad --lanes, --only or --encoders: one line, exit 2, before any step runs
        status = dispatch(args)
    except UserError as err:
        parser.exit(2, f"{parser.prog}: error: {err}\n")
    if not args.dry_run:
        record_run(args.out.resolve(), argv, started, status)
    return status


def dispatch(args: argparse.Namespace) -> int:
    """The run the arguments ask for; its exit status."""
    require(args.lanes >= 1, f"--lanes {args.lanes} must be 1 or more")
    names = tuple(encoders.check_encoders(args.encoders))
    if args.checkpoints is not None:
        require(args.population is None and names == (encoders.DEFAULT,) and not args.member
                and args.first_member == 0 and not args.replace_failed,
                "--checkpoints judges the checkpoints it names: drop --population, "
                "--encoders, --member, --first-member and --replace-failed")
        return reproduce_checkpoints(args.out.resolve(), studies_to_run(args.only),
                                     args.lanes, args.checkpoints, args.member_seeds,
                                     dry_run=args.dry_run)
    require(not args.dry_run, "--dry-run prints the cost of --checkpoints; add them")
    require(args.population is not None or (args.member_seeds is None
                                             and args.first_member == 0
                                             and not args.replace_failed),
            "--member-seeds, --first-member and --replace-failed set a population's "
            "members; add --population K")
    if args.population is not None:
        require(args.population >= 2, f"--population {args.population}: a population "
                "needs 2 or more members (its spread is what the verdicts read)")
        require(args.member_seeds is None or args.member_seeds >= 1,
                f"--member-seeds {args.member_seeds} must be 1 or more")
        require(args.first_member >= 0, f"--first-member {args.first_member} must be 0 "
                "or more")
        return reproduce_population(args.out.resolve(), studies_to_run(args.only),
                                    args.lanes, args.population, tuple(args.member),
                                    per_member=args.member_seeds, first=args.first_member,
                                    replace_failed=args.replace_failed)
    return reproduce(args.out.resolve(), studies_to_run(args.only), args.lanes, names)


def reproduce(out: Path, studies: dict[str, dict], lanes: int,
              names: tuple[str, ...] = (encoders.DEFAULT,)) -> int:
    """The SST-2 models and the studies' sweeps into out (and, for each encoder of names but
    MiniLM, its pretraining and the studies that read it, into out/<name>), then a report per
    encoder and, for several, the matrix of findings by encoder; the exit status."""
    (out / "logs").mkdir(parents=True, exist_ok=True)
    others = [pretrained_encoder(n, studies, out, None) for n in names if n != encoders.DEFAULT]
    # the pretraining first: it is the longest step, and the other encoders' steps wait for it
    steps = [*(s for _, pretrain, _ in others for s in pretrain),
             *encoder_steps(studies, EncoderSteps(out, out / "logs")),
             *(s for _, _, rest in others for s in rest)]
    total = time.perf_counter()
    results = run_steps(steps, lanes)
    failed = [name for name, (status, _) in results.items() if status]
    reports = {encoders.DEFAULT: report(out, studies, out / "logs" / "report.log")}
    for encoder, _, _ in others:
        reports[encoder.root.name] = report(encoder.root, studies,
                                            encoder.logs / f"{encoder.label}report.log")
    (out / "report" / "ENCODERS.md").unlink(missing_ok=True)  # an earlier run's matrix
    if reports[encoders.DEFAULT] == 0 and (out / "report" / "tables" / "findings.csv").exists():
        judged = [n for n in names if reports[n] == 0]  # a failed report leaves its column out
        if len(judged) > 1:
            write_matrix(out / "report", {n: out / "report" if n == encoders.DEFAULT
                                          else out / n / "report" for n in judged})
        write_summary(out / "report")  # the front page's block, as this run wrote it
    status = max(reports.values())
    log.info("report: %s (exit %d); all steps %.1f min; failed: %s", out / "report" /
             "REPORT.md", status, (time.perf_counter() - total) / 60, failed or "none")
    return 1 if failed or status else 0


def report(root: Path, studies: dict[str, dict], log_path: Path) -> int:
    """`bertology report` over the study dirs under root that exist, into root/report; its
    exit status."""
    dirs = [str(root / s) for s in studies if (root / s).exists()]
    status, _ = runner.bertology(["report", *dirs, f"hydra.run.dir={root / 'report'}"], log_path)
    return status
