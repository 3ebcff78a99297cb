"""What conf/ offers a pipeline: its config groups, their options and one line on each (the
option file's first comment sentence), its experiments; and the closest names to a misspelt
one. Help, the did-you-mean errors and shell completion read these; no Hydra, no torch, so a
TAB stays fast.
"""

from __future__ import annotations

import difflib
import re
import textwrap
from functools import cache
from pathlib import Path

from omegaconf import OmegaConf

from bertology.config.compose import CONF_DIR

# Groups a pipeline reads beyond its primary config's defaults list: they set keys of a group
# that is in it (masking and input_format: model.*; mask_mix: objective.*).
OPTIONAL_GROUPS = {"pretrain": ("input_format", "masking", "mask_mix", "mask_rate")}
HYDRA_GROUPS = ("hydra/launcher",)  # bertology's own Hydra options (the SLURM launcher)
NOT_GROUPS = ("wandb_sweep",)  # folders of conf/ that are not config groups (W&B
# sweeps; the study's catalogue, read by bertology/study/judge/catalog.py)
EXPERIMENT = "experiment"
DESCRIPTION_WIDTH = 96
# A sentence ends at a full stop before a capital, unless the stop ends "App.", "Fig.", ...
ABBREVIATION_SAFE_STOP = r"(?<!\bApp\.)(?<!\bFig\.)(?<!\bSec\.)(?<!\bTab\.)(?<!\bEq\.)(?<!\bal\.)" \
    r"(?<=\.)\s+(?=[A-Z])"


def all_groups() -> list[str]:
    """Every folder of conf/ that holds option files, as Hydra names it (hydra/launcher)."""
    folders = {p.parent.relative_to(CONF_DIR).as_posix() for p in CONF_DIR.rglob("*.yaml")}
    return sorted(f for f in folders if f != "." and f not in NOT_GROUPS)


def group_options(group: str) -> list[str]:
    """A group's options; `model@teacher.model` (a group placed at another key, as distill's
    teacher) has model's."""
    return sorted(p.stem for p in (CONF_DIR / group.split("@")[0]).glob("*.yaml"))


@cache
def primary_defaults(pipeline: str) -> dict[str, str | list[str] | None]:
    """group -> default option (a list for a list group: analysis), in the order of the
    pipeline's defaults list."""
    entries = OmegaConf.to_container(OmegaConf.load(CONF_DIR / f"{pipeline}.yaml")).get(
        "defaults", [])
    return {group: option for entry in entries if isinstance(entry, dict)
            for group, option in entry.items()}


def pipeline_groups(pipeline: str) -> list[str]:
    """The groups a pipeline reads, defaults-list order first, experiment last."""
    groups = [g for g in primary_defaults(pipeline) if g != EXPERIMENT]
    groups += [*OPTIONAL_GROUPS.get(pipeline, ()), *HYDRA_GROUPS, EXPERIMENT]
    return groups


def comment_lines(path: Path) -> list[str]:
    """The file's leading comment, `# @package` lines aside, up to its first blank comment
    line or indented example command."""
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        text = line[1:].strip()
        if text.startswith("@package"):
            continue
        if not text or line.startswith("#  "):
            break
        lines.append(text)
    return lines


def describe(path: Path, width: int = DESCRIPTION_WIDTH) -> str:
    """One line on a config file: the first sentence of its leading comment, shortened."""
    text = " ".join(comment_lines(path))
    sentence = re.split(ABBREVIATION_SAFE_STOP, text, maxsplit=1)[0]
    return textwrap.shorten(sentence, width=width, placeholder=" ...", break_on_hyphens=False)


def describe_option(group: str, option: str, width: int = DESCRIPTION_WIDTH) -> str:
    return describe(CONF_DIR / group.split("@")[0] / f"{option}.yaml", width)


@cache
def experiment_pipelines(name: str) -> frozenset[str]:
    """The pipelines an experiment bundle runs with: those its header runs it with (`bertology
    probe -m experiment=<name>`), else those of the header's other commands, else those of the
    bundle it extends; empty when none says."""
    text = (CONF_DIR / EXPERIMENT / f"{name}.yaml").read_text()
    header = "\n".join(line for line in text.splitlines() if line.startswith("#"))
    direct = set(re.findall(rf"bertology (\w+)\b[^\n]*experiment={re.escape(name)}\b", header))
    named = set(re.findall(r"bertology (\w+) ", header)) & set(primary_pipelines()) - {"report"}
    bases = [b for b in OmegaConf.load(CONF_DIR / EXPERIMENT / f"{name}.yaml").get("defaults", [])
             if isinstance(b, str) and b != "_self_"]
    inherited = set().union(*(experiment_pipelines(b) for b in bases)) if bases else set()
    return frozenset(direct or named or inherited)


def primary_pipelines() -> list[str]:
    return sorted(p.stem for p in CONF_DIR.glob("*.yaml"))


def pipeline_experiments(pipeline: str) -> list[str]:
    return [name for name in group_options(EXPERIMENT)
            if pipeline in experiment_pipelines(name) or not experiment_pipelines(name)]


def closest(name: str, candidates: list[str] | set[str], count: int = 3) -> list[str]:
    """The candidates nearest to a misspelt name: difflib's similarity ratio at least 0.6
    (get_close_matches' cutoff) and within 0.05 of the best, so one clear winner is named
    alone and near ties all."""
    scored = sorted(((difflib.SequenceMatcher(None, name, c).ratio(), c)
                     for c in set(candidates)), key=lambda pair: (-pair[0], pair[1]))
    scored = [(score, c) for score, c in scored if score >= 0.6]
    return [c for score, c in scored[:count] if score >= scored[0][0] - 0.05]


def did_you_mean(name: str, candidates: list[str] | set[str], render=str) -> str:
    """'; did you mean a or b?' or '' when nothing is close."""
    near = closest(name, candidates)
    return f"; did you mean {' or '.join(render(n) for n in near)}?" if near else ""
