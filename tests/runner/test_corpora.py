"""Corpora (synthetic, WikiExtractor shards, plain files, datasets.load_dataset) and the
tokenizer cache."""

from __future__ import annotations

import html
import json
from itertools import islice

import pytest
from conftest import DATA_DIR

from bertology.config.groups import DataConfig
from bertology.data.corpora import build_corpus, iter_wikiextractor, split_sentences
from bertology.data.tokenizers import load_or_train_tokenizer, tokenizer_cache_key
from bertology.errors import UserError

WIKI = DATA_DIR / "wikipedia_en_wikiextractor"


def test_split_sentences():
    text = "Shaw was born in 1990. He played for Trouville (LUB). In 2015 he was drafted!"
    assert split_sentences(text) == ["Shaw was born in 1990.", "He played for Trouville (LUB).",
                                     "In 2015 he was drafted!"]
    assert split_sentences("Dr. smith arrived. 3 of them left.") == [
        "Dr. smith arrived.", "3 of them left."]


def test_wikiextractor_shard_documents_drop_titles_and_empty_docs():
    shard = WIKI / "wiki_00"
    text = shard.read_text(encoding="utf-8")
    docs = list(iter_wikiextractor(shard))
    first_body_lines = []
    for block in text.split("</doc>")[:-1]:
        body = [line for line in block.strip().splitlines()[2:] if line.strip()]
        if body:
            first_body_lines.append(html.unescape(body[0].strip()))
    assert len(docs) == len(first_body_lines) > 1
    assert docs[0][0].startswith("Jarred Shaw (born September 28, 1990)")
    # Each document starts with its first body line, not with the title line above it.
    assert all(line.startswith(doc[0]) for doc, line in zip(docs, first_body_lines))


def test_wikipedia_corpus_fraction_limits_shards():
    full = build_corpus(DataConfig(name="wikipedia", path=str(WIKI)), DATA_DIR)
    tenth = build_corpus(DataConfig(name="wikipedia", path=str(WIKI), fraction=0.1), DATA_DIR)
    assert full.fingerprint != tenth.fingerprint
    first = list(islice(tenth.iter_documents(), 5))
    assert first == list(islice(full.iter_documents(), len(first)))  # the first shard's
    assert 0 < sum(1 for _ in tenth.iter_documents()) < sum(1 for _ in full.iter_documents())


def test_files_corpus_reads_bert_format(tmp_path):
    (tmp_path / "a.txt").write_text("One sentence.\nTwo sentences.\n\nAnother doc.\n")
    (tmp_path / "b.txt").write_text("\n\nThird doc here.\n")
    corpus = build_corpus(DataConfig(name="files", files=[str(tmp_path / "*.txt")]), tmp_path)
    assert list(corpus.iter_documents()) == [["One sentence.", "Two sentences."],
                                             ["Another doc."], ["Third doc here."]]


def test_files_corpus_relative_to_data_root_and_bad_files(tmp_path):
    (tmp_path / "c.txt").write_text("A. B.\n")
    corpus = build_corpus(DataConfig(name="files", files=["c.txt"]), tmp_path)
    assert list(corpus.iter_documents()) == [["A. B."]]
    with pytest.raises(UserError, match="missing.txt"):
        build_corpus(DataConfig(name="files", files=["missing.txt"]), tmp_path)
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(UserError, match="empty"):
        build_corpus(DataConfig(name="files", files=["empty.txt"]), tmp_path)
    (tmp_path / "latin1.txt").write_bytes("caf\xe9 au lait.\n".encode("latin-1"))
    corpus = build_corpus(DataConfig(name="files", files=["latin1.txt"]), tmp_path)
    with pytest.raises(UserError, match="UTF-8"):
        list(corpus.iter_documents())


def test_hub_corpus_streams_local_files_through_load_dataset(tmp_path):
    rows = [{"text": "First article. It has two sentences.", "id": 1},
            {"text": "", "id": 2}, {"text": "Second article here.", "id": 3}]
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = DataConfig(name="hub", path="json", data_files=["corpus.jsonl"])
    docs = list(build_corpus(cfg, tmp_path).iter_documents())
    assert docs == [["First article.", "It has two sentences."], ["Second article here."]]
    bad = DataConfig(name="hub", path="json", data_files=["corpus.jsonl"], text_column="body")
    with pytest.raises(UserError, match="text_column"):
        list(build_corpus(bad, tmp_path).iter_documents())


def test_tokenizer_cache_is_keyed_by_corpus_and_settings(tmp_path):
    small = build_corpus(DataConfig(num_sentences=300), DATA_DIR)
    other = build_corpus(DataConfig(num_sentences=300, seed=1), DATA_DIR)
    first = load_or_train_tokenizer(small, "wordpiece", 500, tmp_path)
    cached = list((tmp_path / "tokenizers").iterdir())
    again = load_or_train_tokenizer(small, "wordpiece", 500, tmp_path)
    assert list((tmp_path / "tokenizers").iterdir()) == cached and len(cached) == 1
    assert again.get_vocab() == first.get_vocab()
    settings = [(small, "wordpiece", 500), (other, "wordpiece", 500), (small, "bpe", 500),
                (small, "wordpiece", 600)]
    keys = {tokenizer_cache_key(*setting) for setting in settings}
    assert len(keys) == 4
    bpe = load_or_train_tokenizer(small, "bpe", 500, tmp_path)
    assert type(bpe).__name__ == "RobertaTokenizer" and type(first).__name__ == "BertTokenizer"
