"""Checks on the command line as a whole, before Hydra makes any dir: every job of a `-m`
sweep composes and passes its pipeline's checks (a bad value in job 5 would otherwise be found
only after jobs 1-4 ran), Hydra's own run and sweep dirs can be written, and no list names an
entry twice.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from bertology.cli.suggest import explain
from bertology.config.compose import CONF_DIR
from bertology.config.path_checks import check_writable_folder
from bertology.errors import UserError, require

# Lists whose entries may repeat: a [low, high] range, and a map from student to teacher
# layers (two student layers may learn from one teacher layer).
REPEATS_ALLOWED = {"data.sentences_per_doc", "kd.layer_map", "teacher.kd.layer_map"}
BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"


def check_no_repeats(node, key: str = "") -> None:
    """Refuse a list of names or numbers that lists one entry twice (seeds=[0,0] would run
    one seed twice and count it as two)."""
    if isinstance(node, dict):
        for name, value in node.items():
            check_no_repeats(value, f"{key}.{name}" if key else str(name))
    elif isinstance(node, list):
        scalars = [str(v) for v in node if not isinstance(v, (dict, list))]
        repeated = sorted({v for v in scalars if scalars.count(v) > 1})
        require(not repeated or key in REPEATS_ALLOWED,
                f"{key}=[{','.join(scalars)}] lists {', '.join(repeated)} twice; list each once")
        for index, value in enumerate(node):
            check_no_repeats(value, f"{key}[{index}]")


def check_override_repeats(overrides: list[str]) -> None:
    """A list on the command line, group lists included (analysis=[linear,linear], which
    Hydra would merge into one, dropping the repeat without a word)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except OverrideParseException as err:  # Hydra's grammar: its message, one line
        raise UserError(one_line(err)) from err
    for override in parsed:
        value = override.value() if not override.is_sweep_override() else None
        if isinstance(value, list):
            check_no_repeats(value, override.get_key_element())


def compose_checked(pipeline: str, overrides: list[str]) -> DictConfig:
    """The composed config with Hydra's block (for its dirs), composition errors as one
    line with the closest valid names."""
    from hydra import compose, initialize_config_dir

    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return compose(config_name=pipeline, overrides=overrides, return_hydra_config=True)
    except (HydraException, OmegaConfBaseException) as err:
        raise UserError(explain(err, pipeline, overrides) or one_line(err)) from err


def without_hydra(cfg: DictConfig) -> DictConfig:
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg


def check_job(pipeline: str, overrides: list[str], check: Callable[[DictConfig], object],
              in_sweep: bool = False) -> DictConfig:
    """One run's config: composed, its dir writable (a sweep's job writes under the sweep
    dir, checked once), no repeats, the pipeline's checks."""
    check_override_repeats(overrides)
    cfg = compose_checked(pipeline, overrides)
    if not in_sweep:
        check_writable_folder(Path(cfg.hydra.run.dir), "hydra.run.dir")
    cfg = without_hydra(cfg)
    check_no_repeats(OmegaConf.to_container(cfg, resolve=False))
    check(cfg)
    return cfg


def sweep_jobs(pipeline: str, overrides: list[str]) -> tuple[list[list[str]], DictConfig]:
    """Each job's overrides as Hydra's basic sweeper will launch them (the bundle's
    hydra.sweeper.params first, then the command line's), and the sweep's config."""
    from hydra import initialize_config_dir
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.types import RunMode

    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = GlobalHydra.instance().hydra.compose_config(
                config_name=pipeline, overrides=overrides, run_mode=RunMode.MULTIRUN,
                with_log_configuration=False)
        params = [f"{k}={v}" for k, v in (cfg.hydra.sweeper.get("params") or {}).items()]
        parsed = OverridesParser.create().parse_overrides([*params, *overrides])
        return BasicSweeper.split_arguments(parsed, None)[0], cfg
    except (HydraException, OmegaConfBaseException) as err:
        raise UserError(explain(err, pipeline, overrides) or one_line(err)) from err


def check_sweep(pipeline: str, overrides: list[str],
                check: Callable[[DictConfig], object]) -> None:
    """Every job of `bertology <pipeline> -m ...` passes its checks, and the sweep dir can be
    written, before the first job starts; else one line naming the bad job."""
    jobs, cfg = sweep_jobs(pipeline, overrides)
    check_distinct_jobs(jobs)
    check_writable_folder(Path(cfg.hydra.sweep.dir), "hydra.sweep.dir")
    if cfg.hydra.sweeper.get("_target_") != BASIC_SWEEPER:
        return  # another sweeper picks its points as it goes: each job checks itself
    for number, job in enumerate(jobs, start=1):
        try:
            check_job(pipeline, job, check, in_sweep=True)
        except UserError as err:
            raise UserError(f"sweep job {number} of {len(jobs)} ({' '.join(job)}): {err}; "
                            "no job was started") from err


def check_distinct_jobs(jobs: list[list[str]]) -> None:
    """Two jobs with the same overrides are one run made twice (`-m seed=0,0`), which a
    report would count as two seeds: refused before any job starts."""
    first: dict[frozenset[str], int] = {}
    for number, job in enumerate(jobs, start=1):
        earlier = first.setdefault(frozenset(job), number)
        require(earlier == number, f"sweep jobs {earlier} and {number} are the same run "
                f"({' '.join(job)}): a sweep lists a value twice; list each once; no job was "
                "started")


def one_line(err: BaseException) -> str:
    """Hydra and OmegaConf errors span lines (option lists, search paths): fold into one."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith("full_key")]
    if any(line.startswith("Config search path") for line in lines):
        lines = lines[: next(i for i, line in enumerate(lines)
                             if line.startswith("Config search path"))]
    if not lines:
        return type(err).__name__
    text = lines[0]
    for previous, line in zip(lines, lines[1:]):
        text += (" " if previous.endswith(":") else ", " if previous[-1].isalnum()
                 else " ") + line
    return text
