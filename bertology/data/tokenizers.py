"""Tokenizers: trained on the corpus with the `tokenizers` library (WordPiece for BERT,
byte-level BPE for RoBERTa) and cached by a hash of corpus and settings, or loaded from a
checkpoint given by `model.name_or_path` (or, for pretraining, `model.tokenizer_name_or_path`)."""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from transformers import AutoTokenizer, BertTokenizer, PreTrainedTokenizerBase, RobertaTokenizer

from bertology.config.tokenizer_checks import check_tokenizer_files
from bertology.data import wordpiece
from bertology.data.corpora import Corpus
from bertology.errors import UserError, require
from bertology.families import family_of_checkpoint
from bertology.run.cache_notes import recompute

log = logging.getLogger(__name__)

# Empty tokenizers of each kind: training keeps their normaliser, pre-tokeniser, special tokens
# and post-processor ([CLS] A [SEP] B [SEP] for BERT, <s> A </s></s> B </s> for RoBERTa).
TOKENIZERS = {"wordpiece": BertTokenizer, "bpe": RobertaTokenizer}
TRAINING_SENTENCES = 200_000  # enough text for a vocabulary; a large corpus is not read whole
LEARNER_VERSION = 2  # 2: the deterministic WordPiece learner; older cached vocabularies differ
# Byte-level BPE marks a word start with a space ("Ġword"): pre-split words (tagging, probing)
# need one added, or every word is tokenised as if glued to the previous one.
PRE_SPLIT_OPTIONS = {"wordpiece": {}, "bpe": {"add_prefix_space": True}}


def _training_text(corpus: Corpus, limit: int) -> Iterator[list[str]]:
    """Batches of sentences, at most `limit` in all."""
    seen = 0
    for document in corpus.iter_documents():
        yield document
        seen += len(document)
        if seen >= limit:
            return


def tokenizer_cache_key(corpus: Corpus, kind: str, vocab_size: int) -> str:
    key = f"{corpus.fingerprint}:{kind}:{vocab_size}:{TRAINING_SENTENCES}:{LEARNER_VERSION}"
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def _train_wordpiece(text: Iterator[list[str]], vocab_size: int) -> BertTokenizer:
    """Our own deterministic learner (wordpiece.py): `tokenizers`' trainer gives a different
    vocabulary from run to run (huggingface/tokenizers#1794). Its byte-level BPE trainer has
    no such problem and is used as it is."""
    base = BertTokenizer()
    backend = base.backend_tokenizer
    counts = wordpiece.word_counts(text, backend.normalizer.normalize_str,
                                   backend.pre_tokenizer.pre_tokenize_str)
    ids = base.get_vocab()  # the special tokens; a dict in hash order, so put back in id order
    specials = sorted(ids, key=ids.get)
    vocab = wordpiece.learn_vocabulary(counts, specials, vocab_size)
    return BertTokenizer(vocab=vocab)


def train_tokenizer(corpus: Corpus, kind: str, vocab_size: int) -> PreTrainedTokenizerBase:
    if kind not in TOKENIZERS:
        raise UserError(f"model.tokenizer={kind!r} is unknown; use one of: {', '.join(TOKENIZERS)}")
    text = _training_text(corpus, TRAINING_SENTENCES)
    if kind == "wordpiece":
        return _train_wordpiece(text, vocab_size)
    return TOKENIZERS[kind]().train_new_from_iterator(text, vocab_size=vocab_size,
                                                      show_progress=False)


def load_or_train_tokenizer(corpus: Corpus, kind: str, vocab_size: int, cache_dir: Path,
                            pre_split: bool = False) -> PreTrainedTokenizerBase:
    """The cached tokenizer for (corpus, kind, vocab_size), trained on first use; pre_split:
    it will read pre-split words (tagging, probing)."""
    load_kwargs = PRE_SPLIT_OPTIONS[kind] if pre_split else {}
    path = cache_dir / "tokenizers" / tokenizer_cache_key(corpus, kind, vocab_size)
    if path.exists() or path.is_symlink():
        cached = load_cached_tokenizer(path, load_kwargs)
        if cached is not None:
            return cached
    log.info("training a %s tokenizer (vocab <= %d) on %s", kind, vocab_size, corpus.name)
    tokenizer = train_tokenizer(corpus, kind, vocab_size)
    # Written to a temporary dir and renamed, so a killed run never leaves a half cache entry.
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=".tmp-"))
    tokenizer.save_pretrained(tmp)
    try:
        os.replace(tmp, path)
    except OSError:  # another process won the race; its copy is identical
        shutil.rmtree(tmp, ignore_errors=True)
    return AutoTokenizer.from_pretrained(path, **load_kwargs) if load_kwargs else tokenizer


def load_cached_tokenizer(path: Path, load_kwargs: dict) -> PreTrainedTokenizerBase | None:
    """The cache entry's tokenizer, or None (the entry removed, cache_notes says so) when it
    does not read back whole: a damaged entry is trained again, never served."""
    try:
        require(path.is_dir(), f"{path} is a file, not a folder")
        require((path / "tokenizer.json").is_file(), "no tokenizer.json")
        check_tokenizer_files(path, "the cached tokenizer")
        return AutoTokenizer.from_pretrained(path, **load_kwargs)
    except (UserError, OSError, ValueError) as err:
        recompute("tokenizer", path, str(err).splitlines()[0] if str(err) else "unreadable")
        return None


def tokenizer_options(model_type: str) -> dict:
    """Loading options for a checkpoint's tokenizer that will read pre-split words."""
    return {"add_prefix_space": True} if family_of_checkpoint(model_type).prefix_space else {}


def load_pretrained_tokenizer(name_or_path: str, key: str = "model.name_or_path",
                              **load_kwargs) -> PreTrainedTokenizerBase:
    """A checkpoint's tokenizer; `key` names the option the path came from, for the error."""
    folder = Path(name_or_path).expanduser()
    if folder.is_dir() and not (folder / "tokenizer.json").exists():  # a v4 or older save
        built = [n for n in ("vocab.txt", "vocab.json", "merges.txt") if (folder / n).exists()]
        log.info("%s: no tokenizer.json: the tokenizer is built from %s", folder,
                 " and ".join(built) or "its tokenizer_config.json")
    try:
        return AutoTokenizer.from_pretrained(name_or_path, trust_remote_code=False,
                                             **load_kwargs)
    except (OSError, ValueError) as err:
        raise UserError(
            f"{key}={name_or_path!r}: no tokenizer could be loaded "
            f"({str(err).splitlines()[0]}); give a checkpoint dir with tokenizer files"
        ) from err
