"""`python -m bertology.reproduce --population K`: K BERTs pretrained alike but for their seed,
the studies that read a model run on each with the member's own seeds, then one report that
judges the findings across the members (population.py) and the members' pretraining table."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bertology.errors import require
from bertology.run.atomic import read_json
from bertology.run.rundir import HYDRA_DIR, METRICS_FILE, RunDir
from bertology.run.tables import write_table
from bertology.run.tracking import read_log
from bertology.study.judge import catalog, encoders
from bertology.study.judge.population import below_floor
from bertology.study.judge.selection import MEMBERS_TABLE
from bertology.study.pages.summary import write_summary
from bertology.study.schedule import runner
from bertology.study.schedule.runner import Step, run_steps
from bertology.study.schedule.steps import (
    SEED_STRIDE,
    EncoderSteps,
    encoder_steps,
    model_reading,
    pretraining_step,
)

log = logging.getLogger("bertology.reproduce")


def member_steps(seeds: Sequence[int], extra: tuple[str, ...], studies: dict[str, dict],
                 out: Path, cache: Path | None, per_member: int | None = None
                 ) -> tuple[list[Step], list[EncoderSteps]]:
    """`--population K`: member s of seeds (first..first+K-1, `--first-member` giving first)
    pretrained with seed s (encoders.member_args; none when cached), then the studies of
    encoders.ENCODER_STUDIES on it (member_encoder). The pretraining steps come first: the
    longest, and every member's studies wait for its own."""
    reading = model_reading(studies)
    pretrains, rest, members = [], [], []
    for seed in seeds:
        pretrain = member_pretraining(seed, extra, out, cache)
        member = member_encoder(seed, extra, out, cache, per_member,
                                tuple(s.name for s in pretrain))
        pretrains += pretrain
        rest += encoder_steps(reading, member)
        members.append(member)
    return [*pretrains, *rest], members


def member_encoder(seed: int, extra: tuple[str, ...], out: Path, cache: Path | None,
                   per_member: int | None, after: tuple[str, ...] = ()) -> EncoderSteps:
    """Member seed's studies, on its model, with its own seeds (member_seeds: its own
    sentences, SST-2 subsamples and twins), into out/population/member_<seed>. More than one
    seed a member (per_member, `--member-seeds`, else each study's member_seeds) averages out
    the probe and fine-tuning noise within it, where that and not the spread of pretraining
    keeps a verdict open (docs/reproduce.md)."""
    run_dir = encoders.member_dir(seed, extra, cache)
    return EncoderSteps(out / "population" / f"member_{seed}", out / "logs", f"member{seed}_",
                   (f"model.name_or_path={run_dir / 'model'}",), after, member=seed,
                   per_member=per_member,
                   settings=catalog.load_recipes().member_finetuning)


def member_pretraining(seed: int, extra: tuple[str, ...], out: Path, cache: Path | None
                       ) -> list[Step]:
    """Member seed's pretraining step into its cache dir; none where it is cached."""
    return pretraining_step(f"pretrain member {seed}", encoders.member_args(seed, extra),
                            encoders.member_dir(seed, extra, cache),
                            out / "logs" / f"pretrain_member_{seed}.log")


def check_member_seeds(studies: dict[str, dict], per_member: int | None, first: int,
                       end: int) -> None:
    """Members first..end-1 with their seeds a member: studies that one finding pairs agree
    (unless --member-seeds sets them all), and no member's further seeds (s + SEED_STRIDE·r)
    are another member's."""
    if per_member is None:
        check_paired_member_seeds(studies)
    most = per_member or max((spec["member_seeds"] for spec in studies.values()), default=1)
    require(most == 1 or end <= SEED_STRIDE, f"{most} seeds a member with members "
            f"{first}..{end - 1}: members' seeds would overlap; member seeds must stay "
            f"under {SEED_STRIDE}")


# --replace-failed draws at most this many members for each one asked for: a recipe that fails
# more often than it learns needs mending, not more draws.
MAX_DRAWS = 2


@dataclass
class Draws:
    """`--replace-failed`, as the run goes: members first, first + 1, … are drawn until `size`
    have learned (member_learned: the rule the verdicts set members aside by) or
    MAX_DRAWS·size are drawn. A member that learned gets its studies as soon as its
    pretraining ends, beside the pretrainings still running (no lane waits for a round of
    draws to end); one that did not, or whose step crashed, is replaced by the next seed, as a
    diverged seed is rerun. The rule reads pretraining alone, never a study, so the draws
    cannot follow the verdicts; the members are the first `size` seeds that learned."""

    size: int
    first: int
    extra: tuple[str, ...]
    studies: dict[str, dict]  # the studies that read a model (model_reading)
    out: Path
    cache: Path | None
    per_member: int | None = None
    drawn: list[int] = field(default_factory=list)
    learned: dict[int, EncoderSteps] = field(default_factory=dict)
    pretraining: dict[str, int] = field(default_factory=dict)  # step name -> its seed

    def start(self) -> list[Step]:
        """The first `size` draws' steps (a cached member's: what follows it)."""
        return [step for _ in range(self.size) for step in self.draw()]

    def draw(self) -> list[Step]:
        """The next seed's pretraining, or where it is cached, what follows it; none once
        MAX_DRAWS·size are drawn."""
        if len(self.drawn) == MAX_DRAWS * self.size:
            return []
        seed = self.first + len(self.drawn)
        self.drawn.append(seed)
        pretrain = member_pretraining(seed, self.extra, self.out, self.cache)
        self.pretraining.update((step.name, seed) for step in pretrain)
        return pretrain or self.followed(seed)

    def followed(self, seed: int) -> list[Step]:
        """After member seed's pretraining: its studies if it learned, else the next draw."""
        if not member_learned(encoders.member_dir(seed, self.extra, self.cache)):
            return self.draw()
        member = member_encoder(seed, self.extra, self.out, self.cache, self.per_member)
        steps = encoder_steps(self.studies, member)
        self.learned[seed] = member  # once its steps are planned
        return steps

    def then(self, step: Step, status: int) -> list[Step]:
        """runner.run_steps' hook: what a finished step leads to (a pretraining's, followed)."""
        seed = self.pretraining.get(step.name)
        return [] if seed is None else self.followed(seed)

    def members(self) -> list[EncoderSteps]:
        """The members that learned, by seed; says how many of those drawn did."""
        if len(self.learned) < self.size:
            log.warning("%d of %d members drawn learned (%d asked for): the population is "
                        "judged on those", len(self.learned), len(self.drawn), self.size)
        log.info("members that learned: %d of %d drawn (seeds %d..%d)", len(self.learned),
                 len(self.drawn), self.first, self.first + len(self.drawn) - 1)
        return [self.learned[seed] for seed in sorted(self.learned)]


