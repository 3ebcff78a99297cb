"""`bertology <verb> [hydra overrides]`: dispatched through config/verbs.py's rows, one primary
config per pipeline.

Bad input (an unknown option, a value out of range, a missing file) is one line on stderr and
exit status 2, with no traceback and no run directory left behind. A run that fails on its own
(a non-finite loss, a failed write) is one line and exit 1, its dir kept and marked failed; a
SIGTERM writes a checkpoint and exits 143, a Ctrl-C the same with 130 (bertology/errors.py,
bertology/run/rundir.py).
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import shutil
import signal
import sys
from contextlib import nullcontext
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from bertology import __version__
from bertology.cli.help import format_help, format_usage
from bertology.cli.sweep import check_job, check_sweep
from bertology.config.compose import CONF_DIR
from bertology.config.options import did_you_mean
from bertology.config.rows import load_function
from bertology.config.suites import read_checkpoint_record
from bertology.config.verbs import VERBS, command_names, load_config_check, pipeline_names
from bertology.errors import (
    EXIT_CTRL_C,
    EXIT_FAILED,
    EXIT_USER_ERROR,
    Interrupted,
    RunFailed,
    UserError,
)
from bertology.pipelines import load_pipeline
from bertology.run.cache_notes import take_recomputed
from bertology.run.processes import is_main_process, run_dir_overrides
from bertology.run.provenance import write_env
from bertology.run.resume import (
    check_resume_config,
    record_start,
    refuse_fresh_start,
    resume_mode,
)
from bertology.run.rundir import RunInUse, check_not_in_use, is_finished, run_status
from bertology.run.write_errors import describe_write_error, errno_of

SWEEP_FLAGS = {"-m", "--multirun"}

log = logging.getLogger("bertology")


def fail(pipeline: str, message: str, status: int = EXIT_USER_ERROR) -> int:
    print(f"bertology {pipeline}: error: {message}", file=sys.stderr)
    return status


def _latest_unfinished_run(pipeline: str) -> Path:
    runs = sorted(Path("outputs", pipeline).glob("*/*/checkpoints"))
    runs = [p.parent for p in runs if not is_finished(p.parent)]
    if not runs:
        raise UserError(f"resume=true: no unfinished {pipeline} run with checkpoints under "
                        f"outputs/{pipeline}; start a fresh run without resume=true")
    return runs[-1]


def precheck(pipeline: str, overrides: list[str]) -> list[str]:
    """Compose and check the config before Hydra makes a run dir; resolve resume=true."""
    cfg = check_job(pipeline, overrides, load_config_check(pipeline))  # hydra.run.dir included
    run_dirs = [o.split("=", 1)[1] for o in overrides if o.startswith("hydra.run.dir=")]
    if run_dirs and is_main_process():  # before Hydra writes into a dir another run is using
        check_not_in_use(Path(run_dirs[-1]))
    elif str(cfg.get("resume")).lower() == "true":
        run_dirs = [str(_latest_unfinished_run(pipeline))]
        overrides = [*overrides, f"hydra.run.dir={run_dirs[0]}"]
    if run_dirs:  # a resume under another config: refused before Hydra touches the dir
        check_resume_config(Path(run_dirs[-1]), cfg)
        refuse_fresh_start(Path(run_dirs[-1]), resume_mode(cfg))
    return overrides


def resume_hint(pipeline: str, out_dir: Path) -> str:
    """The command that resumes this run: its own overrides (less any resume=), in its dir."""
    overrides = [o for o in HydraConfig.get().overrides.task
                 if not o.lstrip("+~").startswith(("resume=", "hydra.run.dir="))]
    return shlex.join(["bertology", pipeline, *overrides, f"hydra.run.dir={out_dir}"])


def _run_job(pipeline: str, cfg: DictConfig) -> None:
    out_dir = Path(HydraConfig.get().runtime.output_dir)
    # Rank 0 owns the run dir (status, lock, clean-up, requeue); in a multi-process run the
    # other ranks only train, and end with the same exit statuses.
    owner = is_main_process()
    fresh = owner and not (out_dir / "checkpoints").exists() and not (out_dir / "model").exists()
    log.info("run dir: %s", out_dir)
    take_recomputed()  # counts from an earlier run in this process are not this run's
    try:
        with run_status(out_dir, pipeline) if owner else nullcontext():
            changes = check_resume_config(out_dir, cfg)  # a sweep's job: not checked before
            if owner:
                record_start(out_dir, cfg, changes)
            if owner:  # provenance, whether or not W&B is on
                write_env(out_dir, ["bertology", pipeline, *sys.argv[1:]],
                          list(HydraConfig.get().overrides.task), read_checkpoint_record(cfg))
            metrics = load_pipeline(pipeline)(cfg, out_dir)
    except RunInUse as err:  # another process's dir: touch nothing
        sys.exit(fail(pipeline, str(err)))
    except UserError as err:
        if fresh:  # leave nothing that could pass for a run
            shutil.rmtree(out_dir, ignore_errors=True)
        else:  # a resumed run keeps its log, which records why this attempt stopped
            log.error("%s", err)
        sys.exit(fail(pipeline, str(err)))
    except RunFailed as err:
        log.error("%s", err)
        sys.exit(fail(pipeline, f"{err} (run dir kept: {out_dir})", EXIT_FAILED))
    except OSError as err:  # the environment failed (disk full, I/O error, a removed dir)
        message = describe_write_error(err, out_dir)
        if message is None:
            raise
        log.error("%s", message)
        sys.exit(fail(pipeline, message, EXIT_FAILED))
    except Interrupted as err:
        if owner and err.handover is not None:
            _requeue(pipeline, err, out_dir)
        message = f"{err}; to resume, rerun: {resume_hint(pipeline, out_dir)}"
        log.warning("%s", message)
        print(f"bertology {pipeline}: {message}", file=sys.stderr)
        sys.exit(err.exit_status)
    except KeyboardInterrupt:  # a second Ctrl-C, or one before training began
        message = (f"stopped by Ctrl-C; to resume from its last checkpoint, rerun: "
                   f"{resume_hint(pipeline, out_dir)}")
        log.warning("%s", message)
        print(f"bertology {pipeline}: {message}", file=sys.stderr)
        sys.exit(EXIT_CTRL_C)
    except Exception as err:  # a library's own error for a failed write (safetensors, torch)
        code = errno_of(err, out_dir)
        message = None if code is None else describe_write_error(
            OSError(code, os.strerror(code)), out_dir)
        if message is None:
            raise
        log.error("%s", message)
        sys.exit(fail(pipeline, message, EXIT_FAILED))
    log.info("finished: %s\n%s%s", out_dir, format_summary(metrics), format_figures(out_dir))


SUMMARY_ROWS = 16
HEADLINE_TRAIN = ("train/loss", "train/steps", "train/tokens_per_s")


def format_figures(out_dir: Path) -> str:
    """The closing lines that name the run's figures and page, where it has them."""
    figures = sorted((out_dir / "plots").glob("*.png"))
    if not figures:
        return ""
    more = f" and {len(figures) - 1} more" if len(figures) > 1 else ""
    page = out_dir / "index.html"
    return (f"\n  figure: {figures[0]}{more}"
            + (f"\n  every figure and table: {page}" if page.exists() else ""))


