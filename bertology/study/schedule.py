"""`make reproduce`: every study the findings read, at CPU scale, then `bertology report`.

    python -m bertology.reproduce [--out outputs/reproduce/<stamp>] [--only pos_layers ...]

A finding (conf/findings/<id>.yaml) reads the runs of a study (the bundle
conf/experiment/study_<name>.yaml, with its settings in conf/findings/studies.yaml), and several
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
finding x encoder matrix to the report (matrix.py).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from bertology.errors import UserError, require
from bertology.run.rundir import RunDir
from bertology.run.tables import write_table
from bertology.run.tracking import read_log
from bertology.study import catalog, encoders, runner
from bertology.study.matrix import write_matrix
from bertology.study.runner import Step, run_steps
from bertology.study.summary import write_summary

# The fine-tuned models: MiniLM on 4,000 SST-2 phrases, one epoch (times and accuracies:
# docs/reproduce.md), one per seed of the studies that read them.
SST2_MODEL = ["finetune", "model=minilm", "task=sst2", "trainer=finetune_cpu",
              "trainer.max_train_examples=4000", "trainer.epochs=1", "logger=none"]
BUNDLE_SEEDS = (0, 1, 2)  # the bundles' own sweep (conf/experiment/study_*.yaml: seed: 0,1,2)
# placeholder -> the overrides that make its models beside SST2_MODEL: MiniLM fine-tuned, and its
# random-init twin fine-tuned the same way
SST2_MODELS = {"sst2_model": [], "sst2_twin": ["init=random"]}
# A population member's own fine-tuning settings, by step (an SST-2 model kind or a study), after
# the study's: the members are small BERTs pretrained for minutes, far weaker than MiniLM, for
# which the studies' rate (1e-4) and finetune_sst2's 1,500 phrases were set. Measured on 1x
# members (docs/reproduce.md, "Towards members that learn more"): there, 1,500 phrases leave
# finetune_sst2's models under the 0.609 guard of freeze_lower and word_order at 1e-4 and at 3e-4
# (some at the majority class), and 4,000 phrases at 3e-4 lift members 0-4 to 0.66-0.71.
# Smaller, weaker models take larger rates (BERT §A.3 searches 2e-5..5e-5 for BERT-base); the
# twin is fine-tuned alike.
# The SST-2 model trains two epochs, as finetune_sst2 does: at one, 2 of 12 members' models
# stayed at the majority class (3e-4, 4,000 phrases; the 12-member run of 2026-11-29).
MEMBER_RATE = "trainer.lr=3e-4"
MEMBER_MODEL = (MEMBER_RATE, "trainer.epochs=2")
MEMBER_FINETUNING = {"sst2_model": MEMBER_MODEL, "sst2_twin": MEMBER_MODEL,
                     "finetune_sst2": (MEMBER_RATE, "trainer.max_train_examples=4000")}

log = logging.getLogger("bertology.reproduce")


def studies_to_run(only: list[str] | None) -> dict[str, dict]:
    """study name -> {pipeline, bundle, overrides, alone, seeds, member_seeds, findings} for
    every study
    that a finding (or one of `only`) reads, with the catalogue's settings (conf/findings/)."""
    catalogue = catalog.load_studies()
    studies: dict[str, dict] = {}
    for spec in catalog.load_catalog().values():
        if only and spec.id not in only:
            continue
        for name in spec.studies:
            require(name in catalogue, f"finding {spec.id} reads study {name!r}, which "
                    f"conf/findings/{catalog.STUDIES_FILE} does not list")
            study = catalogue[name]
            studies.setdefault(name, {"pipeline": study.pipeline, "bundle": study.bundle,
                                      "overrides": list(study.reproduce),
                                      "alone": study.alone,
                                      "seeds": tuple(range(study.seeds)),
                                      "member_seeds": study.member_seeds, "findings": []})
            studies[name]["findings"].append(spec.id)
    require(bool(studies), f"no finding matches {only}")
    return studies


def reads_sst2_model(spec: dict, kinds=tuple(SST2_MODELS)) -> bool:
    """Whether a study's `reproduce:` overrides read the fine-tuned SST-2 models (or twins)."""
    return any(f"{{{kind}}}" in override for override in spec["overrides"] for kind in kinds)


