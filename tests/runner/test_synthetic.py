"""Tests for the embedded synthetic corpus: determinism, well-formed gold annotations, and the
distributional properties the pretraining and probing experiments rely on."""

from __future__ import annotations

import itertools
import random
import statistics

import pytest

from bertology.data import lexicon as lx
from bertology.data.synthetic import (
    GRAMMAR_VERSION,
    UPOS_TAGS,
    Agreement,
    Sentence,
    SyntheticDocument,
    generate_corpus,
    iter_documents,
)

UD_DEPRELS = {
    "root", "nsubj", "obj", "det", "amod", "nmod", "case", "acl:relcl", "aux", "cop", "advmod",
    "punct", "obl", "conj", "cc",
}
CONTENT_UPOS = {"NOUN", "VERB", "ADJ"}


@pytest.fixture(scope="module")
def corpus() -> list[SyntheticDocument]:
    return generate_corpus(3000, seed=123)


@pytest.fixture(scope="module")
def sentences(corpus: list[SyntheticDocument]) -> list[Sentence]:
    return [s for doc in corpus for s in doc.sentences]


def children(sentence: Sentence, head: int) -> list[int]:
    """0-based indices of the dependents of the 0-based word `head`."""
    return [i for i, h in enumerate(sentence.heads) if h == head + 1]


def agreeing_word(sentence: Sentence, verb: int) -> int:
    """The word carrying agreement for a clause headed by `verb`: aux/cop if any, else verb."""
    for child in children(sentence, verb):
        if sentence.deprels[child] in ("aux", "cop"):
            return child
    return verb


# --- API, determinism, arguments ------------------------------------------------------------


def test_grammar_version_is_int() -> None:
    assert isinstance(GRAMMAR_VERSION, int) and GRAMMAR_VERSION >= 1


def test_same_seed_same_corpus_different_seed_different() -> None:
    a, b = generate_corpus(400, seed=7), generate_corpus(400, seed=7)
    assert a == b
    assert [d.text for d in a] == [d.text for d in b]
    c = generate_corpus(400, seed=8)
    assert [d.text for d in a] != [d.text for d in c]


def test_generation_does_not_touch_global_random_state() -> None:
    random.seed(0)
    expected = random.random()
    random.seed(0)
    generate_corpus(50, seed=3)
    assert random.random() == expected


@pytest.mark.parametrize("n", [1, 2, 7, 50, 333])
@pytest.mark.parametrize("per_doc", [(3, 8), (1, 1), (5, 5), (2, 20)])
def test_exact_sentence_count_and_document_sizes(n: int, per_doc: tuple[int, int]) -> None:
    docs = generate_corpus(n, seed=1, sentences_per_doc=per_doc)
    assert sum(len(d.sentences) for d in docs) == n
    assert [d.id for d in docs] == list(range(len(docs)))
    lo, hi = per_doc
    assert all(lo <= len(d.sentences) <= hi for d in docs[:-1])
    assert 1 <= len(docs[-1].sentences) <= hi


def test_iter_documents_matches_generate_corpus() -> None:
    assert list(iter_documents(120, seed=5)) == generate_corpus(120, seed=5)


@pytest.mark.parametrize(
    ("num_sentences", "per_doc"),
    [(0, (3, 8)), (-5, (3, 8)), (2.5, (3, 8)), ("10", (3, 8)), (10, (0, 3)), (10, (5, 3)),
     (10, (3,)), (10, (1, 2, 3)), (10, None), (10, (1.5, 3))],
)
def test_bad_arguments_raise_value_error(num_sentences, per_doc) -> None:
    # Validation is eager: the error is raised by the call, not on first iteration.
    with pytest.raises(ValueError, match="num_sentences|sentences_per_doc"):
        iter_documents(num_sentences, sentences_per_doc=per_doc)
    with pytest.raises(ValueError):
        generate_corpus(num_sentences, sentences_per_doc=per_doc)


# --- lexicon --------------------------------------------------------------------------------


def test_lexicon_sizes_and_unambiguous_number() -> None:
    assert len(lx.TOPICS) >= 8
    for lex in lx.TOPICS.values():
        assert len(set(lex.nouns)) >= 12 and len(set(lex.transitive)) >= 6
        assert len(set(lex.intransitive)) >= 3 and len(set(lex.adjectives)) >= 6
    # Number must be recoverable from the form: singular and plural forms never collide.
    assert not set(lx.PLURAL) & set(lx.PLURAL.values())
    assert not set(lx.THIRD_SING) & set(lx.THIRD_SING.values())
    assert lx.PLURAL["child"] == "children" and lx.PLURAL["dish"] == "dishes"
    assert lx.PLURAL["library"] == "libraries" and lx.THIRD_SING["have"] == "has"
    assert lx.THIRD_SING["teach"] == "teaches" and lx.THIRD_SING["carry"] == "carries"


