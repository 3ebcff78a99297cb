"""Which findings a set of runs can judge.

A finding is `conf/experiment/finding_<id>.yaml`: a `finding:` block (id, claim, source, the
comparison, and the `study` whose runs it reads) on top of a study bundle,
`conf/experiment/study_<name>.yaml`, which says how to make those runs. Several findings read
one study (one probe sweep serves every probing claim), so `make reproduce` runs each study
once. A run keeps `study: <name>` in its saved config, and the finding block too when it was
launched as `experiment=finding_<id>`; the report judges the findings those runs carry and
every finding of the studies they belong to.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from bertology.config.compose import CONF_DIR
from bertology.findings.results import Run
from bertology.findings.verdicts import FindingSpec, parse_finding

EXPERIMENTS = CONF_DIR / "experiment"


def finding_files(folder: Path = EXPERIMENTS) -> list[Path]:
    return sorted(folder.glob("finding_*.yaml"))


def load_catalog(folder: Path = EXPERIMENTS) -> dict[str, FindingSpec]:
    """Every finding of conf/experiment/, by id."""
    specs = {}
    for path in finding_files(folder):
        block = OmegaConf.to_container(OmegaConf.load(path)).get("finding") or {}
        spec = parse_finding(block)
        specs[spec.id] = spec
    return specs


def runs_of(spec: FindingSpec, runs: list[Run]) -> list[Run]:
    if spec.studies:
        return [r for r in runs if r.study in spec.studies]
    return [r for r in runs if (r.finding or {}).get("id") == spec.id]


def findings_for(runs: list[Run], catalog: dict[str, FindingSpec] | None = None
                 ) -> list[tuple[FindingSpec, list[Run]]]:
    """(finding, its runs) for every finding the runs carry or whose study they belong to,
    in id order; a finding block a run carries wins over the catalog's copy."""
    catalog = load_catalog() if catalog is None else catalog
    specs: dict[str, FindingSpec] = {}
    for run in runs:
        if run.finding:
            spec = parse_finding(run.finding)
            specs[spec.id] = spec
    studies = {r.study for r in runs if r.study}
    for spec in catalog.values():
        if set(spec.studies) & studies:
            specs.setdefault(spec.id, spec)
    return [(spec, runs_of(spec, runs)) for _, spec in sorted(specs.items())]
