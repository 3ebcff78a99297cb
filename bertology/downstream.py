"""What a pretraining objective buys downstream: after `bertology pretrain`, its model/ is
fine-tuned on a task by `bertology finetune` (into <run>/downstream) and the task scores join
the run's metrics as downstream/eval/*. RoBERTa (§4) and ELECTRA (§3.3) compare objectives
this way, not by their own pretraining losses, which are not comparable across objectives.

Config (pretrain.yaml): `downstream.task` names a conf/task/ file (null: no fine-tuning) and
`downstream.trainer` overrides trainer/finetune.yaml. The finetune config is built and checked
here, at config time, so a bad value fails before pretraining starts.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from bertology.errors import require
from bertology.task_config import build_finetune_cfg

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"


def load_group_file(group: str, name: str) -> dict:
    """conf/<group>/<name>.yaml as plain data, its `defaults: [x]` merged in (one level)."""
    path = CONF_DIR / group / f"{name}.yaml"
    options = sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))
    require(path.exists(), f"downstream: no {group} {name!r}; valid: {', '.join(options)}")
    node = OmegaConf.to_container(OmegaConf.load(path))
    bases = [d for d in node.pop("defaults", []) if isinstance(d, str) and d != "_self_"]
    merged = OmegaConf.merge(*(load_group_file(group, base) for base in bases), node)
    return OmegaConf.to_container(merged)


def build_downstream_cfg(container: dict, model_path: str) -> DictConfig | None:
    """The `finetune` config that fine-tunes a pretrain run's model/ (None: no task given)."""
    downstream = container.get("downstream") or {}
    task = downstream.get("task")
    if not task:
        return None
    trainer = OmegaConf.merge(load_group_file("trainer", "finetune"),
                              downstream.get("trainer") or {})
    model = {**container["model"], "name_or_path": model_path}
    return build_finetune_cfg(container, model, container["size"],
                              OmegaConf.to_container(trainer), load_group_file("task", str(task)))
