"""The loop's held-out evaluation: metrics on fixed masks, so numbers compare across steps and
runs, and at the end of training the bootstrap replicates of the final ones over held-out
sequences (run/replicates.py), which the report's intervals read."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from accelerate import Accelerator

from bertology.config.groups import TrainerConfig
from bertology.data.stream import ExampleSource
from bertology.run.replicates import (
    compute_item_ids,
    compute_ratio_replicates,
    write_replicates,
)
from bertology.training.collectives import (
    gather_shares,
    is_split,
    process_share,
    sum_over_processes,
)
from bertology.training.objective import Objective

log = logging.getLogger(__name__)

ITEM_PREFIX = "seq_"  # per-sequence (batch,) logs: collected, not summed
# the same at every evaluation (fixed masks): in metrics, not repeated on each step's log line
CONSTANT = ("mlm_majority_accuracy",)


def concatenate_items(batches: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Per-batch (batch,) item logs → one (sequences,) array per key, in batch order."""
    if not batches or not batches[0]:
        return {}
    return {key: np.concatenate([batch[key] for batch in batches]) for key in batches[0]}


@dataclass
class HeldOut:
    """Evaluates on the first eval_batches batches of the held-out examples. With several
    processes each evaluates every N-th batch and the per-batch sums are pooled: the same
    numbers as one process, in 1/N of the time.

    `name` scopes the metrics: `eval/…` where this is the run's evaluation (pretraining),
    `eval_subset/…` where the pipeline scores the whole dev set after training (finetune,
    distill) and this periodic one reads only its first eval_batches batches: one name per
    number, so a loss from one set is never paired with an accuracy from the other."""

    objective: Objective
    data: ExampleSource
    cfg: TrainerConfig
    accelerator: Accelerator
    name: str = "eval"
    # of the latest evaluation
    items: dict[str, np.ndarray] | None = field(default=None, init=False, repr=False)
    # eval/mlm_majority_accuracy (majority_floor)
    floor: float | None = field(default=None, init=False)

    def size(self) -> str:
        """What the evaluation reads, for its log line: "256 of 500 held-out"."""
        total = len(self.data.eval_examples)
        return f"{min(total, self.cfg.eval_batches * self.cfg.batch_size)} of {total} held-out"

    def report(self, model: torch.nn.Module, step: int) -> dict[str, float]:
        """run(), and its one log line, the set named once with its size ("step 188
        eval_subset (256 of 500 held-out): accuracy=0.8594 loss=0.41"; the constant floor
        left out)."""
        metrics = self.run(model)
        shown = " ".join(f"{k.removeprefix(self.name + '/')}={v:.4g}"
                         for k, v in sorted(metrics.items())
                         if k.removeprefix(self.name + "/") not in CONSTANT)
        log.info("step %d %s (%s): %s", step, self.name, self.size(), shown)
        return metrics

    def run(self, model: torch.nn.Module) -> dict[str, float]:
        cfg, accelerator = self.cfg, self.accelerator
        examples = self.data.eval_examples[: cfg.eval_batches * cfg.batch_size]
        starts = list(range(0, len(examples), cfg.batch_size))
        sums, items = self._score(model, [examples[s: s + cfg.batch_size]
                                          for s in process_share(starts, accelerator)])
        if is_split(len(starts), accelerator):
            sums = sum_over_processes(sums, accelerator)
            # every process's per-batch counts, in batch order: the sequences one process
            # would have scored, so the replicates match a 1-process run's
            items = gather_shares(items)
        self.items = concatenate_items(items)
        metrics = {f"{self.name}/{k}": v
                   for k, v in self.objective.metrics(sums, len(starts)).items()}
        if f"{self.name}/mlm_accuracy" in metrics:
            metrics[f"{self.name}/mlm_majority_accuracy"] = self.majority_floor(examples)
        return metrics

    def majority_floor(self, examples: list[dict]) -> float:
        """The MLM floor: the share of the held-out masked targets that are their most frequent
        token, the accuracy of always predicting it (the masks are fixed, so it is counted once,
        over every batch, whichever process scores them). A pretraining run at or below it has
        not learned (study/judge/population.py sets such a member aside)."""
        if self.floor is None:
            targets = []
            for start in range(0, len(examples), self.cfg.batch_size):
                batch = self.objective.collate(examples[start: start + self.cfg.batch_size])
                labels = batch["labels"]
                targets.append(labels[labels >= 0].numpy())  # -100: not masked
            counts = np.bincount(np.concatenate(targets)) if targets else np.zeros(1, np.int64)
            self.floor = float(counts.max() / counts.sum()) if counts.sum() else 0.0
            log.info("held-out MLM floor (always the most frequent of %d masked tokens): %.4f",
                     int(counts.sum()), self.floor)
        return self.floor

    def _score(self, model: torch.nn.Module, batches: list[list[dict]]
               ) -> tuple[dict[str, float], list[dict[str, np.ndarray]]]:
        """Pooled sums, and per batch the per-sequence (batch,) item logs."""
        model.eval()
        sums: dict[str, float] = {}
        items: list[dict[str, np.ndarray]] = []
        with torch.no_grad():
            for examples in batches:
                batch = {k: v.to(self.accelerator.device)
                         for k, v in self.objective.collate(examples).items()}
                with self.accelerator.autocast():
                    _, logs = self.objective.loss(model, batch)
                items.append({k: v.float().cpu().numpy() for k, v in logs.items()
                              if k.startswith(ITEM_PREFIX)})
                for key, value in logs.items():
                    if not key.startswith(ITEM_PREFIX):
                        sums[key] = sums.get(key, 0.0) + float(value)
        model.train()
        return sums, items

    def write_replicates(self, model: torch.nn.Module, out_dir: Path) -> None:
        """replicates/eval.csv for the objective's ratio metrics (eval/mlm_accuracy, ...). A run
        resumed after its final evaluation evaluates once more to get the sequences' counts
        (every process takes part: the counts are gathered from all of them)."""
        ratios = self.objective.item_ratios
        if not ratios:
            return
        if self.items is None:
            self.run(model)
        if not self.items:
            return
        columns = {f"eval/{name}": compute_ratio_replicates(self.items[num], self.items[den])
                   for name, (num, den) in ratios.items()
                   if num in self.items and den in self.items}
        # every column resamples the same sequences (bootstrap_indices depends on their number
        # only), so a mean of columns row by row is the mean's own replicate
        for name, parts in self.objective.item_means.items():
            if all(f"eval/{part}" in columns for part in parts):
                columns[f"eval/{name}"] = np.mean([columns[f"eval/{p}"] for p in parts], axis=0)
        if columns and self.accelerator.is_main_process:
            write_replicates(out_dir, "eval", columns, self.item_ids())

    def item_ids(self) -> list[str] | None:
        """The held-out sequences' ids (their token ids hashed), in the order the replicates
        resample them, so the report counts sequences other runs score too (a population's
        members hold out the same documents); None where the counts do not line up."""
        examples = self.data.eval_examples[: self.cfg.eval_batches * self.cfg.batch_size]
        ids = compute_item_ids([np.asarray(e["input_ids"]).tolist() for e in examples])
        counted = {len(v) for v in (self.items or {}).values()}
        return ids if counted == {len(ids)} else None
