"""What `bertology report` writes: REPORT.md, tables/findings.csv and tables/metrics.csv, and a
figure per finding."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from bertology.run.atomic import write_text_atomic
from bertology.run.figures import GREY, integer_ticks, literal, save_figure
from bertology.run.rundir import RunDir, headline_keys
from bertology.study.judge.collapses import collapse_column, fisher_p
from bertology.study.judge.contrasts import selects
from bertology.study.judge.evidence import Evidence, layer_keys
from bertology.study.judge.record import FindingResult
from bertology.study.judge.results import replication_key
from bertology.study.judge.scale import Shortfall, smoke_line
from bertology.study.judge.scope import KINDS, checkpoints_named, result_kind, scope_of
from bertology.study.judge.selection import Selection
from bertology.study.judge.stats import Estimate
from bertology.study.judge.verdicts import VERDICTS

MAX_HEADLINES = 8  # per group in REPORT.md; the CSV has them all


def format_estimate(e: Estimate) -> tuple[str, str]:
    """(effect, 95% interval) as text."""
    low, high = e.interval()
    return f"{e.mean:+.4g}", f"[{low:+.4g}, {high:+.4g}]"


FINDING_COLUMNS = ["finding", "about", "unit", "scope", "claim", "source", "test", "design",
                   "effect", "ci_low", "ci_high", "se", "dof", "seeds", "item_replicates",
                   "item_overlap", "members", "set_aside", "collapsed", "collapse_fisher_p",
                   "member_seeds",
                   "within_member_share",
                   "multibootstrap_low", "multibootstrap_high",
                   "multibootstrap_p", "members_sign_p", "members_skewness", "p_holds",
                   "p_fails", "p_holm", "raw_verdict",
                   "corrected_verdict", "fragile", "p_replication", "note", "runs"]


def finding_rows(results: list[FindingResult], selection: Selection | None = None
                 ) -> list[dict]:
    """tables/findings.csv: one row per comparison of each finding (FINDING_COLUMNS); a
    population's rows name the members drawn and set aside (`set_aside`)."""
    aside = " ".join(selection.set_aside) if selection else ""
    rows = []
    for r in results:
        scope = scope_of(r)
        # item_overlap: the share counted (stats.compute_overlap), blank where some run
        # recorded no item ids (made before runs did), counted as 0; across a population:
        # Sellam et al.'s multi-bootstrap beside the verdict's interval, where its members ran
        # 2+ seeds the share of their spread that is noise within, and from 5 members the sign
        # test over them and their skewness
        for part, comparison in zip(r.parts, r.spec.comparisons):
            test, spread, check = part.test, part.spread, part.check
            low, high = test.estimate.interval()
            boot_low, boot_high, boot_p = part.multibootstrap or (None, None, None)
            rows.append({
                "finding": r.id, "about": r.spec.about, "unit": scope.unit, "scope": scope.column,
                "claim": r.spec.claim,
                "source": r.spec.source,
                "test": comparison.describe(), "design": part.design, "effect": test.estimate.mean,
                "ci_low": low, "ci_high": high, "se": test.estimate.se,
                "dof": test.estimate.dof, "seeds": test.estimate.n,
                "item_replicates": test.estimate.items, "item_overlap": part.overlap,
                "members": len(r.members) or None,
                "set_aside": aside if r.members else "",
                # each arm's fine-tunings that collapsed, "arm:k/n;…", and Fisher's p between
                # two arms whose rates differ (collapses.py: an endpoint of its own)
                "collapsed": collapse_column(r.collapses),
                "collapse_fisher_p": fisher_p(r.collapses),
                # the fewest seeds a member ran on a side (blank: one, or not its own)
                "member_seeds": spread.seeds[0] if spread else None,
                "within_member_share": spread.within if spread else None,
                "multibootstrap_low": boot_low,
                "multibootstrap_high": boot_high, "multibootstrap_p": boot_p,
                "members_sign_p": check.sign_p if check else None,
                "members_skewness": check.skewness if check else None,
                "p_holds": r.p_holds, "p_fails": r.p_fails, "p_holm": r.p_adjusted,
                "raw_verdict": r.raw.label,
                "corrected_verdict": r.corrected.label, "fragile": r.fragile,
                "p_replication": "" if math.isnan(r.p_replication) else r.p_replication,
                "note": r.note,
                "runs": " ".join(str(run.path) for run in r.runs)})
    return rows


