"""Pipelines are verbs: run(cfg, out_dir) -> dict[str, float], read like a table of contents.

Each is a row of config/verbs.py's VERBS (the CLI's dispatch and the nested runs'), its module
imported on dispatch, so `bertology --help` and a config error answer without loading torch.

`report` is the study wing's verb: a thin run() over bertology/study/. `bertology runs` reads
finished run dirs and writes none, so it is no pipeline: it lives in cli/runs_command.py.
"""

from bertology.config.rows import load_function
from bertology.config.verbs import VERBS


def load_pipeline(pipeline: str):
    """The pipeline's run(cfg, out_dir) -> metrics."""
    return load_function(VERBS[pipeline].run)
