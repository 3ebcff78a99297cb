"""Embedded synthetic corpus: a seeded probabilistic grammar with exact gold annotations.

Documents pick one topic and draw most content words from that topic's lexicon, reusing a few
"protagonist" nouns across sentences, so that "does sentence B come from the same document as
A" (next-sentence prediction) is learnable by a tiny BERT. Every sentence carries gold Universal
POS tags, a UD dependency tree (CoNLL-U head indices), the main-clause negation flag and the
subject-verb agreement site with its attractors; these are the gold labels for the probes.

Main clauses are in the present tense so that number agreement is visible on the verb (or on
"does"/"do"/"is"/"are"). Subjects can carry PPs and subject/object relative clauses whose nouns
have an independently drawn number, which produces agreement attractors and varied tree depth.
"""

from __future__ import annotations

import logging
import operator
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property

from bertology.data import lexicon as lx

logger = logging.getLogger(__name__)

# Bump whenever generated output changes for a given seed: it is hashed into tokenizer caches.
GRAMMAR_VERSION = 2

UPOS_TAGS = frozenset({
    "ADJ", "ADP", "ADV", "AUX", "CCONJ", "DET", "INTJ", "NOUN", "NUM", "PART", "PRON", "PROPN",
    "PUNCT", "SCONJ", "SYM", "VERB", "X",
})

# --- Grammar probabilities (tuned so that ~1/3 of sentences have attractors, ~1/4 are negated,
# and max tree depth ranges from 2 to 7 while sentences stay within MAX_WORDS). ---
P_NEGATION = 0.24  # main clause
P_REL_NEGATION = 0.05  # inside relative clauses: makes "contains 'not'" differ from the gold flag
P_COPULA, P_TRANSITIVE = 0.2, 0.55  # predicate frames; intransitive gets the rest
P_PROTAGONIST = 0.3  # a noun slot reuses one of the document's protagonist nouns
P_NAME = 0.05  # a noun phrase is the document's protagonist name
P_TOPIC = 0.93  # otherwise a content word comes from the topic lexicon, else the general one
P_ADJ = (0.35, 0.12)  # first / second prenominal adjective
P_PP, P_REL = 0.35, 0.28  # noun modifiers at nesting level 0, multiplied by NEST_DECAY**level
SUBJECT_SCALE, OBJECT_SCALE = 1.0, 0.6  # objects are modified less: keeps sentences short
NEST_DECAY = 0.6
MAX_LEVEL = 4  # no noun modifiers at or below this nesting level
P_OBJECT_RELATIVE = 0.45  # "the chef that the waiters like" vs "the chef that likes ..."
P_TRANSITIVE_RELATIVE = 0.8
P_OBJ_COORD, P_ADJ_COORD = 0.08, 0.15
P_DEGREE, P_PRE_ADVERB = 0.2, 0.1
P_OBL_TRANSITIVE, P_OBL_INTRANSITIVE = 0.12, 0.55
MAX_WORDS, MAX_TRIES = 25, 10


@dataclass(frozen=True)
class Agreement:
    subject: int  # 0-based index of the main-clause subject head noun
    verb: int  # 0-based index of the agreeing word (main verb, or does/do/is/are)
    number: str  # "sing" | "plur"
    attractors: tuple[int, ...]  # nouns strictly between subject and verb of the other number


@dataclass(frozen=True)
class Sentence:
    words: tuple[str, ...]
    upos: tuple[str, ...]
    heads: tuple[int, ...]  # CoNLL-U: 1-based head index, 0 for the root
    deprels: tuple[str, ...]
    negated: bool  # main clause negated
    agreement: Agreement

    @property
    def text(self) -> str:
        text = " ".join(self.words).replace(" .", ".").replace(" ,", ",")
        return text[:1].upper() + text[1:]

    @cached_property
    def depths(self) -> tuple[int, ...]:
        """Distance of each word to the root (root = 0); probes ask for this repeatedly."""
        n, out = len(self.heads), []
        for i in range(n):
            depth, j = 0, i
            while self.heads[j] != 0:
                j, depth = self.heads[j] - 1, depth + 1
                if depth > n:
                    raise ValueError(f"dependency heads contain a cycle: {self.heads}")
            out.append(depth)
        return tuple(out)


