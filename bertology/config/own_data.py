"""The checks of a task read from a user's own files (task.format csv, tsv or jsonl), the way
transformers' run_glue.py reads --train_file and --validation_file: named by path, read from
disk only. A missing file is refused, never replaced by a hub data set, so task.source and
task.hub have nothing to choose here."""

from __future__ import annotations

from pathlib import Path

from bertology.config.options import did_you_mean
from bertology.errors import require

OWN_FORMATS = ("csv", "tsv", "jsonl")
# format -> the task kinds its files hold (data/own_files.py reads them)
OWN_KINDS = {"csv": ("classification",), "tsv": ("classification",),
             "jsonl": ("classification", "tagging")}
# a file name ending -> the format it holds: a jsonl file read as CSV would fail on a
# column it lacks, far from the cause (.json is left out: run_glue reads JSON lines from it)
SUFFIX_FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl"}


def check_own_task(task) -> None:
    """A TaskConfig of a user's own files: a kind its format holds, local files only, both
    splits named, file endings that agree with task.format, and at most two text columns."""
    kinds = OWN_KINDS[task.format]
    other = ("use task.format=squad for SQuAD-format JSON" if task.kind == "qa" else
             "tagging reads JSON lines of tokens and tags: task.format=jsonl")
    require(task.kind in kinds, f"task.format={task.format} holds {' or '.join(kinds)} data, "
            f"not task.kind={task.kind}; {other}")
    require(task.source != "hub" and task.hub is None, f"task.format={task.format} reads your "
            f"own files only, never the hub (task.source={task.source}, task.hub={task.hub}); "
            "drop task.source and task.hub, or use a hub task such as task=sst2")
    for key in ("train_file", "eval_file"):
        require(getattr(task, key), f"task.format={task.format} needs task.{key} (run_glue's "
                f"--{'train' if key == 'train_file' else 'validation'}_file), e.g. "
                f"task.{key}={'train' if key == 'train_file' else 'dev'}.{task.format}")
        suffix = SUFFIX_FORMATS.get(Path(getattr(task, key)).suffix.lower())
        require(suffix in (None, task.format), f"task.{key}={getattr(task, key)} looks like "
                f"{suffix} and task.format={task.format}; set task.format={suffix}")
    most = 1 if task.kind == "tagging" else 2
    require(len(task.text_columns) <= most, f"task.text_columns={task.text_columns} names "
            f"{len(task.text_columns)} columns; a {task.kind} file has "
            f"{'one tokens field' if most == 1 else 'one text column or a pair'}")


def own_file(name: str) -> Path:
    """A user's own file with no task.path: absolute, or relative to the working dir, as
    run_glue's --train_file is (Hydra leaves the working dir alone: hydra.job.chdir=false)."""
    return Path(name).expanduser().absolute()


def check_own_files(task) -> None:
    """A local task's train and eval files with no task.path (a user's own): each present,
    and a file; a typo names the files of that ending that are there. SQuAD alone may leave
    task.train_file out (its eval file is split by article)."""
    for key in ("train_file", "eval_file"):
        if key == "train_file" and task.format == "squad" and not task.train_file:
            continue
        require(getattr(task, key), f"task.{key} is not set, and task.path=null reads files "
                "from the working dir; name the file")
        path = own_file(getattr(task, key))
        there = [p.name for p in path.parent.glob(f"*{path.suffix}")] \
            if path.parent.is_dir() else []
        fix = (f"give the file's path, absolute or from the working dir ({Path.cwd()})"
               f"{did_you_mean(path.name, there)}")
        require(path.exists(), f"task.{key}: {path} does not exist; {fix}")
        require(path.is_file(), f"task.{key}: {path} is a folder, not a file; {fix}")
