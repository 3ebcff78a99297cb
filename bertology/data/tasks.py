"""Labelled task data: train and eval examples with their label set, from local files under
the data root (GLUE TSV, CoNLL-2003, CoNLL-U, SQuAD JSON), a user's own CSV, TSV or JSON lines
(data/own_files.py), the Hugging Face hub (data/hub_tasks.py), or the embedded synthetic
corpus.

Examples are plain dicts, one shape per task kind:
    classification  {"text": str, "text_pair": str | None, "label": int}
    tagging         {"words": [str], "tags": [int]}
    qa              {"id": str, "question": str, "context": str,
                     "answers": {"text": [str], "answer_start": [int]}}
"""

from __future__ import annotations

import csv
import json
import logging
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bertology.config.data_checks import data_fix, missing_data, reads_local_files, task_file
from bertology.config.groups import TaskConfig
from bertology.config.own_data import OWN_FORMATS
from bertology.data import synthetic
from bertology.data.corpora import read_text, resolve_path
from bertology.data.hub_tasks import load_hub
from bertology.data.own_files import load_own
from bertology.errors import UserError, require
from bertology.run.replicates import MIN_BOOTSTRAP_ITEMS

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TaskData:
    train: list[dict]
    eval: list[dict]
    labels: list[str]  # index -> name; empty for qa
    eval_pool: int = 0  # the eval split's size before task.max_eval_examples: what more exist


def read_lines(path: Path) -> list[str]:
    require(path.is_file(), missing_data(path))
    text = read_text(path, encoding="utf-8-sig")  # GLUE's MRPC files start with a BOM
    require(text.strip(), f"{path} is empty; point the task at a file with examples")
    return text.splitlines()


# ---------------------------------------------------------------- GLUE TSV (SST-2, MRPC)


def load_glue_tsv(path: Path, task: TaskConfig) -> list[dict]:
    """A GLUE TSV with a header row. Fields are not quoted (MRPC's sentences contain stray
    double quotes), so the file is split on tabs only."""
    rows = list(csv.reader(read_lines(path), delimiter="\t", quoting=csv.QUOTE_NONE))
    header = rows[0]
    wanted = [*task.text_columns, task.label_column]
    missing = [c for c in wanted if c not in header]
    if missing:
        raise UserError(f"{path}: no column {missing[0]!r} (header: {', '.join(header)}); "
                        "fix task.text_columns / task.label_column")
    index = {c: header.index(c) for c in wanted}
    examples = []
    for number, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise UserError(f"{path}:{number}: {len(row)} fields, the header has {len(header)}; "
                            "fix that line (tab-separated, one example per line)")
        texts = [row[index[c]].strip() for c in task.text_columns]
        examples.append({"text": texts[0], "text_pair": texts[1] if len(texts) > 1 else None,
                         "label": label_index(row[index[task.label_column]], task, path, number)})
    return examples


def label_index(value: str, task: TaskConfig, path: Path, line: int) -> int:
    if value.strip() not in task.labels:
        raise UserError(f"{path}:{line}: label {value!r} is not in task.labels={task.labels}; "
                        "fix the file or the task's label set")
    return task.labels.index(value.strip())


# ---------------------------------------------------------------- CoNLL-2003 and CoNLL-U


def load_conll03(path: Path, task: TaskConfig) -> list[dict]:
    """`token POS chunk NER` per line, blank lines between sentences, -DOCSTART- skipped."""
    examples, words, tags = [], [], []
    for number, line in enumerate([*read_lines(path), ""], start=1):
        fields = line.split()
        if not fields or fields[0] == "-DOCSTART-":
            if words:
                examples.append({"words": words, "tags": tags})
            words, tags = [], []
            continue
        if len(fields) < 2 or fields[-1] not in task.labels:
            raise UserError(f"{path}:{number}: tag {fields[-1]!r} is not in task.labels="
                            f"{task.labels} (lines are `token POS chunk TAG`); fix the file or "
                            "the task's label set")
        words.append(fields[0])
        tags.append(task.labels.index(fields[-1]))
    return examples


CONLLU_ID = re.compile(r"\d+(-\d+|\.\d+)?")  # a word, a multi-word token range, an empty node