def group_runs(runs: list[RunDir]) -> dict[str, list[RunDir]]:
    """Runs that differ only in seed: keyed by their config without seed/paths/finding."""
    groups: dict[str, list[RunDir]] = {}
    for run in runs:
        groups.setdefault(replication_key(run), []).append(run)
    return groups


def compute_mean_sd(values: list[float]) -> dict[str, float]:
    mean = statistics.fmean(values)
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return {"n": len(values), "mean": mean, "std": std}


def metric_rows(runs: list[RunDir]) -> list[dict]:
    """tables/metrics.csv: one row per (group of seeds, metric): n, mean, std."""
    rows = []
    for index, group in enumerate(group_runs(runs).values()):
        for name in sorted(set().union(*(r.metrics for r in group))):
            values = [r.metrics[name] for r in group if name in r.metrics]
            rows.append({"group": index, "runs": " ".join(str(r.path) for r in group),
                         "metric": name, **compute_mean_sd(values)})
    return rows


def plot_finding(result: FindingResult, out_dir: Path) -> str:
    """The curves of a layer-wise evidence (a line per run), else each side's per-run values;
    the title carries both verdicts."""
    import matplotlib.pyplot as plt

    comparison = result.spec.comparisons[0]
    figure, axis = plt.subplots(figsize=(5.2, 3.5))
    curve = next((e for e in (comparison.a, comparison.b) if isinstance(e, Evidence)
                  and "*" in e.metric), None)
    if curve is not None:
        for run in result.runs:
            if selects(run, curve):
                layers, keys = layer_keys(run.metrics, curve.metric)
                axis.plot(layers, [run.metrics[k] for k in keys], marker="o", alpha=0.7,
                          label=f"seed {run.seed}" if run.seed is not None
                          else literal(run.path.name))
        axis.set_xlabel("layer (0 = embeddings)")
        integer_ticks(axis)
        axis.set_ylabel(curve.metric.replace("*", "L"))
        axis.legend(fontsize=7)
    else:
        test = result.tests[0]
        low, high = test.estimate.interval()
        axis.errorbar([0], [test.estimate.mean], yerr=[[test.estimate.mean - low],
                                                        [high - test.estimate.mean]],
                      fmt="o", capsize=6, label="a − b, 95% interval")
        axis.axhline(comparison.margin, color=GREY, linestyle="--", label="margin")
        axis.set_xticks([0], [comparison.describe()[:60]], fontsize=7)
        axis.legend(fontsize=7)
    axis.set_title(f"{result.id}: {result.raw.label} (Holm: {holm_verdict(result)})", fontsize=9)
    axis.grid(alpha=0.3)
    path = save_figure(figure, out_dir, f"finding_{result.id}")
    return str(path.relative_to(out_dir))


def verdict_counts(results: list[FindingResult], which: str) -> dict[str, int]:
    return {v: sum(getattr(r, which).label == v for r in results) for v in VERDICTS}


def holm_verdict(result: FindingResult) -> str:
    """The corrected verdict as the tables show it: "holds (fragile)" where a resolved verdict
    is not firm (suite.py: firm means Holm-adjusted p below α/10 and no replicate left out
    loses it)."""
    label = result.corrected.label
    return f"{label} (fragile)" if result.fragile else label


def count_line(results: list[FindingResult], which: str) -> str:
    """"7 holds (2 fragile), 3 does not hold, …": fragile ones counted apart, Holm only."""
    parts = []
    for verdict, n in verdict_counts(results, which).items():
        fragile = sum(r.fragile for r in results if r.corrected.label == verdict)
        parts.append(f"{n} {verdict} ({fragile} fragile)" if which == "corrected" and fragile
                     else f"{n} {verdict}")
    return ", ".join(parts)


