"""Whether a report's runs are the size their studies state.

A study states its sizes twice: its bundle (conf/experiment/study_<name>.yaml) and the
`reproduce` overrides of findings/studies.yaml on top, which `make reproduce` runs. A run
with fewer sentences, examples, steps or FLOPs than that (the tests' smoke settings, a quick
look) makes a report that shows what the page looks like, not what the findings are: its
verdicts rest on 16 sentences where the study states 200. The report and SUMMARY.md say so in
their first line (`smoke_line`), and tables/scale.csv lists every shortfall.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from bertology.config.compose import CONF_DIR
from bertology.run.rundir import RunDir
from bertology.study.judge.catalog import Study, load_studies
from bertology.study.judge.results import flatten

EXPERIMENT_DIR = CONF_DIR / "experiment"
# the keys that count what a run reads or spends (a dotted key's last part); null means "all"
SIZE_KEYS = ("max_train_sentences", "max_eval_sentences", "max_train_examples",
             "max_eval_examples", "max_sentences", "num_sentences", "importance_examples",
             "max_steps", "max_flops", "epochs")
SCALE_TABLE = "scale"  # tables/scale.csv of a report
SMOKE = "smoke-sized runs: this page shows the page, not the findings"


@dataclass(frozen=True)
class Shortfall:
    """The smallest value a study's runs had at a key, under the size the study states."""

    study: str
    key: str
    value: float
    stated: float

    def row(self) -> dict[str, object]:
        return {"study": self.study, "key": self.key, "runs": self.value, "stated": self.stated}

    def words(self) -> str:
        return f"{self.study} {self.key}={self.value:g} (stated {self.stated:g})"


def is_size(key: str) -> bool:
    return key.rsplit(".", 1)[-1] in SIZE_KEYS


def number(value) -> float | None:
    """A YAML scalar as a number (3.0e12 and 500 alike), None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    try:
        return float(str(value))
    except ValueError:
        return None


def stated_sizes(study: Study, experiments: Path = EXPERIMENT_DIR) -> dict[str, float]:
    """The sizes the study states: its bundle's, then its reproduce overrides'."""
    path = experiments / f"{study.bundle}.yaml"
    bundle = OmegaConf.to_container(OmegaConf.load(path)) if path.is_file() else {}
    settings = {k: v for k, v in flatten(bundle or {}).items() if not k.startswith("hydra.")}
    for override in study.reproduce:
        key, _, value = override.partition("=")
        settings[key.lstrip("+")] = value
    return {key: found for key, value in settings.items()
            if is_size(key) and (found := number(value)) is not None}


def find_shortfalls(runs: list[RunDir], studies: dict[str, Study] | None = None
                    ) -> list[Shortfall]:
    """Every (study, key) at which a labelled run read or spent less than its study states."""
    studies = load_studies() if studies is None else studies
    smallest: dict[tuple[str, str], tuple[float, float]] = {}
    for run in runs:
        study = studies.get(run.label or "")
        if study is None:
            continue
        for key, stated in stated_sizes(study).items():
            value = number(run.select(key))  # None: the key is null ("all") or absent
            if value is not None and value < stated:
                previous = smallest.get((study.name, key))
                if previous is None or value < previous[0]:
                    smallest[(study.name, key)] = (value, stated)
    return [Shortfall(study, key, value, stated)
            for (study, key), (value, stated) in sorted(smallest.items())]


def smoke_line(shortfalls: list[Shortfall], most: int = 3) -> str:
    """The first line's words where the runs are smaller than their studies state."""
    named = "; ".join(s.words() for s in shortfalls[:most])
    more = f"; {len(shortfalls) - most} more in tables/scale.csv" if len(shortfalls) > most \
        else ""
    return f"{SMOKE} ({named}{more})"
