"""A user's own task files (task.format csv, tsv, jsonl), read as transformers' run_glue.py
reads --train_file and --validation_file: sentence classification from columns `text`,
`text_pair` (optional) and `label` (task.text_columns / task.label_column rename them), and
tagging from JSON lines of `tokens` and `tags`. The label set is task.labels, or else the
train file's labels, sorted (the log says which). Every bad file is one line naming the file,
the line where there is one, and the fix.

Examples come out in data/tasks.py's shapes:
    classification  {"text": str, "text_pair": str | None, "label": int}
    tagging         {"words": [str], "tags": [int]}
"""

from __future__ import annotations

import csv
import io
import json
import logging
from pathlib import Path

from bertology.config.data_checks import task_file
from bertology.config.groups import TaskConfig
from bertology.data.corpora import parse_json_lines, read_text
from bertology.errors import UserError, require

log = logging.getLogger(__name__)

TEXT, TEXT_PAIR, LABEL = "text", "text_pair", "label"  # run_glue's own column names
TOKENS, TAGS = "tokens", "tags"  # the hub's token-classification fields (conll2003, wikiann)
DELIMITERS = {"csv": ",", "tsv": "\t"}
SEPARATOR_NAMES = {",": "comma", "\t": "tab"}
# (format, kind) -> an example line, for the fix of a file that holds none or a broken one
EXAMPLES = {("csv", "classification"): "a header row text,label then a fine film,pos",
            ("tsv", "classification"): "a header row text<TAB>label then a fine film<TAB>pos",
            ("jsonl", "classification"): '{"text": "a fine film", "label": "pos"}',
            ("jsonl", "tagging"): '{"tokens": ["EU", "rejects"], "tags": ["B-ORG", "O"]}'}
TEXT_KEY = "task.text_columns=[<column>] (a pair: [<first>,<second>])"

Record = tuple[int, dict]  # (line number in the file, field -> value)


def load_own(task: TaskConfig, data_dir: Path) -> tuple[list[dict], list[dict], list[str]]:
    """(train, eval, labels) of a task read from a user's own files."""
    train_path = task_file(task, "train_file", data_dir)
    eval_path = task_file(task, "eval_file", data_dir)
    train = read_records(train_path, task, "train")
    evaluation = read_records(eval_path, task, "eval")
    read = read_tagged if task.kind == "tagging" else read_sentences
    train_rows, eval_rows = read(train_path, train, task), read(eval_path, evaluation, task)
    labels = task.labels or own_label_set(train_rows, train_path, task.name)
    given = bool(task.labels)
    return (encode_labels(train_rows, labels, train_path, given),
            encode_labels(eval_rows, labels, eval_path, given), labels)


# ---------------------------------------------------------------- reading records


def read_records(path: Path, task: TaskConfig, split: str) -> list[Record]:
    """The file's records with their line numbers; a file with none is refused."""
    require(path.is_file(), f"{path} is missing; give the {split} file's path")
    text = read_text(path, encoding="utf-8-sig")  # a spreadsheet's CSV often starts with a BOM
    example = EXAMPLES[task.format, task.kind]
    require(text.strip(), f"{path} (the {split} file) is empty; give one example per line: "
            f"{example}")
    records = parse_json_lines(path, text.splitlines(), f"each line is one JSON object: "
                               f"{example}") if task.format == "jsonl" else \
        read_table(path, text, DELIMITERS[task.format])
    require(records, f"{path} (the {split} file) holds a header and no examples; give one "
            f"example per line: {example}")
    return records


def read_table(path: Path, text: str, delimiter: str) -> list[Record]:
    """A header row, then one example a row; fields may be quoted ("a, b"), as a spreadsheet
    writes them, and a quoted field may span lines (the record's first line is named)."""
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    header = next((row for row in reader if row), [])  # blank lines before it are skipped
    records, start = [], reader.line_num + 1
    try:
        for row in reader:
            if row and len(row) != len(header):
                raise UserError(f"{path}:{start}: {len(row)} fields, the header has "
                                f"{len(header)}; fix that line (put a field that holds a "
                                f"{SEPARATOR_NAMES[delimiter]} in double quotes)")
            if row:
                records.append((start, dict(zip(header, row))))
            start = reader.line_num + 1
    except csv.Error as err:  # a field over csv's size limit, a NUL byte
        raise UserError(f"{path}:{start}: not a {SEPARATOR_NAMES[delimiter]}-separated row "
                        f"({err}); fix that line") from err
    return records


# ---------------------------------------------------------------- fields


