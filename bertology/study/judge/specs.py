"""A finding as its yaml states it (findings/<id>.yaml): the claim, its source, the
comparisons that test it, and what it is about. The verdict is computed elsewhere
(verdicts.py); this module only parses and describes.

    compare: {a: <evidence>, b: <evidence or a number>, expect: greater | less, margin: m,
              twin: {a: <evidence>, b: <evidence or a number>}}   # optional

meaning a − b > m (greater) or a − b < m (less); with a twin, (a − b) − (a′ − b′) against m.
Several comparisons that must all hold go under `all:`.
"""

from __future__ import annotations

from dataclasses import dataclass

from bertology.errors import require
from bertology.study.judge.evidence import Evidence, parse_evidence

EXPECTATIONS = ("greater", "less")
ABOUT = ("model", "method")


def describe_side(x: Evidence | float) -> str:
    return x.describe() if isinstance(x, Evidence) else f"{x:g}"


@dataclass(frozen=True)
class Comparison:
    """a − b against the margin; with a twin, (a − b) − (a′ − b′): the same contrast on the
    random-init twin subtracted, so only what training adds counts (a difference in
    differences, every term paired by seed)."""

    a: Evidence | float
    b: Evidence | float
    expect: str
    margin: float
    twin: tuple[Evidence, Evidence | float] | None = None  # (a′, b′)

    def describe(self) -> str:
        symbol = ">" if self.expect == "greater" else "<"
        contrast = f"{describe_side(self.a)} − {describe_side(self.b)}"
        if self.twin is not None:
            twin = " − ".join(describe_side(x) for x in self.twin)
            contrast = f"({contrast}) − ({twin})"
        return f"{contrast} {symbol} {self.margin:g}"

    @property
    def evidence(self) -> list[Evidence]:
        """Every evidence it reads."""
        return [x for x in (self.a, self.b, *(self.twin or ())) if isinstance(x, Evidence)]


@dataclass(frozen=True)
class FindingSpec:
    id: str
    claim: str
    source: str
    comparisons: tuple[Comparison, ...]
    studies: tuple[str, ...] = ()  # the studies whose runs it reads (none: its own runs)
    about: str = "model"  # model | method (ABOUT)
    guards: tuple[Comparison, ...] = ()  # what must hold for the comparison to inform at all
    caveat: str = ""  # what a reader must know beside the verdict (shown in its note)
    no_twin: str = ""  # an `about: model` claim judged without its twin: why none applies
    tautology: str = ""  # can_fail: false: why the real measurement cannot come out against it
    unit: str = "checkpoint"  # what its replicates are: checkpoint | pretraining (scope.UNITS)
    caveat_checkpoint: str = ""  # the checkpoint the caveat is about (none: every run)
    # findings that must hold on the same checkpoints for this claim to inform at all (the
    # manipulation check: pretraining_beats_random, that pretraining put POS information in
    # the model); where one does not, this one is uninformative (verdicts.apply_presuppositions)
    presupposes: tuple[str, ...] = ()

    def describe(self) -> str:
        return " and ".join(c.describe() for c in self.comparisons)

    @property
    def reads_twin(self) -> bool:
        """Whether some comparison of the claim contrasts the model with its random-init twin
        (a twin block, or a twin's metric: probe/random/…, downstream/twin/…)."""
        return any(c.twin is not None or any(twin_metric(e.metric) for e in c.evidence)
                   for c in self.comparisons)


TWIN_METRICS = ("/random/", "twin/")  # where the pipelines write the twin's readings


def twin_metric(metric: str) -> bool:
    return any(part in metric for part in TWIN_METRICS)


def parse_comparison(spec: dict, finding: str) -> Comparison:
    require(isinstance(spec, dict) and "a" in spec and "b" in spec,
            f"finding {finding}: a comparison needs a and b")
    expect = str(spec.get("expect", "greater"))
    require(expect in EXPECTATIONS, f"finding {finding}: expect={expect!r}; valid: "
            f"{', '.join(EXPECTATIONS)}")
    twin = None
    if spec.get("twin") is not None:
        block = spec["twin"]
        require(isinstance(block, dict) and "a" in block and "b" in block,
                f"finding {finding}: twin needs a and b (the same contrast on the twin)")
        twin = (parse_evidence(block["a"]), parse_evidence(block["b"]))
        require(isinstance(twin[0], Evidence), f"finding {finding}: twin's a must read the "
                "runs (a metric), not a number")
    return Comparison(parse_evidence(spec["a"]), parse_evidence(spec["b"]), expect,
                      float(spec.get("margin", 0.0)), twin)


def parse_comparisons(block, finding: str) -> tuple[Comparison, ...]:
    """One comparison, or several under `all:`."""
    block = block or {}
    parts = block["all"] if isinstance(block, dict) and "all" in block else [block]
    return tuple(parse_comparison(p, finding) for p in parts)


def parse_finding(spec: dict) -> FindingSpec:
    require(isinstance(spec, dict) and spec.get("id"), f"a finding block needs an id: {spec!r}")
    about = spec.get("about", "model")  # the catalog declares it (tests/study/test_findings.py)
    require(about in ABOUT, f"finding {spec['id']}: about={about!r}; valid: {', '.join(ABOUT)} "
            "(model: what training put in the model; method: a property of the probe, metric "
            "or architecture)")
    study = spec.get("study") or ()
    guards = parse_comparisons(spec["guard"], spec["id"]) if spec.get("guard") else ()
    return FindingSpec(str(spec["id"]), str(spec.get("claim", "")), str(spec.get("source", "")),
                       parse_comparisons(spec.get("compare"), spec["id"]),
                       (study,) if isinstance(study, str) else tuple(study), str(about), guards,
                       str(spec.get("caveat", "")), str(spec.get("no_twin", "")),
                       str(spec.get("tautology", "")) if spec.get("can_fail") is False else "",
                       str(spec.get("unit", "checkpoint")),
                       str(spec.get("caveat_checkpoint", "")), presupposed(spec))


def presupposed(spec: dict) -> tuple[str, ...]:
    """`presupposes:` as a tuple of finding ids (one id or a list)."""
    found = spec.get("presupposes") or ()
    found = (found,) if isinstance(found, str) else tuple(found)
    require(all(isinstance(x, str) and x != spec["id"] for x in found),
            f"finding {spec['id']}: presupposes={found!r}; give other findings' ids")
    return found


def evidence_of(spec: FindingSpec) -> list[Evidence]:
    """Every evidence the finding reads, guards included."""
    return [x for c in spec.comparisons + spec.guards for x in c.evidence]
