"""The hub fallbacks of the real tasks name repositories datasets >= 4 loads (parquet, no
loading script); a script-based id is refused in one line naming its parquet replacement.
Offline: the ids and load_dataset's arguments are checked, and the conversion runs on
in-memory data sets with the hub's features."""

from __future__ import annotations

import dataclasses

import datasets
import pytest
from conftest import REPO
from omegaconf import OmegaConf

from bertology.config.groups import TaskConfig
from bertology.data.hub_tasks import SCRIPT_HUB_IDS, hub_arguments, load_hub
from bertology.errors import UserError


def task_config(name: str) -> TaskConfig:
    return TaskConfig(**OmegaConf.to_container(OmegaConf.load(REPO / "conf" / "task" /
                                                              f"{name}.yaml")))


def test_ud_pos_and_conll03_name_parquet_backed_repositories():
    assert hub_arguments(task_config("ud_pos")) == (
        "universal-dependencies/universal_dependencies",
        {"revision": "refs/convert/parquet", "data_dir": "en_ewt"})
    assert hub_arguments(task_config("conll03")) == ("lhoestq/conll2003", {})


def test_no_task_names_a_loading_script():
    for path in sorted((REPO / "conf" / "task").glob("*.yaml")):
        task = task_config(path.stem)
        if task.hub is not None:
            hub_arguments(task)  # raises for a script-based id


@pytest.mark.parametrize("hub, replacement", [
    ("conll2003", "task.hub=lhoestq/conll2003"),
    ("universal_dependencies", "task.hub_revision=refs/convert/parquet"),
])
def test_a_script_based_id_is_one_line_naming_its_replacement(hub, replacement):
    task = dataclasses.replace(task_config("conll03"), hub=hub)
    with pytest.raises(UserError) as err:
        hub_arguments(task)
    message = str(err.value)
    assert len(message.splitlines()) == 1
    assert "no longer runs" in message and replacement in message
    assert hub in SCRIPT_HUB_IDS


def fake_hub(calls: list, names: list[str]):
    """load_dataset as the parquet repository answers: tokens and tag ids under ClassLabel
    names in the hub's order (here `names`)."""
    features = datasets.Features({
        "tokens": datasets.Sequence(datasets.Value("string")),
        "tags": datasets.Sequence(datasets.ClassLabel(names=names))})

    def load_dataset(path, split, **keywords):
        calls.append((path, split, keywords))
        return datasets.Dataset.from_dict(
            {"tokens": [["Paris", "is", "big"]], "tags": [[0, 1, 2]]}, features=features)

    return load_dataset


def test_load_hub_reads_the_parquet_export_and_maps_tags_by_name(monkeypatch):
    task = dataclasses.replace(task_config("ud_pos"), hub_label_column="tags")
    names = ["PROPN", "AUX", "ADJ", *[n for n in task.labels if n not in ("PROPN", "AUX", "ADJ")]]
    calls: list = []
    monkeypatch.setattr(datasets, "load_dataset", fake_hub(calls, names))
    train, evaluation, labels = load_hub(task)
    assert calls == [(hub, split, {"revision": "refs/convert/parquet", "data_dir": "en_ewt"})
                     for hub, split in [("universal-dependencies/universal_dependencies",
                                         "train"),
                                        ("universal-dependencies/universal_dependencies",
                                         "validation")]]
    assert labels == task.labels
    assert [labels[t] for t in train[0]["tags"]] == ["PROPN", "AUX", "ADJ"]
    assert evaluation[0]["words"] == ["Paris", "is", "big"]