def field_value(path: Path, record: Record, name: str, key: str, file_format: str) -> object:
    """record[name]; a missing field names the fields there are and the key that renames
    (a CSV or TSV file's columns are its header's: the header is named, not a line)."""
    number, fields = record
    if name in fields:
        return fields[name]
    if file_format in DELIMITERS:
        raise UserError(f"{path}: no column {name!r} (header: {', '.join(fields)}); rename "
                        f"the column or set {key}")
    raise UserError(f"{path}:{number}: no field {name!r} (fields: {', '.join(fields)}); "
                    f"rename it in the file or set {key}")


def text_value(path: Path, record: Record, name: str, file_format: str) -> str:
    value = field_value(path, record, name, TEXT_KEY, file_format)
    require(isinstance(value, str), f"{path}:{record[0]}: field {name!r} is "
            f"{json.dumps(value)}, not a string; give the text as a string")
    return value.strip()


def label_text(path: Path, number: int, value: object) -> str:
    """A label as its text: JSON may give 1 or true where CSV gives "1"."""
    require(isinstance(value, str | int) and str(value).strip() != "", f"{path}:{number}: "
            f"label {json.dumps(value)} is not a class name; give a string or an integer")
    return str(value).strip()


def read_sentences(path: Path, records: list[Record], task: TaskConfig) -> list[dict]:
    """Classification rows, the label as text: columns task.text_columns (default text, and
    text_pair where the first record has it) and task.label_column (default label)."""
    columns = task.text_columns or [TEXT, *[TEXT_PAIR] * (TEXT_PAIR in records[0][1])]
    label = task.label_column or LABEL
    rows = []
    for record in records:
        texts = [text_value(path, record, column, task.format) for column in columns]
        value = field_value(path, record, label, "task.label_column=<column>", task.format)
        rows.append({"text": texts[0], "text_pair": texts[1] if len(texts) > 1 else None,
                     "label": label_text(path, record[0], value), "line": record[0]})
    return rows


def read_tagged(path: Path, records: list[Record], task: TaskConfig) -> list[dict]:
    """Tagging rows, the tags as text: a list of tokens and as many tags."""
    tokens_name = (task.text_columns or [TOKENS])[0]
    tags_name = task.label_column or TAGS
    rows = []
    for record in records:
        number = record[0]
        words = field_value(path, record, tokens_name, "task.text_columns=[<field>]", "jsonl")
        tags = field_value(path, record, tags_name, "task.label_column=<field>", "jsonl")
        require(isinstance(words, list) and words and all(isinstance(w, str) for w in words),
                f"{path}:{number}: {tokens_name!r} is not a list of strings; give the "
                "sentence's tokens, e.g. [\"EU\", \"rejects\"]")
        require(isinstance(tags, list) and len(tags) == len(words), f"{path}:{number}: "
                f"{len(words)} tokens but {len(tags) if isinstance(tags, list) else 'no list of'}"
                " tags; give one tag per token")
        rows.append({"words": words, "tags": [label_text(path, number, t) for t in tags],
                     "line": number})
    return rows


# ---------------------------------------------------------------- the label set


def row_labels(row: dict) -> list[str]:
    return row["tags"] if "tags" in row else [row["label"]]


def own_label_set(rows: list[dict], path: Path, name: str) -> list[str]:
    """The train file's labels, sorted (as numbers where every one is an integer, so 10
    follows 9); the log states them, since a model's outputs follow this order."""
    found = {label for row in rows for label in row_labels(row)}
    numeric = all(label.lstrip("-").isdigit() for label in found)
    labels = sorted(found, key=lambda label: (int(label), label) if numeric else (0, label))
    log.info("task %s: %d labels read from %s (sorted; task.labels=[...] sets another order): "
             "%s", name, len(labels), path, ", ".join(labels))
    return labels


def encode_labels(rows: list[dict], labels: list[str], path: Path, given: bool
                  ) -> list[dict]:
    """The rows as examples, labels as indices into `labels`; an unknown label names its
    line."""
    index = {label: i for i, label in enumerate(labels)}
    for row in rows:
        unknown = [label for label in row_labels(row) if label not in index]
        if unknown and given:
            raise UserError(f"{path}:{row['line']}: label {unknown[0]!r} is not in "
                            f"task.labels={labels}; fix the file or the task's label set")
        if unknown:
            raise UserError(f"{path}:{row['line']}: label {unknown[0]!r} is not among the "
                            f"train file's labels ({', '.join(labels)}); fix that line, or "
                            "list every label in task.labels=[...]")
    if rows and "tags" in rows[0]:
        return [{"words": row["words"], "tags": [index[t] for t in row["tags"]]} for row in rows]
    return [{"text": row["text"], "text_pair": row["text_pair"], "label": index[row["label"]]}
            for row in rows]
