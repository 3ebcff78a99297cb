"""Minimal pairs of subject-verb agreement from the embedded grammar (or given by the data:
Marvin & Linzen's, data/number_pairs.py), for the interchange intervention of
agreement_interchange.py.

An item is a sentence of the grammar (task=synthetic_agreement, whose gold trees name the
main-clause subject and whose labels name the agreeing word) and its counterfactual: the same
words with the subject noun in the other number ("the chef near the tables [MASK] ..." /
"the chefs near the tables [MASK] ..."). Only subjects with the number-neutral determiner
"the" are kept, so the pair differs in the subject noun alone and every cue to the subject's
number sits at its token(s): the interchange at those positions then moves all of it
(Finlayson et al., 2021 build their pairs the same way, by the subject's number alone). The
agreeing word (the verb, or does/do, is/are) is masked in both, and the MLM's preference
between its singular and plural forms is the readout.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase

from bertology.analysis.features import word_spans
from bertology.analysis.mlm_scoring import token_id
from bertology.data import lexicon as lx
from bertology.data.probe_sentences import ProbeSentence

NEUTRAL_DETERMINER = "the"  # the one determiner both numbers take (lexicon.DET_SING/DET_PLUR)
# the agreeing word's (singular, plural) forms beside the main verbs' (lexicon.THIRD_SING)
AUXILIARY_FORMS = {"is": ("is", "are"), "are": ("is", "are"),
                   "does": ("does", "do"), "do": ("does", "do")}
OTHER_NUMBER = {"sing": "plur", "plur": "sing"}


@dataclass(frozen=True)
class AgreementPair:
    """One sentence and its counterfactual, in words."""

    words: tuple[str, ...]
    counterfactual: tuple[str, ...]  # the subject noun in the other number
    subject: int  # word index of the main-clause subject noun
    verb: int  # word index of the agreeing word (masked)
    number: str  # the base subject's number: "sing" | "plur"
    forms: tuple[str, str]  # the agreeing word's (singular, plural) forms


@dataclass(frozen=True)
class InterchangeItem:
    """One pair, tokenised: base and counterfactual have the same length, position by position
    aligned (the subject has as many sub-words in either number)."""

    pair: AgreementPair
    base_ids: list[int]  # the verb's token replaced by the mask token
    counterfactual_ids: list[int]
    subject_positions: list[int]  # the subject noun's sub-word positions
    verb_position: int
    word_positions: list[int]  # every word's first sub-word: where a control may sit
    form_ids: tuple[int, int]  # vocabulary ids of the (singular, plural) forms


def find_subject(sentence: ProbeSentence) -> int | None:
    """The main-clause subject: the `nsubj` dependent of the root (CoNLL-U heads, 1-based)."""
    if sentence.heads is None or sentence.deprels is None:
        return None
    root = sentence.heads.index(0) + 1
    subjects = [i for i, (head, rel) in enumerate(zip(sentence.heads, sentence.deprels))
                if head == root and rel == "nsubj"]
    return subjects[0] if len(subjects) == 1 else None


def other_noun_form(noun: str) -> str | None:
    """The noun in the other number (lexicon.PLURAL both ways); None for a name."""
    if lx.NOUN_NUMBER.get(noun) == "sing" and noun in lx.PLURAL:
        return lx.PLURAL[noun]
    if lx.NOUN_NUMBER.get(noun) == "plur":
        return lx.LEMMAS[noun]
    return None


def verb_forms(word: str) -> tuple[str, str] | None:
    """The agreeing word's (singular, plural) forms."""
    if word in AUXILIARY_FORMS:
        return AUXILIARY_FORMS[word]
    lemma = lx.LEMMAS.get(word)
    return (lx.THIRD_SING[lemma], lemma) if lemma in lx.THIRD_SING else None


