"""`python -m bertology.reproduce --checkpoints ...`: the survey across checkpoints someone else
pretrained (the 25 MultiBERTs, a suite's seeds, one's own runs), each a population member.

Each checkpoint gets the studies that read a model (encoders.ENCODER_STUDIES: probe_pos,
probe_ner, finetune_sst2, finetune_conll, with its SST-2 model and random-init twin) with the
member's own seeds, exactly as a `--population` member the run pretrains; one report judges
the findings across them (population.py), and tables/members.csv names each checkpoint with
its revision and commit. Killed, the same command resumes (runner.py keeps finished sweeps).

A checkpoint is named as `model.name_or_path` takes it (a hub id, a local folder), a hub id at
a revision as `org/name@revision`, or a whole suite as `suite:<name>` (every seed's final model
the local hub cache holds; `suite:<name>:<step>` another step): config/suites.py.

The cost is printed first: the measured time of each study on a population member (6 layers,
256 wide, one CPU thread: findings/costs.yaml), its fixed part (start-up, data) as it is
and the rest scaled by the checkpoint's non-embedding parameters, which set the FLOPs per token.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from bertology.config.compose import FINDINGS_DIR
from bertology.config.hub_revisions import checkpoint_record, hub_snapshot, readable_folder
from bertology.config.path_checks import is_path, read_checkpoint, resolve_checkpoint
from bertology.config.suites import load_suite, pinned_folder
from bertology.errors import require
from bertology.run.tables import write_table
from bertology.study.judge import catalog
from bertology.study.judge.selection import MEMBERS_TABLE
from bertology.study.schedule.members import judge_population
from bertology.study.schedule.runner import run_steps
from bertology.study.schedule.steps import (
    EncoderSteps,
    encoder_steps,
    job_seeds,
    model_reading,
    model_seeds,
)

log = logging.getLogger("bertology.reproduce")
COSTS = FINDINGS_DIR / catalog.COSTS_FILE


@dataclass(frozen=True)
class Checkpoint:
    """One member: what `model.name_or_path` and `model.revision` say, and where it lies."""

    name: str
    revision: str | None = None
    tokens: int | None = None  # tokens seen in pretraining, where its suite states it

    @property
    def overrides(self) -> tuple[str, ...]:
        pinned = (f"model.revision={self.revision}",) if self.revision else ()
        return (f"model.name_or_path={self.name}", *pinned)

    @property
    def label(self) -> str:
        return f"{self.name}@{self.revision}" if self.revision else self.name

    def local_folder(self) -> Path | None:
        """The folder its runs read (a hub id: its cached snapshot, or the converted copy of
        one that ships only pytorch_model.bin); None where a hub id is not cached yet (online,
        the run downloads it)."""
        name = pinned_folder(resolve_checkpoint(self.name), self.revision, "--checkpoints")
        return Path(name).expanduser() if is_path(name) else None

    def pickled(self) -> bool:
        """Whether it is a hub commit that ships only pytorch_model.bin, not converted yet."""
        if is_path(resolve_checkpoint(self.name)):
            return False
        snapshot = hub_snapshot(self.name, self.revision, "--checkpoints")
        return snapshot is not None and readable_folder(self.name, snapshot) is None


def parse_checkpoints(entries: list[str]) -> list[Checkpoint]:
    """The members `--checkpoints` names, in order, each once; a suite expands to the
    checkpoints of it that the cache holds (never guessed)."""
    found: list[Checkpoint] = []
    for entry in entries:
        if entry.startswith("suite:"):
            found += suite_checkpoints(entry.removeprefix("suite:"))
        elif "@" in entry and not is_path(entry):
            name, revision = entry.split("@", 1)
            found.append(Checkpoint(name, revision))
        else:
            found.append(Checkpoint(entry))
    labels = [c.label for c in found]
    twice = sorted({label for label in labels if labels.count(label) > 1})
    require(not twice, f"--checkpoints names {', '.join(twice)} twice; each member once")
    require(len(found) >= 2, f"--checkpoints: {len(found)} checkpoint(s); a population needs 2 "
            "or more (its spread across members is what the verdicts read)")
    return found


def suite_checkpoints(spec: str) -> list[Checkpoint]:
    """`<name>` or `<name>:<step>`: every seed's checkpoint at that step (the final model by
    default) among those the cache holds."""
    name, _, step_text = spec.partition(":")
    suite = load_suite(name)
    require(step_text == "" or step_text.isdigit(), f"--checkpoints suite:{spec}: the step "
            "after the second colon must be a number")
    step = int(step_text) if step_text else suite.final_step
    # a final model a repos-layout suite keeps in a repo of its own is listed at step None
    final = step == suite.final_step
    members = [m for m in suite.members() if m.step == step or (final and m.step is None)]
    held = sorted({m.name_or_path + (f"@{m.revision}" if m.revision else "")
                   for m in suite.members()})
    require(bool(members), f"--checkpoints suite:{spec}: the local hub cache holds no "
            f"checkpoint of suite {suite.name} at step {step or 'final'} (cached: "
            f"{', '.join(held) or 'none'}); download them once, or name another step")
    return [Checkpoint(m.name_or_path, m.revision, suite.tokens(m.step)) for m in members]


def non_embedding_parameters(config: dict) -> int:
    """12·L·H² (attention 4H², a 4H-wide FFN 8H²): the parameters a token's FLOPs scale with
    (Kaplan et al., 2020), from config.json; the FFN at its own width where it says."""
    layers, hidden = config["num_hidden_layers"], config["hidden_size"]
    width = config.get("intermediate_size") or 4 * hidden
    return layers * (4 * hidden * hidden + 2 * hidden * width)


def step_seconds(costs: dict, step: str, scale: float) -> float:
    """A seed of step on a checkpoint `scale` times the reference's non-embedding parameters:
    its fixed part, plus the rest of the reference's time scaled."""
    fixed = costs["overhead"][step]
    return fixed + max(costs["seconds"][step] - fixed, 0) * scale


