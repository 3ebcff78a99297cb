"""Held-out and training examples of a corpus, epoch by epoch, resumable from a cursor.

The first `eval_docs` documents are held out. Training examples are rebuilt deterministically
each epoch (streamed through a seeded shuffle buffer, so memory does not grow with the corpus)
or, for small corpora, built once and permuted in memory. Each example carries a `mask_key`
that seeds its mask: (id, copy) for static masking, so the mask is the same every epoch and
each of the `dupe_factor` copies differs; (id, copy, epoch) for dynamic masking (RoBERTa §4.1).
In the pair formats each copy also draws its own pairs (formats.build_copies), as BERT's
create_pretraining_data.py does: an example's id numbers it within its copy.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Protocol

from transformers import PreTrainedTokenizerBase

from bertology.config.pretrain_config import PretrainConfig
from bertology.data.corpora import Corpus
from bertology.data.formats import build_copies
from bertology.errors import require


@dataclass(frozen=True)
class Cursor:
    """Where the training stream stands: `offset` examples into `epoch`."""

    epoch: int = 0
    offset: int = 0


class ExampleSource(Protocol):
    """What the training loop reads: a seeded, resumable stream of training examples (each a
    dict with "id" and "input_ids") and a fixed list of held-out ones."""

    seed: int
    eval_examples: list[dict]

    def iter_train(self, start: Cursor = Cursor()) -> Iterator[tuple[dict, Cursor]]: ...


class InMemoryExamples:
    """A small labelled set held in memory: a new seeded permutation every epoch."""

    def __init__(self, train: list[dict], eval_examples: list[dict], seed: int):
        require(train, "no training examples; check the task's data")
        self.train, self.eval_examples, self.seed = train, eval_examples, seed

    def iter_train(self, start: Cursor = Cursor()) -> Iterator[tuple[dict, Cursor]]:
        epoch, offset = start.epoch, start.offset
        while True:
            order = list(range(len(self.train)))
            random.Random(f"{self.seed}:{epoch}").shuffle(order)
            for position in range(offset, len(order)):
                yield self.train[order[position]], Cursor(epoch, position + 1)
            epoch, offset = epoch + 1, 0


class PretrainData:
    """A corpus's pretraining examples, as the pretraining config's sub-configs say: its data
    (sequence length, held-out documents, streaming) and model (input format, masking, dupe
    factor), and its seed; `pair_task` is the objective's ("nsp", "sop" or None)."""

    def __init__(self, corpus: Corpus, tokenizer: PreTrainedTokenizerBase,
                 config: PretrainConfig, pair_task: str | None):
        self.corpus, self.tokenizer, self.cfg = corpus, tokenizer, config.data
        self.input_format, self.pair_task = config.model.input_format, pair_task
        self.masking, self.dupe_factor = config.model.masking, config.model.dupe_factor
        self.seed = config.seed
        self.eval_examples = self._eval_examples()
        self._in_memory = None if self.cfg.streaming else list(self._build(train=True))
        require(self._in_memory is None or len(self._in_memory) > 0, self._no_examples())

    def _build(self, train: bool) -> Iterator[tuple[int, dict]]:
        """(copy, example): dupe_factor copies of the training examples, one of the held-out."""
        documents = self.corpus.iter_documents()
        if train:
            documents = islice(documents, self.cfg.eval_docs, None)
        else:
            documents = islice(documents, self.cfg.eval_docs)
        return build_copies(documents, self.tokenizer, self.input_format,
                            self.cfg.max_seq_length, self.pair_task, self.seed,
                            self.dupe_factor if train else 1)

    def _eval_examples(self) -> list[dict]:
        examples = [example for _, example in self._build(train=False)]
        require(examples, f"data={self.corpus.name}: the {self.cfg.eval_docs} held-out documents "
                "gave no examples; the corpus is empty or too small")
        for example in examples:
            example["mask_key"] = (1 << 30, example["id"])  # a fixed mask, apart from training's
        return examples

    def _no_examples(self) -> str:
        return (f"data={self.corpus.name}: no {self.input_format} training examples after the "
                f"{self.cfg.eval_docs} held-out documents (pairs need documents of two or more "
                "sentences); use a larger corpus or lower data.eval_docs")

    def _key(self, example: dict, copy: int, epoch: int) -> tuple[int, ...]:
        if self.masking == "dynamic":
            return (example["id"], copy, epoch)
        return (example["id"], copy)

    def _epoch_in_memory(self, epoch: int) -> Iterator[dict]:
        order = list(range(len(self._in_memory)))
        random.Random(f"{self.seed}:{epoch}").shuffle(order)
        for index in order:
            copy, example = self._in_memory[index]
            yield {**example, "mask_key": self._key(example, copy, epoch)}

    def _epoch_streaming(self, epoch: int) -> Iterator[dict]:
        """A shuffle buffer: memory is bounded by shuffle_buffer, not by the corpus."""
        rng = random.Random(f"{self.seed}:{epoch}")
        buffer: list[dict] = []
        for copy, example in self._build(train=True):
            buffer.append({**example, "mask_key": self._key(example, copy, epoch)})
            if len(buffer) >= self.cfg.shuffle_buffer:
                index = rng.randrange(len(buffer))
                buffer[index], buffer[-1] = buffer[-1], buffer[index]
                yield buffer.pop()
        rng.shuffle(buffer)
        yield from buffer

    def iter_train(self, start: Cursor = Cursor()) -> Iterator[tuple[dict, Cursor]]:
        """Training examples forever, each with the cursor just after it."""
        epoch, offset = start.epoch, start.offset
        while True:
            stream = self._epoch_streaming(epoch) if self._in_memory is None \
                else self._epoch_in_memory(epoch)
            produced = 0
            for position, example in enumerate(islice(stream, offset, None), start=offset + 1):
                produced += 1
                yield example, Cursor(epoch, position)
            require(produced > 0 or offset > 0, self._no_examples())
            epoch, offset = epoch + 1, 0