def member_learned(run_dir: Path) -> bool:
    """Whether a member's pretraining finished with its held-out MLM accuracy above its floor
    (population.below_floor); a crashed or unfinished run did not learn."""
    if not encoders.is_pretrained(run_dir):
        return False
    return not below_floor(RunDir(run_dir).metrics)


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
                f"seed by seed, so findings/{catalog.STUDIES_FILE} must give them one "
                f"member_seeds (now {', '.join(map(str, counts))}), or run --member-seeds")


def reproduce_population(out: Path, studies: dict[str, dict], lanes: int, size: int,
                         extra: tuple[str, ...] = (), cache: Path | None = None,
                         per_member: int | None = None, first: int = 0,
                         replace_failed: bool = False) -> int:
    """The population's steps, then one report over every member's study dirs, which judges
    the findings across the members (study/judge/population.py), and the members' pretraining
    table; the exit status. With replace_failed, a member that did not learn is replaced by
    the next seed (Draws); only the learned get studies, and the table lists every member
    drawn."""
    check_member_seeds(studies, per_member, first,
                       first + size * (MAX_DRAWS if replace_failed else 1))
    (out / "logs").mkdir(parents=True, exist_ok=True)  # after any bad setting: no output
    total = time.perf_counter()
    drawn = list(range(first, first + size))
    if replace_failed:
        draws = Draws(size, first, extra, model_reading(studies), out, cache, per_member)
        results = run_steps(draws.start(), lanes, then=draws.then)
        members, drawn = draws.members(), draws.drawn
    else:
        steps, members = member_steps(drawn, extra, studies, out, cache, per_member)
        results = run_steps(steps, lanes)
    # every member drawn, set aside or not: the report states the selection with its scope
    write_members_table(out / "population", drawn, extra, cache)
    return judge_population(out, members, studies, results, total)


def judge_population(out: Path, members: list[EncoderSteps], studies: dict[str, dict],
                     results: dict[str, tuple[int, float]], started: float) -> int:
    """One report over every member's study dirs, which reads the members table written
    beside them, then the front page's block; the exit status of the whole run."""
    failed = [name for name, (status, _) in results.items() if status]
    report_dir = out / "population" / "report"
    dirs = [str(m.root / s) for m in members for s in studies if (m.root / s).exists()]
    table = out / "population" / "tables" / f"{MEMBERS_TABLE}.csv"
    status, _ = runner.bertology(["report", *dirs, f"members_table={table}",
                                  f"hydra.run.dir={report_dir}"],
                                 out / "logs" / "population_report.log")
    if status == 0 and (report_dir / "tables" / "findings.csv").exists():
        write_summary(report_dir)
    log.info("population report: %s (exit %d); all steps %.1f min; failed: %s",
             report_dir / "REPORT.md", status, (time.perf_counter() - started) / 60,
             failed or "none")
    return 1 if failed or status else 0


def write_members_table(report_dir: Path, seeds: Sequence[int], extra: tuple[str, ...],
                        cache: Path | None) -> None:
    """tables/members.csv: each member's checkpoint, steps, held-out MLM accuracy at its first
    evaluation and its last, and the floor (always predicting the most frequent masked token).
    `learned`: the last accuracy above the floor (population.pretraining_failed, the rule the
    verdicts set members aside by); for a run from before the floor was recorded, above its
    first evaluation, which no verdict reads. A member that did not learn is named in the log."""
    rows = []
    for seed in seeds:
        run_dir = encoders.member_dir(seed, extra, cache)
        done = (run_dir / METRICS_FILE).is_file()  # a member whose pretraining failed: blank
        metrics = read_json(run_dir / METRICS_FILE) if done else {}  # as written: 670 steps
        first = first_eval_accuracy(run_dir)
        last, floor = metrics.get("eval/mlm_accuracy"), metrics.get("eval/mlm_majority_accuracy")
        baseline = floor if floor is not None else first
        # a run without its config (made by hand) has no recipe to state
        recipe = RunDir(run_dir) if (run_dir / HYDRA_DIR / "config.yaml").is_file() else None
        rows.append({"member": seed, "checkpoint": str(run_dir / "model"),
                     "steps": metrics.get("train/steps"), "first_mlm_accuracy": first,
                     "mlm_accuracy": last, "mlm_floor": floor,
                     "learned": None if baseline is None or last is None else last > baseline,
                     # the recipe, as the scope of the population's verdicts states it
                     "layers": recipe and recipe.select("size.num_hidden_layers"),
                     "hidden": recipe and recipe.select("size.hidden_size"),
                     "tokens": metrics.get("train/tokens"), "flops": metrics.get("train/flops")})
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
