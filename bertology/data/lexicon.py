"""Lexicon of the embedded synthetic corpus (see :mod:`bertology.data.synthetic`).

Each topic has its own nouns, verbs and adjectives so that documents about one topic share
vocabulary (which is what makes next-sentence prediction learnable); a general lexicon adds
topic-neutral words. Inflected forms are computed once at import into lookup tables, so the
generator never applies spelling rules per word, and the tables double as gold references for
tests and probes (e.g. the number of a noun or finite verb form).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TopicLexicon:
    name: str
    nouns: tuple[str, ...]  # singular lemmas
    transitive: tuple[str, ...]  # base forms
    intransitive: tuple[str, ...]
    adjectives: tuple[str, ...]


def _topic(
    name: str, nouns: str, transitive: str, intransitive: str, adjectives: str
) -> TopicLexicon:
    return TopicLexicon(
        name, tuple(nouns.split()), tuple(transitive.split()), tuple(intransitive.split()),
        tuple(adjectives.split()),
    )


# Words whose singular and plural coincide (sheep, fish, deer) are deliberately absent: number
# must be recoverable from the form alone, since it is the gold label for agreement probes.
TOPICS: dict[str, TopicLexicon] = {t.name: t for t in (
    _topic("kitchen",
           "chef waiter soup knife plate oven spoon recipe onion potato kettle dish bowl",
           "cook bake cut taste wash serve stir", "hurry simmer rest",
           "hot spicy sweet fresh salty sharp"),
    _topic("farm",
           "farmer cow horse goose mouse barn tractor field pig hen fence egg calf",
           "feed milk plant plow harvest chase ride fix", "graze wander roam",
           "muddy rural hungry brown wooden fertile"),
    _topic("school",
           "teacher student lesson desk pencil classroom exam notebook principal class ruler "
           "essay library",
           "teach study read write grade copy explain", "listen yawn graduate",
           "clever strict boring difficult curious diligent"),
    _topic("hospital",
           "doctor nurse patient surgeon ward pill injury wound tooth bandage clinic ambulance "
           "syringe",
           "treat examine heal cure visit inject", "recover cough faint",
           "sick healthy sterile painful pale feverish"),
    _topic("sea",
           "sailor ship boat captain wave island whale shark harbour anchor net shell beach crab",
           "sail steer catch pull spot tow", "drift swim sink float",
           "stormy deep calm blue wet sandy foggy"),
    _topic("music",
           "singer piano guitar drum song band concert melody violin choir orchestra note "
           "composer stage",
           "play compose tune record perform rehearse", "sing dance hum",
           "loud melodic soft rhythmic famous harmonic"),
    _topic("football",
           "player coach ball goal referee team stadium fan match striker goalkeeper whistle "
           "pitch",
           "kick pass tackle defend win lose", "score cheer shoot",
           "fast strong tired skilful agile loyal"),
    _topic("court",
           "judge lawyer witness jury thief verdict trial law crime prisoner clerk defendant",
           "accuse question convict sue release punish", "object testify confess",
           "guilty innocent fair legal formal solemn"),
    _topic("forest",
           "hunter wolf bear tree fox owl leaf branch path river squirrel mushroom cabin",
           "climb hunt chop follow gather track", "howl hide rustle",
           "dark green wild tall mossy dense"),
    _topic("office",
           "manager secretary computer printer meeting report email contract budget folder "
           "client boss deadline",
           "type print sign approve review schedule", "commute resign retire",
           "busy efficient digital urgent productive corporate"),
)}

GENERAL = _topic(
    "general",
    "man woman child person friend family day house city box room window door",
    "see like want find need have watch help carry bring", "wait smile sleep arrive laugh stay",
    "old new small big good happy young nice quiet",
)

NAMES: tuple[str, ...] = ("Anna", "Tom", "Maria", "David", "Lucy", "Peter", "Sara", "James")

DET_SING: tuple[str, ...] = ("the", "the", "the", "the", "a", "a", "a", "this", "that", "every")
DET_PLUR: tuple[str, ...] = ("the", "the", "the", "the", "the", "some", "some", "these", "those")
PREP_NMOD: tuple[str, ...] = ("near", "behind", "with", "beside", "from", "under", "of", "on")
PREP_OBL: tuple[str, ...] = ("in", "near", "behind", "under", "on", "with", "at", "beside")
PRE_VERB_ADVERBS: tuple[str, ...] = ("often", "always", "usually", "sometimes", "rarely")
DEGREE_ADVERBS: tuple[str, ...] = ("very", "quite", "really", "too")

_IRREGULAR_PLURALS = {
    "child": "children", "person": "people", "mouse": "mice", "man": "men", "woman": "women",
    "goose": "geese", "tooth": "teeth", "knife": "knives", "calf": "calves", "thief": "thieves",
    "wolf": "wolves", "leaf": "leaves", "potato": "potatoes",
}
_IRREGULAR_THIRD = {"have": "has"}
_SIBILANT_ENDINGS = ("s", "x", "z", "ch", "sh")
_VOWELS = frozenset("aeiou")


def pluralize(noun: str) -> str:
    """Plural of a singular noun (English spelling rules plus the irregular table)."""
    if noun in _IRREGULAR_PLURALS:
        return _IRREGULAR_PLURALS[noun]
    if noun.endswith(_SIBILANT_ENDINGS):
        return noun + "es"
    if noun.endswith("y") and noun[-2] not in _VOWELS:
        return noun[:-1] + "ies"
    return noun + "s"


def third_singular(verb: str) -> str:
    """Third-person singular present of a base verb form."""
    if verb in _IRREGULAR_THIRD:
        return _IRREGULAR_THIRD[verb]
    if verb.endswith(_SIBILANT_ENDINGS) or verb.endswith("o"):
        return verb + "es"
    if verb.endswith("y") and verb[-2] not in _VOWELS:
        return verb[:-1] + "ies"
    return verb + "s"


def indefinite_article(next_word: str) -> str:
    # Spelling-based; the lexicon avoids words like "hour" or "uniform" where this fails.
    return "an" if next_word[0] in _VOWELS else "a"


_ALL = (*TOPICS.values(), GENERAL)
ALL_NOUNS: frozenset[str] = frozenset(n for lex in _ALL for n in lex.nouns)
ALL_VERBS: frozenset[str] = frozenset(
    v for lex in _ALL for v in (*lex.transitive, *lex.intransitive))
ALL_ADJECTIVES: frozenset[str] = frozenset(a for lex in _ALL for a in lex.adjectives)

PLURAL: dict[str, str] = {n: pluralize(n) for n in sorted(ALL_NOUNS)}
THIRD_SING: dict[str, str] = {v: third_singular(v) for v in sorted(ALL_VERBS)}

# Gold number of every noun form (names are singular) and of every finite verb form usable in
# a present-tense clause: 3rd-singular -> "sing", base form -> "plur".
NOUN_NUMBER: dict[str, str] = {
    **{s: "sing" for s in PLURAL}, **{p: "plur" for p in PLURAL.values()},
    **{name: "sing" for name in NAMES},
}
VERB_NUMBER: dict[str, str] = {
    **{b: "plur" for b in THIRD_SING}, **{t: "sing" for t in THIRD_SING.values()},
    "is": "sing", "are": "plur", "does": "sing", "do": "plur",
}

# Inflected form -> lemma for content words (lets probes and tests compare across number).
LEMMAS: dict[str, str] = {
    **{a: a for a in ALL_ADJECTIVES}, **{b: b for b in THIRD_SING},
    **{t: b for b, t in THIRD_SING.items()}, **{n: n for n in PLURAL},
    **{p: s for s, p in PLURAL.items()},
}
