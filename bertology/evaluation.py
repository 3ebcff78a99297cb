"""Predictions on the eval split and the task metrics computed from them.

Each decoder turns per-feature logits back into per-example predictions: a label, a tag per
word (read at the word's first sub-token), or the best valid answer span over all windows of a
context (start <= end, inside the context, at most max_answer_tokens long; BERT §4.2).
"""

from __future__ import annotations

import torch
from tqdm.auto import tqdm

from bertology.config.groups import TaskConfig
from bertology.data.encode import build_collate
from bertology.metrics import (
    compute_classification_metrics,
    compute_squad_metrics,
    compute_tagging_metrics,
)
from bertology.models.task_model import TaskModel


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
    gold = [r["gold"] for r in rows]
    predicted = [r["predicted"] for r in rows]
    if kind == "classification":  # binary F1 is the second label's (GLUE's positive class)
        return compute_classification_metrics([labels.index(g) for g in gold],
                                              [labels.index(p) for p in predicted],
                                              len(labels))
    if kind == "tagging":
        return compute_tagging_metrics(gold, predicted)
    return compute_squad_metrics(gold, predicted)


def evaluate_task(model: TaskModel, task: TaskConfig, examples: list[dict],
                  features: list[dict], labels: list[str], pad_token_id: int
                  ) -> tuple[dict[str, float], list[dict]]:
    """(metrics, one prediction row per eval example)."""
    logits = predict_logits(model, features, pad_token_id)
    rows = DECODERS[task.kind](examples, features, logits, labels, task)
    return score_predictions(task.kind, rows, labels), rows
