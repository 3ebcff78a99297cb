"""What the processes of one run exchange while training: each process's rows of the global
batch, and the sums, means and flags they must agree on (bertology/run/processes.py says who
they are)."""

from __future__ import annotations

import torch
from accelerate import Accelerator
from accelerate.utils import broadcast, gather_object

from bertology.errors import UserError


def check_shardable(cfg, processes: int) -> None:
    if cfg.batch_size % processes:
        raise UserError(f"trainer.batch_size={cfg.batch_size} is the global batch and must split "
                        f"evenly over {processes} processes; use a multiple of {processes}")


def shard(batch: dict[str, torch.Tensor], accelerator: Accelerator) -> dict[str, torch.Tensor]:
    """This process's rows of the global batch: every N-th from its rank, so N processes train
    on the same examples, with the same masks, as one process with the whole batch."""
    if accelerator.num_processes == 1:
        return batch
    rows = slice(accelerator.process_index, None, accelerator.num_processes)
    return {key: value[rows] for key, value in batch.items()}


def mean_over_processes(window: dict[str, float], accelerator: Accelerator) -> dict[str, float]:
    """The logged loss is the mean over processes, the loss of the global batch."""
    return _reduce(window, accelerator, "mean")


def sum_over_processes(sums: dict[str, float], accelerator: Accelerator) -> dict[str, float]:
    """Sums pooled over processes (every process must hold the same keys)."""
    return _reduce(sums, accelerator, "sum")


def _reduce(values: dict[str, float], accelerator: Accelerator, reduction: str
            ) -> dict[str, float]:
    if accelerator.num_processes == 1 or not values:
        return values
    keys = sorted(values)
    reduced = accelerator.reduce(torch.tensor([values[k] for k in keys], dtype=torch.float64,
                                              device=accelerator.device), reduction=reduction)
    return dict(zip(keys, reduced.tolist()))


def process_share(items: list, accelerator: Accelerator) -> list:
    """This process's every N-th item (evaluation batches), so N processes split the work; all
    of them where there are fewer items than processes, so that no process is left without a
    share to pool (callers then skip the pooling: see `is_split`)."""
    if not is_split(len(items), accelerator):
        return items
    return items[accelerator.process_index::accelerator.num_processes]


def gather_shares(share: list) -> list:
    """The inverse of process_share: every process's share, back in the original order (item
    i came from process i % N, as the (i // N)-th of its share)."""
    shares = gather_object([share])  # one list per process, in rank order
    processes = len(shares)
    return [shares[i % processes][i // processes] for i in range(sum(map(len, shares)))]


def is_split(count: int, accelerator: Accelerator) -> bool:
    return 1 < accelerator.num_processes <= count


def any_process(flag: bool, accelerator: Accelerator) -> bool:
    """True everywhere if any process has it: a signal may reach one process a step before
    another, and all must stop at the same step."""
    if accelerator.num_processes == 1:
        return flag
    return bool(accelerator.reduce(torch.tensor([float(flag)], device=accelerator.device),
                                   reduction="max").item())


def from_main(value: float, accelerator: Accelerator) -> float:
    """Rank 0's value everywhere: a time budget must end every process at the same step."""
    return float(broadcast(torch.tensor([value], dtype=torch.float64,
                                        device=accelerator.device), from_process=0))
