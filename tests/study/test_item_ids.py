"""Runs record the ids of the items their replicates resample, and the report counts from them
the items seeds share at other positions of their lists (stats.compute_overlap), which the
replicates cannot pair (docs/findings.md, "Overlapping sentences and collapsed seeds")."""

from __future__ import annotations

import csv

import numpy as np
import pytest
from conftest import compose_config
from test_report import run_report, write_run

from bertology.config.probe_config import load_probe_config
from bertology.data.probe_sentences import load_probe_sentences
from bertology.errors import UserError
from bertology.pipelines import probe
from bertology.run.replicates import (
    ITEMS_SUFFIX,
    REPLICATES,
    compute_sentence_ids,
    read_item_ids,
    read_replicates,
    write_replicates,
)
from bertology.run.rundir import RunDir
from bertology.study.judge.results import find_runs
from bertology.study.judge.specs import parse_finding
from bertology.study.judge.stats import combine_seeds, compute_overlap
from bertology.study.judge.verdicts import judge

# a per-seed claim against a number: the comparison's replicates are eval/a's own
FINDING = {"id": "overlap_demo", "unit": "checkpoint", "claim": "a is above 0.5",
           "source": "a test", "compare": {"a": "eval/a", "b": 0.5, "expect": "greater"}}
# Three seeds' eval items: "a" sits at position 0 of seeds 0 and 2 (the same position of
# lists of one length: paired by the replicates) and at position 1 of seed 1 (unpaired).
# By hand: ordered pairs (0,1), (1,0), (1,2), (2,1) each share 1 unpaired item of
# sqrt(4 · 4) = 4, (0,2) and (2,0) none: (4 × 1/4) / (3 × 2) = 1/6
ITEMS = [["a", "b", "c", "d"], ["e", "a", "f", "g"], ["a", "h", "i", "j"]]
BY_HAND = 1 / 6
VALUES = [0.62, 0.58, 0.66]


def test_compute_overlap_by_hand():
    assert compute_overlap(ITEMS) == pytest.approx(BY_HAND)


def test_ids_are_written_beside_their_replicates_and_read_by_column(tmp_path):
    write_replicates(tmp_path, "scored", {"eval/a": np.zeros(3), "eval/b": np.ones(3)},
                     ["x", "y"])
    write_replicates(tmp_path, "old", {"eval/c": np.zeros(3)})  # a file without ids
    assert (tmp_path / "replicates" / f"scored{ITEMS_SUFFIX}").exists()
    assert read_item_ids(tmp_path) == {"eval/a": ["x", "y"], "eval/b": ["x", "y"]}
    assert RunDir(tmp_path).item_pools == {}  # no pool recorded
    write_replicates(tmp_path, "scored", {"eval/a": np.zeros(3), "eval/b": np.ones(3)},
                     ["x", "y"], pool=10)
    assert RunDir(tmp_path).item_pools == {"eval/a": 10, "eval/b": 10}
    assert set(read_replicates(tmp_path)) == {"eval/a", "eval/b", "eval/c"}  # csv only
    write_replicates(tmp_path, "scored", {"eval/a": np.zeros(3)})  # rewritten without ids
    assert read_item_ids(tmp_path) == {}
    assert read_item_ids(tmp_path / "nowhere") == {}


def test_a_malformed_ids_file_is_a_user_error_naming_the_run(tmp_path):
    write_replicates(tmp_path, "scored", {"eval/a": np.zeros(3)}, ["x"])
    (tmp_path / "replicates" / f"scored{ITEMS_SUFFIX}").write_text("[1, 2]")
    with pytest.raises(UserError, match="unreadable"):
        _ = RunDir(tmp_path).item_ids


def item_replicates(seed: int) -> np.ndarray:
    """Seed s's (R,) replicates of eval/a: item noise around its value."""
    return VALUES[seed] + np.random.default_rng(seed).normal(0.0, 0.02, REPLICATES)


def write_seeds(root, ids: list[list[str]] | None):
    """Three finished runs of FINDING's study; their ids, or none (runs made before ids)."""
    for seed, value in enumerate(VALUES):
        path = write_run(root / str(seed), {"eval/a": value}, seed, FINDING)
        write_replicates(path, "test", {"eval/a": item_replicates(seed)},
                         None if ids is None else ids[seed])


def findings_row(out) -> dict:
    with (out / "tables" / "findings.csv").open() as handle:
        return next(csv.DictReader(handle))


def test_the_report_counts_the_overlap_of_the_recorded_ids(tmp_path):
    write_seeds(tmp_path / "runs", ITEMS)
    result = judge(parse_finding(FINDING), find_runs([tmp_path / "runs"]))
    assert [p.overlap for p in result.parts] == [pytest.approx(BY_HAND)]
    reps = [item_replicates(seed) - 0.5 for seed in range(3)]
    values = [v - 0.5 for v in VALUES]
    counted = combine_seeds(values, reps, overlap=BY_HAND)
    ignored = combine_seeds(values, reps, overlap=0.0)
    estimate = result.tests[0].estimate
    assert estimate.interval() == pytest.approx(counted.interval())
    width = estimate.interval()[1] - estimate.interval()[0]
    assert width > ignored.interval()[1] - ignored.interval()[0]
    run_report(tmp_path / "runs", tmp_path / "out", FINDING)
    assert float(findings_row(tmp_path / "out")["item_overlap"]) == pytest.approx(BY_HAND)


