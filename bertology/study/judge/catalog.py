"""The study's catalogue: the findings (findings/<id>.yaml), the studies whose runs they
read (findings/studies.yaml), and which findings a set of runs can judge.

A finding states one claim (id, claim, source, the comparison, the `study` whose runs it
reads, and the `unit` its replicates are: one checkpoint or independently pretrained encoders,
scope.py). A study is a bundle in conf/experiment/ (`study_<name>.yaml`, what a pipeline runs)
that files its runs under `label: <name>`; several findings read one study (one probe sweep
serves every probing claim), so `make reproduce` runs each study once, with the settings the
catalogue gives it. The runner records the label and never reads it: the report judges every
finding of the studies its runs are labelled with.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml
from omegaconf import OmegaConf

from bertology.config.compose import FINDINGS_DIR
from bertology.errors import UserError, require
from bertology.run.rundir import RunDir
from bertology.study.judge.scope import UNITS
from bertology.study.judge.specs import FindingSpec, parse_finding

FINDINGS = FINDINGS_DIR
STUDIES_FILE = "studies.yaml"
RECIPES_FILE = "recipes.yaml"  # make reproduce's other commands (load_recipes)
COSTS_FILE = "costs.yaml"  # measured step times, for the cost --checkpoints prints (external.py)


@dataclass(frozen=True)
class Study:
    """How the study's runs are made: `bertology <pipeline> -m experiment=study_<name>`, with
    `smoke` overrides in the tests and `reproduce` overrides in `make reproduce`."""

    name: str
    pipeline: str
    smoke: tuple[str, ...] = ()
    reproduce: tuple[str, ...] = ()
    alone: bool = False  # make reproduce runs it with no other study beside it (latency)
    seeds: int = 3  # make reproduce's jobs: seeds 0..seeds-1 (more where a seed is cheap)
    member_seeds: int = 1  # a population member's jobs (steps.member_seeds)

    @property
    def bundle(self) -> str:
        return f"study_{self.name}"


def finding_files(folder: Path = FINDINGS) -> list[Path]:
    other = (STUDIES_FILE, RECIPES_FILE, COSTS_FILE)
    return sorted(p for p in folder.glob("*.yaml") if p.name not in other)


def load_catalog(folder: Path = FINDINGS) -> dict[str, FindingSpec]:
    """Every finding of findings/, by id."""
    specs = {}
    for path in finding_files(folder):
        block = OmegaConf.to_container(OmegaConf.load(path)) or {}
        check_unit(path, block)
        spec = parse_finding(block)
        require(spec.id == path.stem, f"{path}: id {spec.id!r} differs from the file's name")
        specs[spec.id] = spec
    return specs


def check_presuppositions(catalog: dict[str, FindingSpec]) -> None:
    """Every finding a finding presupposes is in the catalog (a typo would never apply)."""
    for spec in catalog.values():
        unknown = [p for p in spec.presupposes if p not in catalog]
        require(not unknown, f"finding {spec.id}: presupposes {', '.join(unknown)}, which no "
                "findings file defines")


def check_unit(path: Path, block) -> None:
    """Every finding says what its replicates are (no default: a verdict's scope is declared,
    never assumed)."""
    unit = block.get("unit") if isinstance(block, dict) else None
    require(isinstance(unit, str) and unit in UNITS,
            f"{path}: unit={unit!r}; valid: {', '.join(UNITS)} (checkpoint: one trained model, "
            "replicates are items and probe or fine-tuning seeds; pretraining: each run "
            "pretrains its own encoder)")


def load_studies(folder: Path = FINDINGS) -> dict[str, Study]:
    """Every study of findings/studies.yaml, by name."""
    block = OmegaConf.to_container(OmegaConf.load(folder / STUDIES_FILE))
    return {name: Study(name, str(entry["pipeline"]), tuple(entry.get("smoke") or ()),
                        tuple(entry.get("reproduce") or ()), bool(entry.get("alone", False)),
                        study_seeds(folder, name, entry.get("seeds", 3)),
                        study_seeds(folder, name, entry.get("member_seeds", 1), "member_seeds"))
            for name, entry in block.items()}


@dataclass(frozen=True)
class Recipes:
    """findings/recipes.yaml: the commands `make reproduce` runs besides the studies'
    sweeps, each a tuple of Hydra overrides (the file says where each value comes from)."""

    sst2_model: tuple[str, ...]  # `finetune` of the SST-2 models the studies read
    encoder_pretrain: tuple[str, ...]  # `pretrain model=<name>` of every pretrained encoder
    # a population member's own settings, by step (an SST-2 model kind or a study), after the
    # step's own: steps.EncoderSteps.settings
    member_finetuning: tuple[tuple[str, tuple[str, ...]], ...]


@cache
def load_recipes(folder: Path = FINDINGS) -> Recipes:
    """The recipes of findings/recipes.yaml (read once a process); a malformed one is a
    one-line error."""
    path = folder / RECIPES_FILE
    require(path.is_file(), f"{path} is missing: it gives make reproduce's commands; restore "
            "it from the repository")
    try:
        block = OmegaConf.to_container(OmegaConf.load(path))
    except yaml.YAMLError as err:
        raise UserError(f"{path} is not valid YAML ({' '.join(str(err).split())}); fix it") \
            from None
    require(isinstance(block, dict), f"{path} must map each recipe to its overrides")
    members = block.get("member_finetuning")
    require(isinstance(members, dict), f"{path}: member_finetuning must map a step to its "
            f"overrides; got {members!r}")
    steps = ("sst2_model", "sst2_twin", *load_studies(folder))
    for step in members:
        require(step in steps, f"{path}: member_finetuning.{step} names no step; choose from "
                f"{', '.join(steps)}")
    return Recipes(overrides(path, "sst2_model", block.get("sst2_model")),
                   overrides(path, "encoder_pretrain", block.get("encoder_pretrain")),
                   tuple((step, overrides(path, f"member_finetuning.{step}", value))
                         for step, value in members.items()))


def overrides(path: Path, key: str, value) -> tuple[str, ...]:
    """A recipe's list of key=value overrides, checked."""
    require(isinstance(value, list) and all(isinstance(v, str) and "=" in v for v in value),
            f"{path}: {key} must be a list of Hydra overrides (key=value); got {value!r}")
    return tuple(value)


