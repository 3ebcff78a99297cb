"""Pipelines are verbs: run(cfg, out_dir) -> dict[str, float], read like a table of contents.

PIPELINES is the one dispatch table (the CLI's and nested runs'); each module is imported on
dispatch, so `bertology --help` and a config error answer without loading torch.

`report` is the study wing's verb: a thin run() over bertology/study/. `bertology runs` reads
finished run dirs and writes none, so it is no pipeline: it lives in cli/runs_command.py.
"""

# pipeline -> the module whose run(cfg, out_dir) it is; in sync with conf/<pipeline>.yaml
PIPELINES = {
    "pretrain": "bertology.pipelines.pretrain",
    "finetune": "bertology.pipelines.finetune",
    "probe": "bertology.pipelines.probe",
    "prune": "bertology.pipelines.prune",
    "distill": "bertology.pipelines.distill",
    "report": "bertology.pipelines.report",
}


def load_pipeline(pipeline: str):
    """The pipeline's run(cfg, out_dir) -> metrics."""
    import importlib

    return importlib.import_module(PIPELINES[pipeline]).run
