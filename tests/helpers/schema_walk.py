"""The schema's leaf keys, walked from the composed configs: every pipeline's primary
config with every option of every group it composes. The generated bad-input suite
(tests/reliability/test_schema_inputs.py) feeds each key values derived from this walk."""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from conftest import write_vocab
from omegaconf import OmegaConf

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "conf"
PIPELINES = ("pretrain", "finetune", "probe", "prune", "distill", "report")


def group_packages(pipeline: str) -> list[tuple[str, str]]:
    """(group, package) of each group in the pipeline's defaults list: ("model", "teacher.model")
    for `model@teacher.model`; experiment bundles are not schema and are left out."""
    defaults = OmegaConf.to_container(OmegaConf.load(CONF / f"{pipeline}.yaml")).get("defaults", [])
    entries = [next(iter(d)) for d in defaults if isinstance(d, dict)]
    return [(entry.split("@")[0], entry.split("@")[1] if "@" in entry else entry.split("@")[0])
            for entry in entries if entry.split("@")[0] != "experiment"]


def option_overrides(pipeline: str) -> list[list[str]]:
    """One override list per option of every group: [], [model=roberta], [size=mini], ...
    (analysis: all of them at once, as they compose side by side)."""
    bases: list[list[str]] = [[]]
    for group, package in group_packages(pipeline):
        options = sorted(p.stem for p in (CONF / group).glob("*.yaml"))
        key = group if group == package else f"{group}@{package}"
        if group == "analysis":  # cloze and amnesic read an MLM head: give them one
            bases.append([f"analysis=[{','.join(options)}]",
                          f"model.name_or_path={mlm_checkpoint()}"])
        else:
            bases += [[f"{key}={option}"] for option in options]
    return bases


@functools.cache
def mlm_checkpoint() -> Path:
    """A tiny BERT with its MLM head, saved once per session (the checks read its config.json
    and safetensors header; no test loads it)."""
    from transformers import BertConfig, BertForMaskedLM

    root = Path(tempfile.mkdtemp(prefix="bertology-schema-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)  # gone when the session ends
    path = root / "mlm"
    BertForMaskedLM(BertConfig(vocab_size=100, hidden_size=8, num_hidden_layers=1,
                               num_attention_heads=2, intermediate_size=16)).save_pretrained(path)
    return write_vocab(path, 100)


def leaves(node, prefix: str = ""):
    """(dotted key, value) of every leaf; an empty mapping is a leaf too."""
    if isinstance(node, dict) and node:
        for name, value in node.items():
            yield from leaves(value, f"{prefix}{name}.")
    else:
        yield prefix[:-1], node


@dataclass
class Leaf:
    pipeline: str
    key: str
    value: object
    base: list[str]  # the overrides of the composed config it was found in
    added: bool = False  # a key of the schema that no YAML file sets (given as +key=value)


def schema_groups() -> dict[str, type]:
    """Config block -> the dataclass that checks it, so keys no YAML file sets are walked too."""
    from bertology.config.analysis_settings import ANALYSES
    from bertology.config.checks import PathsConfig
    from bertology.config.distill_config import KDConfig, StudentConfig
    from bertology.config.groups import (
        DataConfig,
        HeadConfig,
        LoggerConfig,
        ModelConfig,
        ObjectiveConfig,
        SizeConfig,
        TaskConfig,
        TrainerConfig,
    )
    from bertology.config.prune_settings import PruneSettings

    blocks = {"model": ModelConfig, "size": SizeConfig, "objective": ObjectiveConfig,
              "data": DataConfig, "trainer": TrainerConfig, "logger": LoggerConfig,
              "task": TaskConfig, "head": HeadConfig, "student": StudentConfig, "kd": KDConfig,
              "prune": PruneSettings, "paths": PathsConfig,
              "teacher.model": ModelConfig, "teacher.size": SizeConfig,
              "teacher.trainer": TrainerConfig, "compression.student": StudentConfig,
              "compression.kd": KDConfig}
    blocks.update({f"analysis.{name}": row.settings for name, row in ANALYSES.items()})
    return blocks


def unset_fields(found: dict[tuple[str, str], Leaf]) -> list[Leaf]:
    """The schema's keys under a block a pipeline composes that no YAML file sets."""
    import dataclasses

    added = []
    for block, cls in schema_groups().items():
        for pipeline in PIPELINES:
            present = [leaf for (p, key), leaf in found.items()
                       if p == pipeline and key.startswith(block + ".")]
            if not present:
                continue
            for f in dataclasses.fields(cls):
                if (pipeline, f"{block}.{f.name}") not in found:
                    default = f.default_factory() if f.default_factory is not dataclasses.MISSING \
                        else f.default
                    added.append(Leaf(pipeline, f"{block}.{f.name}", default, present[0].base,
                                      added=True))
    for pipeline, cls in top_level_keys().items():
        base = next(leaf.base for (p, _), leaf in found.items() if p == pipeline)
        for f in dataclasses.fields(cls):
            if (pipeline, f.name) not in found:
                value = {} if "dict" in str(f.type) else f.default  # a block: fed non-blocks
                added.append(Leaf(pipeline, f.name, value, base, added=True))
    return added


def top_level_keys() -> dict[str, type]:
    """Pipeline -> the dataclass of its top-level keys."""
    from bertology.config.checks import TrainingRunKeys
    from bertology.config.finetune_config import FinetuneRunKeys
    from bertology.config.probe_config import ProbeRunKeys

    return {"pretrain": TrainingRunKeys, "finetune": FinetuneRunKeys, "probe": ProbeRunKeys,
            "prune": TrainingRunKeys, "distill": TrainingRunKeys}


# Options (and pipelines) that need a value no default gives: the walk fills in one that passes.
REQUIRED_VALUES = {
    "data=files": [f"data.files=[{REPO / 'README.md'}]"],
    "data=hub": ["data.path=wikitext"],
    "report": [f"runs=[{REPO / 'bench'}]"],
}


@functools.cache
def walk(every_option: bool = True) -> list[Leaf]:
    """Every leaf key of every pipeline, each with the first option list whose composed config
    passes the pipeline's checks (so a refusal of a bad value is the key's, not the base's).
    every_option=False walks each pipeline's default config alone (6 compositions, not ~225:
    about a second instead of half a minute), the keys a default run sets."""
    from hydra import compose, initialize_config_dir

    from bertology.config.verbs import load_config_check
    from bertology.errors import UserError

    found: dict[tuple[str, str], Leaf] = {}
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        for pipeline in PIPELINES:
            for option in option_overrides(pipeline) if every_option else [[]]:
                base = [*option, *(v for o in [pipeline, *option]
                                   for v in REQUIRED_VALUES.get(o, []))]
                cfg = compose(config_name=pipeline, overrides=base)
                try:
                    load_config_check(pipeline)(cfg)
                except UserError:
                    continue  # an option that needs another (objective=electra: model=electra)
                for key, value in leaves(OmegaConf.to_container(cfg, resolve=False)):
                    if not key.startswith("hydra."):
                        found.setdefault((pipeline, key), Leaf(pipeline, key, value, base))
    # a key no YAML sets is walked on the whole walk alone: on a default config it is often one
    # the default run never reads (task.train_file beside a synthetic task)
    return [*found.values(), *(unset_fields(found) if every_option else [])]
