"""plots/training.png: the curves of a training run (pretrain, finetune, distill), drawn from
the metrics.jsonl files under its run dir, so a run without W&B has its picture too.

Every metrics.jsonl under the dir is a series (the run's own, each fine-tuning seed's, a
distillation's teacher, a pretraining run's downstream fine-tunes), labelled by its dir
relative to the run. Three panels: the losses, the learning rate, and the evaluation metrics
that are not losses (accuracy, F1, MLM accuracy), each over the optimiser step. A line's label
is its key, so it says which set it was measured on: `eval_subset/…` is the periodic
evaluation on the first batches of the dev set (finetune, distill), and a star at the last step
the final `eval/…` score on the whole dev set from metrics.json.
"""

from __future__ import annotations

import logging
from pathlib import Path

from bertology.run.figures import plt, save_figure, tie
from bertology.run.tracking import read_log

log = logging.getLogger(__name__)

MAX_KEYS = 3  # per panel and series: the first ones in key order (the rest: metrics.jsonl)
SKIP_DIRS = ("checkpoints", "wandb", "model")  # where no metrics.jsonl of the run lives


def is_loss(key: str) -> bool:
    return key.endswith("loss")


def is_lr(key: str) -> bool:
    return key.endswith("/lr")


def is_score(key: str) -> bool:
    """An evaluation metric that is not a loss, a loss's transform (perplexity: its scale
    would flatten the accuracies beside it) nor a wall-clock rate."""
    return (key.startswith(("eval/", "eval_subset/")) and not is_loss(key)
            and "perplexity" not in key and not key.endswith(("_s", "per_s")))


PANELS = (("loss", is_loss), ("learning rate", is_lr), ("evaluation", is_score))


def find_logs(out_dir: Path) -> dict[str, list[dict]]:
    """label -> records, for every metrics.jsonl under the run dir ("run" for its own)."""
    logs = {}
    for path in sorted(out_dir.rglob("metrics.jsonl")):
        relative = path.parent.relative_to(out_dir)
        if any(part in SKIP_DIRS for part in relative.parts):
            continue
        records = read_log(path)
        if records:
            logs[str(relative) if relative.parts else "run"] = records
    return logs


def log_path(label: str) -> str:
    """The metrics.jsonl a series was read from, relative to the run dir."""
    return "metrics.jsonl" if label == "run" else f"{label}/metrics.jsonl"


def series(records: list[dict], key: str) -> tuple[list[float], list[float]]:
    points = [(r["step"], r[key]) for r in records if key in r]
    return [p[0] for p in points], [p[1] for p in points]


def final_key(label: str, key: str) -> str | None:
    """The metrics.json key of the whole-dev-set score that a periodic eval_subset/ key
    previews: eval/<name> for the run's own log, seed_<s>/eval/<name> for a seed's."""
    if not key.startswith("eval_subset/"):
        return None
    name = "eval/" + key.removeprefix("eval_subset/")
    if label == "run":
        return name
    parts = Path(label).parts
    return f"seed_{parts[1]}/{name}" if len(parts) == 2 and parts[0] == "seeds" else None


def plot_training(out_dir: Path, title: str, final: dict[str, float] | None = None
                  ) -> Path | None:
    """plots/training.png (and .pdf); None where the run logged nothing to draw. `final`:
    the run's metrics.json, whose whole-dev-set scores are drawn as stars at the last step."""
    logs = find_logs(out_dir)
    panels = [(name, test) for name, test in PANELS
              if any(test(k) for records in logs.values() for r in records for k in r)]
    if not panels:
        return None
    figure, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.2), squeeze=False)
    for axis, (name, test) in zip(axes[0], panels):
        for label, records in logs.items():
            keys = sorted({k for r in records for k in r if test(k)})[:MAX_KEYS]
            for key in keys:
                steps, values = series(records, key)
                marker = "o" if len(steps) < 20 else None
                line = axis.plot(steps, values, marker=marker, markersize=3,
                                 label=key if label == "run" else f"{label}: {key}")[0]
                tie(line, [key] * len(steps), log=log_path(label))
                whole = final_key(label, key)
                if final and whole in final and steps:
                    star = axis.plot([steps[-1]], [final[whole]], marker="*", markersize=9,
                                     linestyle="none", color=line.get_color(),
                                     label=f"{whole} (whole dev set)")[0]
                    tie(star, [whole])
        axis.set_title(name)
        axis.set_xlabel("step")
        axis.grid(True)
        if axis.lines:
            axis.legend(fontsize=7)
    figure.suptitle(title)
    return save_figure(figure, out_dir, "training")


def write_run_page(out_dir: Path, title: str, metrics: dict[str, float]) -> None:
    """plots/training.png and index.html (bertology/run/index.py): the picture of a run
    without W&B (the CLI's closing line names them)."""
    from bertology.run.index import write_run_index

    plot_training(out_dir, title, metrics)
    write_run_index(out_dir, title, metrics)