def build_given_pair(sentence: ProbeSentence) -> AgreementPair | None:
    """The pair of a sentence whose data gives its counterfactual (Marvin & Linzen): the
    subject is the one word besides the labelled verb where the two differ. The counterfactual
    keeps the base's verb (masked in both): the pair differs at the subject alone."""
    verbs = [i for i, label in enumerate(sentence.labels) if label is not None]
    other = sentence.counterfactual
    differ = [i for i, (a, b) in enumerate(zip(sentence.words, other)) if a != b]
    if len(verbs) != 1 or len(other) != len(sentence.words) or len(differ) != 2 \
            or verbs[0] not in differ:
        return None
    verb = verbs[0]
    subject = differ[0] if differ[1] == verb else differ[1]
    number = str(sentence.labels[verb])
    own, theirs = sentence.words[verb], other[verb]
    forms = (own, theirs) if number == "sing" else (theirs, own)
    counterfactual = sentence.words[:subject] + (other[subject],) + sentence.words[subject + 1:]
    return AgreementPair(sentence.words, counterfactual, subject, verb, number, forms)


def build_pair(sentence: ProbeSentence) -> AgreementPair | None:
    """The sentence's minimal pair, or None where it has none: no labelled agreeing word, a
    name for a subject, or a determiner that marks number ("this", "these", "a", ...)."""
    if sentence.counterfactual is not None:
        return build_given_pair(sentence)
    verbs = [i for i, label in enumerate(sentence.labels) if label is not None]
    subject = find_subject(sentence)
    if len(verbs) != 1 or subject is None:
        return None
    words = sentence.words
    other = other_noun_form(words[subject])
    determiners = [i for i, (head, rel) in enumerate(zip(sentence.heads, sentence.deprels))
                   if head == subject + 1 and rel == "det"]
    forms = verb_forms(words[verbs[0]])
    if other is None or forms is None or [words[i] for i in determiners] != [NEUTRAL_DETERMINER]:
        return None
    counterfactual = words[:subject] + (other,) + words[subject + 1:]
    return AgreementPair(words, counterfactual, subject, verbs[0],
                         str(sentence.labels[verbs[0]]), forms)


def encode_pair(tokenizer: PreTrainedTokenizerBase, pair: AgreementPair, max_length: int
                ) -> InterchangeItem | None:
    """The pair's token ids with the agreeing word masked; None where the two are not aligned
    (the subject's sub-words differ in count between the numbers), the agreeing word or one of
    its forms is not one token, or the input is too long."""
    base = tokenizer(list(pair.words), is_split_into_words=True)
    other = tokenizer(list(pair.counterfactual), is_split_into_words=True)
    base_spans = word_spans(base.word_ids(), len(pair.words))
    other_spans = word_spans(other.word_ids(), len(pair.words))
    form_ids = tuple(token_id(tokenizer, form) for form in pair.forms)
    start, end = base_spans[pair.verb]
    if (base_spans != other_spans or end - start != 1 or None in form_ids
            or len(base["input_ids"]) > max_length):
        return None
    masked = [list(base["input_ids"]), list(other["input_ids"])]
    for ids in masked:
        ids[start] = tokenizer.mask_token_id
    first, last = base_spans[pair.subject]
    return InterchangeItem(pair, masked[0], masked[1], list(range(first, last)), start,
                         [s for s, _ in base_spans], form_ids)


def build_items(tokenizer: PreTrainedTokenizerBase, sentences: list[ProbeSentence],
                max_length: int) -> list[InterchangeItem]:
    pairs = [p for p in map(build_pair, sentences) if p is not None]
    return [i for i in (encode_pair(tokenizer, p, max_length) for p in pairs) if i is not None]


def choose_control_positions(item: InterchangeItem, rng: np.random.Generator) -> list[int]:
    """As many positions as the subject has, at words that are neither the subject nor the
    agreeing word (their first sub-words), drawn at random: the same interchange where the
    counterfactual differs from the base only by what attention carried there from the
    subject."""
    others = [p for p in item.word_positions
              if p not in item.subject_positions and p != item.verb_position]
    return sorted(rng.choice(others, size=len(item.subject_positions), replace=False).tolist())


def collate_items(items: list[InterchangeItem], pad_id: int
                  ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Base and counterfactual inputs of a batch, right-padded to one length: (batch, tokens)
    input_ids and attention_mask each."""
    width = max(len(i.base_ids) for i in items)

    def batch(rows: list[list[int]]) -> dict[str, torch.Tensor]:
        ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for r, row in enumerate(rows):
            ids[r, :len(row)] = torch.tensor(row)
            mask[r, :len(row)] = 1
        return {"input_ids": ids, "attention_mask": mask}

    return batch([i.base_ids for i in items]), batch([i.counterfactual_ids for i in items])