def test_runs_without_ids_still_report_with_the_overlap_unknown(tmp_path):
    write_seeds(tmp_path / "runs", None)
    result = judge(parse_finding(FINDING), find_runs([tmp_path / "runs"]))
    assert [p.overlap for p in result.parts] == [None]  # unknown, counted as 0
    reps = [item_replicates(seed) - 0.5 for seed in range(3)]
    expected = combine_seeds([v - 0.5 for v in VALUES], reps, overlap=0.0)
    assert result.tests[0].estimate.interval() == pytest.approx(expected.interval())
    metrics = run_report(tmp_path / "runs", tmp_path / "out", FINDING)
    assert metrics["report/findings"] == 1
    assert findings_row(tmp_path / "out")["item_overlap"] == ""


def test_one_run_without_ids_makes_the_overlap_unknown(tmp_path):
    write_seeds(tmp_path / "runs", ITEMS)
    (tmp_path / "runs" / "1" / "replicates" / f"test{ITEMS_SUFFIX}").unlink()
    result = judge(parse_finding(FINDING), find_runs([tmp_path / "runs"]))
    assert [p.overlap for p in result.parts] == [None]


@pytest.mark.slow
def test_probe_runs_record_the_sentences_they_scored_in_replicate_order(tmp_path):
    """Two probe runs that sample their eval sentences from one file (sample_seed): each
    records the ids of its own sentences in the order its replicates resample them, and a
    sentence both scored has one id in both."""
    ids, sentences = [], []
    for sample_seed in (0, 1):
        cfg = compose_config("probe", [
            "logger=none", "init=random", "seeds=[0]", "max_train_sentences=60",
            "max_eval_sentences=50", "task.num_sentences=400", f"sample_seed={sample_seed}",
            f"seed={sample_seed}",
            "analysis.linear.max_iter=50", f"paths.cache_dir={tmp_path / 'cache'}"])
        out = tmp_path / str(sample_seed)
        probe.run(cfg, out)
        recorded = RunDir(out).item_ids
        ids.append(recorded["probe/layer_00/accuracy"])
        assert recorded["probe/random/layer_00/accuracy"] == ids[-1]  # one list per file
        config = load_probe_config(cfg)
        scored = load_probe_sentences(config.task, config.data_dir, config.max_train_sentences,
                                      config.max_eval_sentences, config.sample_seed)
        sentences.append([tuple(s.words) for s in scored.eval])
        assert ids[-1] == compute_sentence_ids(scored.eval)
        # the pool: the synthetic task's eval share of 400 sentences, 50 of them scored
        assert RunDir(out).item_pools["probe/layer_00/accuracy"] == scored.eval_pool
        assert scored.eval_pool > len(scored.eval) == 50
    shared = set(sentences[0]) & set(sentences[1])
    assert shared, "the two samples share no sentence; the check below would be vacuous"
    for words in shared:
        assert ids[0][sentences[0].index(words)] == ids[1][sentences[1].index(words)]
    assert len(set(ids[0]) & set(ids[1])) == len(shared)
    assert compute_overlap(ids) > 0  # shared at other positions: what the report now counts


@pytest.mark.slow
def test_attention_numeracy_and_pretraining_record_the_items_they_scored(tmp_path):
    """The analyses that wrote no ids before: attention's statistics and head distances (its
    eval sentences), its dependency heads (the odd, scoring half), numeracy (the numbers
    each split scored, one file a split) and pretraining's held-out evaluation (its
    sequences), each list as long as the items its replicates resample."""
    from bertology.pipelines import pretrain

    cfg = compose_config("probe", [
        "logger=none", "init=random", "seeds=[0]", "analysis=[attention,numeracy]",
        "max_train_sentences=20", "max_eval_sentences=12", "analysis.attention.max_sentences=12",
        "analysis.attention.min_dependents=1", "analysis.attention.kovaleva_sentences=4",
        "analysis.numeracy.max_number=200", "analysis.numeracy.train_below=150",
        f"paths.cache_dir={tmp_path / 'cache'}"])
    probe.run(cfg, tmp_path / "probe")
    config = load_probe_config(cfg)
    scored = load_probe_sentences(config.task, config.data_dir, config.max_train_sentences,
                                  config.max_eval_sentences, config.sample_seed).eval[:12]
    recorded = RunDir(tmp_path / "probe").item_ids
    assert recorded["attention/layer_01/cls"] == compute_sentence_ids(scored)
    assert recorded["attention/deps/all/accuracy"] == compute_sentence_ids(scored[1::2])
    assert recorded["attention/head_divergence/within_layer"] == compute_sentence_ids(scored)
    assert recorded["numeracy/layer_00/r2_extrapolate"] == [f"number:{n}"
                                                            for n in range(150, 200)]
    assert len(recorded["numeracy/random/layer_00/r2_interpolate"]) == 30  # 20% of 150
    out = tmp_path / "pretrain"
    pretrain.run(compose_config("pretrain", [
        "logger=none", "trainer.max_steps=2", "trainer.batch_size=2", "trainer.eval_batches=2",
        "data.num_sentences=300", "data.eval_docs=5", "data.max_seq_length=64"]), out)
    held_out = RunDir(out).item_ids["eval/mlm_accuracy"]
    assert len(held_out) == 4 and len(set(held_out)) == 4  # 2 batches of 2 sequences