# --- well-formed annotations ----------------------------------------------------------------


def test_annotation_tuples_and_tags(sentences: list[Sentence]) -> None:
    for s in sentences:
        n = len(s.words)
        assert len(s.upos) == len(s.heads) == len(s.deprels) == n
        assert set(s.upos) <= UPOS_TAGS
        assert set(s.deprels) <= UD_DEPRELS
        assert all(0 <= h <= n for h in s.heads)
        assert s.words[-1] == "." and s.upos[-1] == "PUNCT"
        assert all(w and " " not in w for w in s.words)


def test_heads_form_a_tree_with_one_root(sentences: list[Sentence]) -> None:
    for s in sentences:
        roots = [i for i, h in enumerate(s.heads) if h == 0]
        assert len(roots) == 1 and s.deprels[roots[0]] == "root"
        assert all((h == 0) == (rel == "root") for h, rel in zip(s.heads, s.deprels))
        for i in range(len(s.heads)):
            seen, j = set(), i
            while s.heads[j] != 0:  # every word reaches the root without revisiting a word
                assert j not in seen, f"cycle in {s.heads}"
                seen.add(j)
                j = s.heads[j] - 1
            assert j == roots[0]
        assert s.heads[-1] == roots[0] + 1 and s.deprels[-1] == "punct"


def test_depths_consistent_with_heads(sentences: list[Sentence]) -> None:
    for s in sentences:
        for i, h in enumerate(s.heads):
            assert s.depths[i] == (0 if h == 0 else s.depths[h - 1] + 1)


def test_depths_detects_cycles() -> None:
    agreement = Agreement(subject=0, verb=1, number="sing", attractors=())
    bad = Sentence(("a", "b", "."), ("NOUN", "VERB", "PUNCT"), (2, 1, 0),
                   ("nsubj", "root", "punct"), False, agreement)
    with pytest.raises(ValueError, match="cycle"):
        _ = bad.depths


def test_ud_conventions(sentences: list[Sentence]) -> None:
    nominal = {"NOUN", "PROPN"}
    expected_dependent_upos = {
        "det": {"DET"}, "amod": {"ADJ"}, "case": {"ADP"}, "cop": {"AUX"}, "aux": {"AUX"},
        "cc": {"CCONJ"}, "nmod": nominal, "obl": nominal, "acl:relcl": {"VERB"},
    }
    expected_head_upos = {
        "det": {"NOUN"}, "amod": {"NOUN"}, "case": nominal, "nmod": nominal,
        "acl:relcl": {"NOUN"}, "cop": {"ADJ"}, "aux": {"VERB"}, "obl": {"VERB"},
    }
    for s in sentences:
        for i, (rel, h) in enumerate(zip(s.deprels, s.heads)):
            if rel in expected_dependent_upos:
                assert s.upos[i] in expected_dependent_upos[rel], (s.text, i, rel)
            if rel in expected_head_upos:
                assert s.upos[h - 1] in expected_head_upos[rel], (s.text, i, rel)
            if rel in ("det", "amod", "case"):
                assert h - 1 > i  # these precede their head in English
            if s.words[i] == "not":
                assert s.upos[i] == "PART" and rel == "advmod"
            if s.upos[i] == "PRON":  # relative "that": argument of the relative-clause verb
                assert rel in ("nsubj", "obj") and s.deprels[h - 1] == "acl:relcl"


def test_text_round_trips_words(sentences: list[Sentence]) -> None:
    for s in sentences:
        text = s.text
        assert text[0].isupper() and text.endswith(".") and not text.endswith(" .")
        assert text[:-1].split() + ["."] == [s.words[0][:1].upper() + s.words[0][1:],
                                             *s.words[1:]]
        assert [w.lower() for w in text[:-1].split()] == [w.lower() for w in s.words[:-1]]


def test_document_text_joins_sentences(corpus: list[SyntheticDocument]) -> None:
    for doc in corpus[:50]:
        assert doc.text == " ".join(s.text for s in doc.sentences)
        assert doc.topic in lx.TOPICS and doc.sentences


def test_sentence_lengths(sentences: list[Sentence]) -> None:
    lengths = [len(s.words) for s in sentences]
    assert max(lengths) <= 25 and min(lengths) >= 3
    assert 5 <= statistics.median(lengths) <= 25
    assert sum(5 <= n <= 25 for n in lengths) / len(lengths) > 0.9


# --- agreement and negation -----------------------------------------------------------------


