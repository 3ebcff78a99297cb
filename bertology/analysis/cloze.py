"""Behavioural tests through the masked-LM head: what the model predicts, not what a probe reads
off its layers (the survey's §3 "syntactic / semantic / world knowledge" evidence from cloze).

- BLiMP (Warstadt et al., 2020) and Marvin & Linzen's (2018) agreement pairs, scored by
  pseudo-log-likelihood (Salazar et al., 2020): a pair is right when PLL(good) > PLL(bad).
- Goldberg's (2019) protocol on Gulordava et al.'s (2018) colorless green sentences: the verb
  is masked, and the correct form must score above the wrong one.
- Ettinger's (2020) CPRAG, ROLE and NEG: the last word is predicted at a mask.
- LAMA Google-RE (Petroni et al., 2019): P@1 of the object at the template's mask.

Masks: the word under test is put in its sentence, tokenised, and its sub-words replaced by a
single tokenizer.mask_token_id, so WordPiece ([MASK]) and byte-level BPE (<mask>, which then
stands for "Ġword") are handled alike. Words are candidates only when they are one token
(Goldberg, Petroni et al.); the others are counted as skipped. Top-k ranks every vocabulary
entry except the special tokens.
"""

from __future__ import annotations

import logging
import statistics
from collections import defaultdict
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from bertology.analysis.mlm_scoring import (
    Scorer,
    compute_mask_scores,
    compute_pll,
    encode_cloze,
    token_id,
)
from bertology.config.analysis_settings import ClozeSettings
from bertology.data import cloze_suites as data
from bertology.errors import require
from bertology.run.figures import GREY, PALETTE, reference, save_figure, tie
from bertology.run.tables import write_table

log = logging.getLogger(__name__)


# ---------------------------------------------------------------- results


def result_row(suite: str, test: str, metric: str, outcomes: list[float], skipped: int) -> dict:
    return {"suite": suite, "test": test, "n": len(outcomes), "n_skipped": skipped,
            "metric": metric, "value": statistics.fmean(outcomes) if outcomes else ""}


def metrics_of(rows: list[dict]) -> dict[str, float]:
    """cloze/<suite>/<test>/<metric> (test "" → cloze/<suite>/<metric>); rows with nothing
    scored (every word multi-token, say) have no value and give no metric."""
    return {"/".join(part for part in ("cloze", r["suite"], r["test"], r["metric"]) if part):
            float(r["value"]) for r in rows if r["value"] != ""}


def score_pair_groups(scorer: Scorer, groups: dict[str, list[data.MinimalPair]], desc: str
                      ) -> dict[str, tuple[list[float], int]]:
    """group -> (1.0/0.0 per scored pair: PLL(good) > PLL(bad), pairs skipped as too long);
    one PLL pass over every sentence of every group."""
    sentences = [s for pairs in groups.values() for p in pairs for s in (p.good, p.bad)]
    plls = iter(compute_pll(scorer, sentences, desc))
    results = {}
    for name, pairs in groups.items():
        outcomes, skipped = [], 0
        for _ in pairs:
            good, bad = next(plls), next(plls)
            if good is None or bad is None:
                skipped += 1
            else:
                outcomes.append(float(good > bad))
        results[name] = (outcomes, skipped)
        if skipped:  # counted in the table's n_skipped; said here too
            log.warning("skipped: %d of %d %s pairs are too long for the model's positions",
                        skipped, len(pairs), name)
    return results


def pooled(results: list[tuple[list[float], int]]) -> tuple[list[float], int]:
    return [o for outcomes, _ in results for o in outcomes], sum(s for _, s in results)


# ---------------------------------------------------------------- the suites


