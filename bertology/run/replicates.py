"""Bootstrap replicates of a run's metrics over its evaluation items, for the report's intervals.

A metric such as probe/layer_03/accuracy is one number from one run, but it is computed on a
sample of items (sentences, examples, word pairs); its sampling error is part of the evidence a
verdict rests on, and the only part a deterministic run has. So analyses that score items also
write `replicates/<name>.csv`: R rows, one per bootstrap resample of the items (with
replacement, Efron & Tibshirani, 1993), and one column per metric key, each the same statistic
computed on that resample.

Items are resampled as clusters where they are not independent: the words of a sentence are
resampled together (sentences are the unit), so within-sentence correlation widens the interval
as it should. Resample r draws its item indices from a generator seeded by (r, number of
items) alone, so two runs scored on the same item list (two layers, two models, two seeds of
the same split) get the same resamples, and the report can pair them item by item.

Beside `<name>.csv`, `replicates/<name>.items.json` lists the ids of the items its resamples
draw from, in the order bootstrap_indices indexes them: {"items": ["3f1c…", …]}, one id per
item, a hash of the item's content (compute_item_ids), so two seeds or runs that score the same
sentence give it the same id wherever it sits in their lists. The report counts from them the
items seeds share at other positions (study/judge/stats.py, compute_overlap), which the replicates
cannot pair. A run made before the ids were written has none: its overlap is unknown.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
from pathlib import Path

import numpy as np

from bertology.run.write_errors import writing

REPLICATES = 400  # enough for a standard error to within ~4% (1 / sqrt(2R))
# Fewest items a run is scored on: resamples of one item are all alike, an interval of zero
# width that would read as certainty (the probe and finetune pipelines check it)
MIN_BOOTSTRAP_ITEMS = 2
FOLDER = "replicates"
ITEMS_SUFFIX = ".items.json"  # beside <name>.csv: the ids of the items it resamples


def bootstrap_indices(num_items: int, replicates: int = REPLICATES) -> np.ndarray:
    """(replicates, num_items) item indices drawn with replacement; a function of the two
    sizes only, so runs scored on the same items resample them identically."""
    if num_items < 1:
        raise ValueError("bootstrap needs at least one item")
    rng = np.random.default_rng([num_items, 20191107])
    return rng.integers(0, num_items, size=(replicates, num_items))


def compute_ratio_replicates(numerators: np.ndarray, denominators: np.ndarray,
                             indices: np.ndarray | None = None) -> np.ndarray:
    """Replicates of Σ numerator / Σ denominator over resampled items: per-item sums
    (items,) or (items, k) → (replicates,) or (replicates, k). An accuracy over words of
    sentences is (correct words, words) per sentence."""
    numerators = np.asarray(numerators, dtype=np.float64)
    denominators = np.asarray(denominators, dtype=np.float64)
    indices = bootstrap_indices(len(numerators)) if indices is None else indices
    num = numerators[indices].sum(axis=1)  # (replicates[, k])
    den = denominators[indices].sum(axis=1)
    return num / np.where(den == 0, np.nan, den)


def compute_mean_replicates(values: np.ndarray, indices: np.ndarray | None = None
                            ) -> np.ndarray:
    """Replicates of the mean of per-item values (items,) or (items, k)."""
    values = np.asarray(values, dtype=np.float64)
    indices = bootstrap_indices(len(values)) if indices is None else indices
    return values[indices].mean(axis=1)


def compute_item_ids(items) -> list[str]:
    """A stable id per item (a sentence's words, an example's fields): the first 16 hex digits
    of the SHA-1 of its JSON (keys sorted), equal wherever two runs score the same item."""
    return [hashlib.sha1(json.dumps(item, sort_keys=True, ensure_ascii=False, default=str)
                         .encode()).hexdigest()[:16] for item in items]


def compute_sentence_ids(sentences) -> list[str]:
    """compute_item_ids of sentences by their words alone: the same sentence has one id
    whatever its labels (a task's tags, a tree) or its place in a list."""
    return compute_item_ids([list(s.words) for s in sentences])


def write_replicates(out_dir: Path, name: str, columns: dict[str, np.ndarray],
                     items: list[str] | None = None, pool: int | None = None) -> Path:
    """replicates/<name>.csv: one column per metric key, one row per resample (atomic); with
    items, the ids of the items every column resamples (in bootstrap_indices' order) go to
    <name>.items.json first, so a csv never stands beside another list's ids; pool, the size
    of the set they were drawn from, goes with them (how many more items a run could score)."""
    lengths = {len(v) for v in columns.values()}
    if len(lengths) != 1:
        raise ValueError(f"replicate columns differ in length: {sorted(lengths)}")
    path = out_dir / FOLDER / f"{name}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_item_ids(path.with_name(f"{name}{ITEMS_SUFFIX}"), items, pool)
    tmp = path.with_name(f".{path.name}.tmp")
    keys = sorted(columns)
    with writing(path), tmp.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(keys)
        for row in zip(*(np.asarray(columns[k], dtype=np.float64) for k in keys)):
            writer.writerow([repr(float(v)) for v in row])
    os.replace(tmp, path)
    return path


def write_item_ids(path: Path, items: list[str] | None, pool: int | None = None) -> None:
    """The ids file (atomic); None removes a stale one (a rewrite without ids: unknown)."""
    if items is None:
        path.unlink(missing_ok=True)
        return
    tmp = path.with_name(f".{path.name}.tmp")
    block = {"items": [str(i) for i in items], **({"pool": int(pool)} if pool else {})}
    with writing(path):
        tmp.write_text(json.dumps(block) + "\n")
    os.replace(tmp, path)


def read_replicates(run_dir: Path) -> dict[str, np.ndarray]:
    """Every replicate column a run wrote, by metric key (a key written twice: the last)."""
    columns: dict[str, np.ndarray] = {}
    for path in sorted((run_dir / FOLDER).glob("*.csv")):
        with path.open(newline="") as handle:
            rows = list(csv.reader(handle))
        if len(rows) < 2:
            continue
        values = np.array(rows[1:], dtype=np.float64)  # (replicates, keys)
        columns.update({key: values[:, i] for i, key in enumerate(rows[0])})
    return columns


def read_item_pools(run_dir: Path) -> dict[str, int]:
    """The size of the set each replicate column's items were drawn from, by metric key, where
    the run recorded it (read_item_ids' files)."""
    pools: dict[str, int] = {}
    for path in sorted((run_dir / FOLDER).glob(f"*{ITEMS_SUFFIX}")):
        block = json.loads(path.read_text())
        csv_path = path.with_name(path.name[: -len(ITEMS_SUFFIX)] + ".csv")
        if isinstance(block, dict) and isinstance(block.get("pool"), int) and csv_path.exists():
            with csv_path.open(newline="") as handle:
                pools.update({key: block["pool"] for key in next(csv.reader(handle), [])})
    return pools


def read_item_ids(run_dir: Path) -> dict[str, list[str]]:
    """The item ids behind each replicate column, by metric key (as read_replicates), for the
    columns whose file has an ids file; {} for a run made before runs wrote them."""
    ids: dict[str, list[str]] = {}
    for path in sorted((run_dir / FOLDER).glob("*.csv")):
        sidecar = path.with_name(f"{path.stem}{ITEMS_SUFFIX}")
        with path.open(newline="") as handle:
            header = next(csv.reader(handle), [])
        for key in header:  # a key written twice: the last file's ids, or none
            ids.pop(key, None)
        if sidecar.exists():
            items = json.loads(sidecar.read_text())
            if not isinstance(items, dict) or not isinstance(items.get("items"), list):
                raise ValueError(f"{sidecar.name}: no list of item ids")
            items = [str(i) for i in items["items"]]
            ids.update({key: items for key in header})
    return ids


def average_replicates(tables: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Row-wise means of the columns every table has: the replicates of a metric averaged over
    runs scored on the same items (finetune's random restarts)."""
    keys = set.intersection(*(set(t) for t in tables)) if tables else set()
    return {k: np.mean([t[k] for t in tables], axis=0) for k in sorted(keys)}


def resample_counts(indices: np.ndarray) -> np.ndarray:
    """(replicates, items) how many times each resample drew each item: the weights under
    which a statistic of the original items is its value on the resample."""
    replicates, items = indices.shape
    counts = np.zeros((replicates, items))
    np.add.at(counts, (np.arange(replicates)[:, None], indices), 1.0)
    return counts


def resample_sums(values: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """Σ over each resample's items of per-item values (items, k) → (replicates, k), as a
    product with the resamples' item multiplicities (no (replicates, items, k) array)."""
    return resample_counts(indices) @ np.asarray(values, dtype=np.float64)