def sst2_model_of_the_job(root: Path, kind: str = "sst2_model") -> str:
    """The path the `{sst2_model}` (`{sst2_twin}`) placeholder becomes: the model (its twin)
    fine-tuned with the job's own seed (an interpolation Hydra resolves per job of the sweep)."""
    return str(root / kind / "seed_${seed}" / "model")


def fill_placeholders(override: str, root: Path) -> str:
    for kind in SST2_MODELS:
        override = override.replace(f"{{{kind}}}", sst2_model_of_the_job(root, kind))
    return override


@dataclass(frozen=True)
class Encoder:
    """Where one encoder's steps write, and what picks it: MiniLM (the studies' own, no extra
    overrides) or one the run pretrains (encoders.py)."""

    root: Path  # its study dirs and SST-2 models
    logs: Path
    label: str = ""  # the prefix of its step and log names, e.g. "bert_"
    extra: tuple[str, ...] = ()  # overrides that pick it, e.g. model.name_or_path=<its model>
    after: tuple[str, ...] = ()  # its pretraining step, if the run makes it
    # a population member's pretraining seed, whose own seeds its studies run (member_seeds);
    # None: MiniLM or a matrix encoder, whose studies run their own (studies.yaml: seeds)
    member: int | None = None
    per_member: int | None = None  # --member-seeds: every study's; None: studies.yaml's
    # (step: an SST-2 model kind or a study, its overrides after the study's): MEMBER_FINETUNING
    settings: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def settings_of(self, step: str) -> tuple[str, ...]:
        return dict(self.settings).get(step, ())

    def step(self, name: str, args: list[str], after: tuple[str, ...] = (),
             alone: bool = False, done_in: Path | None = None) -> Step:
        label = f"{self.label}{name}"
        return Step(label, args, self.logs / f"{label.replace(' ', '_')}.log",
                    after=(*self.after, *after), alone=alone, done_in=done_in)


def job_seeds(spec: dict, encoder: Encoder) -> tuple[int, ...]:
    """The seeds of a study's jobs on this encoder: a member's own (as many as --member-seeds
    or the study's member_seeds say), else the study's."""
    if encoder.member is None:
        return spec["seeds"]
    return member_seeds(encoder.member, encoder.per_member or spec["member_seeds"])


def model_seeds(studies: dict[str, dict], encoder: Encoder) -> dict[str, tuple[int, ...]]:
    """SST-2 model kind -> the seeds some study reads it with (a kind no study reads: none)."""
    return {kind: tuple(sorted({seed for spec in studies.values()
                                if reads_sst2_model(spec, (kind,))
                                for seed in job_seeds(spec, encoder)}))
            for kind in SST2_MODELS}


def sst2_model_steps(encoder: Encoder, seeds: dict[str, tuple[int, ...]]) -> list[Step]:
    """The encoder fine-tuned on SST-2 once per seed some study reads, into <root>/sst2_model,
    and its random-init twin the same way, into <root>/sst2_twin; a model an earlier run made
    with the same command is reused."""
    steps = []
    for kind, extra in SST2_MODELS.items():
        for seed in seeds[kind]:
            run_dir = encoder.root / kind / f"seed_{seed}"
            args = [*SST2_MODEL, *encoder.extra, *extra, *encoder.settings_of(kind),
                    f"seed={seed}"]
            if not made_before(run_dir, args):
                steps.append(encoder.step(f"{kind} seed {seed}",
                                          [*args, f"hydra.run.dir={run_dir}"]))
    return steps


def made_before(run_dir: Path, args: list[str]) -> bool:
    """Whether run_dir holds a finished model made by this command (the overrides Hydra
    recorded). One made by another command (an older recipe) is an error, not a silent reuse:
    the studies would read a model their command does not describe."""
    if not (run_dir / "metrics.json").exists():
        return False
    made = RunDir(run_dir).recorded_overrides
    require(made == args[1:], f"{run_dir} holds an SST-2 model made by another command "
            f"({' '.join(made) or 'unrecorded'}); remove it or run into another --out")
    return True


