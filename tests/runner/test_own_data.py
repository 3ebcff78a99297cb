"""A user's own data (docs/howto/own-data.md): CSV, TSV and JSON lines for sentence
classification (single sentences and pairs, columns renamed), JSON lines of tokens and tags for
tagging, SQuAD JSON for QA; the label set read from the train file; local files only, never
the hub; and finetune, probe and prune running on them end to end. The bad files, through the
CLI (one line, exit 2, no run dir), are cases of tests/reliability/test_bad_inputs.py."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from conftest import compose_config
from own_data_files import (
    classification_rows,
    write_classification,
    write_rows,
    write_squad,
    write_tagging,
)

from bertology.config.finetune_config import load_finetune_config
from bertology.data.tasks import load_task
from bertology.errors import UserError

QUIET = ["logger=none"]


def own_task(preset: str, train: Path, dev: Path, *overrides: str):
    """The checked task of a preset reading these files (absolute paths)."""
    cfg = compose_config("finetune", [f"task={preset}", f"task.train_file={train}",
                                      f"task.eval_file={dev}", *overrides])
    return load_finetune_config(cfg).task


# ---------------------------------------------------------------- reading the files


def test_a_csv_file_gives_sentences_and_the_train_files_labels_sorted(tmp_path, caplog):
    train, dev = write_classification(tmp_path)
    with caplog.at_level(logging.INFO, logger="bertology.data.own_files"):
        data = load_task(own_task("own_classification", train, dev), tmp_path)
    assert data.labels == ["neg", "pos"]
    assert "2 labels read from" in caplog.text and "neg, pos" in caplog.text
    first = classification_rows(48, 0)[0]
    assert data.train[0] == {"text": first["text"], "text_pair": None,
                             "label": data.labels.index(first["label"])}
    assert (len(data.train), len(data.eval)) == (48, 16)


def test_integer_labels_sort_as_numbers_and_task_labels_set_the_order(tmp_path):
    rows = [{"text": f"item {i}", "label": str(label)} for i, label in
            enumerate([10, 2, 9, 2, 10, 9])]
    train = write_rows(tmp_path / "train.csv", rows)
    dev = write_rows(tmp_path / "dev.csv", rows[:3])
    assert load_task(own_task("own_classification", train, dev), tmp_path).labels == \
        ["2", "9", "10"]
    given = own_task("own_classification", train, dev, "task.labels=['10','9','2']")
    data = load_task(given, tmp_path)
    assert data.labels == ["10", "9", "2"] and data.train[0]["label"] == 0


def test_sentence_pairs_from_csv_tsv_and_jsonl_read_alike(tmp_path):
    found = []
    for suffix, file_format in ((".csv", "csv"), (".tsv", "tsv"), (".jsonl", "jsonl")):
        train, dev = write_classification(tmp_path / file_format, suffix, pair=True)
        data = load_task(own_task("own_classification", train, dev,
                                  f"task.format={file_format}"), tmp_path)
        found.append(data.train)
    assert found[0] == found[1] == found[2]
    assert found[0][0]["text_pair"].startswith("the ") and found[0][0]["text"].endswith("said")


def test_renamed_columns_quoted_commas_and_a_field_over_two_lines(tmp_path):
    text = ('premise,hypothesis,gold\n"a film, long",it is long,yes\n'
            '"a film\nin two lines",it is short,no\n')
    (tmp_path / "train.csv").write_text(text)
    (tmp_path / "dev.csv").write_text(text)
    task = own_task("own_classification", tmp_path / "train.csv", tmp_path / "dev.csv",
                    "task.text_columns=[premise,hypothesis]", "task.label_column=gold")
    data = load_task(task, tmp_path)
    assert data.labels == ["no", "yes"]
    assert data.train == [{"text": "a film, long", "text_pair": "it is long", "label": 1},
                          {"text": "a film\nin two lines", "text_pair": "it is short",
                           "label": 0}]


def test_json_lines_of_tokens_and_tags_read_as_tagging(tmp_path):
    train, dev = write_tagging(tmp_path)
    data = load_task(own_task("own_tagging", train, dev), tmp_path)
    assert data.labels == ["B-ADJ", "B-NOUN", "O"]  # the train file's tags, sorted
    first = json.loads(train.read_text().splitlines()[0])
    assert data.train[0] == {"words": first["tokens"],
                             "tags": [data.labels.index(t) for t in first["tags"]]}


@pytest.mark.parametrize("line, expected", [
    ('{"text": "a film", "label": ["pos"]}', r"train.jsonl:2: label \[\"pos\"\] is not a class"),
    ('["a film", "pos"]', r"train.jsonl:2: a JSON list, not an object"),
    ('{"text": 3, "label": "pos"}', r"train.jsonl:2: field 'text' is 3, not a string"),
    ('{"sentence": "a film", "label": "pos"}', r"train.jsonl:2: no field 'text' \(fields: "
                                               r"sentence, label\)"),
])
def test_a_bad_json_line_is_named(tmp_path, line, expected):
    (tmp_path / "train.jsonl").write_text('{"text": "fine", "label": "neg"}\n' + line + "\n")
    (tmp_path / "dev.jsonl").write_text('{"text": "fine", "label": "neg"}\n')
    task = own_task("own_classification", tmp_path / "train.jsonl", tmp_path / "dev.jsonl",
                    "task.format=jsonl")
    with pytest.raises(UserError, match=expected) as err:
        load_task(task, tmp_path)
    assert "\n" not in str(err.value)


def test_a_tagging_line_with_fewer_tags_than_tokens_is_named(tmp_path):
    train, dev = write_tagging(tmp_path)
    train.write_text(train.read_text() + '{"tokens": ["a", "b"], "tags": ["O"]}\n')
    with pytest.raises(UserError, match=r"train.jsonl:41: 2 tokens but 1 tags"):
        load_task(own_task("own_tagging", train, dev), tmp_path)


def test_a_csv_row_with_an_extra_field_is_named(tmp_path):
    train, dev = write_classification(tmp_path)
    train.write_text(train.read_text() + "a film, sadly,neg\n")
    with pytest.raises(UserError, match=r"train.csv:50: 3 fields, the header has 2"):
        load_task(own_task("own_classification", train, dev), tmp_path)


# ---------------------------------------------------------------- local only


@pytest.mark.parametrize("override, expected", [
    ("task.source=hub", "reads your own files only, never the hub"),
    ("+task.hub=glue", "reads your own files only, never the hub"),
    ("task.kind=qa", "use task.format=squad"),
    ("task.format=jsonl", "looks like csv and task.format=jsonl"),
    ("task.text_columns=[a,b,c]", "one text column or a pair"),
])
def test_own_formats_refuse_what_they_cannot_read(tmp_path, override, expected):
    train, dev = write_classification(tmp_path)
    with pytest.raises(UserError, match=expected):
        own_task("own_classification", train, dev, override)


def test_a_missing_own_file_is_refused_never_read_from_the_hub(tmp_path, monkeypatch):
    """A typo names the file and the files there are; no hub data set is tried (the hub
    loader would fail the test if it were called)."""
    import datasets

    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: pytest.fail("hub read"))
    monkeypatch.chdir(tmp_path)
    write_classification(tmp_path)
    write_squad(tmp_path / "qa")
    for preset, overrides, missing, near in (
            ("own_classification", ["task.train_file=trian.csv"], "trian.csv", "train.csv"),
            ("own_qa", ["task.train_file=qa/train.json", "task.eval_file=qa/dve.json"],
             "dve.json", "dev.json")):
        cfg = compose_config("finetune", [f"task={preset}", *overrides])
        with pytest.raises(UserError, match=rf"{missing} does not exist; .*did you mean "
                                            rf"{near}\?"):
            load_finetune_config(cfg)


# ---------------------------------------------------------------- the pipelines


@pytest.fixture
def in_tmp(tmp_path, monkeypatch, fresh_logging):
    monkeypatch.chdir(tmp_path)
    return tmp_path


TINY = ["trainer=smoke", "trainer.batch_size=8", *QUIET]


def test_finetune_runs_on_a_csv_file_with_the_presets_default_names(in_tmp, one_thread):
    """task=own_classification reads train.csv and dev.csv from the working dir."""
    from bertology.pipelines import finetune

    write_classification(in_tmp)
    metrics = finetune.run(compose_config("finetune", ["task=own_classification", *TINY]),
                           in_tmp / "run")
    assert 0.0 <= metrics["eval/accuracy"] <= 1.0 and metrics["train/steps"] == 12
    config = json.loads((in_tmp / "run" / "model" / "config.json").read_text())
    assert config["id2label"] == {"0": "neg", "1": "pos"}


def test_finetune_runs_on_json_lines_of_sentence_pairs(in_tmp, one_thread):
    from bertology.pipelines import finetune

    write_classification(in_tmp, ".jsonl", pair=True)
    metrics = finetune.run(compose_config("finetune", ["task=own_classification",
                                                       "task.format=jsonl", *TINY]),
                           in_tmp / "run")
    assert 0.0 <= metrics["eval/accuracy"] <= 1.0


def test_finetune_and_probe_run_on_json_lines_of_tags(in_tmp, one_thread):
    """A token classifier is fine-tuned on the tags, and the probe reads them as word labels."""
    from bertology.pipelines import finetune, probe

    write_tagging(in_tmp)
    metrics = finetune.run(compose_config("finetune", ["task=own_tagging", *TINY]),
                           in_tmp / "finetune")
    assert 0.0 <= metrics["eval/accuracy"] <= 1.0
    config = json.loads((in_tmp / "finetune" / "model" / "config.json").read_text())
    assert sorted(config["id2label"].values()) == ["B-ADJ", "B-NOUN", "O"]
    probed = probe.run(compose_config("probe", [
        "task=own_tagging", f"model.name_or_path={in_tmp / 'finetune' / 'model'}",
        "analysis=linear", "seeds=[0]", *QUIET]), in_tmp / "probe")
    # the tags follow from a word's position (O, B-NOUN, O, B-ADJ): a linear probe reads them
    assert probed["probe/majority_accuracy"] == 0.5 and probed["probe/layer_02/accuracy"] > 0.9


def test_finetune_runs_on_squad_json_from_the_working_dir(in_tmp, one_thread):
    """task=own_qa reads SQuAD-format train.json and dev.json where the command runs."""
    from bertology.pipelines import finetune

    write_squad(in_tmp)
    metrics = finetune.run(compose_config("finetune", ["task=own_qa", *TINY]), in_tmp / "run")
    assert 0.0 <= metrics["eval/exact_match"] <= 1.0 and metrics["train/steps"] == 12
    assert (in_tmp / "run" / "predictions.jsonl").read_text().count("\n") == 4  # dev questions


@pytest.mark.slow
def test_prune_scores_heads_on_a_csv_task(in_tmp, one_thread):
    """Head importance on the user's classification task: prune fine-tunes the tiny BERT on
    the CSV first, then scores and removes its heads."""
    from bertology.pipelines import prune

    write_classification(in_tmp)
    metrics = prune.run(compose_config("prune", ["task=own_classification", "trainer=smoke",
                                                 "prune.experiments=[heads]", *QUIET]),
                        in_tmp / "run")
    assert metrics["prune/heads/total"] == 4  # size=tiny: 2 layers of 2 heads
    assert 0.0 <= metrics["prune/heads/gradient/area"] <= 1.0
