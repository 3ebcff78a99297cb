"""Every reader of a data file names the file and the line (or the sentence) of what is wrong
there, and what it is (issue 20). Each case is a small file with one fault at a line counted
by hand; the reader must raise UserError with `<file>:<line>:` (or the sentence id)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bertology.config.groups import TaskConfig
from bertology.data.cloze_suites import read_jsonl, read_tsv
from bertology.data.corpora import iter_plain_text, iter_wikiextractor
from bertology.data.probe_sentences import load_conllu_sentences
from bertology.data.tasks import load_conll03, load_conllu, load_glue_tsv, load_squad_articles
from bertology.errors import UserError

SST2 = TaskConfig(name="sst2", kind="classification", format="glue_tsv",
                  text_columns=["sentence"], label_column="label", labels=["0", "1"])
CONLL03 = TaskConfig(name="conll03", kind="tagging", format="conll03", labels=["O", "B-PER"])
UPOS = TaskConfig(name="ud_pos", kind="tagging", format="conllu", labels=["DET", "NOUN", "VERB"])


def word(index: int, form: str, upos: str, head: int) -> str:
    return f"{index}\t{form}\t{form}\t{upos}\t_\t_\t{head}\tdep\t_\t_"


def tree(sent_id: str | None, heads: list[int]) -> list[str]:
    """A sentence block: 2 comment lines (1 without an id) then one word per head."""
    comments = [f"# sent_id = {sent_id}"] if sent_id else []
    words = [word(i, f"w{i}", "NOUN", h) for i, h in enumerate(heads, 1)]
    return [*comments, "# text = ...", *words, ""]


GOOD = tree("a", [2, 0, 2])  # lines 1-6


def read_conllu_probe(path: Path):
    return load_conllu_sentences(path, "upos")


CASES = {
    # name: (file lines, reader, expected fragment (":<line>:" after the file name))
    "tsv field count": (["sentence\tlabel", "fine\t1", "bad line with no tab"],
                        lambda p: load_glue_tsv(p, SST2), ":3: 1 fields"),
    "tsv label": (["sentence\tlabel", "fine\t1", "odd\t7"], lambda p: load_glue_tsv(p, SST2),
                  ":3: label '7'"),
    "conll03 tag": (["-DOCSTART- -X- -X- O", "", "John NNP B-NP B-PER", "runs VBZ B-VP X-ACT"],
                    lambda p: load_conll03(p, CONLL03), ":4: tag 'X-ACT'"),
    "conllu fields": ([*GOOD, "# sent_id = b", "1\tw\tw\tNOUN\t_\t_\t0\troot\t_\t_\textra"],
                      read_conllu_probe, ":8: not valid CoNLL-U (11 tab-separated"),
    "conllu two roots": ([*GOOD, *tree("b", [0, 1, 0])], read_conllu_probe,
                         ":11: sentence b: 2 words have HEAD 0"),
    "conllu no root": ([*GOOD, *tree("b", [2, 3, 1])], read_conllu_probe,
                       ":9: sentence b: 0 words have HEAD 0"),
    "conllu cycle": ([*GOOD, *tree("b", [0, 3, 2])], read_conllu_probe,
                     ":10: sentence b: word 2's HEAD chain loops (2 -> 3 -> 2)"),
    "conllu head outside": ([*GOOD, *tree("b", [0, 7, 1])], read_conllu_probe,
                            ":10: sentence b: HEAD '7' is not a word of the sentence"),
    "conllu id order": ([*GOOD, "# sent_id = b", word(1, "x", "NOUN", 0), word(3, "y", "NOUN", 1)],
                        read_conllu_probe, ":9: sentence b: word ID 3 where 2 belongs"),
    "conllu label, no sent_id": ([*tree(None, [0, 1]), *tree(None, [2, 0])],
                                 lambda p: load_conllu(p, TaskConfig(
                                     name="ud", kind="tagging", format="conllu",
                                     labels=["DET"])),
                                 "sentence number 1 (no sent_id): upos 'NOUN'"),
    "squad json": (['{"data": [', '  {"title": "A",', '   "paragraphs": [}]}'],
                   load_squad_articles, ":3: not JSON"),
    "squad field": (['{"data": [{"title": "A", "paragraphs": [{"context": "c", "qas": '
                     '[{"id": "q1", "question": "why"}]}]}]}'],
                    load_squad_articles, ": article 1 (A): no field 'answers'"),
    "jsonl not json": (['{"a": 1}', '{"a": 2', '{"a": 3}'], lambda p: read_jsonl(p, ("a",)),
                       ":2: not JSON"),
    "jsonl not an object": (['{"a": 1}', '[1, 2]'], lambda p: read_jsonl(p, ("a",)),
                            ":2: a JSON list, not an object"),
    "jsonl field": (['{"a": 1}', '{"b": 2}'], lambda p: read_jsonl(p, ("a",)), ":2: no field"),
    "cloze tsv": (["a\tb", "1\t2", "3"], lambda p: read_tsv(p, ("a", "b")), ":3: 1 fields"),
    "wikiextractor close": (['<doc id="1" url="u" title="T">', "T", "Text.", "</doc>",
                             "</doc>"], lambda p: list(iter_wikiextractor(p)),
                            ":5: </doc> without <doc>"),
}


@pytest.mark.parametrize("name", CASES)
def test_reader_names_the_file_and_line(name, tmp_path):
    lines, read, expected = CASES[name]
    path = tmp_path / "data.txt"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(UserError) as err:
        read(path)
    message = str(err.value)
    assert f"{path}{expected}" in message or (expected in message and str(path) in message), \
        message
    assert "\n" not in message


@pytest.mark.parametrize("read", [lambda p: list(iter_plain_text(p)),
                                  lambda p: list(iter_wikiextractor(p))],
                         ids=["plain text", "wikiextractor"])
def test_a_byte_that_is_not_utf8_names_its_line(read, tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_bytes('<doc id="1" url="u" title="T">\nT\ncaf\xe9\n</doc>\n'.encode("latin-1"))
    with pytest.raises(UserError, match=rf"{path}:3: not UTF-8 text"):
        read(path)


@pytest.mark.parametrize("split", ["train", "eval"])
def test_a_split_file_with_a_header_and_no_rows_is_named_with_its_split(split, tmp_path):
    """An SST-2 file with its header and no rows: the error names the file and the split
    (it once said "no training or no eval examples" and neither)."""
    from dataclasses import replace

    from bertology.data.tasks import load_task

    root = tmp_path / "glue_sst2"
    root.mkdir()
    rows = "sentence\tlabel\n" + "".join(f"a fine film {i}\t{i % 2}\n" for i in range(40))
    (root / "train.tsv").write_text("sentence\tlabel\n" if split == "train" else rows)
    (root / "dev.tsv").write_text("sentence\tlabel\n" if split == "eval" else rows)
    task = replace(SST2, path="glue_sst2", train_file="train.tsv", eval_file="dev.tsv",
                   source="local")
    empty = root / ("train.tsv" if split == "train" else "dev.tsv")
    with pytest.raises(UserError, match=f"{empty} \\(the {split} split\\) holds no examples"):
        load_task(task, tmp_path)
