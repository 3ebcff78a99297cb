"""Several processes, one run: `accelerate launch --multi_gpu --num_processes N -m bertology
pretrain ...` (or torchrun). On a machine without GPUs the processes talk over gloo.

Every process trains on its share of each global batch; only rank 0 writes (run dir, status,
checkpoints, metrics, W&B). Hydra runs in every process, so the run dir, which Hydra names by
the clock, is chosen once on rank 0 and given to the others.
"""

from __future__ import annotations

import os
import re
from datetime import datetime
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import broadcast
from omegaconf import OmegaConf

from bertology.errors import UserError

NOW = re.compile(r"\$\{now:([^}]*)\}")


def world_size() -> int:
    """Processes in the run, from the launcher's environment (before torch.distributed)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def is_main_process() -> bool:
    return rank() == 0


def accelerator_options() -> dict:
    """Accelerator(cpu=True) where several processes have no GPU: accelerate then joins them
    over gloo (MULTI_CPU); without it they would each train alone."""
    return {"cpu": True} if world_size() > 1 and not torch.cuda.is_available() else {}


def _broadcast_from_main(value: str) -> str:
    from accelerate import PartialState
    from accelerate.utils import broadcast_object_list

    PartialState(**accelerator_options())  # joins the process group
    return broadcast_object_list([value], from_process=0)[0]


def run_dir_overrides(config_file: Path, overrides: list[str]) -> list[str]:
    """For a multi-process run: the same `hydra.run.dir` in every process (rank 0's clock),
    and no Hydra log file or saved config from the other ranks."""
    if world_size() == 1:
        return overrides
    chosen = [o for o in overrides if o.startswith("hydra.run.dir=")]
    if not chosen:
        pattern = OmegaConf.to_container(OmegaConf.load(config_file).hydra.run)["dir"]
        now = datetime.fromisoformat(_broadcast_from_main(datetime.now().isoformat()))
        chosen = [f"hydra.run.dir={NOW.sub(lambda m: now.strftime(m.group(1)), pattern)}"]
    quiet = [] if is_main_process() else ["hydra.output_subdir=null", "hydra/job_logging=stdout"]
    return [*[o for o in overrides if not o.startswith("hydra.run.dir=")], *chosen, *quiet]


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
