"""Synthetic runs made from a finding's spec, with the effect of each of its comparisons set on
purpose, as the pipelines would have written them.

tests/study/test_can_fail.py asks, for every finding of the catalog, for worlds in which its claim
is true, false the opposite way, null, or blind, and judges them with the report's own code.
A world gives every comparison the finding makes (its claim's and its guards') a target:

    a − b = t      (a number: the effect, in the claim's units)
    a ≡ b          (EQUAL: a is its null reference at every layer, measured alike: the other
                    arm of the sweep, the random-init twin, the majority label, the baseline)

World.runs() turns the targets into Run objects as find_runs reads them (World.write puts the
same runs on disk): 3 seeds of every arm of the sweep (an arm is the config a comparison's
`where:` selects), each with its metrics, its config and item replicates (400 bootstrap
resamples of 200 items, made by bertology/run/replicates.py as the pipelines make them).

From targets to metrics. Every metric key of every arm is one unknown (a pattern `layer_*` is
LAYERS keys: the embeddings and 6 layers, as MiniLM). Every reduction the findings use is
linear in the layer curve (a mean, a slope, top minus bottom, the middle third), so a target
a − b = t is one linear equation in the unknowns, and a ≡ b is one equation per layer. The
metrics are the solution closest to a random smooth prior curve per metric (minimum-norm least
squares), and every equation is checked to hold: a world the equations cannot express (a
nonlinear reduction, contradictory targets) raises instead of passing silently.

Noise. A run's value of a key is the solved value plus a seed effect (SEED_SD). The seed
effects of each key are centred over the seeds, so the mean over seeds of any linear reduction
is exactly its target: a world meant to sit on its margin sits there, whatever the draw, and
no verdict depends on luck. Each seed scores ITEMS items of its own (seeds draw their own
sentences); an item's score is the run's value plus an item effect the seed's runs and keys
share (a hard sentence is hard at every layer and in both arms of that seed) plus noise of its
own, centred so the items' mean is the run's value; the replicates are the items' means over
bootstrap_indices resamples. Quantities an EQUAL target ties share their seed effects and item
noise but for TIE of it: the same encoder measured twice (issue 28: no_nsp's two arms made the
same prediction on all 800 dev items), which is what lets a blind comparison look precise.

Measured noise (MeasuredWorld). The noise above is the simulator's own, about 20 times smaller
than its worlds' distances from their margins. A MeasuredWorld gives each comparison the noise
the last `make reproduce` run measured for it (tests/fixtures/reproduce_findings.csv: its se and
ν, split into a seed part and a part shared by every seed: Noise.measured), drawn afresh by each
call of runs() and not centred, so that a world 2 standard errors past its margin is as hard to
resolve as the real one. The noise is drawn per comparison and put on the unknowns by the
minimum-norm solution of the targets' own equations, so every layer reduction of it is exactly
the comparison's noise, per seed and per replicate.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import yaml
from scipy import stats

from bertology.run.replicates import (
    REPLICATES,
    bootstrap_indices,
    compute_mean_replicates,
    write_replicates,
)
from bertology.run.rundir import RunDir
from bertology.study.judge.catalog import runs_of
from bertology.study.judge.evidence import REDUCTIONS, Evidence
from bertology.study.judge.results import find_runs
from bertology.study.judge.specs import Comparison, FindingSpec
from bertology.study.judge.stats import ALPHA

LAYERS = 7  # embeddings + 6 layers (MiniLM)
SEEDS = (0, 1, 2)
ITEMS = 200  # items (sentences, examples) one run scores
SEED_SD = 0.005  # seed-to-seed spread of one metric key
ITEM_SD = 0.05  # an item's own noise: a standard error of 0.0035 per key over 200 items
SHARED_ITEM_SD = 0.05  # the item effect a seed's runs and keys share
TIE = 0.05  # the noise two tied (EQUAL) quantities do not share, relative to their own
PRIOR_STEP_SD = 0.02  # prior curves: a random walk over the layers
EQUAL = None  # the target "a is its null reference at every layer"

Arm = tuple[tuple[str, str], ...]  # the `where` items that select the arm's runs


def keys_of(pattern: str) -> list[str]:
    """The metric keys a pattern names: one per layer for `layer_*`, else the key."""
    if "*" not in pattern:
        return [pattern]
    return [pattern.replace("*", f"{layer:02d}") for layer in range(LAYERS)]


def reduction_weights(reduce: str, count: int) -> np.ndarray:
    """w with reduce(curve) = w · curve for a curve of `count` keys; refuses a nonlinear
    reduction (the equations would not express it)."""
    layers = np.arange(count)
    weights = REDUCTIONS[reduce](layers, np.eye(count))  # row i: the reduction of e_i
    probe = np.random.default_rng(0).normal(size=(4, count))
    if not np.allclose(REDUCTIONS[reduce](layers, probe), probe @ weights):
        raise NotImplementedError(f"reduce={reduce} is not linear in the layer curve: "
                                  "write this finding's worlds by hand")
    return weights


def evidence_of(spec: FindingSpec) -> list[Evidence]:
    return [x for c in spec.comparisons + spec.guards for x in c.evidence]


def arms_of(spec: FindingSpec) -> list[Arm]:
    """The arms of the sweep the finding compares (one where nothing says `where:`)."""
    wheres = sorted({e.where for e in evidence_of(spec)})
    if len(wheres) > 1 and () in wheres:
        raise NotImplementedError(f"{spec.id}: some evidence reads every arm of the sweep")
    return wheres


class World:
    """The metric values of every arm that meet a finding's targets (see the module's
    docstring), and the runs that carry them."""

    def __init__(self, spec: FindingSpec, targets: list[tuple[Comparison, float | None]],
                 rng: np.random.Generator):
        self.spec, self.rng = spec, rng
        self.arms = arms_of(spec)
        patterns = sorted({e.metric for e in evidence_of(spec)})
        self.index = {(arm, key): i for i, (arm, key) in enumerate(
            (arm, key) for arm in self.arms for p in patterns for key in keys_of(p))}
        rows, rhs = [], []
        self.ties: list[tuple[int, int]] = []  # unknowns an EQUAL target makes one quantity
        for comparison, target in targets:
            for row, value in self.equations(comparison, target):
                rows.append(row)
                rhs.append(value)
        self.rows = np.array(rows)  # (equations, unknowns)
        self.values = self.solve(self.rows, np.array(rhs), self.prior(patterns))

    def prior(self, patterns: list[str]) -> np.ndarray:
        """Random smooth curves around a level per metric, each arm a little apart."""
        x = np.zeros(len(self.index))
        for pattern in patterns:
            level = self.rng.uniform(0.3, 0.7)
            for arm in self.arms:
                keys = keys_of(pattern)
                walk = np.cumsum(self.rng.normal(0, PRIOR_STEP_SD, len(keys)))
                curve = level + self.rng.normal(0, 0.02) + walk - walk.mean()
                x[[self.index[(arm, k)] for k in keys]] = curve
        return x

    def columns(self, evidence: Evidence) -> list[int]:
        """The unknowns an evidence reads: its metric's keys in the one arm it selects."""
        arms = [arm for arm in self.arms if set(evidence.where) <= set(arm)]
        assert len(arms) == 1, f"{evidence.describe()} selects arms {arms}"
        return [self.index[(arms[0], key)] for key in keys_of(evidence.metric)]

    def equations(self, comparison: Comparison, target: float | None):
        """(row, right-hand side) pairs saying a − b = target (with a twin: (a − b) − (a′ −
        b′) = target), or a ≡ b layer by layer (and a′ ≡ b′, a ≡ a′: the model its twin)."""
        pairs = [(comparison.a, comparison.b)]
        if comparison.twin is not None:
            pairs += [comparison.twin, (comparison.a, comparison.twin[0])]
        if target is EQUAL:
            for a, b in pairs:
                yield from self.ties_of(comparison, a, b)
            return
        row, rhs = np.zeros(len(self.index)), target
        terms = [(1.0, comparison.a), (-1.0, comparison.b)]
        if comparison.twin is not None:
            terms += [(-1.0, comparison.twin[0]), (1.0, comparison.twin[1])]
        for sign, x in terms:
            if isinstance(x, Evidence):
                columns = self.columns(x)
                row[columns] += sign * reduction_weights(x.reduce, len(columns))
            else:
                rhs -= sign * x  # a number moves to the right-hand side
        yield row, rhs

    def ties_of(self, comparison: Comparison, a: Evidence, b: Evidence | float):
        """a ≡ b layer by layer: rows a_l − b_l = 0, the pairs tied in self.ties."""
        assert isinstance(b, Evidence), f"{comparison.describe()}: a number has no layers to equal"
        a, b = self.columns(a), self.columns(b)
        if len(a) != len(b) and 1 not in (len(a), len(b)):
            raise NotImplementedError(f"{comparison.describe()}: curves of unequal length")
        for i, j in zip(a * (len(b) if len(a) == 1 else 1), b * (len(a) if len(b) == 1 else 1)):
            row = np.zeros(len(self.index))
            row[i], row[j] = 1.0, -1.0
            self.ties.append((i, j))
            yield row, 0.0

    @staticmethod
    def solve(rows: np.ndarray, rhs: np.ndarray, prior: np.ndarray) -> np.ndarray:
        """The values closest to the prior that meet every equation exactly."""
        step = np.linalg.lstsq(rows, rhs - rows @ prior, rcond=None)[0]  # minimum norm
        values = prior + step
        worst = float(np.abs(rows @ values - rhs).max())
        if worst > 1e-9:
            raise ValueError(f"the targets contradict each other (residual {worst:.2g})")
        return values

    def runs(self) -> list[RunDir]:
        """3 seeds of every arm, as the report reads finished runs (see write)."""
        keys = sorted({key for _, key in self.index})
        values, replicates = self.draw()  # (seeds, unknowns), (seeds, R, unknowns)
        runs = []
        for n_seed, seed in enumerate(SEEDS):
            for n_arm, arm in enumerate(self.arms):
                columns = [self.index[(arm, k)] for k in keys]
                metrics = dict(zip(keys, values[n_seed, columns].tolist()))
                run = RunDir(Path(f"arm{n_arm}_seed{seed}"), metrics, self.config(seed, arm))
                run.__dict__["replicates"] = dict(zip(keys, replicates[n_seed][:, columns].T))
                runs.append(run)
        return runs_of(self.spec, runs)

    def draw(self) -> tuple[np.ndarray, np.ndarray]:
        """Every unknown's value per seed (seeds, unknowns) and its item replicates
        (seeds, R, unknowns): the solved values, seed effects centred over the seeds, items
        of each seed's own (see the module's docstring)."""
        seed_effects, item_noise = self.noise()
        shared_items = self.rng.normal(0, SHARED_ITEM_SD, (len(SEEDS), ITEMS, 1))  # per seed
        values = self.values + seed_effects  # (seeds, unknowns)
        items = values[:, None, :] + shared_items + item_noise  # (seeds, items, unknowns)
        items += (values - items.mean(axis=1))[:, None, :]  # the items' mean is the run's value
        return values, np.stack([compute_mean_replicates(x) for x in items])

    def noise(self) -> tuple[np.ndarray, np.ndarray]:
        """Seed effects (seeds, unknowns), centred over the seeds so their mean is the target,
        and item noise (seeds, items, unknowns); unknowns tied by an EQUAL target share theirs
        but for TIE of it (the same model measured twice: a few items differ)."""
        shape = (len(SEEDS), len(self.index))
        seed_effects = self.rng.normal(0, SEED_SD * math.sqrt(1.5), shape)  # centring: × 2/3
        item_noise = self.rng.normal(0, ITEM_SD, (len(SEEDS), ITEMS, len(self.index)))
        root = self.tie_roots()
        seed_effects = seed_effects[:, root] + TIE * seed_effects
        item_noise = item_noise[:, :, root] + TIE * item_noise
        return seed_effects - seed_effects.mean(axis=0), item_noise

    def tie_roots(self) -> np.ndarray:
        """Each unknown's representative among those EQUAL targets tie it to (union-find)."""
        parent = list(range(len(self.index)))

        def find(i: int) -> int:
            while parent[i] != i:
                i = parent[i]
            return i

        for i, j in self.ties:
            parent[find(i)] = find(j)
        return np.array([find(i) for i in range(len(parent))])

    def config(self, seed: int, arm: Arm) -> dict:
        """The run's saved config: its seed, study label and the arm's `where` choices."""
        config: dict = {"seed": seed, "label": self.spec.studies[0]}
        for dotted, value in arm:  # `where` keys are dotted paths into the config
            *parents, leaf = dotted.split(".")
            node = config
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = value
        return config

    def write(self, root: Path) -> list[RunDir]:
        """The runs as folders under root, as Hydra and the pipelines leave them; read back."""
        for run in self.runs():
            path = root / run.path
            (path / ".hydra").mkdir(parents=True)
            (path / ".hydra" / "config.yaml").write_text(yaml.safe_dump(run.config))
            (path / "metrics.json").write_text(json.dumps(run.metrics))
            write_replicates(path, "metrics", run.replicates)
        return runs_of(self.spec, find_runs([root]))


