"""Training batches: length-grouped, seeded, and never holding an example twice."""

from __future__ import annotations

from collections import Counter
from itertools import islice
from types import SimpleNamespace

from bertology.data.stream import InMemoryExamples
from bertology.training.loop import GROUP_BATCHES, LoopState, iter_batches

IDS = SimpleNamespace(collate=lambda examples: [e["id"] for e in examples])


def small_corpus(size: int) -> InMemoryExamples:
    train = [{"id": i, "input_ids": [0] * (3 + i % 5)} for i in range(size)]
    return InMemoryExamples(train, [], seed=0)


def test_a_group_spanning_epochs_never_puts_an_example_twice_in_a_batch():
    """10 examples, groups of 16 batches of 4: every group spans several epochs. Sorting a
    group by length alone put each example beside its copies from the next epochs (with
    static masking, the same masked sequence twice in one batch)."""
    data = small_corpus(10)
    batches = [batch for batch, _, _ in islice(iter_batches(data, IDS, LoopState(), 4),
                                                3 * GROUP_BATCHES)]
    assert all(len(batch) == 4 for batch in batches)
    assert all(max(Counter(batch).values()) == 1 for batch in batches), batches[:4]
    seen = Counter(i for batch in batches for i in batch)
    assert max(seen.values()) - min(seen.values()) <= 1  # each epoch serves each example once


def test_batches_are_sorted_by_length_within_an_epoch():
    data = small_corpus(200)  # one group is 64 of an epoch's 200 examples
    batches = [batch for batch, _, _ in islice(iter_batches(data, IDS, LoopState(), 4),
                                                GROUP_BATCHES)]
    spreads = [max(3 + i % 5 for i in batch) - min(3 + i % 5 for i in batch) for batch in batches]
    assert sum(spreads) <= 4  # one length per batch, but where a length's run ends
