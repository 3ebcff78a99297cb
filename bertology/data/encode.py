"""Task examples → model inputs (one feature dict per sequence) and padded batches.

Tagging labels the first sub-token of each word and ignores the rest (BERT §5.3). Extractive
QA slides a window of max_seq_length over a long context with overlap `doc_stride` (BERT §4.2),
so one question can give several features; each remembers its example and the character
offsets of its context tokens, to map a predicted span back to text.
"""

from __future__ import annotations

import torch
from transformers import PreTrainedTokenizerBase

from bertology.config.groups import TaskConfig
from bertology.errors import require

IGNORE = -100  # label of positions without a loss (the torch / transformers convention)


def encode_classification(examples: list[dict], tokenizer, task: TaskConfig) -> list[dict]:
    features = []
    for index, example in enumerate(examples):
        encoded = tokenizer(example["text"], example["text_pair"], truncation=True,
                            max_length=task.max_seq_length)
        cut = bool(encoded.encodings and encoded.encodings[0].overflowing)
        features.append({"id": index, "example": index, **_inputs(encoded),
                         "labels": example["label"], "truncated": cut})
    return features


def encode_tagging(examples: list[dict], tokenizer, task: TaskConfig) -> list[dict]:
    """Words past max_seq_length are cut; `word_ids` lets predictions map back to words."""
    features = []
    for index, example in enumerate(examples):
        encoded = tokenizer(example["words"], is_split_into_words=True, truncation=True,
                            max_length=task.max_seq_length)
        word_ids = encoded.word_ids()
        labels, previous = [], None
        for word in word_ids:
            first = word is not None and word != previous
            labels.append(example["tags"][word] if first else IGNORE)
            previous = word
        features.append({"id": index, "example": index, **_inputs(encoded), "labels": labels,
                         "word_ids": [-1 if w is None else w for w in word_ids],
                         "truncated": max((w for w in word_ids if w is not None), default=-1)
                         < len(example["words"]) - 1})
    return features


def encode_qa(examples: list[dict], tokenizer, task: TaskConfig) -> list[dict]:
    """Windows over each context; the answer's token span, or [CLS] (0, 0) where the window
    does not contain the first gold answer (as the reference implementation trains)."""
    require(tokenizer.is_fast, "extractive QA needs a fast tokenizer (offset mappings)")
    pad_right = tokenizer.padding_side == "right"
    require(pad_right, "extractive QA expects right padding")
    features = []
    for index, example in enumerate(examples):
        question = cut_question(example["question"], tokenizer, task.max_query_length)
        encoded = tokenizer(question, example["context"], truncation="only_second",
                            max_length=task.max_seq_length, stride=task.doc_stride,
                            return_overflowing_tokens=True, return_offsets_mapping=True)
        for window in range(len(encoded["input_ids"])):
            sequence_ids = encoded.sequence_ids(window)
            offsets = [o if s == 1 else None
                       for o, s in zip(encoded["offset_mapping"][window], sequence_ids)]
            start, end = _answer_tokens(example, offsets)
            features.append({"id": len(features), "example": index,
                             **_inputs(encoded, window), "start_positions": start,
                             "end_positions": end, "offsets": offsets})
    return features


def cut_question(question: str, tokenizer, max_tokens: int) -> str:
    """The question cut to its first max_tokens word pieces (run_squad.py's max_query_length),
    so that the context keeps the room task.doc_stride assumes: a question that fills the
    window would leave no context to slide over (the tokenizer refuses a stride that long)."""
    offsets = tokenizer(question, add_special_tokens=False,
                        return_offsets_mapping=True)["offset_mapping"]
    return question if len(offsets) <= max_tokens else question[:offsets[max_tokens - 1][1]]


def _answer_tokens(example: dict, offsets: list) -> tuple[int, int]:
    answer_start = example["answers"]["answer_start"][0]
    answer_end = answer_start + len(example["answers"]["text"][0])
    inside = [i for i, o in enumerate(offsets) if o is not None]
    if not inside or offsets[inside[0]][0] > answer_start or offsets[inside[-1]][1] < answer_end:
        return 0, 0
    start = next(i for i in inside if offsets[i][1] > answer_start)
    end = next(i for i in reversed(inside) if offsets[i][0] < answer_end)
    return start, end


def _inputs(encoded, window: int | None = None) -> dict:
    keys = ("input_ids", "token_type_ids")
    if window is None:
        return {k: list(encoded[k]) for k in keys if k in encoded}
    return {k: list(encoded[k][window]) for k in keys if k in encoded}


ENCODE_BY_KIND = {"classification": encode_classification, "tagging": encode_tagging,
            "qa": encode_qa}


def encode(examples: list[dict], tokenizer: PreTrainedTokenizerBase, task: TaskConfig
           ) -> list[dict]:
    return ENCODE_BY_KIND[task.kind](examples, tokenizer, task)


def build_collate(pad_token_id: int):
    """collate(features) -> padded tensors: input_ids, attention_mask, token_type_ids and the
    targets (labels padded with IGNORE; QA start/end positions)."""

    def collate(features: list[dict]) -> dict[str, torch.Tensor]:
        width = max(len(f["input_ids"]) for f in features)
        batch = {"input_ids": _pad([f["input_ids"] for f in features], width, pad_token_id),
                 "attention_mask": _pad([[1] * len(f["input_ids"]) for f in features], width, 0)}
        if "token_type_ids" in features[0]:
            batch["token_type_ids"] = _pad([f["token_type_ids"] for f in features], width, 0)
        if isinstance(features[0].get("labels"), list):
            batch["labels"] = _pad([f["labels"] for f in features], width, IGNORE)
        elif "labels" in features[0]:
            batch["labels"] = torch.tensor([f["labels"] for f in features])
        for key in ("start_positions", "end_positions"):
            if key in features[0]:
                batch[key] = torch.tensor([f[key] for f in features])
        return batch

    return collate


def _pad(rows: list[list[int]], width: int, value: int) -> torch.Tensor:
    return torch.tensor([row + [value] * (width - len(row)) for row in rows])