def format_summary(metrics: dict[str, float]) -> str:
    """The final metrics as a short aligned table: results first (eval/, probe/, ...), then
    the training loss, steps and rate, then the other counters; the rest is in metrics.json."""
    def rank(key: str) -> tuple:
        train = key.startswith("train/")
        return (train, key not in HEADLINE_TRAIN, key)

    order = sorted(metrics, key=rank)
    shown = order[:SUMMARY_ROWS]
    width = max((len(k) for k in shown), default=0)
    lines = [f"  {k:<{width}}  {metrics[k]:>12.4g}" for k in shown]
    if len(order) > len(shown):
        lines.append(f"  ... {len(order) - len(shown)} more in metrics.json")
    return "\n".join(lines)


def _requeue(pipeline: str, err: Interrupted, out_dir: Path) -> None:
    """A submitit job (SLURM or local): the checkpoint is on disk and the status says
    interrupted, so hand over to submitit's preemption handler, which resubmits the same
    Hydra job (same config, same run dir, which resumes) and exits. Further signals are
    ignored so a late one cannot requeue the job twice."""
    from bertology.training.loop import preempt_signal

    log.warning("%s; handing over to submitit to requeue the job into %s", err, out_dir)
    print(f"bertology {pipeline}: {err}; requeued by submitit", file=sys.stderr)
    for signum in (signal.SIGTERM, preempt_signal()):
        signal.signal(signum, signal.SIG_IGN)
    err.handover(preempt_signal(), None)


