"""Perturbed copies of eval examples, to test what a fine-tuned model's predictions rest on.

Word order: Pham et al. (2020, "Out of Order") and Sinha et al. (2021) shuffle the words of
each input and find most predictions of GLUE classifiers unchanged; the survey (§3.1) cites
this as BERT relying little on word order. A copy's words are a seeded random permutation of
the original's whitespace tokens (each text of a pair shuffled on its own); inputs of one word
stay as they are.
"""

from __future__ import annotations

import numpy as np

from bertology.errors import require


def shuffle_text(text: str, rng: np.random.Generator) -> str:
    words = text.split()
    return " ".join(words[i] for i in rng.permutation(len(words)))


def shuffle_words(examples: list[dict], seed: int) -> list[dict]:
    """Classification examples with the words of text (and text_pair) shuffled."""
    require(all("text" in e for e in examples), "word-order shuffling needs sentence "
            "classification examples (a text and an optional text_pair)")
    rng = np.random.default_rng([seed, 2020])
    return [{**e, "text": shuffle_text(e["text"], rng),
             "text_pair": shuffle_text(e["text_pair"], rng) if e.get("text_pair") else
             e.get("text_pair")} for e in examples]
