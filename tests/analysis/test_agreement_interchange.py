"""The planted-truth check's arithmetic: the minimal pairs are the grammar's own agreement sites
with the subject's number swapped; the interchange at the subject (a multi-token one
included) and at the control positions equals a 2-layer BERT run layer by layer by hand, with
the counterfactual's states written in, to 1e-6; the net flips and logit shifts equal a loop
written here; the pipeline writes the metrics, replicates, table and figure it promises."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import torch
from conftest import compose_config
from intervention_cases import VOCAB, tiny_mlm

from bertology.analysis.agreement_interchange import (
    AgreementReadings,
    compute_item_effects,
    compute_toward,
    extract_readings,
    summarise_encoder,
)
from bertology.analysis.agreement_items import (
    AgreementPair,
    InterchangeItem,
    build_items,
    build_pair,
    choose_control_positions,
)
from bertology.data import lexicon as lx
from bertology.data import synthetic
from bertology.data.probe_sentences import ProbeSentence, synthetic_labels
from bertology.run.replicates import bootstrap_indices

TOLERANCE = 1e-6
pytestmark = pytest.mark.usefixtures("one_thread")


def grammar(count: int = 400) -> list[tuple[synthetic.Sentence, ProbeSentence]]:
    sentences = [s for doc in synthetic.iter_documents(count, seed=3) for s in doc.sentences]
    return [(s, ProbeSentence(s.words, synthetic_labels(s, "agreement"), s.heads, s.deprels,
                              s.upos)) for s in sentences]


# ---------------------------------------------------------------- the minimal pairs


def test_a_pair_is_the_generators_agreement_site_with_the_subject_number_swapped():
    """The generator's own record (Agreement: subject, verb, number), not the tree the pair
    is read from, says where the subject and the agreeing word are; a pair is kept exactly
    where the subject is a noun after a sentence-initial "the"."""
    kept = 0
    for source, sentence in grammar():
        pair = build_pair(sentence)
        site = source.agreement
        expected = source.upos[site.subject] == "NOUN" and source.words[0] == "the"
        assert (pair is not None) == expected, source.text
        if pair is None:
            continue
        kept += 1
        assert (pair.subject, pair.verb, pair.number) == (site.subject, site.verb, site.number)
        changed = [i for i, (a, b) in enumerate(zip(pair.words, pair.counterfactual)) if a != b]
        assert changed == [site.subject]
        assert lx.NOUN_NUMBER[pair.counterfactual[site.subject]] != site.number
        assert lx.LEMMAS[pair.counterfactual[site.subject]] == lx.LEMMAS[source.words[site.subject]]
        singular, plural = pair.forms
        assert source.words[site.verb] == (singular if site.number == "sing" else plural)
        assert lx.VERB_NUMBER[singular] == "sing" and lx.VERB_NUMBER[plural] == "plur"
    assert kept > 50


def test_items_are_aligned_masked_and_their_controls_avoid_subject_and_verb(synthetic_tokenizer):
    items = build_items(synthetic_tokenizer, [s for _, s in grammar()], 64)
    assert len(items) > 50
    rng = np.random.default_rng(0)
    for item in items:
        assert len(item.base_ids) == len(item.counterfactual_ids)
        differs = [p for p, (a, b) in enumerate(zip(item.base_ids, item.counterfactual_ids))
                   if a != b]
        assert set(differs) <= set(item.subject_positions) and differs
        assert item.base_ids[item.verb_position] == synthetic_tokenizer.mask_token_id
        assert item.counterfactual_ids[item.verb_position] == synthetic_tokenizer.mask_token_id
        forms = synthetic_tokenizer.convert_ids_to_tokens(list(item.form_ids))
        assert forms == list(item.pair.forms)
        controls = choose_control_positions(item, rng)
        assert len(controls) == len(item.subject_positions)
        assert not set(controls) & {*item.subject_positions, item.verb_position}


# ---------------------------------------------------------------- the interchange, by hand


def hand_item(subject: list[int], verb: int, number: str, base: list[int], other: list[int]
              ) -> InterchangeItem:
    pair = AgreementPair(("w",) * len(base), ("w",) * len(base), subject[0], verb, number,
                         ("runs", "run"))
    return InterchangeItem(pair, base, other, subject, verb, list(range(1, len(base) - 1)),
                         (7, 11))


def layer_states(model, ids: torch.Tensor) -> list[torch.Tensor]:
    """Hidden states 0 (embeddings) … L of a BERT, each layer called by hand."""
    states = [model.bert.embeddings(input_ids=ids)]  # (batch, seq, hidden), no padding
    for layer in model.bert.encoder.layer:
        out = layer(states[-1])
        states.append(out[0] if isinstance(out, tuple) else out)
    return states


def preference_by_hand(model, items: list[InterchangeItem], layer: int,
                       positions: list[list[int]]) -> np.ndarray:
    """d at each item's verb with hidden state `layer` of the base overwritten, at
    `positions`, by the counterfactual's, and the layers above called by hand."""
    base = torch.tensor([i.base_ids for i in items])
    donor = layer_states(model, torch.tensor([i.counterfactual_ids for i in items]))[layer]
    hidden = model.bert.embeddings(input_ids=base)
    for depth in range(len(model.bert.encoder.layer) + 1):
        if depth > 0:
            out = model.bert.encoder.layer[depth - 1](hidden)
            hidden = out[0] if isinstance(out, tuple) else out
        if depth == layer:
            hidden = hidden.clone()
            for row, chosen in enumerate(positions):
                hidden[row, chosen] = donor[row, chosen]
    logits = model.cls(hidden)
    return np.array([float(logits[r, i.verb_position, 7] - logits[r, i.verb_position, 11])
                     for r, i in enumerate(items)])