# ---------------------------------------------------------------- measured noise

REPRODUCE = Path(__file__).resolve().parents[1] / "fixtures" / "reproduce_findings.csv"
# The share of a seed's spread that is the noise of its own items (shown in its replicates). The
# committed numbers cannot say (the seed part holds seed effects and private items alike). It
# moves the estimate of the shared part: 0 on average on private items, but cut at 0, so
# positive half the time, which widens the interval a little and the seed budget more (at 0.5,
# a false world 2 standard errors out settles 0.834 of the time instead of the t's 0.863;
# test_can_fail's power arithmetic counts it).
PRIVATE_SHARE = 0.5


@dataclass(frozen=True)
class Noise:
    """One comparison's noise, as a run measured it: the spread of its per-seed values (seed
    effects and each seed's own items), the error that the items every seed shares add to every
    seed alike (the shared part's standard deviation), and a seed's own items in its
    replicates."""

    seed_sd: float
    shared_sd: float
    private_sd: float

    @classmethod
    def measured(cls, se: float, dof: float, seeds: int) -> Noise:
        """The noise whose seed mean has standard error se and whose 95% half-width is
        t_dof · se (stats.Estimate.dof), inverted: a seed part on seeds − 1 degrees of freedom
        and a shared part on R − 1, with t²_dof se² = t²_{n−1} v_seed + t²_{R−1} v_shared."""
        quantile = {nu: stats.t.isf(ALPHA / 2, nu) ** 2 for nu in (dof, seeds - 1, REPLICATES - 1)}
        share = ((quantile[dof] - quantile[REPLICATES - 1])
                 / (quantile[seeds - 1] - quantile[REPLICATES - 1]))
        seed_part = min(max(share, 0.0), 1.0) * se**2  # s²/n
        spread = math.sqrt(seeds * seed_part)
        return cls(spread, math.sqrt(se**2 - seed_part), math.sqrt(PRIVATE_SHARE) * spread)

    def se(self, seeds: int) -> float:
        """The standard error of the mean over seeds."""
        return math.sqrt(self.seed_sd**2 / seeds + self.shared_sd**2)