def study_steps(studies: dict[str, dict], encoder: Encoder, models: list[Step]) -> list[Step]:
    """A sweep per study into <root>/<study>; one that reads the SST-2 models waits for them."""
    steps = []
    for study, spec in studies.items():
        overrides = [fill_placeholders(o, encoder.root) for o in spec["overrides"]]
        command = [spec["pipeline"], "-m", f"experiment={spec['bundle']}", "logger=none",
                   *overrides, *encoder.extra, *encoder.settings_of(study),
                   *seed_override(job_seeds(spec, encoder)),
                   f"hydra.sweep.dir={encoder.root / study}"]
        log.info("%s%s reads %s", encoder.label, study, ", ".join(spec["findings"]))
        waits = tuple(m.name for m in models) if reads_sst2_model(spec) else ()
        steps.append(encoder.step(study, command, waits, spec["alone"], encoder.root / study))
    return steps


def seed_override(seeds: tuple[int, ...]) -> list[str]:
    """The sweep's seeds where they are not the bundles' own (0, 1, 2)."""
    return [] if seeds == BUNDLE_SEEDS else [f"seed={','.join(map(str, seeds))}"]


def encoder_steps(studies: dict[str, dict], encoder: Encoder) -> list[Step]:
    """The encoder's SST-2 models (where a study reads them), then its studies."""
    models = sst2_model_steps(encoder, model_seeds(studies, encoder))
    return [*models, *study_steps(studies, encoder, models)]


def pretrained_encoder(name: str, studies: dict[str, dict], out: Path, cache: Path | None
                       ) -> tuple[Encoder, list[Step], list[Step]]:
    """An encoder the run pretrains: its pretraining step (none when cached), and the studies
    of encoders.ENCODER_STUDIES on it, into out/<name>, which wait for it."""
    run_dir = encoders.encoder_dir(name, cache)
    pretrain = pretraining_step(f"pretrain {name}", encoders.pretrain_args(name), run_dir,
                                out / "logs" / f"pretrain_{name}.log")
    encoder = Encoder(out / name, out / "logs", f"{name}_",
                      (f"model.name_or_path={run_dir / 'model'}",),
                      tuple(s.name for s in pretrain))
    return encoder, pretrain, encoder_steps(model_reading(studies), encoder)


def pretraining_step(name: str, args: list[str], run_dir: Path, log_path: Path) -> list[Step]:
    """The step that pretrains an encoder into run_dir; none where it is cached there."""
    if encoders.is_pretrained(run_dir):
        return []
    return [Step(name, [*args, f"hydra.run.dir={run_dir}"], log_path)]


def model_reading(studies: dict[str, dict]) -> dict[str, dict]:
    """The studies of encoders.ENCODER_STUDIES: those whose findings read a model."""
    return {k: v for k, v in studies.items() if k in encoders.ENCODER_STUDIES}


# A member's further seeds lie this far apart, so no two members share one (a member's seeds
# draw its sentences, SST-2 subsample, heads and twin: they are its private replicates).
SEED_STRIDE = 1000


def member_seeds(member: int, per_member: int) -> tuple[int, ...]:
    """Member s's study seeds: s, s + SEED_STRIDE, …; with one a member, s (the seed its
    pretraining had), so a one-seed population's commands are unchanged."""
    return tuple(member + SEED_STRIDE * r for r in range(per_member))