def run_blimp(scorer: Scorer, data_dir: Path, settings: ClozeSettings, seed: int
              ) -> tuple[list[dict], dict[str, float]]:
    """Per paradigm (table), per phenomenon and overall (metrics): accuracy over all scored
    pairs, as Warstadt et al. (2020) report BLiMP."""
    terms, groups = {}, {}
    for paradigm in data.blimp_paradigms(data_dir, settings.blimp_paradigms):
        terms[paradigm], pairs = data.load_blimp(data_dir, paradigm)
        groups[paradigm] = data.sample_items(pairs, settings.max_items, f"blimp/{paradigm}", seed)
    results = score_pair_groups(scorer, groups, "cloze: BLiMP PLL")
    by_term = defaultdict(list)
    for paradigm, result in results.items():
        by_term[terms[paradigm]].append(result)
    exported = [result_row("blimp", term, "accuracy", *pooled(r)) for term, r in by_term.items()]
    exported.append(result_row("blimp", "", "accuracy", *pooled(list(results.values()))))
    rows = [result_row("blimp", f"paradigm/{p}", "accuracy", *r) for p, r in results.items()]
    return rows + exported, metrics_of(exported)


def run_marvin_linzen(scorer: Scorer, data_dir: Path, settings: ClozeSettings, seed: int
                      ) -> tuple[list[dict], dict[str, float]]:
    """Marvin & Linzen (2018) pairs by PLL: per condition (table), per construction and per
    phenomenon (metrics: agreement → marvin_linzen, reflexive anaphora → ..._reflexives)."""
    groups, members = {}, defaultdict(list)  # "construction/condition" -> pairs
    for phenomenon, constructions in data.MARVIN_LINZEN.items():
        for construction in constructions:
            for condition, pairs in data.load_marvin_linzen(data_dir, construction).items():
                key = f"{construction}/{condition}"
                groups[key] = data.sample_items(pairs, settings.max_items, f"ml/{key}", seed)
                members[(phenomenon, construction)].append(key)
    results = score_pair_groups(scorer, groups, "cloze: Marvin & Linzen PLL")
    rows = [result_row("agreement", f"marvin_linzen/{k}", "accuracy", *r)
            for k, r in results.items()]
    exported = [result_row("agreement", f"marvin_linzen/{construction}", "accuracy",
                           *pooled([results[k] for k in keys]))
                for (_, construction), keys in members.items()]
    for phenomenon in data.MARVIN_LINZEN:
        keys = [k for (p, _), ks in members.items() if p == phenomenon for k in ks]
        test = "marvin_linzen" if phenomenon == "agreement" else f"marvin_linzen_{phenomenon}"
        exported.append(result_row("agreement", test, "accuracy",
                                   *pooled([results[k] for k in keys])))
    return rows + exported, metrics_of(exported)


def run_colorless_green(scorer: Scorer, data_dir: Path, settings: ClozeSettings, seed: int
                        ) -> tuple[list[dict], dict[str, float]]:
    """Goldberg (2019) §2: mask the verb, compare the two forms' scores at the mask (only
    where both are single tokens: his bert-syntax skips the others). Unlike his script, is/are
    items are kept, and the case of the sentence is the tokenizer's business."""
    by_pattern, skipped = defaultdict(list), defaultdict(int)
    for item in data.load_colorless_green(data_dir):
        ids = (token_id(scorer.tokenizer, item.correct), token_id(scorer.tokenizer, item.wrong))
        encoded = encode_cloze(scorer, item.cloze, item.correct)
        if None in ids or encoded is None:
            skipped[item.kind] += 1
            continue
        by_pattern[item.pattern].append((item, encoded, list(ids)))
    chosen = [entry for pattern, entries in by_pattern.items() for entry in
              data.sample_items(entries, settings.max_items, f"gulordava/{pattern}", seed)]
    _, scores = compute_mask_scores(scorer, [e[1] for e in chosen], [e[2] for e in chosen],
                                    "cloze: colorless green")
    outcomes = defaultdict(list)
    for (item, _, _), (good, bad) in zip(chosen, scores):
        outcomes[item.kind].append(float(good > bad))
    kinds = sorted(set(outcomes) | set(skipped))
    exported = [result_row("agreement", f"colorless_green/{kind}", "accuracy", outcomes[kind],
                           skipped[kind]) for kind in kinds]
    exported.append(result_row("agreement", "colorless_green", "accuracy",
                               *pooled([(outcomes[k], skipped[k]) for k in kinds])))
    return exported, metrics_of(exported)


