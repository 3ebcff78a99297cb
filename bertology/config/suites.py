"""Checkpoint suites: the (seed x step) grid of a family of pretraining runs, named by
`model.suite`, `model.suite_seed` and `model.suite_step`, so that one sweep names a grid:

    bertology probe -m model.suite=multiberts model.suite_seed=0,1,2 model.suite_step=20000,2000000

A suite is a row (conf/suites/<name>.yaml, or the path of a YAML file of one's own) in one of
three layouts:

- repos: one hub repo per checkpoint (MultiBERTs: google/multiberts-seed_0-step_20k), and one
  per seed for the final model;
- revisions: one repo per seed, a branch or tag per step (Pythia's step1000; Ettin's step,
  ext and decay phases are rows like it);
- folders: a local folder per checkpoint (a template path with {seed} and {step}).

A step becomes tokens seen (tokens_per_step, from the suite's paper), the x axis that curves
across pretraining are drawn on. Which checkpoints a suite has is read from the local hub cache
(or the folders), never guessed: `members()`. No torch here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import yaml
from omegaconf import OmegaConf

from bertology.config.checks import one_of
from bertology.config.hub_revisions import (
    cached_refs,
    check_revision_target,
    checkpoint_record,
    hub_cache,
    hub_label,
    hub_snapshot,
    repo_folder,
    snapshot_sha,
    weights_folder,
)
from bertology.config.path_checks import LOCAL_MIRRORS, is_path
from bertology.errors import UserError, require

LAYOUTS = ("repos", "revisions", "folders")
SUITES_DIR = "suites"  # under conf/


class SuiteMember(NamedTuple):
    """One checkpoint of a suite the cache (or the disk) holds."""

    seed: int
    step: int | None  # None: a final model (MultiBERTs' seed repos)
    name_or_path: str
    revision: str | None


@dataclass(frozen=True)
class Suite:
    name: str
    layout: str
    repo: str  # template: {seed} and, for repos and folders, {step}
    revision: str | None = None  # revisions: the ref template, e.g. step{step}
    step_unit: int = 1  # the repo or ref names count steps in these units (MultiBERTs: 1000)
    final: str | None = None  # repos: the final model's repo template (MultiBERTs: seed_{seed})
    final_step: int | None = None
    tokens_per_step: int | None = None  # tokens a training step reads; None: not stated

    def __post_init__(self) -> None:
        one_of(self.layout, LAYOUTS, f"suite {self.name}: layout")
        require(self.layout != "revisions" or self.revision is not None,
                f"suite {self.name}: a revisions layout needs revision: (e.g. step{{step}})")
        require(self.step_unit >= 1, f"suite {self.name}: step_unit must be >= 1")

    def checkpoint(self, seed: int | None, step: int | None) -> tuple[str, str | None]:
        """(model.name_or_path, model.revision) of the suite's checkpoint at (seed, step);
        step None: the final model."""
        seed = 0 if seed is None else seed
        require(seed >= 0, f"model.suite_seed={seed} must be >= 0 (a seed of suite {self.name})")
        require("{seed}" in self.repo or seed == 0, f"model.suite={self.name} has one seed "
                f"(its repo {self.repo} names none); drop model.suite_seed={seed}")
        if self.layout == "revisions":
            ref = "main" if step is None else self.revision.format(step=self.units(step))
            return self.repo.format(seed=seed), ref
        if step is None or (step == self.final_step and self.final is not None):
            require(self.final is not None, f"model.suite={self.name} names no final model; "
                    "give model.suite_step")
            return self.final.format(seed=seed), None
        return self.repo.format(seed=seed, step=self.units(step)), None

    def units(self, step: int) -> int:
        require(step >= 0, f"model.suite_step={step} must be >= 0 (a training step)")
        require(step % self.step_unit == 0, f"model.suite_step={step}: suite "
                f"{self.name} keeps checkpoints at multiples of {self.step_unit} steps")
        return step // self.step_unit

    def tokens(self, step: int | None) -> int | None:
        """Tokens seen at a step (the final model's where step is None)."""
        step = self.final_step if step is None else step
        return None if step is None or self.tokens_per_step is None else step * self.tokens_per_step

    def members(self) -> list[SuiteMember]:
        """Every checkpoint of the suite the local hub cache (folders: the disk) holds, by seed
        then step."""
        found = {"repos": self.cached_repos, "revisions": self.cached_revisions,
                 "folders": self.local_folders}[self.layout]()
        return sorted(found, key=lambda m: (m.seed, -1 if m.step is None else m.step))

    def cached_repos(self) -> list[SuiteMember]:
        found = []
        for repo in cached_repo_ids():
            for template, final in ((self.repo, False), (self.final, True)):
                match = template and pattern(template).fullmatch(repo)
                if match and (repo_folder(repo) / "refs" / "main").is_file():
                    step = None if final else int(match["step"]) * self.step_unit
                    found.append(SuiteMember(seed_of(match), step, repo, None))
        return found

    def cached_revisions(self) -> list[SuiteMember]:
        found = []
        for repo in cached_repo_ids():
            match = pattern(self.repo).fullmatch(repo)
            for ref in cached_refs(repo) if match else ():
                step = pattern(self.revision).fullmatch(ref)
                if step:
                    found.append(SuiteMember(seed_of(match), int(step["step"]) * self.step_unit,
                                             repo, ref))
        return found

    def local_folders(self) -> list[SuiteMember]:
        found = []
        prefix = self.repo.split("{")[0]  # the template's fixed part: .../runs/seed_
        root = Path(prefix).expanduser() if prefix.endswith("/") else Path(prefix).parent
        for config in root.rglob("config.json") if root.is_dir() else ():
            folder = config.parent.as_posix()
            match = pattern(self.repo).fullmatch(folder)
            if match:
                found.append(SuiteMember(seed_of(match), int(match["step"]) * self.step_unit,
                                         folder, None))
        return found


def cached_repo_ids() -> list[str]:
    """The model repos the local hub cache holds, as org/name."""
    return [folder.name.removeprefix("models--").replace("--", "/")
            for folder in hub_cache().glob("models--*")]


def seed_of(match: re.Match) -> int:
    """The seed a template's match names (0 where the template names none)."""
    return int(match.groupdict().get("seed") or 0)


def pattern(template: str) -> re.Pattern:
    """A regular expression for a template's names: {seed} and {step} capture digits."""
    escaped = re.escape(template)
    for field in ("seed", "step"):
        escaped = escaped.replace(re.escape(f"{{{field}}}"), f"(?P<{field}>\\d+)", 1)
    return re.compile(escaped)


def suite_names() -> list[str]:
    from bertology.config.compose import CONF_DIR

    return sorted(p.stem for p in (CONF_DIR / SUITES_DIR).glob("*.yaml"))


def load_suite(name: str) -> Suite:
    """The row conf/suites/<name>.yaml, or a YAML file of one's own given by its path."""
    from bertology.config.compose import CONF_DIR

    path = Path(name).expanduser()
    if not name.endswith((".yaml", ".yml")):
        path = CONF_DIR / SUITES_DIR / f"{name}.yaml"
        require(path.is_file(), f"model.suite={name!r} is not a suite; choose from "
                f"{', '.join(suite_names())}, or give the path of a suite YAML file")
    require(path.is_file(), f"model.suite={name!r}: no such file; give the path of a suite "
            "YAML file (docs/howto/checkpoint-suites.md)")
    try:
        row = OmegaConf.to_container(OmegaConf.load(path))
        require(isinstance(row, dict), "not a mapping")
        return Suite(name=path.stem, **row)
    except (UserError, TypeError, ValueError, yaml.YAMLError) as err:
        raise UserError(f"model.suite={name!r}: {path} is not a suite row ({err}); it needs "
                        "layout: and repo: (docs/howto/checkpoint-suites.md)") from None


def same_checkpoint(name_or_path: str, name: str) -> bool:
    """Whether name_or_path is the checkpoint `name`, or its snapshot folder in the hub cache."""
    path = Path(name_or_path)
    if snapshot_sha(path) is not None:  # the cache's snapshot, or its converted copy
        return path.parent.parent.name == repo_folder(name).name
    return name_or_path == name


def pin_checkpoint(model) -> None:  # a config.groups.ModelConfig (it calls this)
    """model.suite's (seed, step) becomes model.name_or_path and model.revision, and a revision
    its snapshot folder in the hub cache, so every later step reads one commit. Idempotent: a
    copy of a pinned config (dataclasses.replace) is pinned already."""
    if model.suite is None:
        require(model.suite_seed is None and model.suite_step is None,
                "model.suite_seed and model.suite_step pick a checkpoint of model.suite; set "
                "model.suite=<name> (conf/suites/) or drop them")
    else:
        name, revision = load_suite(model.suite).checkpoint(model.suite_seed, model.suite_step)
        if model.name_or_path is None:
            require(model.revision is None, f"model.suite={model.suite} picks the revision "
                    f"by model.suite_step; drop model.revision={model.revision!r}")
            model.name_or_path, model.revision = name, revision
        require(same_checkpoint(model.name_or_path, name), f"model.suite={model.suite} picks "
                f"the checkpoint ({name}); drop model.name_or_path={model.name_or_path!r}")
    if model.revision is not None:
        check_revision_target(model.name_or_path, model.revision)
    model.name_or_path = pinned_folder(model.name_or_path, model.revision)


def pinned_folder(name_or_path: str | None, revision: str | None,
                  key: str = "model.name_or_path") -> str | None:
    """The local folder a hub checkpoint is read from, where the cache holds it (a revision:
    downloaded first when the hub can be reached), its safetensors or their converted copy
    (hub_revisions.weights_folder); a path, a mirrored id or an uncached id unchanged."""
    if name_or_path is None or snapshot_sha(name_or_path) is not None or is_path(name_or_path):
        return name_or_path
    if revision is None and name_or_path in LOCAL_MIRRORS:
        return name_or_path  # the installed package's copy (path_checks.resolve_checkpoint)
    snapshot = hub_snapshot(name_or_path, revision, key)
    if snapshot is None:
        return name_or_path  # transformers reads or downloads it (offline: checked later)
    return str(weights_folder(name_or_path, snapshot, key, hub_label(name_or_path, revision)))


def read_checkpoint_record(cfg) -> dict | None:
    """env.json's record of the checkpoint a run's config names (its model group): name,
    revision, commit SHA (hub_revisions.checkpoint_record) and, for a suite's member, its
    suite, seed, step and the tokens it had seen."""
    model = cfg.get("model") if hasattr(cfg, "get") else None
    if not model:
        return None
    name, revision, suite = model.get("name_or_path"), model.get("revision"), model.get("suite")
    if suite is None:
        return checkpoint_record(name, revision)
    row = load_suite(str(suite))
    seed, step = model.get("suite_seed"), model.get("suite_step")
    name, revision = row.checkpoint(seed, step)
    return {**checkpoint_record(name, revision), "suite": row.name, "seed": seed or 0,
            "step": row.final_step if step is None else step, "tokens_seen": row.tokens(step)}