# a guard sits DISTANCE past its margin in every test world; its noise is the simulator's own
GUARD_NOISE = Noise(SEED_SD, 0.0, ITEM_SD / math.sqrt(ITEMS))


def load_reproduce(path: Path = REPRODUCE) -> dict[str, list[dict]]:
    """tests/fixtures/reproduce_findings.csv by finding: its comparisons' rows, in order."""
    with path.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(line for line in handle if not line.startswith("#")))
    found: dict[str, list[dict]] = {}
    for row in sorted(rows, key=lambda r: (r["finding"], int(r["comparison"]))):
        found.setdefault(row["finding"], []).append(row)
    return found


class MeasuredWorld(World):
    """A World whose comparisons each carry their own Noise (one per target, in order), drawn
    afresh by every call of runs(): the seed effects are not centred, so a comparison's seed
    mean scatters around its target by its standard error, as a rerun's would, and a world 2
    standard errors past its margin is as hard to resolve as the real one. The noise is put on
    the unknowns by the minimum-norm solution of the same equations the targets are (the
    pseudo-inverse), so every comparison's reduction of it is exactly the noise drawn for it,
    per seed and per replicate, and the comparisons' noises are independent."""

    def __init__(self, spec: FindingSpec, targets: list[tuple[Comparison, float]],
                 noises: list[Noise], rng: np.random.Generator):
        if any(target is EQUAL for _, target in targets) or len(noises) != len(targets):
            raise ValueError("a measured world needs a number and a Noise for every target")
        super().__init__(spec, targets, rng)
        self.noises = noises
        self.spread = np.linalg.pinv(self.rows)  # (unknowns, equations)
        if not np.allclose(self.rows @ self.spread, np.eye(len(noises)), atol=1e-9):
            raise ValueError(f"{spec.id}: its comparisons are linearly dependent; their noises "
                             "cannot be drawn apart")

    def draw(self) -> tuple[np.ndarray, np.ndarray]:
        """Per comparison: the shared items' error (every seed alike), a seed effect per seed,
        and items (shared and each seed's own) resampled into replicates; then put on the
        unknowns (see the class's docstring)."""
        seed_sd = np.array([noise.seed_sd for noise in self.noises])  # (equations,)
        shared_sd = np.array([noise.shared_sd for noise in self.noises])
        private_sd = np.array([noise.private_sd for noise in self.noises])
        shape = (len(SEEDS), ITEMS, len(self.noises))
        offset = self.rng.normal(0, 1, len(self.noises)) * shared_sd  # (equations,)
        effects = self.rng.normal(0, 1, (len(SEEDS), len(self.noises))) * seed_sd
        items = (self.rng.normal(0, 1, shape[1:]) * shared_sd
                 + self.rng.normal(0, 1, shape) * private_sd) * math.sqrt(ITEMS)
        items -= items.mean(axis=1, keepdims=True)  # (seeds, items, equations): about the value
        values = self.values + (offset + effects) @ self.spread.T  # (seeds, unknowns)
        deviations = resample_counts() @ items / ITEMS  # (seeds, R, equations): item means
        return values, values[:, None, :] + deviations @ self.spread.T


@lru_cache(maxsize=1)
def resample_counts() -> np.ndarray:
    """(R, ITEMS): how often each resample of bootstrap_indices draws each item, so that a
    resample's mean of item values is one matrix product (compute_mean_replicates's numbers,
    about 20 times faster: the realistic worlds draw thousands)."""
    indices = bootstrap_indices(ITEMS)  # (R, ITEMS)
    counts = np.zeros(indices.shape)
    np.add.at(counts, (np.arange(len(indices))[:, None], indices), 1.0)
    return counts
