"""Corpora, the embedded synthetic corpus, tokenizers and input formats."""
