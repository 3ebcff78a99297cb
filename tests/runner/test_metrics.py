"""Task metrics against hand counts: BIO entity spans, entity F1, SQuAD normalisation/EM/F1,
and classification F1 / Matthews correlation."""

from __future__ import annotations

import pytest

from bertology.evaluation.metrics import (
    bio_spans,
    compute_classification_metrics,
    compute_entity_f1,
    compute_squad_metrics,
    compute_tagging_metrics,
    normalize_answer,
    squad_f1,
)


def test_bio_spans_read_types_and_boundaries():
    tags = ["B-PER", "I-PER", "O", "B-LOC", "B-LOC", "I-LOC", "I-ORG", "O", "I-MISC"]
    assert bio_spans(tags) == {(0, 2, "PER"), (3, 4, "LOC"), (4, 6, "LOC"), (6, 7, "ORG"),
                               (8, 9, "MISC")}
    assert bio_spans(["O", "O"]) == set()


def test_entity_f1_needs_exact_span_and_type():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    predicted = [["B-PER", "O", "O", "B-LOC"],  # PER span too short: miss; LOC: hit
                 ["B-MISC", "O"]]  # wrong type: miss
    metrics = compute_entity_f1(gold, predicted)
    assert metrics["entity_precision"] == pytest.approx(1 / 3)
    assert metrics["entity_recall"] == pytest.approx(1 / 3)
    assert metrics["entity_f1"] == pytest.approx(1 / 3)
    assert compute_entity_f1(gold, gold)["entity_f1"] == 1.0


def test_tagging_metrics_add_entity_f1_only_for_bio_tag_sets():
    pos = compute_tagging_metrics([["NOUN", "VERB"]], [["NOUN", "NOUN"]])
    assert pos == {"accuracy": 0.5}
    ner = compute_tagging_metrics([["B-PER", "O"]], [["B-PER", "O"]])
    assert ner["accuracy"] == 1.0 and ner["f1"] == ner["entity_f1"] == 1.0


def test_squad_normalisation_drops_case_punctuation_and_articles():
    assert normalize_answer("The  Denver Broncos!") == "denver broncos"
    assert normalize_answer("an apple, a pear") == "apple pear"


def test_squad_exact_match_and_f1_take_the_best_reference():
    answers = [["Denver Broncos", "the Broncos"], ["Santa Clara, California"]]
    predictions = ["Broncos", "Santa Clara"]
    metrics = compute_squad_metrics(answers, predictions)
    assert metrics["exact_match"] == pytest.approx(0.5)  # "Broncos" == "the Broncos"
    assert metrics["f1"] == pytest.approx((1.0 + 0.8) / 2)  # P=1, R=2/3 → 0.8
    assert squad_f1("", "x") == 0.0


def test_classification_metrics_binary_and_multiclass():
    binary = compute_classification_metrics([1, 1, 0, 0], [1, 0, 0, 0], num_labels=2)
    assert binary["accuracy"] == 0.75
    assert binary["f1"] == pytest.approx(2 / 3)  # positive class: P=1, R=1/2
    assert binary["mcc"] == pytest.approx(1 / 3 ** 0.5)
    multi = compute_classification_metrics([0, 1, 2], [0, 1, 1], num_labels=3)
    assert multi["f1"] == pytest.approx((1 + 2 / 3 + 0) / 3)


# ---------------------------------------------------------------- replicates of the metrics


def random_rows(kind: str, rng, n: int = 60) -> tuple[list[dict], list[str]]:
    if kind == "classification":
        labels = ["neg", "neu", "pos"]
        return [{"gold": labels[rng.integers(3)], "predicted": labels[rng.integers(3)]}
                for _ in range(n)], labels
    if kind == "tagging":
        labels = ["O", "B-PER", "I-PER", "B-LOC"]
        rows = []
        for _ in range(n):
            length = int(rng.integers(1, 8))
            rows.append({"gold": [labels[i] for i in rng.integers(4, size=length)],
                         "predicted": [labels[i] for i in rng.integers(4, size=length)]})
        return rows, labels
    words = ["the cat", "a dog", "cat", "dog sat", "on the mat"]
    return [{"gold": [words[rng.integers(5)], words[rng.integers(5)]],
             "predicted": words[rng.integers(5)]} for _ in range(n)], []


@pytest.mark.parametrize("kind", ["classification", "tagging", "qa"])
def test_replicates_are_the_metric_on_each_resample(kind):
    """On the identity resample and on an arbitrary one, the vectorised replicates equal
    score_predictions computed from the resampled rows."""
    import numpy as np

    from bertology.evaluation.predictions import compute_score_replicates, score_predictions

    rng = np.random.default_rng(0)
    rows, labels = random_rows(kind, rng)
    indices = np.stack([np.arange(len(rows)), rng.integers(0, len(rows), len(rows))])
    reps = compute_score_replicates(kind, rows, labels, indices)
    for r, sample in enumerate(indices):
        expected = score_predictions(kind, [rows[i] for i in sample], labels)
        for key, value in expected.items():
            assert reps[key][r] == pytest.approx(value, abs=1e-12), (key, r)


def test_binary_f1_replicates_are_the_positive_class():
    import numpy as np

    from bertology.evaluation.predictions import compute_score_replicates, score_predictions

    rng = np.random.default_rng(1)
    labels = ["0", "1"]
    rows = [{"gold": labels[rng.integers(2)], "predicted": labels[rng.integers(2)]}
            for _ in range(50)]
    reps = compute_score_replicates("classification", rows, labels, np.arange(50)[None])
    assert reps["f1"][0] == pytest.approx(score_predictions("classification", rows, labels)["f1"])
