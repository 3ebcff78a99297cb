"""Probe data: sentences of words with a label per word and, where the data has them, gold
dependency trees (for structural probes, attention-to-head accuracy and edge probing).

Sources: UD English-EWT (CoNLL-U: UPOS, heads, relations), CoNLL-2003 (NER tags), a user's
own JSON lines of tokens and tags (data/own_files.py) and the embedded synthetic grammar (UPOS,
depth, heads, agreement), whose gold labels validate probes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from bertology.config.groups import TaskConfig
from bertology.config.probe_config import PROBE_TASKS, SYNTHETIC_PROBE_FIELDS
from bertology.data import synthetic
from bertology.data.number_pairs import NumberPair, load_number_pairs
from bertology.data.own_files import load_own
from bertology.data.tasks import (
    check_conllu_lines,
    conllu_error,
    read_lines,
    split_files,
    subsample,
)
from bertology.errors import UserError, require

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProbeSentence:
    words: tuple[str, ...]
    labels: tuple[str | None, ...]  # the task's label of each word; None: not labelled
    heads: tuple[int, ...] | None = None  # CoNLL-U: 1-based head index, 0 for the root
    deprels: tuple[str, ...] | None = None  # universal relation (subtype dropped)
    upos: tuple[str, ...] | None = None
    # a minimal pair's other sentence, where the data gives one (Marvin & Linzen's subject in
    # the other number, data/number_pairs.py)
    counterfactual: tuple[str, ...] | None = None


@dataclass(frozen=True)
class ProbeSplits:
    train: list[ProbeSentence]
    eval: list[ProbeSentence]
    eval_pool: int = 0  # the eval file's sentences before max_eval_sentences: what more exist


# ---------------------------------------------------------------- readers


def split_conllu_blocks(path: Path) -> list[str]:
    """The file's sentence blocks (blank-line separated), unparsed: sampling before parsing
    keeps a 2,000-sentence probe from parsing all 12,544 of EWT's train sentences."""
    lines = read_lines(path)
    check_conllu_lines(path, lines)
    text = "\n".join(lines)
    return [block for block in text.split("\n\n") if block.strip()]


def load_conllu_sentences(path: Path, label_field: str, limit: int | None = None,
                          seed: int = 0, labels: list[str] | None = None
                          ) -> list[ProbeSentence]:
    """Syntactic words (multi-word token lines and empty nodes skipped) with their trees,
    of a seeded sample of `limit` sentences (all if None). `labels`: the task's label set
    (task.labels), which every word's label must be in."""
    import conllu

    blocks = subsample(split_conllu_blocks(path), limit, seed)
    try:
        parsed = conllu.parse("\n\n".join(blocks) + "\n")
    except conllu.exceptions.ParseException as err:
        raise conllu_error(path, err) from err
    return [s for s in (conllu_sentence(path, sentence, label_field, labels)
                        for sentence in parsed) if s is not None]


def conllu_sentence(path: Path, sentence, label_field: str, known: list[str] | None = None
                    ) -> ProbeSentence | None:
    tokens = [t for t in sentence if isinstance(t["id"], int)]
    if not tokens:
        return None
    heads = tuple(int(t["head"]) for t in tokens)  # a tree: tasks.check_conllu_lines
    deprels = tuple(str(t["deprel"]).split(":")[0] for t in tokens)
    upos = tuple(str(t["upos"]) for t in tokens)
    labels = {"upos": upos, "deprel": deprels}.get(label_field)
    require(labels is not None, f"task.label_field={label_field!r}: CoNLL-U probes read upos "
            "or deprel")
    unknown = [label for label in labels if known and label not in known]
    require(not unknown, f"{path}: sentence {sentence.metadata.get('sent_id', '(no sent_id)')}: "
            f"{label_field} {unknown[0]!r} is not in task.labels; fix the file or the task's "
            "label set" if unknown else "")
    return ProbeSentence(tuple(t["form"] for t in tokens), labels, heads, deprels, upos)


def load_conll03_sentences(path: Path, task: TaskConfig) -> list[ProbeSentence]:
    from bertology.data.tasks import load_conll03

    return tagged_sentences(load_conll03(path, task), task.labels)