@dataclass(frozen=True)
class SyntheticDocument:
    id: int
    topic: str
    sentences: tuple[Sentence, ...]

    @property
    def text(self) -> str:
        return " ".join(s.text for s in self.sentences)


class _Tokens:
    """Mutable sentence under construction; heads are 0-based here, -1 marks the root."""

    __slots__ = ("words", "upos", "heads", "rels", "nums")

    def __init__(self) -> None:
        self.words: list[str] = []
        self.upos: list[str] = []
        self.heads: list[int] = []
        self.rels: list[str] = []
        self.nums: list[str | None] = []  # grammatical number of nominals, None elsewhere

    def add(self, word: str, upos: str, head: int = -1, rel: str = "", num: str | None = None):
        self.words.append(word)
        self.upos.append(upos)
        self.heads.append(head)
        self.rels.append(rel)
        self.nums.append(num)
        return len(self.words) - 1

    def attach(self, i: int, head: int, rel: str) -> None:
        self.heads[i], self.rels[i] = head, rel

    def freeze(self, negated: bool, agreement: Agreement) -> Sentence:
        return Sentence(
            words=tuple(self.words), upos=tuple(self.upos),
            heads=tuple(h + 1 for h in self.heads), deprels=tuple(self.rels),
            negated=negated, agreement=agreement,
        )