def check_conllu_lines(path: Path, lines: list[str]) -> None:
    """The conllu parser takes a line with 11 fields, or a bad ID, without a word, or names a
    field rather than the line: every line must be a comment, a blank, or ten tab-separated
    fields with a valid ID, and every sentence's words must form one tree. The error names the
    first line (and sentence) that is not right."""
    words: list[tuple[int, str, str]] = []  # (line, ID, HEAD) of the sentence's words
    sent_id = None
    for number, line in enumerate([*lines, ""], 1):
        if line.startswith("# sent_id"):
            sent_id = line.split("=", 1)[-1].strip()
        if not line.strip():
            check_tree(path, words, sent_id)
            words, sent_id = [], None
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) != 10:
            problem = f"{len(fields)} tab-separated fields, CoNLL-U has 10"
        elif not CONLLU_ID.fullmatch(fields[0]):
            problem = f"ID {fields[0]!r} is not a number, a range or a decimal"
        elif "" in fields:  # a line cut short inside its last field leaves it empty
            problem = f"field {fields.index('') + 1} is empty; CoNLL-U writes _ for no value"
        else:
            if fields[0].isdigit():
                words.append((number, fields[0], fields[6]))
            continue
        raise UserError(f"{path}:{number}: not valid CoNLL-U ({problem}); fix or remove that "
                        "line")


def check_tree(path: Path, words: list[tuple[int, str, str]], sent_id: str | None) -> None:
    """A sentence's HEAD column is a tree: word IDs 1..n in order, every HEAD in 0..n, one
    root (HEAD 0), and every word reaches it (no cycle)."""
    if not words:
        return
    where = f"sentence {sent_id}" if sent_id else "this sentence"
    for index, (line, word_id, head) in enumerate(words, 1):
        if word_id != str(index):
            raise UserError(f"{path}:{line}: {where}: word ID {word_id} where {index} belongs "
                            "(IDs count 1, 2, ...); fix the ID column")
        if not head.isdigit() or int(head) > len(words):
            raise UserError(f"{path}:{line}: {where}: HEAD {head!r} is not a word of the "
                            f"sentence (0..{len(words)}); fix the HEAD column")
    heads = [int(head) for _, _, head in words]
    roots = [line for (line, _, _), head in zip(words, heads) if head == 0]
    if len(roots) != 1:
        line = roots[1] if len(roots) > 1 else words[0][0]
        raise UserError(f"{path}:{line}: {where}: {len(roots)} words have HEAD 0; a dependency "
                        "tree has one root")
    for start, (line, _, _) in enumerate(words, 1):
        chain, node = [], start
        while node != 0:
            if node in chain:
                raise UserError(f"{path}:{line}: {where}: word {start}'s HEAD chain loops "
                                f"({' -> '.join(map(str, [*chain, node]))}); a dependency tree "
                                "has no cycle")
            chain.append(node)
            node = heads[node - 1]


def conllu_error(path: Path, err: Exception) -> UserError:
    return UserError(f"{path}: not valid CoNLL-U ({str(err).splitlines()[0]}); fix the file")


def load_conllu(path: Path, task: TaskConfig) -> list[dict]:
    """Syntactic words of a CoNLL-U file (multi-word token lines and empty nodes skipped) with
    the annotation `task.label_field` (upos, deprel, ...) as the tag."""
    import conllu

    lines = read_lines(path)
    check_conllu_lines(path, lines)
    try:
        sentences = conllu.parse("\n".join(lines))
    except conllu.exceptions.ParseException as err:
        raise conllu_error(path, err) from err
    examples = []
    for number, sentence in enumerate(sentences, 1):
        tokens = [t for t in sentence if isinstance(t["id"], int)]
        for token in tokens:
            if token[task.label_field] not in task.labels:
                sent_id = sentence.metadata.get("sent_id") or f"number {number} (no sent_id)"
                raise UserError(f"{path}: sentence {sent_id}: "
                                f"{task.label_field} {token[task.label_field]!r} is not in "
                                "task.labels; fix the file or the task's label set")
        examples.append({"words": [t["form"] for t in tokens],
                         "tags": [task.labels.index(t[task.label_field]) for t in tokens]})
    return examples