def launch(pipeline: str, overrides: list[str]) -> int:
    """Hand over to Hydra (single run or -m sweep) with the pipeline's primary config."""
    if "-m" not in overrides and "--multirun" not in overrides:
        overrides = run_dir_overrides(CONF_DIR / f"{pipeline}.yaml", overrides)
    sys.argv = [f"bertology {pipeline}", *overrides]
    # A log line that cannot be written (the run dir's disk is full) must not print a traceback
    # on every later line: the run's own write fails next and says so in one line.
    logging.raiseExceptions = False

    def task(cfg: DictConfig) -> None:
        _run_job(pipeline, cfg)

    hydra.main(config_path=str(CONF_DIR), config_name=pipeline, version_base="1.3")(task)()
    return 0


# Hydra's flags that take the next word as their value (`--cfg job`): that word is no run dir
HYDRA_VALUE_FLAGS = ("--cfg", "-c", "--package", "-p", "--config-name", "-cn", "--config-path",
                     "-cp", "--config-dir", "-cd")


def dirs_overrides(args: list[str], key: str) -> list[str]:
    """`bertology report DIR [DIR ...] [key=value ...]`: the dirs become <key>=[...] (the
    verb row's dirs_key: report's runs)."""
    values = {i + 1 for i, a in enumerate(args) if a in HYDRA_VALUE_FLAGS}
    paths = [a for i, a in enumerate(args)
             if "=" not in a and not a.startswith("-") and i not in values]
    rest = [a for a in args if a not in paths]
    if not paths:
        return rest
    quoted = ",".join("'" + p.replace("\\", "\\\\").replace("'", "\\'") + "'" for p in paths)
    return [f"{key}=[{quoted}]", *rest]


def run_command(command: str, args: list[str]) -> int:
    """`bertology <command> ...`, its row's main(args) imported now (a command that needs no
    torch loads none): its UserError is one line and exit 2, as a pipeline's."""
    try:
        return load_function(VERBS[command].run)(args) or 0
    except UserError as err:
        return fail(command, str(err))


PROGRESS_BARS_OFF = ("TQDM_DISABLE", "HF_HUB_DISABLE_PROGRESS_BARS",
                     "HF_DATASETS_DISABLE_PROGRESS_BARS")


def quiet_progress_bars() -> None:
    """No progress bar unless stderr is a terminal: under SLURM or nohup every redraw is a
    carriage return in the job's log (tqdm, transformers and datasets read these variables;
    a user's own setting wins)."""
    if not sys.stderr.isatty():
        for name in PROGRESS_BARS_OFF:
            os.environ.setdefault(name, "1")


ANSI = re.compile(r"\x1b\[[0-9;]*m")
# transformers v5 bolds its load report's title whatever the stream (utils/loading_report.py,
# logged through modeling_utils' logger when from_pretrained reports missing keys)
COLOURED_LOGGERS = ("transformers.modeling_utils", "transformers.utils.loading_report")


class StripAnsi(logging.Filter):
    """Drops ANSI colour codes from a record's message: a log file or a pipe shows text."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = ANSI.sub("", record.msg)
        return True


def plain_library_logs() -> None:
    """No raw escape codes from a library's log lines unless stderr is a terminal."""
    if not sys.stderr.isatty():
        for name in COLOURED_LOGGERS:
            logging.getLogger(name).addFilter(StripAnsi())


def unknown_verb(name: str) -> str:
    pipelines, commands = pipeline_names(), command_names()
    near = did_you_mean(name, [*pipelines, *commands])
    return (f"unknown pipeline {name!r}{near} (pipelines: {', '.join(pipelines)}; commands: "
            f"{', '.join(commands)}; bertology --help)")


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(format_usage())
        return 0
    if args[0] in ("--version", "-V"):
        print(f"bertology {__version__}")
        return 0
    if "-sc" in args or "--shell-completion" in args:  # Hydra's flag: bertology's own script
        return run_command("completion", ["bash"] if "install=bash" in args else [])
    pipeline, overrides = args[0], args[1:]
    verb = VERBS.get(pipeline)
    if verb is None:
        return fail(pipeline, unknown_verb(pipeline))
    if verb.check is None:
        return run_command(pipeline, overrides)
    if verb.dirs_key is not None:
        overrides = dirs_overrides(overrides, verb.dirs_key)
    if "--help" in overrides or "-h" in overrides:  # Hydra's own help is --hydra-help
        print(format_help(pipeline))
        return 0
    quiet_progress_bars()
    plain_library_logs()
    flags = [o for o in overrides if o.startswith("-")]  # -m, --cfg, --info, ...
    try:
        if not flags:
            overrides = precheck(pipeline, overrides)
        elif set(flags) <= SWEEP_FLAGS:  # every job checked before the first starts
            check_sweep(pipeline, [o for o in overrides if o not in flags],
                        load_config_check(pipeline))
    except UserError as err:
        return fail(pipeline, str(err))
    return launch(pipeline, overrides)
