"""A verdict's scope: what its replicates are, and so what it can be a claim about.

Most findings read one trained model (all-MiniLM-L6-v2): their seeds resample sentences, probe
initialisations or a fine-tuning head, so for the claim "pretraining puts X in the model" n = 1,
and a verdict that holds holds *for that checkpoint* on these sentences. Seeds of one checkpoint
are not replicates of pretraining: independently pretrained BERTs that differ only in their
pretraining seed disagree on probing and fine-tuning results (Sellam et al., 2021, MultiBERTs).
Each finding declares its `unit` (findings/<id>.yaml; the catalogue checks it):

    checkpoint   one trained model; replicates are items and probe or fine-tuning seeds
    pretraining  independently pretrained encoders; replicates are pretraining seeds

The report states each verdict's scope ("for all-MiniLM-L6-v2", "across 6 independently
pretrained encoders") and counts the two kinds apart; a checkpoint-level verdict is never
counted as a claim about BERT.
"""

from __future__ import annotations

from dataclasses import dataclass

from bertology.study.judge.checkpoints import checkpoint_of
from bertology.study.judge.record import FindingResult
from bertology.study.judge.specs import FindingSpec

UNITS = {
    "checkpoint": "one trained model: replicates are items and probe or fine-tuning seeds",
    "pretraining": "independently pretrained encoders: replicates are pretraining seeds",
}
KINDS = ("pretraining", "checkpoint", "method")  # how the report groups and counts claims


def kind_of(about: str, unit: str) -> str:
    """A claim about the method is counted apart whatever its unit; a claim about the model by
    its unit."""
    return "method" if about == "method" else unit


def spec_kind(spec: FindingSpec) -> str:
    return kind_of(spec.about, spec.unit)


def result_kind(result: FindingResult) -> str:
    """The kind a verdict is counted as: its finding's, except that one judged across a
    checkpoint population is about pretraining whatever unit its yaml gives for one
    checkpoint."""
    return kind_of(result.spec.about, scope_of(result).unit)


@dataclass(frozen=True)
class Scope:
    """What a verdict is about: one checkpoint (named where the runs record it) or the
    procedure, over `encoders` independently pretrained ones: the runs' own encoders
    (pretraining studies) or a population of checkpoints (population.py, named)."""

    unit: str
    checkpoints: tuple[str, ...] = ()  # the checkpoints its runs read (a population's members)
    encoders: int = 0  # unit pretraining: its runs' encoders, or the population's members

    @property
    def column(self) -> str:
        """findings.csv's `scope`: "checkpoint: <name>", "pretraining: N encoders" or
        "pretraining: N checkpoints (<names>)"."""
        if self.unit == "pretraining" and self.checkpoints:
            return f"pretraining: {self.encoders} checkpoints ({'; '.join(self.checkpoints)})"
        if self.unit == "pretraining":
            return f"pretraining: {self.encoders} encoders"
        return f"checkpoint: {', '.join(self.checkpoints) or 'not recorded'}"

    @property
    def words(self) -> str:
        """The verdict's scope in REPORT.md and REPORT.html."""
        if self.unit == "pretraining" and self.checkpoints:
            return (f"across {self.encoders} pretrained checkpoints "
                    f"({abbreviate(self.checkpoints)})")
        if self.unit == "pretraining":
            return f"across {self.encoders} independently pretrained encoders"
        return f"for {' and '.join(self.checkpoints)}" if self.checkpoints else \
            "for one checkpoint"


def abbreviate(names: tuple[str, ...], shown: int = 3) -> str:
    """The first names of a population and how many more (25 MultiBERTs seeds fill a cell)."""
    more = f", and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def scope_of(result: FindingResult) -> Scope:
    if result.members:  # judged across a checkpoint population, each member one replicate
        return Scope("pretraining", result.members, len(result.members))
    if result.spec.unit == "pretraining":
        return Scope("pretraining", encoders=len(result.runs))
    names = {checkpoint_of(run) for run in result.runs} - {None}
    return Scope("checkpoint", tuple(sorted(names)))


def checkpoints_named(scopes: list[Scope]) -> str:
    """The checkpoints a group of checkpoint-level verdicts read, for a headline."""
    names = sorted({name for s in scopes for name in s.checkpoints})
    return ", ".join(names) if names else "one checkpoint"