# ---------------------------------------------------------------- SQuAD


def load_squad_articles(path: Path) -> list[list[dict]]:
    """SQuAD v1.1 JSON as one list of question examples per article."""
    try:
        data = json.loads("\n".join(read_lines(path)))
    except json.JSONDecodeError as err:
        raise UserError(f"{path}:{err.lineno}: not JSON ({err.msg}); give the official "
                        "dev-v1.1.json or train-v1.1.json") from err
    require(isinstance(data, dict) and isinstance(data.get("data"), list),
            f"{path}: no top-level 'data' list; not SQuAD v1.1 JSON (give the official "
            "dev-v1.1.json or train-v1.1.json)")
    return [squad_article(path, number, article) for number, article in
            enumerate(data["data"], 1)]


def squad_article(path: Path, number: int, article: dict) -> list[dict]:
    """One article's questions; a missing field names the article and question."""
    where = f"{path}: article {number}"
    try:
        questions = [{"id": qa["id"], "question": qa["question"], "context": paragraph["context"],
                      "answers": {"text": [a["text"] for a in qa["answers"]],
                                  "answer_start": [a["answer_start"] for a in qa["answers"]]}}
                     for paragraph in article["paragraphs"] for qa in paragraph["qas"]]
    except (KeyError, TypeError) as err:
        title = article.get("title") if isinstance(article, dict) else None
        raise UserError(f"{where}{f' ({title})' if title else ''}: no field {err} where SQuAD "
                        "v1.1 has one (paragraphs, context, qas, id, question, answers, text, "
                        "answer_start); fix the article") from err
    for question in questions:
        check_answers(where, question)
    return questions


def check_answers(where: str, question: dict) -> None:
    """Each answer is its text at answer_start in the context: an answer elsewhere (an
    offset past the context, a text edited apart from its offset) would train on a wrong span."""
    answers, context = question["answers"], question["context"]
    for text, start in zip(answers["text"], answers["answer_start"]):
        found = context[start: start + len(text)] if isinstance(start, int) else None
        require(found == text, f"{where}: question {question['id']}: answer {text!r} is not at "
                f"answer_start={start!r} of its context ({len(context)} characters); fix the "
                "answer or its offset")


def split_squad(task: TaskConfig, data_dir: Path) -> tuple[list[dict], list[dict]]:
    """Only the dev set is available here, so it is split by article: the last
    `task.eval_articles` articles are eval, the rest train; no context is in both."""
    train_path, eval_path = split_files(task, data_dir)
    if train_path is not None:
        train = [q for a in load_squad_articles(train_path) for q in a]
        return train, [q for a in load_squad_articles(eval_path) for q in a]
    articles = load_squad_articles(eval_path)
    require(0 < task.eval_articles < len(articles),
            f"task.eval_articles={task.eval_articles} must leave train articles; the file has "
            f"{len(articles)}")
    cut = len(articles) - task.eval_articles
    return ([q for a in articles[:cut] for q in a], [q for a in articles[cut:] for q in a])


# ---------------------------------------------------------------- synthetic


def load_synthetic(task: TaskConfig) -> tuple[list[dict], list[dict], list[str]]:
    """Gold labels from the embedded grammar: word tags (`upos`, `depth`) or the sentence
    label `negated`. The first eval_fraction of the sentences is held out."""
    sentences = [s for doc in synthetic.iter_documents(task.num_sentences, seed=1)
                 for s in doc.sentences]
    if task.label_field == "negated":
        examples = [{"text": s.text, "text_pair": None, "label": int(s.negated)}
                    for s in sentences]
        labels = ["affirmative", "negated"]
    else:
        tags = [getattr(s, task.label_field) for s in sentences]
        labels = sorted({str(t) for row in tags for t in row})
        examples = [{"words": list(s.words), "tags": [labels.index(str(t)) for t in row]}
                    for s, row in zip(sentences, tags)]
    cut = int(len(examples) * task.eval_fraction)
    return examples[cut:], examples[:cut], labels


SYNTHETIC_FIELDS = ("upos", "depths", "negated")