def print_cost(checkpoints: list[Checkpoint], configs: list[dict | None],
               studies: dict[str, dict], encoders: list[EncoderSteps]) -> None:
    """Per member and study, the CPU time the run will take, before any step starts."""
    costs = OmegaConf.to_container(OmegaConf.load(COSTS))
    reference = non_embedding_parameters(costs["reference"])
    total = 0.0
    for checkpoint, config, encoder in zip(checkpoints, configs, encoders):
        if config is None:
            log.info("cost of %s: unknown until it is downloaded (not in the cache)",
                     checkpoint.label)
            continue
        scale = non_embedding_parameters(config) / reference
        runs = {kind: len(seeds) for kind, seeds in model_seeds(studies, encoder).items()}
        runs.update({study: len(job_seeds(spec, encoder)) for study, spec in studies.items()})
        minutes = {step: count * step_seconds(costs, step, scale) / 60
                   for step, count in runs.items() if count}
        total += sum(minutes.values())
        log.info("cost of %s (%.3gx the reference's non-embedding parameters): %s; %.3g min",
                 checkpoint.label, scale, ", ".join(f"{k} {v:.2g} min" for k, v in
                                                    minutes.items()), sum(minutes.values()))
    log.info("estimated cost: %.3g hours of one CPU thread in all (%s; a GPU takes a fraction: "
             "docs/gpu.md)", total / 60, costs["measured"])


def reproduce_checkpoints(out: Path, studies: dict[str, dict], lanes: int,
                          entries: list[str], per_member: int | None = None,
                          dry_run: bool = False) -> int:
    """The studies that read a model on each checkpoint, then one report across them; the exit
    status. dry_run: the checkpoints checked and the cost printed, nothing run."""
    checkpoints = parse_checkpoints(entries)
    pickled = [c.label for c in checkpoints if c.pickled()]
    require(not pickled, f"{len(pickled)} of the checkpoints ship only pytorch_model.bin (a "
            f"pickle, never opened by a run); convert them once: bertology convert "
            f"{' '.join(pickled)}")
    configs = [checkpoint_config(c) for c in checkpoints]
    reading = model_reading(studies)
    members = [EncoderSteps(out / "population" / f"member_{i}", out / "logs", f"member{i}_",
                       c.overrides, member=i, per_member=per_member)
               for i, c in enumerate(checkpoints)]
    print_cost(checkpoints, configs, reading, members)
    if dry_run:
        return 0
    (out / "logs").mkdir(parents=True, exist_ok=True)  # after any bad entry: no output
    started = time.perf_counter()
    results = run_steps([s for m in members for s in encoder_steps(reading, m)], lanes)
    write_checkpoints_table(out / "population", checkpoints)
    return judge_population(out, members, reading, results, started)


def checkpoint_config(checkpoint: Checkpoint) -> dict | None:
    """config.json of a member, checked as the pipelines will check it (a folder with
    safetensors weights and a tokenizer, or a cached hub snapshot); None where a hub id is not
    cached and the hub can be reached (the run downloads it)."""
    folder = checkpoint.local_folder()
    return read_checkpoint(checkpoint.name if folder is None else str(folder), "--checkpoints")


def write_checkpoints_table(population: Path, checkpoints: list[Checkpoint]) -> None:
    """tables/members.csv: each member's checkpoint, revision and commit, its shape and the
    tokens it saw where its suite states them. Every member is kept (`learned`: no floor to
    read for a checkpoint the run did not pretrain)."""
    rows = []
    for i, checkpoint in enumerate(checkpoints):
        folder = checkpoint.local_folder()  # again: a hub id its runs downloaded is there now
        config = json.loads((folder / "config.json").read_text()) if folder else {}
        record = checkpoint_record(str(folder) if folder else checkpoint.name, checkpoint.revision)
        rows.append({"member": i, "checkpoint": checkpoint.name, "revision": checkpoint.revision,
                     "sha": record and record["sha"], "learned": True,
                     "model_type": config.get("model_type"),
                     "layers": config.get("num_hidden_layers"),
                     "hidden": config.get("hidden_size"), "tokens": checkpoint.tokens})
    write_table(population, MEMBERS_TABLE, rows)
