"""bertology report: run dirs → REPORT.md, CSV and figures, with a verdict per survey finding.

A run dir is any folder holding a finished run (`metrics.json` + `.hydra/config.yaml`); sweeps
are searched recursively. Runs that differ only in their seed form a group, summarised by the
mean, standard deviation and 95% t-interval of every metric.

A finding (conf/experiment/finding_<name>.yaml) carries a `finding:` block that its runs keep
in their saved config: the claim, its source, and the comparison that decides it,

    compare: {a: <evidence>, b: <evidence or a number>, expect: greater | less, margin: 0.0}

where an evidence is a metric key, or {metric: <key with one * over layers>, reduce: <name>}
(REDUCTIONS: the argmax layer as a fraction of depth, the Spearman trend over layers, ...),
optionally with `where: {config.key: value}` to pick runs of a sweep. Per seed a − b is
computed (paired by seed when both sides have one run per seed); the verdict is computed, never
written: `holds` when the 95% interval of the mean difference lies beyond the margin in the
expected direction, `does not hold` when it lies beyond it in the other, else `inconclusive`.
With one value per side (a deterministic result) the sign of a − b − margin decides.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import math
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from omegaconf import DictConfig, OmegaConf
from scipy import stats

from bertology.config.report import load_report_config
from bertology.errors import UserError, require
from bertology.run.figures import save_figure
from bertology.run.rundir import finished_runs
from bertology.run.tables import write_table

log = logging.getLogger(__name__)

LAYER = re.compile(r"layer_(\d+)")
EXPECTATIONS = ("greater", "less")
HEADLINE = ("eval/", "distill/retained", "distill/speedup", "prune/heads_remaining")
MAX_HEADLINES = 8  # per group in REPORT.md; the CSV has them all


@dataclass
class Run:
    path: Path
    metrics: dict[str, float]
    config: dict
    finding: dict | None

    @property
    def seed(self) -> int | None:
        seed = self.config.get("seed")
        return int(seed) if isinstance(seed, int) else None

    def choice(self, key: str):
        node = self.config
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return node


def find_runs(roots: list[Path]) -> list[Run]:
    """Every finished run under the roots (a root may be a run itself)."""
    runs = [load_run(path) for path in finished_runs(roots)]
    require(bool(runs), f"no finished runs (metrics.json + .hydra/config.yaml) under "
            f"{', '.join(map(str, roots))}")
    return runs


def load_run(path: Path) -> Run:
    try:
        metrics = json.loads((path / "metrics.json").read_text())
        config = OmegaConf.to_container(OmegaConf.load(path / ".hydra" / "config.yaml"))
    except (OSError, ValueError) as err:
        raise UserError(f"{path}: unreadable run ({str(err).splitlines()[0]}); remove it "
                        "or rerun it") from err
    return Run(path, {k: float(v) for k, v in metrics.items()}, config, config.get("finding"))


# ---------------------------------------------------------------- evidence


def layer_series(metrics: dict[str, float], pattern: str) -> tuple[list[int], list[float]]:
    """(layers, values) of the metrics matching a key pattern with one * for the layer."""
    matches = sorted((int(LAYER.search(k).group(1)), v) for k, v in metrics.items()
                     if fnmatch.fnmatchcase(k, pattern) and LAYER.search(k))
    require(bool(matches), f"no metric matches {pattern!r}")
    return [m[0] for m in matches], [m[1] for m in matches]


def reduce_argmax_fraction(layers: list[int], values: list[float]) -> float:
    """Where the curve peaks, as a fraction of the depth: 0 = embeddings, 1 = top layer."""
    return layers[int(np.argmax(values))] / max(layers)


def reduce_trend(layers: list[int], values: list[float]) -> float:
    """Spearman correlation of the value with the layer: +1 rises steadily, −1 falls."""
    return float(stats.spearmanr(layers, values).statistic) if len(set(values)) > 1 else 0.0


def reduce_top_minus_bottom(layers: list[int], values: list[float]) -> float:
    """Mean of the top half of the layers minus the mean of the bottom half."""
    half = len(values) // 2
    return float(np.mean(values[-half:]) - np.mean(values[:half]))


def reduce_peak_off_middle(layers: list[int], values: list[float]) -> float:
    """How far the peak lies from the middle of the depth: |argmax fraction − 0.5|."""
    return abs(reduce_argmax_fraction(layers, values) - 0.5)


REDUCTIONS = {
    "argmax_fraction": reduce_argmax_fraction,
    "peak_off_middle": reduce_peak_off_middle,
    "trend": reduce_trend,
    "top_minus_bottom": reduce_top_minus_bottom,
    "max": lambda layers, values: float(max(values)),
    "mean": lambda layers, values: float(np.mean(values)),
}


def evidence_value(run: Run, evidence) -> float:
    """One number from one run: a metric, or a reduction over a layer curve."""
    key = evidence if isinstance(evidence, str) else evidence["metric"]
    if "*" not in key:  # one metric (a `where` may still have picked the run)
        require(key in run.metrics, f"{run.path}: no metric {key!r}")
        return run.metrics[key]
    reduce = evidence.get("reduce", "max")
    require(reduce in REDUCTIONS, f"unknown reduce {reduce!r}; valid: {', '.join(REDUCTIONS)}")
    return REDUCTIONS[reduce](*layer_series(run.metrics, evidence["metric"]))


def selects(run: Run, evidence) -> bool:
    where = evidence.get("where", {}) if isinstance(evidence, dict) else {}
    return all(str(run.choice(key)) == str(value) for key, value in where.items())


def describe_evidence(evidence) -> str:
    if isinstance(evidence, (int, float)):
        return f"{evidence:g}"
    if isinstance(evidence, str):
        return evidence
    where = ", ".join(f"{k}={v}" for k, v in evidence.get("where", {}).items())
    text = f"{evidence.get('reduce', 'max')}({evidence['metric']})"
    return f"{text} [{where}]" if where else text


# ---------------------------------------------------------------- verdicts


@dataclass
class Summary:
    mean: float
    std: float
    low: float
    high: float
    n: int


def summarise(values: list[float]) -> Summary:
    """Mean, std and 95% t-interval (the interval is the point itself for one value)."""
    n = len(values)
    mean = statistics.fmean(values)
    if n < 2:
        return Summary(mean, 0.0, mean, mean, n)
    std = statistics.stdev(values)
    half = stats.t.ppf(0.975, n - 1) * std / math.sqrt(n)
    return Summary(mean, std, mean - half, mean + half, n)


def compute_verdict(a: list[float], b: list[float], expect: str, margin: float = 0.0,
                    paired: bool = True) -> tuple[str, Summary]:
    """holds / does not hold / inconclusive, and the summary of a − b."""
    require(expect in EXPECTATIONS, f"expect={expect!r}; valid: {', '.join(EXPECTATIONS)}")
    require(bool(a) and bool(b), "a finding needs values on both sides")
    if paired and len(a) == len(b):
        diff = summarise([x - y for x, y in zip(a, b)])
    else:  # unpaired: Welch's interval on the difference of means
        sa, sb = summarise(a), summarise(b)
        mean = sa.mean - sb.mean
        var = (sa.std**2 / sa.n if sa.n > 1 else 0.0) + (sb.std**2 / sb.n if sb.n > 1 else 0.0)
        dof = max(1, min(sa.n, sb.n) - 1)
        half = stats.t.ppf(0.975, dof) * math.sqrt(var)
        diff = Summary(mean, math.sqrt(var), mean - half, mean + half, min(sa.n, sb.n))
    low, high = diff.low - margin, diff.high - margin
    if expect == "less":  # a − b < margin: mirror, so "beyond the margin" is always > 0
        low, high = -high, -low
    if low > 0:
        return "holds", diff
    if high < 0:
        return "does not hold", diff
    return "inconclusive", diff


@dataclass
class FindingResult:
    id: str
    claim: str
    source: str
    a: Summary
    b: Summary
    diff: Summary
    verdict: str
    evidence: str
    runs: list[Run] = field(default_factory=list)
    a_values: list[float] = field(default_factory=list)
    b_values: list[float] = field(default_factory=list)


def side_values(runs: list[Run], evidence) -> tuple[list[float], list[int | None]]:
    if isinstance(evidence, (int, float)):
        return [float(evidence)], [None]
    chosen = [r for r in runs if selects(r, evidence)]
    require(bool(chosen), f"no run matches {describe_evidence(evidence)}")
    return [evidence_value(r, evidence) for r in chosen], [r.seed for r in chosen]


def align_by_seed(b: list[float], seeds_a: list, seeds_b: list) -> list[float] | None:
    """b in the order of a's seeds when the two sides can be paired (the same seeds, one run
    each, in any order); None when they cannot."""
    if seeds_a == seeds_b:
        return b
    if len(set(seeds_a)) != len(seeds_a) or sorted(map(str, seeds_a)) != sorted(map(str, seeds_b)):
        return None
    position = {seed: i for i, seed in enumerate(seeds_b)}
    return [b[position[seed]] for seed in seeds_a]


def judge(finding_id: str, runs: list[Run]) -> FindingResult:
    spec = runs[0].finding
    compare = spec["compare"]
    a, seeds_a = side_values(runs, compare["a"])
    b, seeds_b = side_values(runs, compare["b"])
    if len(b) == 1 and len(a) > 1 and isinstance(compare["b"], (int, float)):
        b = b * len(a)  # a constant threshold: compare each seed with it
        seeds_b = seeds_a
    aligned = align_by_seed(b, seeds_a, seeds_b)
    b = b if aligned is None else aligned
    verdict, diff = compute_verdict(a, b, compare.get("expect", "greater"),
                                    float(compare.get("margin", 0.0)), aligned is not None)
    symbol = ">" if compare.get("expect", "greater") == "greater" else "<"
    margin = f" {float(compare['margin']):+g}" if compare.get("margin") else ""
    evidence = (f"{describe_evidence(compare['a'])} {symbol} "
                f"{describe_evidence(compare['b'])}{margin}")
    return FindingResult(finding_id, spec.get("claim", ""), spec.get("source", ""),
                         summarise(a), summarise(b), diff, verdict, evidence, runs, a, b)


def group_findings(runs: list[Run]) -> dict[str, list[Run]]:
    groups: dict[str, list[Run]] = {}
    for run in runs:
        if run.finding and "compare" in run.finding:
            groups.setdefault(str(run.finding.get("id", "unnamed")), []).append(run)
    return groups


# ---------------------------------------------------------------- output


def group_runs(runs: list[Run]) -> dict[str, list[Run]]:
    """Runs that differ only in seed: keyed by their config without seed/paths/hydra."""
    groups: dict[str, list[Run]] = {}
    for run in runs:
        config = {k: v for k, v in run.config.items() if k not in ("seed", "paths", "finding")}
        key = json.dumps(config, sort_keys=True, default=str)
        groups.setdefault(key, []).append(run)
    return groups


def metric_rows(runs: list[Run]) -> list[dict]:
    """One row per (group, metric): mean, std, 95% interval over the group's seeds."""
    rows = []
    for index, group in enumerate(group_runs(runs).values()):
        names = sorted(set().union(*(r.metrics for r in group)))
        for name in names:
            values = [r.metrics[name] for r in group if name in r.metrics]
            s = summarise(values)
            rows.append({"group": index, "runs": " ".join(str(r.path) for r in group),
                         "metric": name, "n": s.n, "mean": s.mean, "std": s.std,
                         "ci_low": s.low, "ci_high": s.high})
    return rows


