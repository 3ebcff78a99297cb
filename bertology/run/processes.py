"""Which process this is. Several processes, one run: `accelerate launch --multi_gpu
--num_processes N -m bertology pretrain ...` (or torchrun); without GPUs they talk over gloo.

Every process trains on its share of each global batch; only rank 0 writes (run dir, status,
checkpoints, metrics, W&B). Hydra runs in every process, so the run dir, which Hydra names by
the clock, is chosen once on rank 0 and given to the others.
"""

from __future__ import annotations

import os
import re
from datetime import datetime
from pathlib import Path

from omegaconf import OmegaConf

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
    import torch  # here, not at the top: the CLI reads rank and world size without torch

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