# ---------------------------------------------------------------- dispatch

# format -> reader of one local file
LOCAL_READERS: dict[str, Callable[[Path, TaskConfig], list[dict]]] = {
    "glue_tsv": load_glue_tsv,
    "conll03": load_conll03,
    "conllu": load_conllu,
}


def load_local(task: TaskConfig, data_dir: Path) -> tuple[list[dict], list[dict], list[str]]:
    if task.format in OWN_FORMATS:
        return load_own(task, data_dir)
    if task.format == "squad":
        train, evaluation = split_squad(task, data_dir)
        return train, evaluation, []
    read = LOCAL_READERS[task.format]
    splits = []
    for split, path in zip(("train", "eval"), split_files(task, data_dir)):
        found = read(path, task)
        require(found, f"task={task.name}: {path} (the {split} split) holds no "
                "examples; check the file (a header and no rows?)")
        splits.append(found)
    return splits[0], splits[1], task.labels


def split_files(task: TaskConfig, data_dir: Path) -> tuple[Path | None, Path]:
    """The task's train file (None: squad splits its eval file) and eval file: inside
    task.path, whose folder must be there, or with no task.path absolute or from the working
    dir (config/data_checks.task_file)."""
    if task.path is not None:
        resolve_path(task.path, data_dir, "task.path")
    train = task_file(task, "train_file", data_dir) if task.train_file else None
    return train, task_file(task, "eval_file", data_dir)


def subsample(examples: list, limit: int | None, seed: int) -> list:
    """A seeded random subset (order kept), so a budget run sees a fixed sample."""
    if limit is None or limit >= len(examples):
        return examples
    keep = sorted(random.Random(seed).sample(range(len(examples)), limit))
    return [examples[i] for i in keep]


def load_task(task: TaskConfig, data_dir: Path, max_train_examples: int | None = None
              ) -> TaskData:
    """The task's train/eval examples, each subsampled (seeded) where a limit is set."""
    if task.format == "synthetic":
        require(task.label_field in SYNTHETIC_FIELDS, f"task.label_field={task.label_field!r} "
                f"is not a synthetic annotation; use one of: {', '.join(SYNTHETIC_FIELDS)}")
        train, evaluation, labels = load_synthetic(task)
    elif reads_local_files(task, data_dir):
        train, evaluation, labels = load_local(task, data_dir)
    else:
        root = data_dir / str(task.path)
        require(task.hub is not None, f"task={task.name}: {root} is missing and the task names "
                f"no hub data set; {data_fix(root, data_dir)}")
        train, evaluation, labels = load_hub(task)
    require(train and evaluation, f"task={task.name}: no training or no eval examples; check "
            "the data files")
    train = subsample(train, max_train_examples, seed=0)
    pool = len(evaluation)
    evaluation = subsample(evaluation, task.max_eval_examples, seed=1)
    check_train_classes(task, train, labels)
    require(len(evaluation) >= MIN_BOOTSTRAP_ITEMS, f"task={task.name}: {len(evaluation)} eval "
            f"example; the score's bootstrap interval resamples examples and needs "
            f"{MIN_BOOTSTRAP_ITEMS} or more (check the eval file and task.max_eval_examples)")
    log.info("task %s: %d train / %d eval examples", task.name, len(train), len(evaluation))
    return TaskData(train, evaluation, labels, pool)


def check_train_classes(task: TaskConfig, train: list[dict], labels: list[str]) -> None:
    """A classifier needs two classes to learn from: on one it learns a constant, and its eval
    accuracy (that class's share of the eval split) would read as a result."""
    if task.kind == "classification":
        seen = {example["label"] for example in train}
    elif task.kind == "tagging":
        seen = {tag for example in train for tag in example["tags"]}
    else:  # extractive QA predicts spans, not classes
        return
    if len(seen) < 2:
        names = [labels[i] if isinstance(i, int) and i < len(labels) else str(i) for i in seen]
        raise UserError(f"task={task.name}: every training example has the label "
                        f"{', '.join(map(repr, names)) or 'none'}; a classifier needs at least "
                        "two classes: check the training file (and task.max_train_examples)")