# A seed count in studies.yaml -> (its least value, what it counts). make reproduce's jobs need
# two seeds or more (one leaves no spread to judge by); a population member's need one (the
# members are the replicates).
SEED_COUNTS = {"seeds": (2, "the jobs of make reproduce: seeds 0..seeds-1"),
               "member_seeds": (1, "a population member's seeds per study")}


def study_seeds(folder: Path, name: str, seeds, key: str = "seeds") -> int:
    """A study's seed count of kind key (SEED_COUNTS): a whole number of at least its least."""
    least, meaning = SEED_COUNTS[key]
    require(isinstance(seeds, int) and not isinstance(seeds, bool) and seeds >= least,
            f"{folder / STUDIES_FILE}: {name}.{key}={seeds!r}; give a whole number of at "
            f"least {least} ({meaning})")
    return seeds


def studies_guide(catalog: dict[str, FindingSpec], folder: Path = FINDINGS) -> list[str]:
    """Markdown lines: each study, the command that runs it, and the findings its runs
    answer (for a report whose runs judge no finding)."""
    studies = load_studies(folder if (folder / STUDIES_FILE).exists() else FINDINGS)
    lines = ["| study | command | findings it answers |", "|---|---|---|"]
    for name, study in sorted(studies.items()):
        answers = sorted(spec.id for spec in catalog.values() if name in spec.studies)
        lines.append(f"| {name} | `bertology {study.pipeline} -m experiment={study.bundle}` "
                     f"| {', '.join(answers) or '–'} |")
    return lines


def runs_of(spec: FindingSpec, runs: list[RunDir]) -> list[RunDir]:
    return [r for r in runs if r.label in spec.studies]


def findings_for(runs: list[RunDir], catalog: dict[str, FindingSpec] | None = None
                 ) -> list[tuple[FindingSpec, list[RunDir]]]:
    """(finding, its runs) for every finding of the studies the runs are labelled with, in id
    order."""
    catalog = load_catalog() if catalog is None else catalog
    labels = {r.label for r in runs if r.label}
    specs = {spec.id: spec for spec in catalog.values() if set(spec.studies) & labels}
    return [(spec, runs_of(spec, runs)) for _, spec in sorted(specs.items())]