@torch.no_grad()
def test_the_interchange_equals_the_layers_called_by_hand():
    """A 2-layer BERT in float64; item 1's subject is two tokens; every layer 0..2, subject
    and control, to 1e-6; and the interchange moves d (it is not a no-op)."""
    model = tiny_mlm(dtype=torch.float64)
    rng = np.random.default_rng(0)
    items = []
    for subject, verb, number in (([2], 4, "sing"), ([1, 2], 5, "plur"), ([3], 6, "sing")):
        base = rng.integers(5, VOCAB, 9).tolist()
        other = list(base)
        for p in subject:
            other[p] = int(rng.integers(5, VOCAB))
        base[verb] = other[verb] = 3  # the "mask"
        items.append(hand_item(subject, verb, number, base, other))
    controls = [[6], [3, 7], [1]]
    readings = extract_readings(model, items, controls, batch_size=2, pad_id=0)
    for layer in range(3):
        subject = preference_by_hand(model, items, layer, [i.subject_positions for i in items])
        control = preference_by_hand(model, items, layer, controls)
        np.testing.assert_allclose(readings.subject[layer], subject, rtol=0, atol=TOLERANCE)
        np.testing.assert_allclose(readings.control[layer], control, rtol=0, atol=TOLERANCE)
    unpatched = preference_by_hand(model, items, 0, [[] for _ in items])
    np.testing.assert_allclose(readings.base, unpatched, rtol=0, atol=TOLERANCE)
    everything = preference_by_hand(model, items, 0, [list(range(9)) for _ in items])
    np.testing.assert_allclose(readings.counterfactual, everything, rtol=0, atol=TOLERANCE)
    assert np.abs(readings.subject[0] - readings.base).min() > 1e-4


# ---------------------------------------------------------------- the effects, by a loop


def prefers(form: str, d: float) -> bool:
    """Whether d = logit(singular) − logit(plural) prefers `form`."""
    return d < 0 if form == "plur" else d > 0