def test_main_clause_agreement(sentences: list[Sentence]) -> None:
    for s in sentences:
        a = s.agreement
        assert a.number in ("sing", "plur") and 0 <= a.subject < a.verb < len(s.words)
        assert s.upos[a.subject] in ("NOUN", "PROPN") and s.deprels[a.subject] == "nsubj"
        assert s.heads[a.subject] == s.heads.index(0) + 1  # subject of the main clause
        assert lx.NOUN_NUMBER[s.words[a.subject]] == a.number
        assert lx.VERB_NUMBER[s.words[a.verb]] == a.number
        assert agreeing_word(s, s.heads.index(0)) == a.verb
        expected = tuple(
            i for i in range(a.subject + 1, a.verb)
            if s.upos[i] in ("NOUN", "PROPN") and lx.NOUN_NUMBER[s.words[i]] != a.number
        )
        assert a.attractors == expected


def test_relative_clause_verbs_agree_with_their_own_subject(sentences: list[Sentence]) -> None:
    checked = 0
    for s in sentences:
        for verb, rel in enumerate(s.deprels):
            if rel != "acl:relcl":
                continue
            subject = next(c for c in children(s, verb) if s.deprels[c] == "nsubj")
            # "that" as subject inherits the number of the noun the relative clause modifies.
            noun = s.heads[verb] - 1 if s.words[subject] == "that" else subject
            word = s.words[agreeing_word(s, verb)]
            assert lx.VERB_NUMBER[word] == lx.NOUN_NUMBER[s.words[noun]], s.text
            checked += 1
    assert checked > 100


def test_attractor_and_number_distribution(sentences: list[Sentence]) -> None:
    with_attractor = sum(bool(s.agreement.attractors) for s in sentences) / len(sentences)
    assert with_attractor >= 0.2
    numbers = [s.agreement.number for s in sentences]
    assert 0.3 < numbers.count("sing") / len(numbers) < 0.7


def test_negation_flag_matches_main_clause_not(sentences: list[Sentence]) -> None:
    for s in sentences:
        root = s.heads.index(0)
        main_not = any(s.words[c] == "not" and s.upos[c] == "PART" and s.deprels[c] == "advmod"
                       for c in children(s, root))
        assert s.negated == main_not, s.text
        if s.negated:  # "does/do not" + base verb, or "is/are not" + adjective
            aux = s.agreement.verb
            assert s.words[aux] in ("does", "do", "is", "are") and s.words[aux + 1] == "not"
    share = sum(s.negated for s in sentences) / len(sentences)
    assert 0.15 <= share <= 0.35


def test_frames_and_constructions_all_occur(sentences: list[Sentence]) -> None:
    rels = {rel for s in sentences for rel in s.deprels}
    assert {"obj", "cop", "obl", "nmod", "acl:relcl", "conj", "aux"} <= rels
    relative_pronoun_rels = {s.deprels[i] for s in sentences for i, u in enumerate(s.upos)
                             if u == "PRON"}
    assert relative_pronoun_rels == {"nsubj", "obj"}  # subject and object relatives


# --- distributional properties --------------------------------------------------------------


def test_depth_variety(sentences: list[Sentence]) -> None:
    max_depths = [max(s.depths) for s in sentences]
    assert min(max_depths) <= 3 and max(max_depths) >= 6
    assert sum(d >= 6 for d in max_depths) >= 20


def _content_lemmas(s: Sentence) -> set[str]:
    return {lx.LEMMAS[w] for w, u in zip(s.words, s.upos) if u in CONTENT_UPOS}


def _jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a | b else 0.0


def test_topic_coherence(corpus: list[SyntheticDocument]) -> None:
    docs = [[_content_lemmas(s) for s in d.sentences] for d in corpus if len(d.sentences) >= 2]
    same = statistics.mean(
        _jaccard(a, b) for sents in docs for a, b in itertools.combinations(sents, 2)
    )
    rng = random.Random(0)
    pairs = [rng.sample(range(len(docs)), 2) for _ in range(3000)]
    different = statistics.mean(
        _jaccard(rng.choice(docs[i]), rng.choice(docs[j])) for i, j in pairs
    )
    assert same > 3 * different and same - different > 0.05, (same, different)


def test_documents_mostly_use_their_topic_lexicon(corpus: list[SyntheticDocument]) -> None:
    hits = total = 0
    for doc in corpus:
        lex = lx.TOPICS[doc.topic]
        vocab = {*lex.nouns, *lex.transitive, *lex.intransitive, *lex.adjectives}
        for s in doc.sentences:
            lemmas = [lx.LEMMAS[w] for w, u in zip(s.words, s.upos) if u in CONTENT_UPOS]
            hits += sum(lemma in vocab for lemma in lemmas)
            total += len(lemmas)
    assert 0.75 < hits / total < 0.97