def plot_finding(result: FindingResult, out_dir: Path) -> str:
    """A layer curve per run where the evidence is one, else a bar per side with its seeds."""
    import matplotlib.pyplot as plt

    compare = result.runs[0].finding["compare"]
    figure, axis = plt.subplots(figsize=(5.2, 3.5))
    curve = next((e for e in (compare["a"], compare["b"]) if isinstance(e, dict)
                  and "*" in e.get("metric", "")), None)
    if curve is not None:
        for run in result.runs:
            if selects(run, curve):
                axis.plot(*layer_series(run.metrics, curve["metric"]), marker="o", alpha=0.7,
                          label=f"seed {run.seed}" if run.seed is not None else run.path.name)
        axis.set_xlabel("layer (0 = embeddings)")
        axis.set_ylabel(curve["metric"].replace("*", "L"))
        axis.legend(fontsize=7)
    else:
        for x, (values, label) in enumerate(((result.a_values, "a"), (result.b_values, "b"))):
            axis.bar(x, statistics.fmean(values), alpha=0.6, label=label)
            axis.scatter([x] * len(values), values, color="black", s=12, zorder=3)
        axis.set_xticks([0, 1], [describe_evidence(compare["a"])[:40],
                                 describe_evidence(compare["b"])[:40]], fontsize=7)
    axis.set_title(f"{result.id}: {result.verdict}", fontsize=9)
    axis.grid(alpha=0.3)
    path = save_figure(figure, out_dir, f"finding_{result.id}")
    return str(path.relative_to(out_dir))


