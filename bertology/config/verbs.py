"""One row per `bertology <verb>`: the code that runs it, the check its config must pass, its line
in `bertology --help`. The CLI's dispatch, usage, per-verb help and completion, and the nested
runs (pipelines/nested.py) all read VERBS; nothing else lists the verbs.

A verb with a config check is a pipeline: Hydra composes conf/<verb>.yaml, the check refuses bad
input before a run dir exists, and run(cfg, out_dir) returns its metrics. A verb without one is
a command: main(args) runs it, with no Hydra and no run dir. Adding a verb takes its module, its
conf/<verb>.yaml (a pipeline's) and its row here (tests/house/test_rows.py adds one that way).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bertology.config.rows import load_function


@dataclass(frozen=True)
class Verb:
    # "module:function": a pipeline's run(cfg, out_dir) -> metrics, a command's main(args)
    run: str
    # its line in `bertology --help`; {models} (a|b), {analyses}, {experiments} and {scores}
    # (a, b) are filled in from those rows (cli/help.py), so the line cannot fall behind them
    about: str
    # "module:function": the check the composed config passes before a run dir is made
    # (raises UserError); None: a command
    check: str | None = None
    # the key that positional arguments land in as a list (report's run dirs: runs=[...])
    dirs_key: str | None = None
    # the `keys:` paragraph of its --help, where it differs from any-key-is-KEY=VALUE
    keys_help: str | None = None
    # a command's "module:function"(current, args) -> candidates for bash completion, args the
    # words typed after the command; None: bash completes paths
    complete: str | None = None


VERBS = {
    "pretrain": Verb(
        "bertology.pipelines.pretrain:run",
        "masked-LM pretraining (model={models}, size=tiny..large, "
        "data=synthetic|wikipedia|files|hub)",
        check="bertology.config.pretrain_config:load_pretrain_config"),
    "finetune": Verb(
        "bertology.pipelines.finetune:run",
        "a checkpoint → a task model (task=sst2|mrpc|conll03|ud_pos|squad|synthetic_*, or your "
        "own files: task=own_classification|own_tagging|own_qa; model=minilm or "
        "model.name_or_path=<dir>; head.mode=finetune|feature)",
        check="bertology.config.finetune_config:load_finetune_config"),
    "probe": Verb(
        "bertology.pipelines.probe:run",
        "what a checkpoint knows, layer by layer (analysis=NAME or [NAME,...] of {analyses}; "
        "task=ud_pos|ud_deps|conll03|own_tagging or "
        "synthetic_pos|synthetic_depth|synthetic_agreement)",
        check="bertology.config.probe_config:load_probe_config"),
    "prune": Verb(
        "bertology.pipelines.prune:run",
        "how much of a fine-tuned model is needed (model.name_or_path=<finetune model/> or "
        "model=minilm to fine-tune first; prune.experiments=[...] of {experiments}; "
        "prune.scores=[...] of {scores})",
        check="bertology.config.prune_config:load_prune_config"),
    "distill": Verb(
        "bertology.pipelines.distill:run",
        "a fine-tuned teacher → a smaller student (teacher.name_or_path=<finetune model/>; "
        "student.init=teacher_layers|random; kd.alpha, kd.temperature, TinyBERT terms)",
        check="bertology.config.distill_config:load_distill_config"),
    # the study wing's verb: a thin run() over bertology/study/
    "report": Verb(
        "bertology.pipelines.report:run",
        "run dirs → REPORT.md: metrics over seeds and a verdict per survey finding "
        "(bertology report outputs/probe/multirun/<date>/<time> [more dirs])",
        check="bertology.config.report_config:load_report_config", dirs_key="runs",
        keys_help="runs=[DIR,...] (the positional dirs land there) and findings_dir=FOLDER "
        "(your own findings, judged beside the survey's); `bertology report DIR --cfg job` "
        "prints the config."),
    "data": Verb(
        "bertology.cli.data_command:main",
        "the real data sets: bertology data list | fetch NAME... | --all | verify (into "
        "BERTOLOGY_DATA_DIR, default ~/.cache/bertology/data)",
        complete="bertology.cli.data_command:complete_data"),
    # reads finished run dirs and writes none, so it is no pipeline
    "runs": Verb(
        "bertology.cli.runs_command:main",
        "a table of finished runs: the overrides that differ, headline metrics (bertology runs "
        "[DIR ...] [--format markdown|csv] [--metrics GLOBS])",
        complete="bertology.cli.runs_command:complete_runs"),
    "convert": Verb(
        "bertology.cli.convert_command:main",
        "a checkpoint's pytorch_model.bin → model.safetensors beside it (bertology convert "
        "DIR; torch.load with weights_only=True, no code runs)"),
    "completion": Verb(
        "bertology.cli.completion:main",
        'bash completion: eval "$(bertology completion bash)" (e.g. in ~/.bashrc)',
        complete="bertology.cli.completion:complete_shells"),
}


def pipeline_names() -> list[str]:
    """The verbs Hydra runs from conf/<verb>.yaml, in VERBS's order."""
    return [name for name, verb in VERBS.items() if verb.check is not None]


def command_names() -> list[str]:
    return [name for name, verb in VERBS.items() if verb.check is None]


def load_config_check(pipeline: str) -> Callable:
    """The pipeline's check: composed config -> its typed view, or UserError."""
    return load_function(VERBS[pipeline].check)
