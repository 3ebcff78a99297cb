"""Task data: the files under the data root load (the full sets with their published counts),
bad files are refused in one line that names the file (and line), the hub converters map the
hub's schemas, and encoding labels first sub-tokens and finds answer spans."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import DATA_DIR, compose_config

from bertology.config.finetune_config import load_finetune_config
from bertology.data.encode import IGNORE, encode
from bertology.data.hub_tasks import load_hub
from bertology.data.tasks import load_task
from bertology.errors import UserError

MINILM = "sentence-transformers/all-MiniLM-L6-v2"


def task_config(name: str, *overrides: str):
    return load_finetune_config(compose_config("finetune", [f"task={name}", *overrides])).task


@pytest.fixture(scope="module")
def minilm_tokenizer():
    from bertology.config.path_checks import resolve_checkpoint
    from bertology.data.tokenizers import load_pretrained_tokenizer

    return load_pretrained_tokenizer(resolve_checkpoint(MINILM))


def test_sst2_reads_sentences_and_binary_labels():
    data = load_task(task_config("sst2"), DATA_DIR, max_train_examples=50)
    assert len(data.train) == 50 and data.labels == ["0", "1"]
    assert {e["label"] for e in data.eval} == {0, 1}
    assert all(e["text_pair"] is None and e["text"] for e in data.eval)
    assert data.eval[0] == {"text": "it 's a charming and often affecting journey .",
                            "text_pair": None, "label": 1}


def test_mrpc_reads_pairs_despite_the_bom_and_stray_quotes():
    data = load_task(task_config("mrpc"), DATA_DIR)
    first = data.eval[0]
    assert first["text_pair"].startswith('"The foodservice pie business')
    assert first["label"] == 1


def test_conll03_skips_docstart_and_reads_bio_tags():
    task = task_config("conll03")
    data = load_task(task, DATA_DIR)
    assert data.labels[0] == "O"
    first = data.train[0]  # the file starts with -DOCSTART-, then this sentence
    assert first["words"][:3] == ["EU", "rejects", "German"]
    assert [data.labels[t] for t in first["tags"][:3]] == ["B-ORG", "O", "B-MISC"]
    assert all("-DOCSTART-" not in e["words"] for e in data.train + data.eval)


@pytest.mark.slow
def test_ud_pos_reads_syntactic_words():
    data = load_task(task_config("ud_pos"), DATA_DIR)
    assert all(len(e["words"]) == len(e["tags"]) for e in data.eval)
    # the 9th train sentence has the multi-word token 19-20 "don't": its words do, n't
    assert data.train[8]["words"][17:20] == ["I", "do", "n't"]


def test_squad_is_split_by_article_with_no_shared_context():
    data = load_task(task_config("squad"), DATA_DIR)
    assert data.train and data.eval
    assert not {e["context"] for e in data.train} & {e["context"] for e in data.eval}
    assert data.train[0]["answers"]["text"][0] == "Denver Broncos"


def full(name: str, data_set: str, *counts):
    return pytest.param(name, *counts, marks=pytest.mark.data(data_set), id=name)


@pytest.mark.slow
@pytest.mark.parametrize("name, train, evaluation, words", [
    full("sst2", "glue_sst2", 67349, 872, None),
    full("mrpc", "glue_mrpc", 3668, 408, None),
    full("conll03", "conll2003_ner", 14041, 3250, 51362),  # eng.testa, -DOCSTART- excluded
    full("ud_pos", "ud_english_ewt", 12544, 2001, None),
    full("squad", "squad_v1.1", 10570 - 1988, 1988, None),  # eval: the last 10 of 48 articles
])
def test_the_full_sets_have_their_published_counts(name, train, evaluation, words):
    data = load_task(task_config(name), DATA_DIR)
    assert (len(data.train), len(data.eval)) == (train, evaluation)
    if words is not None:
        assert sum(len(e["words"]) for e in data.eval) == words


def test_synthetic_tasks_hold_out_a_fifth():
    data = load_task(task_config("synthetic_negation"), DATA_DIR)
    assert len(data.eval) * 4 == len(data.train)
    negated = sum(e["label"] for e in data.train) / len(data.train)
    assert 0.1 < negated < 0.4  # the grammar negates about a quarter of main clauses


# ---------------------------------------------------------------- bad files


def _glue_task(tmp_path: Path, text: str | bytes):
    folder = tmp_path / "glue_sst2"
    folder.mkdir(exist_ok=True)
    for name in ("train.tsv", "dev.tsv"):
        path = folder / name
        path.write_bytes(text) if isinstance(text, bytes) else path.write_text(text)
    return task_config("sst2")


@pytest.mark.parametrize("content, expected", [
    ("sentence\tlabel\ngood film\t1\nbad film\t7\n", r"train.tsv:3: label '7' is not in"),
    ("sentence\tlabel\ngood film\t1\tx\n", r"train.tsv:2: 3 fields, the header has 2"),
    ("text\tlabel\ngood\t1\n", r"no column 'sentence'"),
    ("", r"is empty"),
    (b"sentence\tlabel\n\xff\xfe\t1\n", r"not UTF-8"),
])
def test_bad_glue_files_are_one_line_errors(tmp_path, content, expected):
    with pytest.raises(UserError, match=expected) as err:
        load_task(_glue_task(tmp_path, content), tmp_path)
    assert "\n" not in str(err.value)


def test_a_broken_conll03_line_is_named(tmp_path):
    folder = tmp_path / "conll2003_ner"
    folder.mkdir()
    (folder / "train.txt").write_text("EU NNP B-NP B-ORG\n")
    (folder / "dev.txt").write_text("EU NNP B-NP B-ORG\n\nrejects VBZ B-VP B-VERB\n")
    with pytest.raises(UserError, match=r"dev.txt:3: tag 'B-VERB' is not in task.labels"):
        load_task(task_config("conll03"), tmp_path)


def test_a_missing_data_root_names_the_variable(tmp_path):
    with pytest.raises(UserError, match="BERTOLOGY_DATA_DIR"):
        load_task(task_config("ud_pos", "task.source=local"), tmp_path)


# ---------------------------------------------------------------- the hub schemas


def test_hub_converters_map_glue_conll_and_squad_schemas(monkeypatch):
    import datasets

    conll = datasets.Dataset.from_dict(
        {"tokens": [["EU", "rejects"]], "ner_tags": [[3, 0]]},
        features=datasets.Features({
            "tokens": datasets.Sequence(datasets.Value("string")),
            "ner_tags": datasets.Sequence(datasets.ClassLabel(
                names=["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC",
                       "I-MISC"]))}))
    mrpc = datasets.Dataset.from_dict({"sentence1": ["a"], "sentence2": ["b"], "label": [1]})
    squad = datasets.Dataset.from_dict({
        "id": ["q1"], "question": ["who?"], "context": ["Ann ran."],
        "answers": [{"text": ["Ann"], "answer_start": [0]}]})
    tables = {"lhoestq/conll2003": conll, "glue": mrpc, "squad": squad}  # conf/task's hub ids
    monkeypatch.setattr(datasets, "load_dataset", lambda path, *args, **kwargs: tables[path])
    train, _, labels = load_hub(task_config("conll03"))
    assert train == [{"words": ["EU", "rejects"], "tags": [labels.index("B-ORG"), 0]}]
    train, _, _ = load_hub(task_config("mrpc"))
    assert train == [{"text": "a", "text_pair": "b", "label": 1}]
    train, _, _ = load_hub(task_config("squad"))
    assert train[0]["answers"] == {"text": ["Ann"], "answer_start": [0]}


def test_an_unreachable_hub_is_a_user_error(monkeypatch):
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("no network")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(UserError, match="could not be loaded"):
        load_hub(task_config("sst2"))


# ---------------------------------------------------------------- encoding


def test_tagging_labels_only_the_first_subtoken(minilm_tokenizer):
    task = task_config("conll03")
    example = {"words": ["Rejectionism", "EU"], "tags": [0, 3]}
    (feature,) = encode([example], minilm_tokenizer, task)
    pieces = minilm_tokenizer.convert_ids_to_tokens(feature["input_ids"])
    assert len(pieces) > 4  # "rejectionism" splits into several word pieces
    labelled = [(p, t) for p, t in zip(pieces, feature["labels"]) if t != IGNORE]
    assert [t for _, t in labelled] == [0, 3]
    assert not labelled[0][0].startswith("##") and labelled[1][0] == "eu"


def test_qa_windows_recover_every_answer_inside_them(minilm_tokenizer):
    task = task_config("squad", "task.max_seq_length=96", "task.doc_stride=32",
                       "task.max_query_length=32")
    examples = load_task(task, DATA_DIR).eval[:60]
    features = encode(examples, minilm_tokenizer, task)
    assert len(features) > len(examples)  # long contexts need several windows
    found = 0
    for feature in features:
        if feature["start_positions"] == 0:
            continue
        example = examples[feature["example"]]
        start = feature["offsets"][feature["start_positions"]][0]
        end = feature["offsets"][feature["end_positions"]][1]
        assert example["context"][start:end].lower() == example["answers"]["text"][0].lower()
        found += 1
    assert found >= len(examples) * 0.9


def test_a_long_question_is_cut_so_the_context_keeps_its_room(minilm_tokenizer):
    """run_squad.py's max_query_length: a question longer than it is cut to its first word
    pieces, so the window still slides over the context. Before, a long question left the
    tokenizer less context than doc_stride and it panicked (issue 32: a ModernBERT checkpoint
    whose small tokenizer splits SQuAD questions into 60+ pieces)."""
    from bertology.data.encode import cut_question

    question = "who " + "really " * 80 + "wrote it?"
    cut = cut_question(question, minilm_tokenizer, 10)
    assert question.startswith(cut) and cut == "who " + "really " * 8 + "really"
    assert len(minilm_tokenizer(cut, add_special_tokens=False)["input_ids"]) == 10
    assert cut_question("who wrote it?", minilm_tokenizer, 10) == "who wrote it?"
    task = task_config("squad", "task.max_seq_length=96", "task.doc_stride=32",
                       "task.max_query_length=32")
    context = "The book was written by Ann. " * 40
    example = {"question": question, "context": context,
               "answers": {"text": ["Ann"], "answer_start": [context.index("Ann")]}}
    features = encode([example], minilm_tokenizer, task)
    assert len(features) > 1 and features[0]["start_positions"] > 0


def test_a_stride_the_window_cannot_hold_is_refused():
    with pytest.raises(UserError, match=r"task.doc_stride=128 must be below .* = 125"):
        task_config("squad", "task.max_seq_length=192")


def test_byte_level_bpe_words_keep_their_word_start_marker(bpe_tokenizer, tmp_path):
    """Tagging pre-split words with RoBERTa's tokenizer: each word must be tokenised as in
    running text ("Ġchef"), not as a continuation piece, or pretraining is wasted."""
    from bertology.data.tokenizers import load_pretrained_tokenizer, tokenizer_options

    bpe_tokenizer.save_pretrained(tmp_path)
    tokenizer = load_pretrained_tokenizer(str(tmp_path), **tokenizer_options("roberta"))
    words = ["the", "chef", "likes", "bread"]
    (feature,) = encode([{"words": words, "tags": [0, 1, 2, 1]}], tokenizer,
                        task_config("synthetic_pos"))
    pieces = tokenizer.convert_ids_to_tokens(feature["input_ids"])
    firsts = [p for p, label in zip(pieces, feature["labels"]) if label != IGNORE]
    assert len(firsts) == 4 and all(p.startswith("Ġ") for p in firsts), pieces