def format_summary(s: Summary) -> str:
    if s.n < 2:
        return f"{s.mean:.4g}"
    return f"{s.mean:.4g} ± {s.std:.2g} [{s.low:.4g}, {s.high:.4g}]"


def write_report(results: list[FindingResult], runs: list[Run], out_dir: Path) -> Path:
    lines = ["# bertology report", "",
             f"{len(runs)} finished runs; {len(results)} findings judged. Values are means over "
             "seeds ± std [95% t-interval]; a verdict holds when the interval of a − b lies "
             "beyond the margin in the expected direction (bertology/pipelines/report.py).", "",
             "## Findings", ""]
    if not results:
        lines.append("None of these runs belongs to a finding (conf/experiment/finding_*.yaml).")
    else:
        lines += ["| finding | claim | source | evidence | a | b | a − b | seeds | verdict "
                  "| figure |", "|---|---|---|---|---|---|---|---:|---|---|"]
    for r in results:
        figure = plot_finding(r, out_dir)
        lines.append(f"| {r.id} | {r.claim} | {r.source} | `{r.evidence}` "
                     f"| {format_summary(r.a)} | {format_summary(r.b)} "
                     f"| {format_summary(r.diff)} | {r.diff.n} "
                     f"| **{r.verdict}** | ![]({figure}) |")
    lines += ["", "## Runs", "", "Runs that differ only in their seed form a group; its "
              "evaluation metrics (all metrics: `tables/metrics.csv`):", "",
              "| group | runs | seeds | metric | mean ± std |", "|---:|---|---:|---|---|"]
    for index, group in enumerate(group_runs(runs).values()):
        names = sorted({k for r in group for k in r.metrics if k.startswith(HEADLINE)})
        for name in names[:MAX_HEADLINES]:
            s = summarise([r.metrics[name] for r in group if name in r.metrics])
            lines.append(f"| {index} | {group[0].path}{' …' if len(group) > 1 else ''} "
                         f"| {len(group)} | {name} | {format_summary(s)} |")
    lines += ["", "Verdicts as CSV: `tables/findings.csv`.", ""]
    path = out_dir / "REPORT.md"
    tmp = path.with_name(".REPORT.md.tmp")
    tmp.write_text("\n".join(lines))
    tmp.replace(path)
    return path


