"""The steps of `make reproduce` (schedule.py) for one encoder: its SST-2 models and twins, its
studies' sweeps, its pretraining where the run makes it, and the seeds its jobs run (a population
member's own: member_seeds)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from bertology.errors import require
from bertology.run.rundir import METRICS_FILE, RunDir
from bertology.study.judge import encoders
from bertology.study.judge.catalog import load_recipes
from bertology.study.schedule.runner import Step

BUNDLE_SEEDS = (0, 1, 2)  # the bundles' own sweep (conf/experiment/study_*.yaml: seed: 0,1,2)
# placeholder -> the overrides that make its models after the sst2_model recipe
# (findings/recipes.yaml): MiniLM fine-tuned, and its random-init twin fine-tuned the same way
SST2_MODELS = {"sst2_model": [], "sst2_twin": ["init=random"]}

log = logging.getLogger("bertology.reproduce")


def reads_sst2_model(spec: dict, kinds=tuple(SST2_MODELS)) -> bool:
    """Whether a study's `reproduce:` overrides read the fine-tuned SST-2 models (or twins)."""
    return any(f"{{{kind}}}" in override for override in spec["overrides"] for kind in kinds)


def sst2_model_of_the_job(root: Path, kind: str = "sst2_model") -> str:
    """The path the `{sst2_model}` (`{sst2_twin}`) placeholder becomes: the model (its twin)
    fine-tuned with the job's own seed (an interpolation Hydra resolves per job of the sweep)."""
    return str(root / kind / "seed_${seed}" / "model")


def fill_placeholders(override: str, root: Path) -> str:
    for kind in SST2_MODELS:
        override = override.replace(f"{{{kind}}}", sst2_model_of_the_job(root, kind))
    return override


@dataclass(frozen=True)
class EncoderSteps:
    """Where one encoder's steps write, and what picks it: MiniLM (the studies' own, no extra
    overrides) or one the run pretrains (encoders.py)."""

    root: Path  # its study dirs and SST-2 models
    logs: Path
    label: str = ""  # the prefix of its step and log names, e.g. "bert_"
    extra: tuple[str, ...] = ()  # overrides that pick it, e.g. model.name_or_path=<its model>
    after: tuple[str, ...] = ()  # its pretraining step, if the run makes it
    # a population member's pretraining seed, whose own seeds its studies run (member_seeds);
    # None: MiniLM or a matrix encoder, whose studies run their own (studies.yaml: seeds)
    member: int | None = None
    per_member: int | None = None  # --member-seeds: every study's; None: studies.yaml's
    # (step: an SST-2 model kind or a study, its overrides after the study's): a member's
    # member_finetuning (findings/recipes.yaml)
    settings: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def settings_of(self, step: str) -> tuple[str, ...]:
        return dict(self.settings).get(step, ())

    def step(self, name: str, args: list[str], after: tuple[str, ...] = (),
             alone: bool = False, done_in: Path | None = None) -> Step:
        label = f"{self.label}{name}"
        return Step(label, args, self.logs / f"{label.replace(' ', '_')}.log",
                    after=(*self.after, *after), alone=alone, done_in=done_in)


def job_seeds(spec: dict, encoder: EncoderSteps) -> tuple[int, ...]:
    """The seeds of a study's jobs on this encoder: a member's own (as many as --member-seeds
    or the study's member_seeds say), else the study's."""
    if encoder.member is None:
        return spec["seeds"]
    return member_seeds(encoder.member, encoder.per_member or spec["member_seeds"])


def model_seeds(studies: dict[str, dict], encoder: EncoderSteps) -> dict[str, tuple[int, ...]]:
    """SST-2 model kind -> the seeds some study reads it with (a kind no study reads: none)."""
    return {kind: tuple(sorted({seed for spec in studies.values()
                                if reads_sst2_model(spec, (kind,))
                                for seed in job_seeds(spec, encoder)}))
            for kind in SST2_MODELS}


