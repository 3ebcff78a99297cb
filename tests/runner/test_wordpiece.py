"""The deterministic WordPiece learner: BPE merges with ties broken by text, so one corpus
gives one vocabulary in every process (huggingface/tokenizers#1794 is why we have our own)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import pytest
from conftest import DATA_DIR

from bertology.config.groups import DataConfig
from bertology.data.corpora import build_corpus
from bertology.data.tokenizers import train_tokenizer
from bertology.data.wordpiece import learn_vocabulary

SPECIALS = ["[PAD]", "[UNK]"]
# The Hugging Face course's BPE example: hug×10, pug×5, pun×12, bun×4, hugs×5.
COUNTS = Counter({"hug": 10, "pug": 5, "pun": 12, "bun": 4, "hugs": 5})


def test_merges_take_the_most_frequent_pair_and_break_ties_by_text():
    vocab = learn_vocabulary(COUNTS, SPECIALS, vocab_size=100)
    pieces = list(vocab)
    assert pieces[:9] == [*SPECIALS, "b", "h", "p", "##g", "##n", "##s", "##u"]
    # ##u ##g occurs 20 times, then ##u ##n 16, h ##ug 15, p ##un 12; then hug ##s and p ##ug
    # tie at 5 and "hug" < "p" decides; b ##un (4) comes last.
    assert pieces[9:] == ["##ug", "##un", "hug", "pun", "hugs", "pug", "bun"]
    assert vocab == {piece: i for i, piece in enumerate(pieces)}


def test_the_vocabulary_does_not_depend_on_the_order_words_arrive_in():
    reordered = Counter(dict(reversed(list(COUNTS.items()))))
    assert list(learn_vocabulary(reordered, SPECIALS, 100)) == list(
        learn_vocabulary(COUNTS, SPECIALS, 100))


def test_vocab_size_caps_the_merges():
    assert list(learn_vocabulary(COUNTS, SPECIALS, vocab_size=11))[9:] == ["##ug", "##un"]


def test_a_trained_tokenizer_keeps_each_corpus_word_whole_and_splits_new_words():
    corpus = build_corpus(DataConfig(num_sentences=300), DATA_DIR)
    tokenizer = train_tokenizer(corpus, "wordpiece", 2000)
    assert len(tokenizer) <= 2000 and tokenizer.get_vocab()["[PAD]"] == 0
    sentences = [s for document in corpus.iter_documents() for s in document]
    words = {w.lower().strip(".") for s in sentences for w in s.split()}
    # The synthetic grammar's vocabulary is closed and far smaller than 2000 pieces, so the
    # merges run until every word is one piece; an unseen word falls back to its pieces.
    assert all(tokenizer.tokenize(word) == [word] for word in words)
    assert tokenizer.tokenize("rhythmicness")[0] == "rhythmic"
    assert tokenizer.unk_token not in tokenizer.tokenize(" ".join(sorted(words)))


TRAIN_AND_PRINT = f"""
import json
from bertology.config.groups import DataConfig
from bertology.data.corpora import build_corpus
from bertology.data.tokenizers import train_tokenizer
corpus = build_corpus(DataConfig(num_sentences=2000), {str(DATA_DIR)!r})
print(json.dumps(train_tokenizer(corpus, "wordpiece", 2000).get_vocab(), sort_keys=True))
"""


@pytest.mark.slow
def test_two_processes_learn_the_same_vocabulary(synthetic_tokenizer):
    """The bug this learner exists for: tokenizers' trainer numbered pieces in hash order, so a
    second process learned another vocabulary and the same seed gave other results."""
    vocabularies = []
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        out = subprocess.run([sys.executable, "-c", TRAIN_AND_PRINT], env=env, check=True,
                             capture_output=True, text=True).stdout
        vocabularies.append(json.loads(out.splitlines()[-1]))
    assert vocabularies[0] == vocabularies[1]
    assert vocabularies[0] == synthetic_tokenizer.get_vocab()