def run(cfg: DictConfig, out_dir: Path) -> dict[str, float]:
    """The report pipeline: cfg.runs (paths) → out_dir/REPORT.md, tables/, plots/."""
    roots = load_report_config(cfg)
    runs = [r for r in find_runs(roots) if out_dir not in r.path.parents and r.path != out_dir]
    results = [judge(fid, group) for fid, group in sorted(group_findings(runs).items())]
    write_table(out_dir, "metrics", metric_rows(runs))
    write_table(out_dir, "findings", [
        {"finding": r.id, "claim": r.claim, "source": r.source, "evidence": r.evidence,
         "a_mean": r.a.mean, "b_mean": r.b.mean, "diff_mean": r.diff.mean,
         "diff_ci_low": r.diff.low, "diff_ci_high": r.diff.high, "seeds": r.diff.n,
         "verdict": r.verdict} for r in results])
    report = write_report(results, runs, out_dir)
    log.info("%s: %d runs, %s", report, len(runs),
             ", ".join(f"{r.id}={r.verdict}" for r in results) or "no findings")
    metrics = {"report/runs": float(len(runs)), "report/findings": float(len(results))}
    for verdict in ("holds", "does not hold", "inconclusive"):
        metrics[f"report/{verdict.replace(' ', '_')}"] = float(
            sum(r.verdict == verdict for r in results))
    (out_dir / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    return metrics