class _DocumentGrammar:
    """Generates the sentences of one document: fixed topic, protagonists and shared rng."""

    def __init__(self, rng: random.Random, topic: str) -> None:
        self.rng = rng
        self.topic = lx.TOPICS[topic]
        self.protagonists = rng.sample(self.topic.nouns, 2)
        self.name = self._choice(lx.NAMES)

    # --- lexical choice -------------------------------------------------------------------
    def _choice(self, seq: Sequence[str]) -> str:
        # Faster than rng.choice and just as deterministic.
        return seq[int(self.rng.random() * len(seq))]

    def _lexicon(self) -> lx.TopicLexicon:
        return self.topic if self.rng.random() < P_TOPIC else lx.GENERAL

    def _noun_lemma(self) -> str:
        if self.rng.random() < P_PROTAGONIST:
            return self._choice(self.protagonists)
        return self._choice(self._lexicon().nouns)

    def _verb(self, transitive: bool) -> str:
        lex = self._lexicon()
        return self._choice(lex.transitive if transitive else lex.intransitive)

    def _adjective(self) -> str:
        return self._choice(self._lexicon().adjectives)

    def _adjectives(self) -> list[str]:
        if self.rng.random() >= P_ADJ[0]:
            return []
        first = self._adjective()
        if self.rng.random() < P_ADJ[1]:
            second = self._adjective()
            if second != first:
                return [first, second]
        return [first]

    def _determiner(self, number: str, next_word: str) -> str:
        if number == "plur":
            return self._choice(lx.DET_PLUR)
        det = self._choice(lx.DET_SING)
        return lx.indefinite_article(next_word) if det == "a" else det

    # --- phrases --------------------------------------------------------------------------
    def _noun_phrase(self, t: _Tokens, level: int, scale: float) -> tuple[int, str]:
        """Det (Adj)* Noun (PP | relative clause); returns (head index, number)."""
        if self.rng.random() < P_NAME:
            return t.add(self.name, "PROPN", num="sing"), "sing"
        lemma = self._noun_lemma()
        number = "plur" if self.rng.random() < 0.5 else "sing"
        form = lx.PLURAL[lemma] if number == "plur" else lemma
        adjectives = self._adjectives()
        noun = len(t.words) + 1 + len(adjectives)
        t.add(self._determiner(number, adjectives[0] if adjectives else form), "DET", noun, "det")
        for adjective in adjectives:
            t.add(adjective, "ADJ", noun, "amod")
        t.add(form, "NOUN", num=number)
        self._noun_modifier(t, noun, number, level, scale)
        return noun, number

    def _noun_modifier(self, t: _Tokens, noun: int, number: str, level: int, scale: float):
        if level >= MAX_LEVEL:
            return
        # Decaying probabilities keep nesting bounded while still yielding deep trees.
        decay = scale * NEST_DECAY**level
        r = self.rng.random()
        if r < P_PP * decay:
            t.attach(self._prep_phrase(t, lx.PREP_NMOD, level + 1), noun, "nmod")
        elif r < (P_PP + P_REL) * decay:
            self._relative_clause(t, noun, number, level + 1)

    def _prep_phrase(self, t: _Tokens, prepositions: Sequence[str], level: int) -> int:
        """Preposition + NP; the preposition is `case` of the noun, caller attaches the noun."""
        case = t.add(self._choice(prepositions), "ADP")
        noun, _ = self._noun_phrase(t, level, SUBJECT_SCALE)
        t.attach(case, noun, "case")
        return noun

    def _relative_clause(self, t: _Tokens, head: int, head_number: str, level: int) -> None:
        """Subject relative ("that likes the waiters") or object relative ("that the waiters
        like"); the relative verb agrees with its own subject, not with the head noun."""
        that = t.add("that", "PRON")
        negate = self.rng.random() < P_REL_NEGATION
        if self.rng.random() < P_OBJECT_RELATIVE:
            subject, number = self._noun_phrase(t, level, SUBJECT_SCALE)
            verb, _ = self._finite_verb(t, self._verb(True), number, negate)
            t.attach(subject, verb, "nsubj")
            t.attach(that, verb, "obj")
        else:
            transitive = self.rng.random() < P_TRANSITIVE_RELATIVE
            verb, _ = self._finite_verb(t, self._verb(transitive), head_number, negate)
            t.attach(that, verb, "nsubj")
            if transitive:
                t.attach(self._noun_phrase(t, level, SUBJECT_SCALE)[0], verb, "obj")
        t.attach(verb, head, "acl:relcl")

    def _finite_verb(self, t: _Tokens, lemma: str, number: str, negate: bool) -> tuple[int, int]:
        """Adds "(does|do not) verb" or the agreeing verb; returns (verb, agreeing word)."""
        singular = number == "sing"
        if not negate:
            verb = t.add(lx.THIRD_SING[lemma] if singular else lemma, "VERB")
            return verb, verb
        aux = t.add("does" if singular else "do", "AUX")
        neg = t.add("not", "PART")
        verb = t.add(lemma, "VERB")
        t.attach(aux, verb, "aux")
        t.attach(neg, verb, "advmod")
        return verb, aux

    def _copular_predicate(self, t: _Tokens, number: str, negate: bool) -> tuple[int, int]:
        """ "is (not) (very) hot (and fresh)": in UD the adjective is the head, "is" its cop."""
        cop = t.add("is" if number == "sing" else "are", "AUX")
        neg = t.add("not", "PART") if negate else -1
        degree = -1
        if self.rng.random() < P_DEGREE:
            degree = t.add(self._choice(lx.DEGREE_ADVERBS), "ADV")
        adjective = t.add(self._adjective(), "ADJ", -1, "root")
        t.attach(cop, adjective, "cop")
        for modifier in (neg, degree):
            if modifier >= 0:
                t.attach(modifier, adjective, "advmod")
        if self.rng.random() < P_ADJ_COORD:
            second = self._adjective()
            if second != t.words[adjective]:
                cc = t.add("and", "CCONJ")
                t.attach(cc, t.add(second, "ADJ", adjective, "conj"), "cc")
        return adjective, cop

    def _verbal_predicate(self, t: _Tokens, number: str, negate: bool, transitive: bool):
        adverb = -1
        if not negate and self.rng.random() < P_PRE_ADVERB:
            adverb = t.add(self._choice(lx.PRE_VERB_ADVERBS), "ADV")
        verb, agree = self._finite_verb(t, self._verb(transitive), number, negate)
        t.attach(verb, -1, "root")
        if adverb >= 0:
            t.attach(adverb, verb, "advmod")
        if transitive:
            obj, _ = self._noun_phrase(t, 0, OBJECT_SCALE)
            t.attach(obj, verb, "obj")
            if self.rng.random() < P_OBJ_COORD:
                cc = t.add("and", "CCONJ")
                # Plain conjunct (no modifiers) so the coordination stays short and unambiguous.
                conjunct, _ = self._noun_phrase(t, MAX_LEVEL, 0.0)
                t.attach(cc, conjunct, "cc")
                t.attach(conjunct, obj, "conj")
        p_obl = P_OBL_TRANSITIVE if transitive else P_OBL_INTRANSITIVE
        if self.rng.random() < p_obl:
            t.attach(self._prep_phrase(t, lx.PREP_OBL, 1), verb, "obl")
        return verb, agree

    # --- sentences ------------------------------------------------------------------------
    def _main_clause(self, t: _Tokens) -> tuple[Agreement, bool]:
        subject, number = self._noun_phrase(t, 0, SUBJECT_SCALE)
        negated = self.rng.random() < P_NEGATION
        r = self.rng.random()
        if r < P_COPULA:
            root, agree = self._copular_predicate(t, number, negated)
        else:
            root, agree = self._verbal_predicate(t, number, negated, r < P_COPULA + P_TRANSITIVE)
        t.attach(subject, root, "nsubj")
        t.add(".", "PUNCT", root, "punct")
        attractors = tuple(
            i for i in range(subject + 1, agree) if t.nums[i] is not None and t.nums[i] != number
        )
        return Agreement(subject, agree, number, attractors), negated

    def sentence(self) -> Sentence:
        # Resampling over-long sentences is cheap and keeps lengths in the target range.
        for _ in range(MAX_TRIES):
            t = _Tokens()
            agreement, negated = self._main_clause(t)
            if len(t.words) <= MAX_WORDS:
                break
        return t.freeze(negated, agreement)


