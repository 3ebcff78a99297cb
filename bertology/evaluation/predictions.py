"""Predictions on the eval split, the task metrics computed from them, and their bootstrap
replicates over eval examples (for the report's intervals).

Each decoder turns per-feature logits back into per-example predictions: a label, a tag per
word (read at the word's first sub-token), or the best valid answer span over all windows of a
context (start <= end, inside the context, at most max_answer_tokens long; BERT §4.2).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import torch
from tqdm.auto import tqdm

from bertology.config.groups import TaskConfig
from bertology.data.encode import build_collate
from bertology.evaluation.metrics import (
    bio_spans,
    compute_classification_metrics,
    compute_squad_metrics,
    compute_tagging_metrics,
    normalize_answer,
    squad_f1,
)
from bertology.models.task_model import TaskModel
from bertology.run.replicates import bootstrap_indices, resample_sums


@torch.no_grad()
def predict_logits(model: TaskModel, features: list[dict], pad_token_id: int,
                   batch_size: int = 64) -> list[torch.Tensor]:
    """Logits per feature (unpadded), in feature order; batches sorted by length."""
    model.eval()
    collate = build_collate(pad_token_id)
    order = sorted(range(len(features)), key=lambda i: len(features[i]["input_ids"]))
    logits: list[torch.Tensor | None] = [None] * len(features)
    for start in tqdm(range(0, len(order), batch_size), desc="predict", unit="batch",
                      leave=False):
        chunk = order[start: start + batch_size]
        batch = collate([features[i] for i in chunk])
        output = model(batch).float()
        for row, index in enumerate(chunk):
            length = len(features[index]["input_ids"])
            logits[index] = output[row] if model.kind == "classification" \
                else output[row, :length]
    return logits


def decode_classification(examples, features, logits, labels, task) -> list[dict]:
    return [{"text": e["text"], "text_pair": e["text_pair"], "gold": labels[e["label"]],
             "predicted": labels[int(logit.argmax())]} for e, logit in zip(examples, logits)]


def decode_tagging(examples, features, logits, labels, task) -> list[dict]:
    """Words cut off by max_seq_length are predicted as the first label (O for NER)."""
    rows = []
    for example, feature, logit in zip(examples, features, logits):
        predicted = [labels[0]] * len(example["words"])
        previous = -1
        for position, word in enumerate(feature["word_ids"]):
            if word >= 0 and word != previous:
                predicted[word] = labels[int(logit[position].argmax())]
            previous = word
        rows.append({"words": example["words"], "gold": [labels[t] for t in example["tags"]],
                     "predicted": predicted})
    return rows


def decode_qa(examples, features, logits, labels, task) -> list[dict]:
    best: dict[int, tuple[float, str]] = {}
    for feature, logit in zip(features, logits):
        score, text = best_span(logit, feature["offsets"], examples[feature["example"]],
                                task.max_answer_tokens)
        if feature["example"] not in best or score > best[feature["example"]][0]:
            best[feature["example"]] = (score, text)
    return [{"id": e["id"], "question": e["question"], "gold": e["answers"]["text"],
             "predicted": best.get(i, (0.0, ""))[1]} for i, e in enumerate(examples)]


def best_span(logit: torch.Tensor, offsets: list, example: dict, max_tokens: int
              ) -> tuple[float, str]:
    """The highest start + end score over valid spans in this window (and its text)."""
    start_scores, end_scores = logit[:, 0], logit[:, 1]  # (seq,) each
    inside = torch.tensor([o is not None for o in offsets])
    scores = start_scores[:, None] + end_scores[None, :]  # (start, end)
    length = torch.arange(len(offsets))
    span = (length[None, :] - length[:, None])  # end - start
    valid = (span >= 0) & (span < max_tokens) & inside[:, None] & inside[None, :]
    if not bool(valid.any()):
        return float("-inf"), ""
    scores = scores.masked_fill(~valid, float("-inf"))
    flat = int(scores.argmax())
    start, end = divmod(flat, len(offsets))
    text = example["context"][offsets[start][0]: offsets[end][1]]
    return float(scores[start, end]), text


DECODERS = {"classification": decode_classification, "tagging": decode_tagging,
            "qa": decode_qa}


def score_predictions(kind: str, rows: list[dict], labels: list[str]) -> dict[str, float]:
    """The task's metrics; beside accuracy, majority_accuracy: the accuracy of always
    predicting the eval set's most frequent label (tag), the floor a model must clear."""
    gold = [r["gold"] for r in rows]
    predicted = [r["predicted"] for r in rows]
    if kind == "classification":  # binary F1 is the second label's (GLUE's positive class)
        scores = compute_classification_metrics([labels.index(g) for g in gold],
                                                [labels.index(p) for p in predicted],
                                                len(labels))
        return {**scores, "majority_accuracy": Counter(gold).most_common(1)[0][1] / len(gold)}
    if kind == "tagging":
        tags = Counter(t for sentence in gold for t in sentence)
        return {**compute_tagging_metrics(gold, predicted),
                "majority_accuracy": tags.most_common(1)[0][1] / max(1, sum(tags.values()))}
    return compute_squad_metrics(gold, predicted)