def population_steps(size: int, extra: tuple[str, ...], studies: dict[str, dict], out: Path,
                     cache: Path | None, per_member: int | None = None, first: int = 0
                     ) -> tuple[list[Step], list[Encoder]]:
    """`--population K`: member s (first ≤ s < first + K; `--first-member`, 0 by default: a
    confirmatory population draws seeds no earlier run was seen on) pretrained with seed s
    (encoders.member_args; none
    when cached), then the studies of encoders.ENCODER_STUDIES on it with its own seeds
    (member_seeds: its own sentences, SST-2 subsamples and twins), into
    out/population/member_<s>. More than one seed a member (per_member, `--member-seeds`, else
    each study's member_seeds) averages out the probe and fine-tuning noise within it, where
    that and not the spread of pretraining keeps a verdict open (docs/reproduce.md). The
    pretraining steps come first: the longest, and every member's studies wait for its own."""
    if per_member is None:
        check_paired_member_seeds(studies)
    most = per_member or max((spec["member_seeds"] for spec in studies.values()), default=1)
    require(most == 1 or first + size <= SEED_STRIDE, f"{most} seeds a member with members "
            f"{first}..{first + size - 1}: members' seeds would overlap; member seeds must stay "
            f"under {SEED_STRIDE}")
    reading = model_reading(studies)
    pretrains, rest, members = [], [], []
    for seed in range(first, first + size):
        run_dir = encoders.member_dir(seed, extra, cache)
        pretrain = pretraining_step(f"pretrain member {seed}",
                                    encoders.member_args(seed, extra), run_dir,
                                    out / "logs" / f"pretrain_member_{seed}.log")
        member = Encoder(out / "population" / f"member_{seed}", out / "logs", f"member{seed}_",
                         (f"model.name_or_path={run_dir / 'model'}",),
                         tuple(s.name for s in pretrain), member=seed, per_member=per_member,
                         settings=tuple(MEMBER_FINETUNING.items()))
        pretrains += pretrain
        rest += encoder_steps(reading, member)
        members.append(member)
    return [*pretrains, *rest], members


def check_paired_member_seeds(studies: dict[str, dict]) -> None:
    """Studies that one finding reads together are paired seed by seed (probe_pos and
    probe_ner): studies.yaml must give them one member_seeds."""
    findings: dict[str, list[str]] = {}
    for name, spec in studies.items():
        for finding in spec["findings"]:
            findings.setdefault(finding, []).append(name)
    for finding, names in findings.items():
        counts = [studies[n]["member_seeds"] for n in names]
        require(len(set(counts)) == 1, f"finding {finding} pairs studies {', '.join(names)} "
                f"seed by seed, so conf/findings/{catalog.STUDIES_FILE} must give them one "
                f"member_seeds (now {', '.join(map(str, counts))}), or run --member-seeds")


def reproduce_population(out: Path, studies: dict[str, dict], lanes: int, size: int,
                         extra: tuple[str, ...] = (), cache: Path | None = None,
                         per_member: int | None = None, first: int = 0) -> int:
    """The population's steps, then one report over every member's study dirs, which judges
    the findings across the members (study/population.py), and the members' pretraining
    table; the exit status."""
    steps, members = population_steps(size, extra, studies, out, cache, per_member, first)
    (out / "logs").mkdir(parents=True, exist_ok=True)  # after any bad setting: no output
    total = time.perf_counter()
    results = run_steps(steps, lanes)
    failed = [name for name, (status, _) in results.items() if status]
    report_dir = out / "population" / "report"
    dirs = [str(m.root / s) for m in members for s in studies if (m.root / s).exists()]
    status, _ = runner.bertology(["report", *dirs, f"hydra.run.dir={report_dir}"],
                          out / "logs" / "population_report.log")
    if status == 0 and (report_dir / "tables" / "findings.csv").exists():
        write_members_table(report_dir, range(first, first + size), extra, cache)
        write_summary(report_dir)
    log.info("population report: %s (exit %d); all steps %.1f min; failed: %s",
             report_dir / "REPORT.md", status, (time.perf_counter() - total) / 60,
             failed or "none")
    return 1 if failed or status else 0