def sst2_model_steps(encoder: EncoderSteps, seeds: dict[str, tuple[int, ...]]) -> list[Step]:
    """The encoder fine-tuned on SST-2 once per seed some study reads, into <root>/sst2_model,
    and its random-init twin the same way, into <root>/sst2_twin; a model an earlier run made
    with the same command is reused."""
    steps = []
    for kind, extra in SST2_MODELS.items():
        for seed in seeds[kind]:
            run_dir = encoder.root / kind / f"seed_{seed}"
            args = ["finetune", *load_recipes().sst2_model, *encoder.extra, *extra,
                    *encoder.settings_of(kind), f"seed={seed}"]
            if not made_before(run_dir, args):
                steps.append(encoder.step(f"{kind} seed {seed}",
                                          [*args, f"hydra.run.dir={run_dir}"]))
    return steps


def made_before(run_dir: Path, args: list[str]) -> bool:
    """Whether run_dir holds a finished model made by this command (the overrides Hydra
    recorded). One made by another command (an older recipe) is an error, not a silent reuse:
    the studies would read a model their command does not describe."""
    if not (run_dir / METRICS_FILE).exists():
        return False
    made = RunDir(run_dir).recorded_overrides
    require(made == args[1:], f"{run_dir} holds an SST-2 model made by another command "
            f"({' '.join(made) or 'unrecorded'}); remove it or run into another --out")
    return True


def study_steps(studies: dict[str, dict], encoder: EncoderSteps, models: list[Step]) -> list[Step]:
    """A sweep per study into <root>/<study>; one that reads the SST-2 models waits for them."""
    steps = []
    for study, spec in studies.items():
        overrides = [fill_placeholders(o, encoder.root) for o in spec["overrides"]]
        command = [spec["pipeline"], "-m", f"experiment={spec['bundle']}", "logger=none",
                   *overrides, *encoder.extra, *encoder.settings_of(study),
                   *seed_override(job_seeds(spec, encoder)),
                   f"hydra.sweep.dir={encoder.root / study}"]
        log.info("%s%s reads %s", encoder.label, study, ", ".join(spec["findings"]))
        waits = tuple(m.name for m in models) if reads_sst2_model(spec) else ()
        steps.append(encoder.step(study, command, waits, spec["alone"], encoder.root / study))
    return steps


def seed_override(seeds: tuple[int, ...]) -> list[str]:
    """The sweep's seeds where they are not the bundles' own (0, 1, 2)."""
    return [] if seeds == BUNDLE_SEEDS else [f"seed={','.join(map(str, seeds))}"]


def encoder_steps(studies: dict[str, dict], encoder: EncoderSteps) -> list[Step]:
    """The encoder's SST-2 models (where a study reads them), then its studies."""
    models = sst2_model_steps(encoder, model_seeds(studies, encoder))
    return [*models, *study_steps(studies, encoder, models)]


def pretraining_step(name: str, args: list[str], run_dir: Path, log_path: Path) -> list[Step]:
    """The step that pretrains an encoder into run_dir; none where it is cached there."""
    if encoders.is_pretrained(run_dir):
        return []
    return [Step(name, [*args, f"hydra.run.dir={run_dir}"], log_path, first=True)]


def model_reading(studies: dict[str, dict]) -> dict[str, dict]:
    """The studies of encoders.ENCODER_STUDIES: those whose findings read a model."""
    return {k: v for k, v in studies.items() if k in encoders.ENCODER_STUDIES}


# A member's further seeds lie this far apart, so no two members share one (a member's seeds
# draw its sentences, SST-2 subsample, heads and twin: they are its private replicates).
SEED_STRIDE = 1000


def member_seeds(member: int, per_member: int) -> tuple[int, ...]:
    """Member s's study seeds: s, s + SEED_STRIDE, …; with one a member, s (the seed its
    pretraining had), so a one-seed population's commands are unchanged."""
    return tuple(member + SEED_STRIDE * r for r in range(per_member))