def run_agreement(scorer: Scorer, data_dir: Path, settings: ClozeSettings, seed: int
                  ) -> tuple[list[dict], dict[str, float]]:
    rows, metrics = run_marvin_linzen(scorer, data_dir, settings, seed)
    more_rows, more_metrics = run_colorless_green(scorer, data_dir, settings, seed)
    return rows + more_rows, {**metrics, **more_metrics}


def in_top(top: np.ndarray, wanted: list[int], k: int) -> float:
    return float(any(w in top[:k] for w in wanted))


def run_cprag(scorer: Scorer, data_dir: Path) -> list[dict]:
    """Ettinger (2020) §4, CPRAG-34: the expected completion in the top 1 / top k (lm-diagnostics
    test_cprag_acc), and the expected word more probable than both the within- and the
    between-category word in the same context (sim_cprag_N400's "EXP TOP")."""
    k, kept, skipped = scorer.top_k, [], 0
    for item in data.load_cprag(data_dir):
        ids = [token_id(scorer.tokenizer, w) for w in (item.expected, item.within, item.between)]
        encoded = encode_cloze(scorer, item.cloze, item.expected)
        if ids[0] is None or encoded is None:
            skipped += 1
        else:
            kept.append((encoded, ids if None not in ids else ids[:1]))
    tops, scores = compute_mask_scores(scorer, [e for e, _ in kept], [c for _, c in kept],
                                       "cloze: CPRAG")
    prefer = [float(s[0] > max(s[1:])) for s in scores if len(s) == 3]
    return [result_row("ettinger", "cprag", "top1", [in_top(t, c[:1], 1) for t, (_, c)
                                                      in zip(tops, kept)], skipped),
            result_row("ettinger", "cprag", f"top{k}", [in_top(t, c[:1], k) for t, (_, c)
                                                         in zip(tops, kept)], skipped),
            result_row("ettinger", "cprag", "expected_preferred", prefer,
                       skipped + len(kept) - len(prefer))]


def run_role(scorer: Scorer, data_dir: Path) -> list[dict]:
    """Ettinger (2020) §5, ROLE-88: any expected completion in the top 1 / top k; and the target
    more probable in the a sentence than in its role-reversed b sentence (sim_role_N400's
    "GOOD TGT HIGHER")."""
    k, kept, skipped, items = scorer.top_k, [], 0, data.load_role(data_dir)
    for item in items:
        expected = [i for w in item.expected if (i := token_id(scorer.tokenizer, w)) is not None]
        target = token_id(scorer.tokenizer, item.target)
        encoded = encode_cloze(scorer, item.cloze, item.target)
        if encoded is None:
            skipped += 1
        else:
            kept.append((item, encoded, expected, [] if target is None else [target]))
    tops, scores = compute_mask_scores(scorer, [e[1] for e in kept], [e[3] for e in kept],
                                       "cloze: ROLE")
    ranked = [(top, e[2]) for top, e in zip(tops, kept) if e[2]]
    by_pair = defaultdict(dict)  # pair number -> condition -> the target's log-probability
    for (item, *_), score in zip(kept, scores):
        if score:
            by_pair[item.item][item.condition] = score[0]
    prefer = [float(p["a"] > p["b"]) for p in by_pair.values() if len(p) == 2]
    pairs = len({item.item for item in items})
    return [result_row("ettinger", "role", "top1", [in_top(t, e, 1) for t, e in ranked],
                       skipped + len(kept) - len(ranked)),
            result_row("ettinger", "role", f"top{k}", [in_top(t, e, k) for t, e in ranked],
                       skipped + len(kept) - len(ranked)),
            result_row("ettinger", "role", "role_preferred", prefer, pairs - len(prefer))]


