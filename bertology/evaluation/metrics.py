"""Task metrics: accuracy, F1, Matthews correlation, entity-level F1 for BIO tags (exact span
and type, as conlleval), and SQuAD exact match / F1 with the official answer normalisation."""

from __future__ import annotations

import re
import string
from collections import Counter

from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef


def compute_classification_metrics(gold: list[int], predicted: list[int], num_labels: int
                                   ) -> dict[str, float]:
    """Accuracy, Matthews correlation, and F1: of the positive class (label 1) for binary
    tasks (GLUE's MRPC F1), macro-averaged otherwise."""
    binary = num_labels == 2
    return {"accuracy": float(accuracy_score(gold, predicted)),
            "f1": float(f1_score(gold, predicted, average="binary" if binary else "macro",
                                 zero_division=0)),
            "mcc": float(matthews_corrcoef(gold, predicted))}


def bio_spans(tags: list[str]) -> set[tuple[int, int, str]]:
    """(start, end exclusive, type) of each entity in a BIO/IOB2 sequence. An I- that does not
    continue an entity of its type starts one (conlleval's lenient reading)."""
    spans, start, kind = set(), None, None
    for i, tag in enumerate([*tags, "O"]):
        prefix, _, label = tag.partition("-")
        continues = prefix == "I" and kind == label
        if start is not None and not continues:
            spans.add((start, i, kind))
            start, kind = None, None
        if prefix in ("B", "I") and not continues:
            start, kind = i, label
    return spans


def compute_entity_f1(gold: list[list[str]], predicted: list[list[str]]) -> dict[str, float]:
    """Micro precision/recall/F1 over entities: a hit needs the exact span and type."""
    hits = n_gold = n_pred = 0
    for gold_tags, pred_tags in zip(gold, predicted):
        gold_spans, pred_spans = bio_spans(gold_tags), bio_spans(pred_tags)
        hits += len(gold_spans & pred_spans)
        n_gold += len(gold_spans)
        n_pred += len(pred_spans)
    precision = hits / n_pred if n_pred else 0.0
    recall = hits / n_gold if n_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if hits else 0.0
    return {"entity_precision": precision, "entity_recall": recall, "entity_f1": f1}


def compute_tagging_metrics(gold: list[list[str]], predicted: list[list[str]]
                            ) -> dict[str, float]:
    """Word accuracy always; entity F1 when the tag set is BIO."""
    pairs = [(g, p) for gold_tags, pred_tags in zip(gold, predicted)
             for g, p in zip(gold_tags, pred_tags)]
    metrics = {"accuracy": sum(g == p for g, p in pairs) / max(1, len(pairs))}
    if any(t.startswith(("B-", "I-")) for tags in gold for t in tags):
        metrics.update(compute_entity_f1(gold, predicted))
        metrics["f1"] = metrics["entity_f1"]
    return metrics


# ---------------------------------------------------------------- SQuAD (official v1.1 script)


def normalize_answer(text: str) -> str:
    """Lower case, drop punctuation, the articles a/an/the, and extra white space."""
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def squad_f1(prediction: str, truth: str) -> float:
    pred_tokens, true_tokens = normalize_answer(prediction).split(), normalize_answer(truth).split()
    common = Counter(pred_tokens) & Counter(true_tokens)
    overlap = sum(common.values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(pred_tokens), overlap / len(true_tokens)
    return 2 * precision * recall / (precision + recall)


def compute_squad_metrics(answers: list[list[str]], predictions: list[str]) -> dict[str, float]:
    """Exact match and F1, each the best over a question's reference answers. Fractions in
    [0, 1] like every other metric here (the official script prints them x 100)."""
    exact = [max(float(normalize_answer(p) == normalize_answer(t)) for t in truths)
             for truths, p in zip(answers, predictions)]
    f1 = [max(squad_f1(p, t) for t in truths) for truths, p in zip(answers, predictions)]
    return {"exact_match": sum(exact) / len(exact), "f1": sum(f1) / len(f1)}