def tagged_sentences(examples: list[dict], labels: list[str]) -> list[ProbeSentence]:
    """Tagging examples (words, tag indices) as probe sentences with their tags' names."""
    return [ProbeSentence(tuple(e["words"]), tuple(labels[t] for t in e["tags"]))
            for e in examples]


def synthetic_labels(sentence: synthetic.Sentence, field: str) -> tuple[str | None, ...]:
    """Gold labels from the grammar; `agreement` labels only the word that agrees with the
    main-clause subject (Linzen et al., 2016's number prediction, as a probe)."""
    if field == "agreement":
        site = sentence.agreement
        return tuple(site.number if i == site.verb else None for i in range(len(sentence.words)))
    if field == "deprel":
        return sentence.deprels
    return tuple(str(value) for value in getattr(sentence, field))




def load_synthetic_sentences(task: TaskConfig) -> ProbeSplits:
    require(task.label_field in SYNTHETIC_PROBE_FIELDS,
            f"task.label_field={task.label_field!r} is not a synthetic word annotation; use one "
            f"of: {', '.join(SYNTHETIC_PROBE_FIELDS)}")
    grammar = [s for doc in synthetic.iter_documents(task.num_sentences, seed=1)
               for s in doc.sentences]
    sentences = [ProbeSentence(s.words, synthetic_labels(s, task.label_field), s.heads,
                               s.deprels, s.upos) for s in grammar]
    cut = int(len(sentences) * task.eval_fraction)  # the first share is held out, as finetune
    return ProbeSplits(sentences[cut:], sentences[:cut])


def load_number_pair_sentences(task: TaskConfig, data_dir: Path) -> ProbeSplits:
    """Marvin & Linzen's counterfactual pairs: the grammatical sentence, its agreeing verb
    labelled with the subject's number, and the counterfactual beside it."""
    def sentence(pair: NumberPair) -> ProbeSentence:
        labels = tuple(pair.number if i == pair.verb else None for i in range(len(pair.words)))
        return ProbeSentence(pair.words, labels, counterfactual=pair.counterfactual)

    train, held = load_number_pairs(data_dir, task.eval_fraction)
    return ProbeSplits([sentence(p) for p in train], [sentence(p) for p in held])


# ---------------------------------------------------------------- dispatch


def load_probe_sentences(task: TaskConfig, data_dir: Path, max_train: int | None,
                         max_eval: int | None, seed: int = 0) -> ProbeSplits:
    """The task's train (probe fitting) and eval (probe scoring) sentences, subsampled with
    `seed` (train) and `seed + 1` (eval): runs with other seeds see other sentences."""
    if task.format == "synthetic":
        full = load_synthetic_sentences(task)
        splits = ProbeSplits(subsample(full.train, max_train, seed),
                             subsample(full.eval, max_eval, seed + 1), len(full.eval))
    elif task.format == "marvin_linzen":
        full = load_number_pair_sentences(task, data_dir)
        splits = ProbeSplits(subsample(full.train, max_train, seed),
                             subsample(full.eval, max_eval, seed + 1), len(full.eval))
    elif task.format == "conllu":
        train_path, eval_path = split_files(task, data_dir)
        splits = ProbeSplits(
            load_conllu_sentences(train_path, task.label_field, max_train, seed, task.labels),
            load_conllu_sentences(eval_path, task.label_field, max_eval, seed + 1,
                                  task.labels),
            len(split_conllu_blocks(eval_path)))
    elif task.format == "conll03":
        train_path, eval_path = split_files(task, data_dir)
        evaluation = load_conll03_sentences(eval_path, task)
        splits = ProbeSplits(
            subsample(load_conll03_sentences(train_path, task), max_train, seed),
            subsample(evaluation, max_eval, seed + 1), len(evaluation))
    elif task.format == "jsonl" and task.kind == "tagging":
        train, evaluation, labels = load_own(task, data_dir)
        splits = ProbeSplits(subsample(tagged_sentences(train, labels), max_train, seed),
                             subsample(tagged_sentences(evaluation, labels), max_eval,
                                       seed + 1), len(evaluation))
    else:
        raise UserError(f"task={task.name} ({task.format}) has no word labels to probe; use a "
                        f"tagging task: {PROBE_TASKS}")
    require(splits.train and splits.eval, f"task={task.name}: no sentences to probe; check the "
            "data files")
    log.info("task %s: %d train / %d eval sentences", task.name, len(splits.train),
             len(splits.eval))
    return splits
