"""Fine-tuning runs that collapsed to the majority class, counted as an endpoint of their own.

Fine-tuning on a small task sometimes fails: the model ends at the majority class (Dodge et al.,
2020, see many restarts diverge on small GLUE tasks; Mosbach, Andriushchenko & Klakow, 2021,
call such a run failed and report how many failed). Which runs collapse is an outcome of the
treatment: freezing the lower layers, say, may keep a run from diverging. So a collapsed seed
is not removed from the verdict, which would judge a selection made on the outcome of one arm
(intention to treat: every seed counts, verdicts.judge). Instead each arm the claim reads (each
distinct `where` of its comparisons) reports its own rate, k of n runs collapsed with an exact
Clopper–Pearson 95% interval; where two arms' rates differ, Fisher's exact test between them;
and, as a secondary estimate labelled so, the claim's contrast on the seeds that trained in
every arm (per protocol). Which runs collapsed: stats.collapsed_seeds (a near-floor band).
"""

from __future__ import annotations

from dataclasses import dataclass

from scipy import stats

from bertology.run.rundir import RunDir
from bertology.study.judge.contrasts import selects
from bertology.study.judge.evidence import Evidence
from bertology.study.judge.sign_test import SignTest
from bertology.study.judge.specs import FindingSpec
from bertology.study.judge.stats import COLLAPSE_BAND, TTest, collapsed_seeds

# A trained model's accuracy and its majority-class floor, as each pipeline writes them
ACCURACY_FLOORS = (("eval/accuracy", "eval/majority_accuracy"),
                   ("prune/original/accuracy", "prune/original/majority_accuracy"),
                   ("distill/teacher/accuracy", "distill/teacher/majority_accuracy"))
LEVEL = 0.95  # the collapse rate's interval


@dataclass(frozen=True)
class ArmCollapses:
    """One arm's collapse rate: `collapsed` of its `runs` fine-tunings (a population's runs
    of every member together). arm: its `where` ("head.freeze_layers=3"), or "all" where the
    claim reads every run."""

    arm: str
    collapsed: int
    runs: int

    def interval(self) -> tuple[float, float]:
        """Clopper–Pearson: exact, so it keeps its coverage at 3 or 5 runs, where a normal
        interval around 0 of 3 would be [0, 0]."""
        ci = stats.binomtest(self.collapsed, self.runs).proportion_ci(LEVEL, method="exact")
        return float(ci.low), float(ci.high)

    def describe(self) -> str:
        low, high = self.interval()
        return f"{self.arm} {self.collapsed} of {self.runs} [{low:.2g}, {high:.2g}]"


def scored(run: RunDir) -> list[tuple[float, float]]:
    """A sentence classifier's (accuracy, floor) pairs. A tagger is never scored: its token
    accuracy sits near its majority tag while it learns (CoNLL's all-O tagger scores 0.82)."""
    if str(run.select("task.kind", default="classification")) != "classification":
        return []
    return [(run.metrics[a], run.metrics[f]) for a, f in ACCURACY_FLOORS
            if a in run.metrics and f in run.metrics]


def is_collapsed(run: RunDir) -> bool:
    """Whether some accuracy the run wrote lies in the band above its floor."""
    pairs = scored(run)
    return bool(pairs) and bool(collapsed_seeds([a for a, _ in pairs], [f for _, f in pairs]))


def arms_of(spec: FindingSpec) -> dict[str, Evidence]:
    """The claim's arms: an evidence of each distinct `where` its comparisons read, by name."""
    arms: dict[str, Evidence] = {}
    for evidence in (e for c in spec.comparisons for e in c.evidence):
        name = ", ".join(f"{k}={v}" for k, v in evidence.where) or "all"
        arms.setdefault(name, evidence)
    return arms


def count_collapses(spec: FindingSpec, groups: dict[str, list[RunDir]]) -> list[ArmCollapses]:
    """Each arm's collapse rate over the runs of every group (a population's members) that it
    selects and that score a classifier; an arm with none such is left out."""
    counts = []
    for name, evidence in arms_of(spec).items():
        runs = [r for g in groups.values() for r in g if selects(r, evidence) and scored(r)]
        if runs:
            counts.append(ArmCollapses(name, sum(map(is_collapsed, runs)), len(runs)))
    return counts


def fisher_p(arms: list[ArmCollapses]) -> float | None:
    """Fisher's exact two-sided p between two arms whose collapse rates differ (None: one arm,
    or more than two, or equal rates). It treats the arms' runs as independent draws; a paired
    design's arms share each seed's data order, but a seed's run in each arm is its own
    fine-tuning, and a paired test (McNemar's) has next to no power at 3 or 5 seeds."""
    if len(arms) != 2 or arms[0].collapsed * arms[1].runs == arms[1].collapsed * arms[0].runs:
        return None
    table = [[a.collapsed, a.runs - a.collapsed] for a in arms]
    return float(stats.fisher_exact(table, alternative="two-sided").pvalue)


def collapse_column(arms: list[ArmCollapses]) -> str:
    """findings.csv's `collapsed`: "arm:k/n" per arm, ";"-separated."""
    return ";".join(f"{a.arm}:{a.collapsed}/{a.runs}" for a in arms)


def trained_groups(spec: FindingSpec, groups: dict[str, list[RunDir]]
                   ) -> dict[str, list[RunDir]]:
    """The per-protocol set: in each group, the seeds none of whose runs in the claim's arms
    collapsed, and the groups with such a seed left; {} where nothing collapsed or fewer than 2
    replicates remain (2 seeds of one checkpoint, or 2 members of a population)."""
    arms = list(arms_of(spec).values())
    gone = {name: {r.seed for r in group if any(selects(r, e) for e in arms) and is_collapsed(r)}
            for name, group in groups.items()}
    if not any(gone.values()):
        return {}
    kept = {name: [r for r in group if r.seed not in gone[name]] for name, group in groups.items()}
    kept = {name: group for name, group in kept.items() if group}
    replicates = len(kept) if len(groups) > 1 else len({r.seed for g in kept.values() for r in g})
    return kept if replicates >= 2 else {}


def collapse_note(arms: list[ArmCollapses], secondary: list[TTest | SignTest],
                  trained: dict[str, list[RunDir]]) -> str:
    """The note's collapse endpoint, where some run collapsed: each arm's rate, Fisher's p
    between two that differ, and the per-protocol estimate on the seeds `trained` (each part
    of the claim, `secondary`), labelled secondary; "" where none collapsed."""
    if not any(a.collapsed for a in arms):
        return ""
    fisher = fisher_p(arms)
    rates = (f"collapsed fine-tunings (accuracy within {COLLAPSE_BAND:g} of the majority "
             "class), an endpoint of their own: " + ", ".join(a.describe() for a in arms)
             + " (Clopper–Pearson 95%)"
             + (f"; Fisher's exact p = {fisher:.2g} between the arms" if fisher is not None
                else "") + "; every seed counts in the verdict")
    if not secondary:
        return f"{rates}; no per-protocol estimate: fewer than 2 replicates trained in every arm"
    seeds = sum(len({r.seed for r in g}) for g in trained.values())
    across = f" of {len(trained)} checkpoints" if len(trained) > 1 else ""
    estimates = " and ".join(estimate_text(t) for t in secondary)
    return (f"{rates}; secondary, per protocol, on the {seeds} seeds{across} that trained in "
            f"every arm: {estimates}")


def estimate_text(test: TTest | SignTest) -> str:
    low, high = test.estimate.interval()
    return f"{test.estimate.mean:+.3g} [{low:+.3g}, {high:+.3g}]"
