"""The findings across encoders: `python -m bertology.reproduce --encoders minilm bert modernbert`.

The survey's findings were measured on BERT-base; the question asked of them now is which hold
for the encoders trained today. MiniLM (all-MiniLM-L6-v2) is the encoder every study reads by
default. Each other encoder named is pretrained by the run itself, from random init with its
family's own recipe (`model=<name>`: BERT's static MLM + NSP, ModernBERT's 30% dynamic MLM
with alternating local and global attention, ...), all at one FLOP budget on Wikipedia with
one tokenizer (MiniLM's uncased WordPiece), so the columns differ in the family alone. Its
model is cached under <cache>/encoders/<name>-<digest of the command>, and a rerun with the same
settings reuses it.

The studies whose findings read an encoder (ENCODER_STUDIES: probing, attention, geometry,
structural, fine-tuning) then run again on it, into <out>/<name>/<study>, with SST-2 models
fine-tuned from it for the probe's fine-tuned comparison; a report per encoder judges them
(<out>/<name>/report). Each encoder is contrasted with its own random-init twin: the probes'
`random_init` arm rebuilds the checkpoint's architecture with fresh weights.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from omegaconf import OmegaConf

from bertology.config.compose import CONF_DIR
from bertology.config.hub_revisions import cache_root
from bertology.config.options import group_options
from bertology.errors import require
from bertology.run.rundir import METRICS_FILE
from bertology.study.judge.catalog import load_recipes

DEFAULT = "minilm"  # the studies' own encoder: the run's other studies read it too
ENCODER_STUDIES = ("probe_pos", "probe_ner", "probe_agreement", "finetune_sst2", "finetune_conll")

def pretrainable() -> list[str]:
    """The model= options a run can pretrain from random init: those with no checkpoint of
    their own (conf/model/<name>.yaml's name_or_path is null; MiniLM's is its hub id)."""
    return [name for name in group_options("model")
            if OmegaConf.load(CONF_DIR / "model" / f"{name}.yaml").get("name_or_path") is None]


def check_encoders(encoders: list[str]) -> list[str]:
    """The encoders in order, each once; an unknown one or a list without minilm is a one-line
    error."""
    choices = (DEFAULT, *pretrainable())
    for name in encoders:
        require(name in choices, f"--encoders {name} is not an encoder this run can judge; "
                f"choose from {', '.join(choices)}")
    require(DEFAULT in encoders, f"--encoders must name {DEFAULT}: the run's other studies "
            "(pretraining, pruning, distillation) read it, and its column is the baseline")
    return list(dict.fromkeys(encoders))


def pretrain_args(name: str) -> list[str]:
    """The command that pretrains `name` at the one budget of every pretrained encoder
    (findings/recipes.yaml: encoder_pretrain, with its sources)."""
    return ["pretrain", f"model={name}", *load_recipes().encoder_pretrain]


def encoder_dir(name: str, cache: Path | None = None, args: list[str] | None = None) -> Path:
    """Where the run pretrains `name`, keyed by its command (args; default pretrain_args), so
    that changed settings never reuse a model trained under others."""
    cache = cache or cache_root()
    command = pretrain_args(name) if args is None else args
    digest = hashlib.sha256(json.dumps(command).encode()).hexdigest()[:12]
    return cache / "encoders" / f"{name}-{digest}"


# The checkpoint population (`--population K`): K encoders of one recipe, BERT's, at the budget
# above, that differ only in the pretraining seed, which draws their initial weights, their
# masks and their data order (MultiBERTs' design, Sellam et al., 2021, at CPU scale).
POPULATION_RECIPE = "bert"


def member_args(seed: int, extra: tuple[str, ...] = ()) -> list[str]:
    """The pretraining command of the population's member `seed`; extra overrides (a larger
    size or budget on a GPU) come after the recipe's."""
    recipe = [a for a in pretrain_args(POPULATION_RECIPE) if not a.startswith("seed=")]
    return [*recipe, *extra, f"seed={seed}"]


def member_dir(seed: int, extra: tuple[str, ...] = (), cache: Path | None = None) -> Path:
    return encoder_dir(f"{POPULATION_RECIPE}-seed{seed}", cache, member_args(seed, extra))


def is_pretrained(run_dir: Path) -> bool:
    """A finished pretraining run (metrics.json is written last); a killed one resumes."""
    return (run_dir / METRICS_FILE).is_file() and (run_dir / "model" / "config.json").is_file()