KIND_TITLES = {
    "pretraining": ("Claims about pretraining", "what a pretraining procedure puts in an "
                    "encoder, judged across encoders pretrained independently (the replicates "
                    "are pretraining seeds); the headline is about these"),
    "checkpoint": ("Claims about one checkpoint", "what one trained model holds, judged on that "
                   "checkpoint (the replicates are items and probe or fine-tuning seeds): a "
                   "verdict here holds for that checkpoint, not for BERT or its pretraining; "
                   "counted apart in the headline"),
    "method": ("Claims about the method", "properties of a probe, a metric or the "
               "architecture, true of any encoder (e.g. of random vectors per word type); "
               "reported, not counted in the headline"),
}


def split_by_kind(results: list[FindingResult]) -> dict[str, list[FindingResult]]:
    """The findings by kind (scope.KINDS): pretraining claims, then checkpoint claims, then
    claims about the method."""
    return {kind: [r for r in results if result_kind(r) == kind] for kind in KINDS}


def holds_line(results: list[FindingResult]) -> str:
    """"k of n hold (m fragile)" after Holm."""
    held = [r for r in results if r.corrected.label == "holds"]
    return (f"{len(held)} of {len(results)} hold ({sum(r.fragile for r in held)} fragile) "
            "after Holm's correction")


def headline(results: list[FindingResult]) -> list[str]:
    """Pretraining claims first (the procedure), then the checkpoint claims counted apart, each
    with its raw and Holm-corrected verdict counts; then the method's."""
    kinds = split_by_kind(results)
    pretraining, checkpoint = kinds["pretraining"], kinds["checkpoint"]
    named = checkpoints_named([scope_of(r) for r in checkpoint])
    lines = ["Pretraining claims, across independently pretrained encoders: "
             + (holds_line(pretraining) if pretraining else "none judged here"),
             f"Checkpoint claims ({named}; not claims about BERT): "
             + (holds_line(checkpoint) if checkpoint else "none judged here")]
    for kind, group in (("pretraining", pretraining), ("checkpoint", checkpoint)):
        lines += [f"{title} verdicts on the {len(group)} {kind} claims: "
                  + count_line(group, which)
                  for which, title in (("raw", "Raw"), ("corrected", "Holm-corrected"))
                  if group]
    method = kinds["method"]
    if method:
        lines.append(f"Claims about the method ({len(method)}, not counted above): " + ", ".join(
            f"{n} {v}" for v, n in verdict_counts(method, "corrected").items() if n))
    return lines


def members_table(selection: Selection) -> list[str]:
    """Every member drawn: its held-out MLM accuracy against its floor, and whether it learned
    (a member set aside, or whose pretraining did not finish, is a row too); a checkpoint
    pretrained elsewhere, its revision and commit."""
    header, rows = selection.table()
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(f"**{c}**" if c == "no: set aside" else c for c in row) + " |"
              for row in rows]
    return lines


def findings_table(results: list[FindingResult], figures: dict[str, str]) -> list[str]:
    lines = ["| finding | claim | scope | source | test | effect a − b | 95% interval | seeds "
             "| raw | Holm | note | figure |",
             "|---|---|---|---|---|---|---|---:|---|---|---|---|"]
    for r in results:
        figure = figures[r.id]
        for i, (test, comparison) in enumerate(zip(r.tests, r.spec.comparisons)):
            effect, interval = format_estimate(test.estimate)
            head = ([r.id, r.spec.claim, scope_of(r).words, r.spec.source] if i == 0
                    else ["", "", "", ""])
            tail = ([f"**{r.raw.label}**", f"**{holm_verdict(r)}**", r.note, f"![]({figure})"]
                    if i == 0 else ["", "", "", ""])
            lines.append("| " + " | ".join([*head, f"`{comparison.describe()}`", effect,
                                             interval, str(test.estimate.n), *tail]) + " |")
    return lines


# what makes a resolved verdict firm (suite.py), in the pages' words
FIRM_WORDS = ("firm where its Holm-adjusted p lies below α/10 and no replicate left out loses "
              "it (4 or more replicates)")
