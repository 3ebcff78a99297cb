"""bench/bench_pretrain.py's bookkeeping (issue 29.2): interleaved repeats, medians and ranges,
each arm's best precision. The timings themselves are measured by the bench, never asserted."""

from __future__ import annotations

import importlib.util
import sys

from conftest import REPO

spec = importlib.util.spec_from_file_location("bench_pretrain",
                                              REPO / "bench" / "bench_pretrain.py")
bench = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = bench  # its dataclasses look their module up
spec.loader.exec_module(bench)


def test_every_repeat_runs_every_cell_once_in_a_rotated_order():
    cells = [("a", "fp32"), ("b", "fp32"), ("c", "bf16")]
    order = bench.interleaved(cells, repeats=3)
    assert len(order) == 9
    for repeat in range(3):
        ran = [(arm, precision) for r, arm, precision in order if r == repeat]
        assert sorted(ran) == sorted(cells)
    # no cell always goes first: each repeat starts with a different one
    assert [order[3 * r][1] for r in range(3)] == ["a", "b", "c"]


def test_a_cell_reports_the_median_run_and_the_range():
    runs = [{"tokens_per_s": t, "load_before": load, "flops_per_s": 10 * t}
            for t, load in [(300.0, 0.1), (100.0, 0.2), (200.0, 0.3)]]
    summary = bench.summarise(runs)
    assert summary["tokens_per_s"] == 200.0 and summary["flops_per_s"] == 2000.0
    assert (summary["low"], summary["high"]) == (100.0, 300.0)
    assert summary["loads"] == [0.1, 0.2, 0.3] and summary["repeats"] == 3


def test_an_arms_best_is_its_faster_precision_and_ratios_read_as_such():
    cells = {"fp32": {"tokens_per_s": 500.0}, "bf16": {"tokens_per_s": 80.0}}
    assert bench.best_of(cells)[0] == "fp32"
    assert bench.ratio(600.0, 200.0) == "3.00x" and bench.ratio(None, 200.0) == "–"
    # an emulated bf16 peak is no ceiling: no MFU is printed against it
    peaks = {"fp32": bench.Peak(1e11, (1, 1, 1)), "bf16": bench.Peak(1e9, (1, 1, 1))}
    assert bench.mfu_text(5e10, peaks, native=False) == "50% / – (emulated)"
    native = {"fp32": bench.Peak(1e11, (1, 1, 1)), "bf16": bench.Peak(2e11, (2, 2, 2))}
    assert bench.mfu_text(5e10, native, native=True) == "50% / 25%"
    assert str(native["bf16"]) == "200 GFLOP/s (2x2x2)"


def test_the_profile_split_sums_to_the_steps_wall_time():
    """bench/profile_split.py: every aten op's self time goes to its kind (unknown ones to
    'other aten ops'), wrappers' time is host overhead, and the kinds add up to the steps'
    wall time."""
    from collections import namedtuple

    sys.path.insert(0, str(REPO / "bench"))
    import profile_split

    Event = namedtuple("Event", "key self_cpu_time_total cpu_time_total")
    events = [Event("ProfilerStep*", 50.0, 1000.0), Event("aten::mm", 600.0, 600.0),
              Event("aten::bernoulli_", 100.0, 100.0), Event("aten::gelu", 40.0, 40.0),
              Event("aten::copy_", 30.0, 30.0), Event("aten::frobnicate", 20.0, 20.0),
              Event("autograd::engine::evaluate_function: MmBackward0", 25.0, 300.0)]
    kinds = profile_split.split(events, profile_split.step_wall_us(events))
    assert kinds["matmul"] == 600 and kinds["dropout RNG"] == 100
    assert kinds["elementwise"] == 40 and kinds["casts"] == 30
    assert kinds["other aten ops"] == 20
    assert kinds["host overhead"] == 1000 - 790
    assert sum(kinds.values()) == 1000
    assert profile_split.unmatched(events) == [("aten::frobnicate", 20.0)]
    rows = profile_split.table({"a": kinds})
    assert "| matmul | 60.0% |" in rows and "| host overhead | 21.0% |" in rows