def write_members_table(report_dir: Path, seeds: range, extra: tuple[str, ...],
                        cache: Path | None) -> None:
    """tables/members.csv: each member's checkpoint, steps, held-out MLM accuracy at its first
    evaluation and its last, and the floor (always predicting the most frequent masked token).
    `learned`: the last accuracy above the floor (population.pretraining_failed, the rule the
    verdicts set members aside by); for a run from before the floor was recorded, above its
    first evaluation, which no verdict reads. A member that did not learn is named in the log."""
    rows = []
    for seed in seeds:
        run_dir = encoders.member_dir(seed, extra, cache)
        done = (run_dir / "metrics.json").is_file()  # a member whose pretraining failed: blank
        metrics = json.loads((run_dir / "metrics.json").read_text()) if done else {}
        first = first_eval_accuracy(run_dir)
        last, floor = metrics.get("eval/mlm_accuracy"), metrics.get("eval/mlm_majority_accuracy")
        baseline = floor if floor is not None else first
        rows.append({"member": seed, "checkpoint": str(run_dir / "model"),
                     "steps": metrics.get("train/steps"), "first_mlm_accuracy": first,
                     "mlm_accuracy": last, "mlm_floor": floor,
                     "learned": None if baseline is None or last is None else last > baseline})
    write_table(report_dir, "members", rows)
    log.info("members' held-out MLM accuracy: %s", ", ".join(
        f"{row['mlm_accuracy']:.3f}" for row in rows if row["mlm_accuracy"] is not None))
    for row in (r for r in rows if r["learned"] is False):
        log.warning("member %d did not learn: held-out MLM accuracy %.4f at its last "
                    "evaluation, against %s; %s", row["member"], row["mlm_accuracy"],
                    f"the floor {row['mlm_floor']:.4f}" if row["mlm_floor"] is not None
                    else f"{row['first_mlm_accuracy']:.4f} at its first",
                    "the verdicts set it aside" if row["mlm_floor"] is not None else
                    "the verdicts keep it (no floor recorded: docs/reproduce.md)")


def first_eval_accuracy(run_dir: Path) -> float | None:
    """The held-out MLM accuracy at a pretraining run's first evaluation (its metrics.jsonl),
    None where it has none."""
    path = run_dir / "metrics.jsonl"
    history = [r["eval/mlm_accuracy"] for r in read_log(path) if "eval/mlm_accuracy" in r] \
        if path.is_file() else []
    return float(history[0]) if history else None


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
    parser.add_argument("--member", nargs="*", default=[], metavar="OVERRIDE",
                        help="with --population: pretraining overrides of every member "
                             "(e.g. size=base trainer.max_flops=1e17 on a GPU)")
    parser.add_argument("--member-seeds", type=int, metavar="R",
                        help="with --population: each member's studies run R seeds (default: "
                             "each study's member_seeds in conf/findings/studies.yaml), which "
                             "average out the probe and fine-tuning noise within a member")
    parser.add_argument("--first-member", type=int, default=0, metavar="N",
                        help="with --population: the members' seeds start at N (default 0), "
                             "so a confirmatory population shares no member with a run whose "
                             "results were seen")
    args = parser.parse_args(argv)
    try:  # a bad --lanes, --only or --encoders: one line, exit 2, before any step runs
        require(args.lanes >= 1, f"--lanes {args.lanes} must be 1 or more")
        names = tuple(encoders.check_encoders(args.encoders))
        require(args.population is not None or (args.member_seeds is None
                                                 and args.first_member == 0),
                "--member-seeds and --first-member set a population's members; add "
                "--population K")
        if args.population is not None:
            require(args.population >= 2, f"--population {args.population}: a population "
                    "needs 2 or more members (its spread is what the verdicts read)")
            require(args.member_seeds is None or args.member_seeds >= 1,
                    f"--member-seeds {args.member_seeds} must be 1 or more")
            require(args.first_member >= 0, f"--first-member {args.first_member} must be 0 "
                    "or more")
            return reproduce_population(args.out.resolve(), studies_to_run(args.only),
                                        args.lanes, args.population, tuple(args.member),
                                        per_member=args.member_seeds, first=args.first_member)
        return reproduce(args.out.resolve(), studies_to_run(args.only), args.lanes, names)
    except UserError as err:
        parser.exit(2, f"{parser.prog}: error: {err}\n")


def reproduce(out: Path, studies: dict[str, dict], lanes: int,
              names: tuple[str, ...] = (encoders.DEFAULT,)) -> int:
    """The SST-2 models and the studies' sweeps into out (and, for each encoder of names but
    MiniLM, its pretraining and the studies that read it, into out/<name>), then a report per
    encoder and, for several, the matrix of findings by encoder; the exit status."""
    (out / "logs").mkdir(parents=True, exist_ok=True)
    others = [pretrained_encoder(n, studies, out, None) for n in names if n != encoders.DEFAULT]
    # the pretraining first: it is the longest step, and the other encoders' steps wait for it
    steps = [*(s for _, pretrain, _ in others for s in pretrain),
             *encoder_steps(studies, Encoder(out, out / "logs")),
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