def score_neg(scorer: Scorer, data_dir: Path, variant: str) -> tuple[list[dict], int]:
    """Ettinger (2020) §6, NEG-88 (lm-diagnostics process_neg*, sim_nkf_N400): per item the
    four sentences TA (affirmative, true word), FA, TN (negated, true word), FN. Per item:
    top1/topk: the true affirmative word at TA's mask (test_nkf_acc scores TA only);
    aff_accuracy: P(TA) > P(FA); neg_accuracy: P(TN) > P(FN) (her "AFF" and "NEG");
    sensitivity: both, i.e. negation flips the preference to the now-true word;
    insensitivity: P(TA) > P(FA) but not P(TN) > P(FN): the affirmative's word is still
    preferred under negation (sensitivity + insensitivity = aff_accuracy)."""
    inputs, candidates, kept, skipped = [], [], [], 0
    for item in data.load_neg(data_dir, variant):
        aff = token_id(scorer.tokenizer, item.true_affirmative)
        neg = token_id(scorer.tokenizer, item.true_negated)
        conditions = [("affirmative", item.true_affirmative, aff),  # TA, FA, TN, FN
                      ("affirmative", item.true_negated, neg),
                      ("negated", item.true_negated, neg),
                      ("negated", item.true_affirmative, aff)]
        encoded = [encode_cloze(scorer, item.cloze(p, w), w) for p, w, _ in conditions]
        if None in (aff, neg) or None in encoded:
            skipped += 1
            continue
        inputs += encoded
        candidates += [[i] for *_, i in conditions]
        kept.append(aff)
    tops, scores = compute_mask_scores(scorer, inputs, candidates, f"cloze: NEG-{variant}")
    results = []
    for j, aff in enumerate(kept):
        ta, fa, tn, fn = (scores[4 * j + c][0] for c in range(4))
        results.append({"top1": in_top(tops[4 * j], [aff], 1),
                        f"top{scorer.top_k}": in_top(tops[4 * j], [aff], scorer.top_k),
                        "aff_accuracy": float(ta > fa), "neg_accuracy": float(tn > fn),
                        "sensitivity": float(ta > fa and tn > fn),
                        "insensitivity": float(ta > fa and not tn > fn)})
    return results, skipped


def run_ettinger(scorer: Scorer, data_dir: Path, settings: ClozeSettings, seed: int
                 ) -> tuple[list[dict], dict[str, float]]:
    """CPRAG, ROLE, NEG-SIMP, NEG-NAT and NEG (both pooled). The sets are small (18-88 items)
    and always run whole: max_items does not apply."""
    rows = run_cprag(scorer, data_dir) + run_role(scorer, data_dir)
    pooled_results, pooled_skipped = [], 0
    for variant in ("SIMP", "NAT"):
        results, skipped = score_neg(scorer, data_dir, variant)
        pooled_results += results
        pooled_skipped += skipped
        for metric in ("top1", f"top{scorer.top_k}", "aff_accuracy", "neg_accuracy",
                       "sensitivity", "insensitivity"):
            rows.append(result_row("ettinger", f"neg_{variant.lower()}", metric,
                                   [r[metric] for r in results], skipped))
    for metric in ("aff_accuracy", "neg_accuracy", "sensitivity", "insensitivity"):
        rows.append(result_row("ettinger", "neg", metric, [r[metric] for r in pooled_results],
                               pooled_skipped))
    return rows, metrics_of(rows)


