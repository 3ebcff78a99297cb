"""Pipelines are verbs: run(cfg, out_dir) -> dict[str, float], read like a table of contents.

PIPELINES is the one dispatch table (the CLI's and nested runs'); each module is imported on
dispatch, so `bertology --help` and a config error answer without loading torch.

runs_table.py is `bertology runs`: it reads finished run dirs and writes none, so it has no
run(cfg, out_dir) and no PIPELINES entry; the CLI dispatches to it by name.
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
