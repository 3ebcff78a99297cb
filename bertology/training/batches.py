"""Training batches: groups sorted by length and served in a seeded order, so a resumed run
sees exactly the batches it would have seen, optionally collated ahead by a thread.
"""

from __future__ import annotations

import queue
import random
import threading
from collections.abc import Iterator
from itertools import islice

from bertology.data.stream import Cursor, ExampleSource
from bertology.training.objective import Objective

GROUP_BATCHES = 16  # batches drawn together and sorted by length, so little is padding


def iter_batches(data: ExampleSource, objective: Objective, position: Cursor, skip: int,
                 batch_size: int) -> Iterator[tuple[dict, tuple[Cursor, int], int]]:
    """(collated batch, position after it, real tokens in it). Examples come in groups of
    GROUP_BATCHES batches, sorted by length within the group (as HF's group_by_length) and
    served in a seeded random order; a position is (start of the group, batches served from
    it), so a resumed run rebuilds the group and skips what it had served."""
    stream = data.iter_train(position)
    while True:
        chunk = list(islice(stream, batch_size * GROUP_BATCHES))
        # Sorted by length within each epoch, epochs kept in order: a group that spans an
        # epoch boundary (every group, on a small corpus) must not put an example beside its
        # copy from the next epoch, which static masking gives the same mask.
        examples = [e for e, _ in sorted(chunk, key=lambda item: (
            item[1].epoch, len(item[0]["input_ids"]), item[0]["id"]))]
        batches = [examples[i: i + batch_size] for i in range(0, len(examples), batch_size)]
        random.Random(f"{data.seed}:{position.epoch}:{position.offset}").shuffle(batches)
        for index in range(skip, len(batches)):
            tokens = sum(len(e["input_ids"]) for e in batches[index])
            yield objective.collate(batches[index]), (position, index + 1), tokens
        position, skip = chunk[-1][1], 0


def prefetch(batches: Iterator, depth: int) -> Iterator:
    """The same batches in the same order, collated by a background thread while the model
    computes: masking and padding are Python and numpy, and torch releases the GIL in its
    kernels, so the two overlap. An error in the thread is raised at the step that needed
    the batch; the thread stops when the consumer is gone (a daemon, blocked at most on a
    full queue)."""
    ready: queue.Queue = queue.Queue(maxsize=depth)
    done = threading.Event()
    end = object()

    def hand_over(entry: tuple) -> bool:
        """Put, unless the consumer is gone; False then."""
        while not done.is_set():
            try:
                ready.put(entry, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def fill() -> None:
        try:
            for item in batches:
                if not hand_over((item, None)):
                    return
            hand_over((end, None))
        except BaseException as err:  # handed to the consumer, raised there
            hand_over((None, err))

    worker = threading.Thread(target=fill, name="bertology-prefetch", daemon=True)
    worker.start()
    try:
        while True:
            item, err = ready.get()
            if err is not None:
                raise err
            if item is end:
                return
            yield item
    finally:
        done.set()
