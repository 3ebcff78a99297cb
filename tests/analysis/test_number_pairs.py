"""Marvin & Linzen's counterfactual pairs (data/number_pairs.py) and the interchange items
built from them (analysis/agreement_items.py), on a hand-made construction file: which rows
pair, with what subject, verb and forms, and on which side of the split."""

from __future__ import annotations

from pathlib import Path

import pytest

from bertology.analysis.agreement_items import build_pair
from bertology.data.number_pairs import (
    flip_condition,
    held_out,
    load_construction,
    load_number_pairs,
)
from bertology.data.probe_sentences import ProbeSentence

ROWS = [
    # a pair: the subject and the verb differ, nothing else
    ("sing_MS_MV_plur_ES", 0, "the author near the guards laughs",
     "the author near the guards laugh"),
    ("plur_MS_MV_plur_ES", 0, "the authors near the guards laugh",
     "the authors near the guards laughs"),
    # index 1 kept in one condition only (the sampling): no partner
    ("sing_MS_MV_plur_ES", 1, "the pilot near the guards smiles",
     "the pilot near the guards smile"),
    # a second agreeing word (a subject relative's verb) differs too: left out
    ("sing_MS_EV_MV", 2, "the author that likes the guard laughs",
     "the author that likes the guard laugh"),
    ("plur_MS_EV_MV", 2, "the authors that like the guard laugh",
     "the authors that like the guard laughs"),
]


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "marvin_linzen_syneval"
    folder.mkdir()
    lines = ["condition\torig_index\tsentence_good\tsentence_bad"]
    lines += [f"{c}\t{i}\t{good}\t{bad}" for c, i, good, bad in ROWS]
    (folder / "prep_anim.tsv").write_text("\n".join(lines) + "\n")
    return tmp_path


def test_the_flipped_condition_changes_the_first_number_only():
    assert flip_condition("sing_MS_MV_plur_ES") == "plur_MS_MV_plur_ES"
    assert flip_condition("plur_ES_EV_sing_MS_MV") == "sing_ES_EV_sing_MS_MV"
    assert flip_condition("past") is None


def test_rows_pair_where_only_the_subject_and_verb_differ(data_dir):
    pairs = load_construction(data_dir, "prep_anim")
    assert [(p.key, p.number, p.verb) for p in pairs] == [
        ("prep_anim/sing_MS_MV_plur_ES/0", "sing", 5),
        ("prep_anim/plur_MS_MV_plur_ES/0", "plur", 5)]
    assert pairs[0].counterfactual == tuple(ROWS[1][2].split())


def test_the_interchange_item_masks_the_verb_and_swaps_the_subject_alone(data_dir):
    singular, plural = load_construction(data_dir, "prep_anim")
    for pair, subject_form, forms in ((singular, "authors", ("laughs", "laugh")),
                                      (plural, "author", ("laughs", "laugh"))):
        labels = tuple(pair.number if i == pair.verb else None for i in range(len(pair.words)))
        built = build_pair(ProbeSentence(pair.words, labels, counterfactual=pair.counterfactual))
        assert (built.subject, built.verb, built.number, built.forms) == (1, 5, pair.number, forms)
        # the counterfactual keeps the base's verb: masked in both, the pair differs at the subject
        assert built.counterfactual == (*pair.words[:1], subject_form, *pair.words[2:])


def test_a_fill_and_its_counterfactual_fall_on_one_side_of_the_split(data_dir):
    singular, plural = load_construction(data_dir, "prep_anim")
    for fraction in (0.1, 0.5, 0.9):
        assert held_out(singular, fraction) == held_out(plural, fraction)


@pytest.mark.data("marvin_linzen_syneval")
def test_the_real_files_give_both_numbers_in_both_splits():
    from conftest import DATA_DIR

    train, held = load_number_pairs(DATA_DIR, 0.5)
    for split in (train, held):
        numbers = [p.number for p in split]
        assert numbers.count("sing") == numbers.count("plur") > 1000
    assert not {p.key for p in train} & {p.key for p in held}