def test_effects_are_net_flips_towards_the_counterfactual_and_logit_shifts():
    rng = np.random.default_rng(1)
    n, layers = 40, 3
    numbers = rng.choice(["sing", "plur"], n)
    items = [hand_item([1], 2, str(number), [0] * 4, [0] * 4) for number in numbers]
    readings = AgreementReadings(rng.normal(size=n), rng.normal(size=n),
                                 rng.normal(size=(layers, n)), rng.normal(size=(layers, n)))
    values = compute_item_effects(readings, compute_toward(items))
    for i, number in enumerate(numbers):
        wanted = "plur" if number == "sing" else "sing"  # the counterfactual's form
        for layer in range(layers):
            before = prefers(wanted, readings.base[i])
            effect = int(prefers(wanted, readings.subject[layer, i])) - int(before)
            control = int(prefers(wanted, readings.control[layer, i])) - int(before)
            shift = readings.subject[layer, i] - readings.base[i]
            assert values["effect"][layer, i] == effect
            assert values["control"][layer, i] == control
            assert values["effect_minus_control"][layer, i] == effect - control
            assert values["logit_shift"][layer, i] == pytest.approx(
                shift if wanted == "sing" else -shift, abs=1e-12)
    metrics, columns = summarise_encoder(values, "random", bootstrap_indices(n))
    means = values["effect_minus_control"].mean(axis=1)
    best = int(np.argmax(means))
    assert metrics["interchange/random/best_layer"] == best
    assert metrics["interchange/random/best/effect_minus_control"] == pytest.approx(means[best])
    for layer in range(layers):
        key = f"interchange/random/layer_{layer:02d}/effect"
        assert metrics[key] == pytest.approx(values["effect"][layer].mean())
        assert columns[key].shape == (400,)


# ---------------------------------------------------------------- the pipeline


def test_the_pipeline_writes_its_metrics_replicates_table_and_figure(tmp_path,
                                                                    synthetic_tokenizer):
    """On a random tiny BERT with an MLM head, init=random (the model drawn from seed=) and
    its twin: every layer's keys for both, replicates with item ids, the figure's lines tied
    to the keys they draw."""
    from transformers import BertConfig, BertForMaskedLM

    from bertology.pipelines import probe

    torch.manual_seed(0)
    config = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, vocab_size=len(synthetic_tokenizer))
    BertForMaskedLM(config).save_pretrained(tmp_path / "model")
    synthetic_tokenizer.save_pretrained(tmp_path / "model")
    cfg = compose_config("probe", [
        "analysis=agreement_interchange", "task=synthetic_agreement",
        f"model.name_or_path={tmp_path / 'model'}", "logger=none", "max_train_sentences=200",
        "max_eval_sentences=80", f"paths.cache_dir={tmp_path / 'cache'}"])
    metrics = probe.run(cfg, tmp_path / "run")
    items = int(metrics["interchange/items"])
    assert items >= 10
    for scope in ("", "random/"):
        for layer in range(3):
            for name in ("effect", "control", "effect_minus_control", "probe_accuracy"):
                key = f"interchange/{scope}layer_{layer:02d}/{name}"
                assert -1.0 <= metrics[key] <= 1.0, key
            # an untrained model flips (almost) nothing towards the counterfactual
            assert abs(metrics[f"interchange/{scope}layer_{layer:02d}/effect"]) < 0.2
        assert metrics[f"interchange/{scope}best_layer"] in (0.0, 1.0, 2.0)
    run = tmp_path / "run"
    ids = json.loads((run / "replicates" / "interchange_synthetic_agreement.items.json")
                     .read_text())["items"]
    assert len(ids) == items
    with (run / "replicates" / "interchange_synthetic_agreement.csv").open() as handle:
        header = next(csv.reader(handle))
    assert "interchange/random/layer_01/effect_minus_control" in header
    with (run / "tables" / "interchange_synthetic_agreement.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["encoder"], r["layer"]) for r in rows] == [
        (e, str(layer)) for e in ("model", "random") for layer in range(3)]
    assert (run / "plots" / "interchange_synthetic_agreement.png").stat().st_size > 0
