"""CPU seconds (time.process_time) of analysis=erasure_use's steps at one layer of a fine-tuned
classifier (bench/RESULTS.md, "erasure_use on MiniLM's SST-2 copy"):

    BERTOLOGY_DATA_DIR=<data> python bench/bench_erasure_use.py LAYER MODEL_DIR

CPU time, not wall time: on a shared machine the wall time measures the other jobs."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

from bertology.analysis.erasure_use import compute_probe_check, fit_conditions
from bertology.analysis.features import extract_or_load, fingerprint_model
from bertology.analysis.probe_context import load_encoder
from bertology.analysis.probes import build_units, label_set
from bertology.analysis.readouts import build_task_readout, compute_item_effects, load_classifier
from bertology.config.analysis_settings import ErasureUseSettings
from bertology.config.compose import load_group_file
from bertology.config.groups import TaskConfig
from bertology.data.probe_sentences import load_probe_sentences

DATA = Path(os.environ.get("BERTOLOGY_DATA_DIR", "data"))
CACHE = Path("/tmp/bench-erasure-use-cache")


def main(layer: int, path: str) -> None:
    torch.set_num_threads(2)
    clock = time.process_time
    task = TaskConfig(**load_group_file("task", "ud_pos"))
    splits = load_probe_sentences(task, DATA, 250, 200, 0)
    encoder, tokenizer = load_encoder(path, False)
    start = clock()
    readout = build_task_readout(load_classifier(path, "sst2", "compare_to"), tokenizer, "sst2",
                                 DATA, 200, 32)
    print("readout build (load, 200 originals)", round(clock() - start, 1))
    fingerprint = fingerprint_model(encoder, path)
    features = {split: extract_or_load(encoder, fingerprint, tokenizer, getattr(splits, split),
                                       CACHE, "first", False, 32, 128, desc=split)
                for split in ("train", "eval")}
    labels = label_set(splits.train)

    def words(split: str) -> tuple[np.ndarray, np.ndarray]:
        units = build_units(getattr(splits, split), features[split], "word", labels)
        return features[split].layer(layer)[units.rows].astype(np.float64), units.labels

    train, evaluation = words("train"), words("eval")
    start = clock()
    conditions = fit_conditions(*train, 0)
    print("LEACE twice and the subspace", round(clock() - start, 1))
    start = clock()
    compute_probe_check(train, evaluation, conditions["concept"], ErasureUseSettings(), 0)
    print("probe check (2 fits)", round(clock() - start, 1))
    start = clock()
    compute_item_effects(readout, layer, conditions, "erased")
    print("3 erased readouts of 200 examples", round(clock() - start, 1))


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
