"""`bertology --help`: a line per verb, from config/verbs.py's rows (the lists of analyses,
prune experiments, scores and models filled in from theirs). `bertology <pipeline> --help`: the
config groups a pipeline reads, each option with one line on what it is (its file's first
comment sentence), the default marked, then the experiment bundles run with this pipeline.
Hydra's own help, which lists names only, stays at --hydra-help.
"""

from __future__ import annotations

import textwrap

from bertology.config.analysis_settings import ANALYSES
from bertology.config.compose import CONF_DIR
from bertology.config.options import (
    EXPERIMENT,
    describe,
    describe_option,
    group_options,
    pipeline_experiments,
    pipeline_groups,
    primary_defaults,
)
from bertology.config.prune_settings import PRUNE_EXPERIMENTS, PRUNE_SCORES
from bertology.config.verbs import VERBS, command_names, pipeline_names
from bertology.families import FAMILIES

LINE_WIDTH = 100


def _rows(group: str, options: list[str], default: str | list[str] | None) -> list[str]:
    """'  * name  description', the names in one column, each row within LINE_WIDTH."""
    defaults = default if isinstance(default, list) else [default]
    width = max(len(o) for o in options)
    room = max(30, LINE_WIDTH - width - 6)
    return [f"  {'*' if option in defaults else ' '} {option:<{width}}  "
            f"{describe_option(group, option, room)}" for option in options]


def probe_reads(option: str) -> bool:
    """A task probe can read: word labels (probe_config.has_word_labels)."""
    from omegaconf import OmegaConf

    from bertology.config.probe_config import has_word_labels

    task = OmegaConf.load(CONF_DIR / "task" / f"{option}.yaml")
    return has_word_labels(str(task.get("format")), task.get("label_field"), task.get("kind"))


# (pipeline, group) -> which of the group's options the pipeline can run
OFFERED = {("probe", "task"): probe_reads}


def offered(pipeline: str, group: str) -> list[str]:
    keep = OFFERED.get((pipeline, group), lambda option: True)
    return [option for option in group_options(group) if keep(option)]


def format_help(pipeline: str) -> str:
    verb = VERBS[pipeline]
    about = describe(CONF_DIR / f"{pipeline}.yaml", width=1000)
    about = textwrap.shorten(about.removeprefix(f"bertology {pipeline}:"), placeholder=" ...",
                             width=LINE_WIDTH - len(pipeline) - 2, break_on_hyphens=False)
    usage = ("RUN_DIR [RUN_DIR ...] [KEY=VALUE ...]" if verb.dirs_key
             else "[GROUP=OPTION ...] [KEY=VALUE ...] [-m KEY=A,B ...]")
    lines = [f"usage: bertology {pipeline} {usage}", "", f"{pipeline}: {about}", "",
             "config groups (GROUP=OPTION; * the default):"]
    defaults = primary_defaults(pipeline)
    for group in pipeline_groups(pipeline):
        if group == EXPERIMENT or not group_options(group):
            continue
        lines += [f"{group}:", *_rows(group, offered(pipeline, group), defaults.get(group))]
    experiments = pipeline_experiments(pipeline)
    if experiments:
        lines += ["", "experiments (experiment=NAME: a versioned bundle of overrides; most are "
                  "sweeps, run with -m):", *_rows(EXPERIMENT, experiments, None)]
    if verb.keys_help:
        lines += ["", *_wrap(f"keys: {verb.keys_help}", "", "  ")]
    else:
        lines += ["", "keys: any key of the config is set as KEY=VALUE (e.g. "
                  "trainer.max_steps=200);",
                  f"  `bertology {pipeline} --cfg job` prints them all with their values.",
                  f"sweeps: `bertology {pipeline} -m model=bert,roberta seed=0,1,2` runs every "
                  "combination."]
    lines += ["Hydra's own flags: --hydra-help. Bash completion: "
              'eval "$(bertology completion bash)".']
    return "\n".join(lines)


def _wrap(text: str, first: str, rest: str) -> list[str]:
    return textwrap.wrap(text, width=LINE_WIDTH, initial_indent=first, subsequent_indent=rest,
                         break_long_words=False, break_on_hyphens=False)


def option_lists() -> dict[str, str]:
    """What a verb's line may list of the other extension points ({models} and kin in a
    Verb's `about`), from their rows: the line cannot fall behind a new row."""
    return {"models": "|".join(FAMILIES), "analyses": ", ".join(ANALYSES),
            "experiments": ", ".join(PRUNE_EXPERIMENTS), "scores": ", ".join(PRUNE_SCORES)}


def _verb_lines(names: list[str]) -> list[str]:
    lists = option_lists()
    lines = []
    for name in names:
        lines += _wrap(VERBS[name].about.format(**lists), f"  {name:<10} ", " " * 13)
    return lines


def format_usage() -> str:
    """`bertology --help`: a line (or a few) per verb, pipelines first, then commands."""
    return "\n".join([
        "usage: bertology <pipeline> [key=value ...] [-m key=a,b ...]", "", "pipelines:",
        *_verb_lines(pipeline_names()), "",
        "commands (no config, no run dir):", *_verb_lines(command_names()), "",
        "`bertology <pipeline> --help` shows its config groups, each option with a line on it, "
        "and its", "experiments; `bertology --version` the version; `python -m bertology` is "
        "the same program."])
