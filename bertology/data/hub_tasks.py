"""Task data from the Hugging Face hub (datasets.load_dataset(task.hub, ...)), the source of a
task whose files are not under the data root: the repository's splits converted to the
example dicts of data/tasks.py, and script-based ids refused with their parquet replacement."""

from __future__ import annotations

from bertology.config.groups import TaskConfig
from bertology.errors import UserError, require

# Hub data sets made of a loading script, which datasets >= 4 refuses to run ("Dataset scripts
# are no longer supported"), and the parquet-backed repository with the same data and features
# (ClassLabel names in the same order). conll2003 (eriktks/conll2003's script): lhoestq/conll2003
# holds its train/validation/test as parquet, uploaded by a datasets maintainer. The UD treebanks
# (universal_dependencies's script): the hub's own parquet export of that repository.
UD_PARQUET = ("task.hub=universal-dependencies/universal_dependencies task.hub_revision="
              "refs/convert/parquet task.hub_data_dir=<treebank, e.g. en_ewt> task.hub_config=null")
SCRIPT_HUB_IDS = {
    "conll2003": "task.hub=lhoestq/conll2003",
    "eriktks/conll2003": "task.hub=lhoestq/conll2003",
    "universal_dependencies": UD_PARQUET,
    "universal-dependencies/universal_dependencies": UD_PARQUET,
}


def hub_arguments(task: TaskConfig) -> tuple[str, dict[str, str]]:
    """datasets.load_dataset's repository and keywords for task.hub; a script-based id is
    refused in one line naming its parquet-backed replacement (a script repository's parquet
    export, read with task.hub_revision=refs/convert/parquet, is no script)."""
    replacement = SCRIPT_HUB_IDS.get(task.hub)
    if replacement is not None and task.hub_revision != "refs/convert/parquet":
        raise UserError(f"task={task.name}: task.hub={task.hub!r} is a loading script, which "
                        f"datasets >= 4 no longer runs; use {replacement} (parquet), or put "
                        f"the files under the data root ({task.path})")
    keywords = {"name": task.hub_config, "revision": task.hub_revision,
                "data_dir": task.hub_data_dir}
    return task.hub, {key: value for key, value in keywords.items() if value is not None}


def load_hub(task: TaskConfig) -> tuple[list[dict], list[dict], list[str]]:
    """datasets.load_dataset(task.hub, ...): the world's default source."""
    import datasets

    repository, keywords = hub_arguments(task)
    try:
        splits = {name: datasets.load_dataset(repository, split=name, **keywords)
                  for name in ("train", task.hub_eval_split)}
    except Exception as err:  # offline, unknown name, ...: datasets raises many types
        raise UserError(f"task={task.name}: the hub data set {task.hub!r} could not be loaded "
                        f"({str(err).splitlines()[0]}); put the files under the data root "
                        f"({task.path}) or check the name") from err
    convert = HUB_CONVERTERS[task.kind]
    labels, train = convert(splits["train"], task)
    _, evaluation = convert(splits[task.hub_eval_split], task)
    return train, evaluation, labels


def _class_names(dataset, column: str) -> list[str]:
    feature = dataset.features[column]
    feature = getattr(feature, "feature", feature)  # Sequence(ClassLabel) for tag columns
    return list(feature.names)


def convert_hub_classification(dataset, task: TaskConfig) -> tuple[list[str], list[dict]]:
    columns = task.hub_text_columns
    examples = [{"text": row[columns[0]], "text_pair": row[columns[1]] if len(columns) > 1
                 else None, "label": int(row[task.hub_label_column])} for row in dataset]
    return task.labels, examples


def convert_hub_tagging(dataset, task: TaskConfig) -> tuple[list[str], list[dict]]:
    names = _class_names(dataset, task.hub_label_column)
    order = [task.labels.index(n) if n in task.labels else None for n in names]
    require(None not in order, f"task={task.name}: the hub's tags {names} differ from "
            f"task.labels={task.labels}")
    return task.labels, [{"words": list(row["tokens"]),
                          "tags": [order[t] for t in row[task.hub_label_column]]}
                         for row in dataset]


def convert_hub_qa(dataset, task: TaskConfig) -> tuple[list[str], list[dict]]:
    return [], [{"id": row["id"], "question": row["question"], "context": row["context"],
                 "answers": {"text": list(row["answers"]["text"]),
                             "answer_start": list(row["answers"]["answer_start"])}}
                for row in dataset]


HUB_CONVERTERS = {"classification": convert_hub_classification, "tagging": convert_hub_tagging,
                  "qa": convert_hub_qa}
