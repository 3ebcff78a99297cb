"""Subject-number counterfactuals from Marvin & Linzen (2018), for the interchange of
analysis=agreement_interchange on real English (task=marvin_linzen_agreement).

Marvin & Linzen generate each construction's conditions from one grid of templates: the
first number of a condition's name is the agreeing subject's (`sing_MS_MV_plur_ES`: the main
subject singular, the noun in the prepositional phrase plural), and item i of every condition
fills the same template slots. A condition's item and the item of the same index in the
condition whose first number is flipped are a counterfactual pair: the same sentence with the
agreeing subject in the other number. Our copy samples up to 1,000 items a condition (the data
folder's README), so only the indices both files kept pair up.

A pair is kept where the two grammatical sentences differ at exactly two words, the subject
noun and the agreeing verb, and the verb's ungrammatical form in one is the other's form. That
leaves out the constructions where a second word carries the subject's number (a subject
relative's own verb, a coordinated verb): there the interchange at the subject alone would
not move all of it (Finlayson et al., 2021 build their pairs by the subject's number alone).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path

from bertology.data.cloze_suites import MARVIN_LINZEN, read_tsv

NUMBERS = ("sing", "plur")
ML_FOLDER = "marvin_linzen_syneval"


@dataclass(frozen=True)
class NumberPair:
    """A grammatical sentence and its subject in the other number, in words."""

    words: tuple[str, ...]
    counterfactual: tuple[str, ...]  # the counterfactual's own grammatical sentence
    verb: int  # word index of the agreeing verb
    number: str  # the base subject's number: "sing" | "plur"
    construction: str
    key: str  # construction/condition/index: one template fill of one condition


def flip_condition(condition: str) -> str | None:
    """The condition whose agreeing subject has the other number; None for a name without one."""
    first, _, rest = condition.partition("_")
    if first not in NUMBERS:
        return None
    return f"{NUMBERS[1 - NUMBERS.index(first)]}_{rest}"


def match_pair(row: dict, partner: dict, construction: str) -> NumberPair | None:
    """The pair of a row and its flipped condition's row, or None where they differ elsewhere
    than at the subject and the verb (see the module's docstring)."""
    good, bad = row["sentence_good"].split(), row["sentence_bad"].split()
    other, other_bad = partner["sentence_good"].split(), partner["sentence_bad"].split()
    if not len(good) == len(bad) == len(other) == len(other_bad):
        return None
    verbs = [i for i, (a, b) in enumerate(zip(good, bad)) if a != b]
    differ = [i for i, (a, b) in enumerate(zip(good, other)) if a != b]
    if len(verbs) != 1 or len(differ) != 2 or verbs[0] not in differ:
        return None
    verb = verbs[0]
    if other[verb] != bad[verb] or other_bad[verb] != good[verb]:
        return None
    key = f"{construction}/{row['condition']}/{row['orig_index']}"
    return NumberPair(tuple(good), tuple(other), verb, row["condition"].partition("_")[0],
                      construction, key)


def load_construction(data_dir: Path, construction: str) -> list[NumberPair]:
    """Every pair of one construction's file, in file order."""
    rows = read_tsv(data_dir / ML_FOLDER / f"{construction}.tsv",
                    ("condition", "orig_index", "sentence_good", "sentence_bad"))
    by_item = {(r["condition"], r["orig_index"]): r for r in rows}
    pairs = []
    for row in rows:
        partner = by_item.get((flip_condition(row["condition"]), row["orig_index"]))
        pair = None if partner is None else match_pair(row, partner, construction)
        if pair is not None:
            pairs.append(pair)
    return pairs


def held_out(pair: NumberPair, eval_fraction: float) -> bool:
    """Whether the pair is in the eval split: a hash of its construction and template index,
    so that an item and its counterfactual (the same fill) fall on the same side."""
    fill = f"{pair.construction}/{pair.key.rsplit('/', 1)[1]}"
    return zlib.crc32(fill.encode()) % 1000 < eval_fraction * 1000


def load_number_pairs(data_dir: Path, eval_fraction: float
                      ) -> tuple[list[NumberPair], list[NumberPair]]:
    """(train, eval) pairs of every agreement construction of Marvin & Linzen's Table 1."""
    pairs = [p for c in MARVIN_LINZEN["agreement"] for p in load_construction(data_dir, c)]
    train = [p for p in pairs if not held_out(p, eval_fraction)]
    return train, [p for p in pairs if held_out(p, eval_fraction)]
