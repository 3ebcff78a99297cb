"""A table of finished runs: one row per run dir (its Hydra choices and final metrics), for
sweeps, until `bertology report` turns them into verdicts and figures.

    python -m bertology.runs outputs/pretrain/multirun/2026-11-22/10-00-00 [--out runs.csv]
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

from omegaconf import OmegaConf

from bertology.run.rundir import finished_runs

# What tells runs of a sweep apart, read from each run's composed config.
CHOICES = ("model.family", "model.name_or_path", "size.hidden_size", "size.num_hidden_layers",
           "objective.name", "model.input_format", "model.masking", "seed", "trainer.max_flops",
           "task.name", "init", "head.mode", "head.features", "head.pooling",
           "head.freeze_layers", "compare_to", "pooling")


def run_row(run: Path) -> dict[str, object]:
    config = OmegaConf.load(run / ".hydra" / "config.yaml")
    row: dict[str, object] = {"run": str(run)}
    for key in CHOICES:
        value = OmegaConf.select(config, key)
        if value is not None:  # keys of other pipelines stay out of the row
            row[key] = value
    row.update(json.loads((run / "metrics.json").read_text()))
    return row


def write_csv(rows: list[dict[str, object]], path: Path) -> None:
    columns = list(dict.fromkeys(key for row in rows for key in row))
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="one CSV row per finished run dir")
    parser.add_argument("dirs", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, default=Path("runs.csv"))
    args = parser.parse_args(argv)
    runs = finished_runs(args.dirs)
    if not runs:
        print(f"bertology.runs: error: no finished run (metrics.json) under "
              f"{', '.join(map(str, args.dirs))}; point it at run or sweep dirs", file=sys.stderr)
        return 2
    write_csv([run_row(run) for run in runs], args.out)
    print(f"{len(runs)} runs -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