def evaluate_task(model: TaskModel, task: TaskConfig, examples: list[dict],
                  features: list[dict], labels: list[str], pad_token_id: int
                  ) -> tuple[dict[str, float], list[dict]]:
    """(metrics, one prediction row per eval example)."""
    logits = predict_logits(model, features, pad_token_id)
    rows = DECODERS[task.kind](examples, features, logits, labels, task)
    return score_predictions(task.kind, rows, labels), rows


# ---------------------------------------------------------------- item replicates


def classification_statistics(rows: list[dict], labels: list[str]) -> np.ndarray:
    """Per example, its cell of the confusion matrix as a one-hot: (examples, K·K), gold-major."""
    k = len(labels)
    cells = [labels.index(r["gold"]) * k + labels.index(r["predicted"]) for r in rows]
    return np.eye(k * k)[cells]


def compute_classification_replicates(rows: list[dict], labels: list[str],
                                      indices: np.ndarray) -> dict[str, np.ndarray]:
    """Accuracy, F1 and MCC (as compute_classification_metrics) on each resample of examples:
    each from the resample's confusion matrix."""
    k = len(labels)
    confusion = resample_sums(classification_statistics(rows, labels), indices)  # (R, K·K)
    confusion = confusion.reshape(-1, k, k)  # (R, gold, predicted)
    total = confusion.sum(axis=(1, 2))
    hits = np.diagonal(confusion, axis1=1, axis2=2)  # (R, K)
    gold, predicted = confusion.sum(axis=2), confusion.sum(axis=1)  # (R, K) each
    with np.errstate(invalid="ignore", divide="ignore"):
        f1 = np.where(gold + predicted > 0, 2 * hits / (gold + predicted), 0.0)  # (R, K)
        # Gorodkin's multiclass MCC, which sklearn computes
        cov_yp = hits.sum(axis=1) * total - (gold * predicted).sum(axis=1)
        cov_yy = total**2 - (gold * gold).sum(axis=1)
        cov_pp = total**2 - (predicted * predicted).sum(axis=1)
        mcc = np.where(cov_yy * cov_pp > 0, cov_yp / np.sqrt(cov_yy * cov_pp), 0.0)
    return {"accuracy": hits.sum(axis=1) / total,
            "f1": f1[:, 1] if k == 2 else f1.mean(axis=1), "mcc": mcc,
            "majority_accuracy": gold.max(axis=1) / total}


def tagging_statistics(rows: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """Per sentence: (correct words, words, entity hits, gold entities, predicted entities),
    and its count of each gold tag (sentences, tags)."""
    stats, tags = [], sorted({t for r in rows for t in r["gold"]})
    counts = np.zeros((len(rows), len(tags)))
    for i, r in enumerate(rows):
        gold, predicted = bio_spans(r["gold"]), bio_spans(r["predicted"])
        stats.append([sum(g == p for g, p in zip(r["gold"], r["predicted"])), len(r["gold"]),
                      len(gold & predicted), len(gold), len(predicted)])
        for tag, count in Counter(r["gold"]).items():
            counts[i, tags.index(tag)] = count
    return np.array(stats, dtype=np.float64).reshape(-1, 5), counts


def compute_tagging_replicates(rows: list[dict], labels: list[str], indices: np.ndarray
                               ) -> dict[str, np.ndarray]:
    """Word accuracy, and entity precision/recall/F1 for BIO tags (as
    compute_tagging_metrics), on each resample of sentences."""
    stats, tag_counts = tagging_statistics(rows)
    sums = resample_sums(stats, indices)  # (R, 5)
    words, hits, n_gold, n_pred = sums[:, 1], sums[:, 2], sums[:, 3], sums[:, 4]
    out = {"accuracy": sums[:, 0] / np.maximum(words, 1),
           "majority_accuracy": resample_sums(tag_counts, indices).max(axis=1)
           / np.maximum(words, 1)}
    if any(t.startswith(("B-", "I-")) for r in rows for t in r["gold"]):
        with np.errstate(invalid="ignore", divide="ignore"):
            precision = np.where(n_pred > 0, hits / n_pred, 0.0)
            recall = np.where(n_gold > 0, hits / n_gold, 0.0)
            f1 = np.where(hits > 0, 2 * precision * recall / (precision + recall), 0.0)
        out.update(entity_precision=precision, entity_recall=recall, entity_f1=f1, f1=f1)
    return out


def compute_qa_replicates(rows: list[dict], labels: list[str], indices: np.ndarray
                          ) -> dict[str, np.ndarray]:
    """Exact match and F1 (as compute_squad_metrics) on each resample of questions."""
    exact = np.array([max(float(normalize_answer(r["predicted"]) == normalize_answer(t))
                          for t in r["gold"]) for r in rows])
    f1 = np.array([max(squad_f1(r["predicted"], t) for t in r["gold"]) for r in rows])
    return {"exact_match": exact[indices].mean(axis=1), "f1": f1[indices].mean(axis=1)}


REPLICATES_BY_KIND = {"classification": compute_classification_replicates,
              "tagging": compute_tagging_replicates, "qa": compute_qa_replicates}


def compute_score_replicates(kind: str, rows: list[dict], labels: list[str],
                             indices: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The task metrics of score_predictions on bootstrap resamples of the eval examples
    (sentences for tagging, questions for QA): {metric: (R,)} (run/replicates.py)."""
    indices = bootstrap_indices(len(rows)) if indices is None else indices
    return REPLICATES_BY_KIND[kind](rows, labels, indices)