def run_lama(scorer: Scorer, data_dir: Path, settings: ClozeSettings, seed: int
             ) -> tuple[list[dict], dict[str, float]]:
    """Petroni et al. (2019) §4: P@1 of the object over the whole vocabulary (special tokens
    excluded) at the template's [Y], on max_items facts drawn from those whose object is one
    token (n_skipped: all the others). The overall P@1 is the mean over relations, as LAMA
    averages per relation first."""
    rows = []
    for relation in data.GOOGLE_RE_TEMPLATES:
        facts = data.load_google_re(data_dir, relation)
        ids = {name: token_id(scorer.tokenizer, name) for name in {f.object for f in facts}}
        single = [fact for fact in facts if ids[fact.object] is not None]
        chosen = data.sample_items(single, settings.max_items, f"lama/{relation}", seed)
        encoded = [encode_cloze(scorer, fact.cloze, fact.object) for fact in chosen]
        kept = [(e, ids[fact.object]) for fact, e in zip(chosen, encoded) if e is not None]
        tops, _ = compute_mask_scores(scorer, [e for e, _ in kept], [[t] for _, t in kept],
                                      f"cloze: LAMA {relation}")
        hits = [float(top[0] == target) for top, (_, target) in zip(tops, kept)]
        skipped = len(facts) - len(single) + len(chosen) - len(kept)  # the cap skips none
        rows.append(result_row("lama", relation, "p_at_1", hits, skipped))
    scored = [row for row in rows if row["n"]]
    overall = {"suite": "lama", "test": "", "n": sum(r["n"] for r in rows),
               "n_skipped": sum(r["n_skipped"] for r in rows), "metric": "p_at_1",
               "value": statistics.fmean(r["value"] for r in scored) if scored else ""}
    return rows + [overall], metrics_of(rows + [overall])


def plot_metrics(metrics: dict[str, float], title: str, out_dir: Path, name: str) -> Path:
    """One horizontal bar per returned metric, grouped by suite (the key's order)."""
    keys = sorted(metrics)
    figure, axis = plt.subplots(figsize=(7.5, 0.22 * len(keys) + 1.2))
    bars = axis.barh(range(len(keys)), [metrics[k] for k in keys], color=PALETTE[0],
                     label="model")
    for bar, key in zip(bars, keys):
        tie(bar, [key])
    axis.set_yticks(range(len(keys)), [k.removeprefix("cloze/") for k in keys], fontsize=7)
    axis.invert_yaxis()
    axis.set_xlim(0, 1)
    reference(axis.axvline(0.5, color=GREY, linewidth=0.8, linestyle="--",
                           label="chance (minimal pairs)"))
    figure.legend(loc="outside lower center", ncols=2)
    axis.set_xlabel("accuracy / P@1")
    axis.set_title(title)
    return save_figure(figure, out_dir, name)


def run(ctx, settings: ClozeSettings) -> dict[str, float]:
    model, tokenizer = ctx.mlm_model()
    require(tokenizer.mask_token_id is not None and tokenizer.is_fast,
            f"model.name_or_path={ctx.config.model.name_or_path!r}: cloze needs a fast tokenizer "
            "with a mask token (tokenizer.json); use a bertology pretrain model/ dir")
    scorer = Scorer(model, tokenizer, settings.batch_size, settings.top_k)
    suites = {"blimp": run_blimp, "agreement": run_agreement, "ettinger": run_ettinger,
              "lama": run_lama}
    rows, metrics = [], {}
    for suite in settings.suites:
        log.info("cloze suite %s", suite)
        suite_rows, suite_metrics = suites[suite](scorer, ctx.config.data_dir, settings,
                                                  ctx.config.seed)
        rows += suite_rows
        metrics.update(suite_metrics)
    name = f"cloze_{ctx.config.task.name}"
    write_table(ctx.out_dir, name, rows)
    if metrics:
        plot_metrics(metrics, f"cloze: {ctx.config.model.name_or_path}", ctx.out_dir, name)
    for key in ("cloze/blimp/accuracy", "cloze/agreement/marvin_linzen/accuracy",
                "cloze/agreement/colorless_green/accuracy", "cloze/lama/p_at_1"):
        if key in metrics:
            log.info("%s = %.3f", key, metrics[key])
    return metrics