# what a verdict's test is, in one sentence (stats.ALPHA is two-sided; a claim is one-sided)
METHOD = ("Each claim is tested one-sided at level 0.025: it holds where its two-sided 95% "
          "interval lies beyond the margin")


def title_line(shortfalls: list[Shortfall]) -> str:
    """The page's first line: its title, and where the runs are smaller than their studies
    state (study/judge/scale.py), that the page shows the page, not the findings."""
    return f"# bertology report: {smoke_line(shortfalls)}" if shortfalls \
        else "# bertology report"


def write_report(results: list[FindingResult], skipped: list[tuple[str, str]],
                 runs: list[RunDir], out_dir: Path, figures: dict[str, str],
                 curves: dict[str, str] | None = None, guide: list[str] | None = None,
                 shortfalls: list[Shortfall] = (), selection: Selection | None = None) -> Path:
    """REPORT.md; figures maps a finding's id to its figure (plot_finding's path), curves a
    caption to a figure of layer curves across runs (curves.plot_layer_curves_across_runs)."""
    lines = [title_line(list(shortfalls)), "",
             f"{len(runs)} finished runs; {len(results)} findings judged. {METHOD}; the "
             "interval counts seed-to-seed and item-sampling noise (bootstrap replicates); the "
             "corrected verdict applies Holm's correction over every finding here; a finding "
             "whose guard fails (the runs cannot discriminate) is uninformative; a resolved "
             f"verdict is {FIRM_WORDS}, else fragile; seeds counts independent runs, "
             "which for a claim about one checkpoint are runs of that checkpoint, not "
             "independently pretrained encoders: each verdict's scope says which "
             "(docs/findings.md: \"The verdicts, defined\", \"Unit of replication\").", ""]
    lines += headline(results)
    if selection:
        lines += ["", f"Members: {selection.words()}. {selection.about()}; every member:", "",
                  *members_table(selection)]
    if shortfalls:
        lines += ["", "These runs are smaller than their studies state (the sizes `make "
                  "reproduce` runs); their verdicts say what the page looks like, not what the "
                  "findings are:", "", "| study | key | smallest in these runs | stated |",
                  "|---|---|---:|---:|"]
        lines += [f"| {s.study} | `{s.key}` | {s.value:g} | {s.stated:g} |" for s in shortfalls]
    if not results and guide:
        lines += ["", "## No finding judged", "", "A finding reads the runs of its study, "
                  "labelled `label: <study>` by the study's experiment bundle; these runs carry "
                  "no such label (or not the studies a finding needs). Each study, the command "
                  "that runs it, and the findings its runs answer:", "", *guide]
    for kind, group in split_by_kind(results).items():
        if group:
            title, says = KIND_TITLES[kind]
            lines += ["", f"## {title}", "", f"{says[0].upper()}{says[1:]}.", "",
                      *findings_table(group, figures)]
    for finding, reason in skipped:
        lines.append(f"\nNot judged: {finding} ({reason}).")
    if curves:
        lines += ["", "## Layer curves across runs", "", "One curve per group of runs (a "
                  "checkpoint sweep: one per checkpoint), the mean over its seeds:", ""]
        lines += [f"![{caption}]({path})" for caption, path in curves.items()]
    lines += ["", "## Runs", "", "Runs that differ only in their seed form a group; its "
              "evaluation metrics (all metrics: `tables/metrics.csv`):", "",
              "| group | runs | seeds | metric | mean ± std |", "|---:|---|---:|---|---|"]
    for index, group in enumerate(group_runs(runs).values()):
        names = headline_keys({k for r in group for k in r.metrics})
        for name in names[:MAX_HEADLINES]:
            s = compute_mean_sd([r.metrics[name] for r in group if name in r.metrics])
            lines.append(f"| {index} | {group[0].path}{' …' if len(group) > 1 else ''} "
                         f"| {len(group)} | {name} | {s['mean']:.4g} ± {s['std']:.2g} |")
    path = out_dir / "REPORT.md"
    write_text_atomic(path, "\n".join(lines) + "\n")
    return path

