"""Data: the embedded synthetic corpus, real corpora, tokenizers, input formats and the example
stream; labelled tasks, probe sentences and cloze suites, with their readers."""