def _validate(num_sentences: int, sentences_per_doc: tuple[int, int]) -> tuple[int, int, int]:
    try:
        n = operator.index(num_sentences)
    except TypeError:
        raise ValueError(f"num_sentences must be an integer, got {num_sentences!r}") from None
    if n < 1:
        raise ValueError(f"num_sentences must be >= 1, got {n}")
    try:
        lo, hi = (operator.index(x) for x in sentences_per_doc)
    except (TypeError, ValueError):
        raise ValueError(
            f"sentences_per_doc must be a (min, max) pair of integers, got {sentences_per_doc!r}"
        ) from None
    if not 1 <= lo <= hi:
        raise ValueError(f"sentences_per_doc must satisfy 1 <= min <= max, got ({lo}, {hi})")
    return n, lo, hi


def _documents(num_sentences: int, seed: int, lo: int, hi: int) -> Iterator[SyntheticDocument]:
    rng = random.Random(seed)
    topics = sorted(lx.TOPICS)
    produced = doc_id = 0
    while produced < num_sentences:
        size = min(rng.randint(lo, hi), num_sentences - produced)
        grammar = _DocumentGrammar(rng, topics[rng.randrange(len(topics))])
        sentences = tuple(grammar.sentence() for _ in range(size))
        yield SyntheticDocument(doc_id, grammar.topic.name, sentences)
        produced += size
        doc_id += 1


def iter_documents(
    num_sentences: int, seed: int = 0, sentences_per_doc: tuple[int, int] = (3, 8)
) -> Iterator[SyntheticDocument]:
    """Yield documents until `num_sentences` sentences have been produced (the last document
    may be cut short but has >= 1 sentence). Deterministic for a given seed: all randomness
    comes from one private ``random.Random(seed)``. Arguments are validated eagerly."""
    n, lo, hi = _validate(num_sentences, sentences_per_doc)
    return _documents(n, seed, lo, hi)


def generate_corpus(
    num_sentences: int, seed: int = 0, sentences_per_doc: tuple[int, int] = (3, 8)
) -> list[SyntheticDocument]:
    documents = list(iter_documents(num_sentences, seed, sentences_per_doc))
    logger.debug(
        "synthetic corpus v%d: %d sentences in %d documents (seed=%d)",
        GRAMMAR_VERSION, num_sentences, len(documents), seed,
    )
    return documents
