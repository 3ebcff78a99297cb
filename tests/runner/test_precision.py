"""trainer.mixed_precision=auto: the faster of fp32 and bf16 by timing whole training steps
where the device has native bf16, fp32 without timing where it has not, cached per machine
and shape, recorded in the run dir (training/precision.py)."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

import pytest
import torch
from conftest import compose_config

from bertology.pipelines import pretrain
from bertology.run.tracking import without_wall_clock
from bertology.training import precision

CPU = torch.device("cpu")
AUTO = SimpleNamespace(mixed_precision="auto")


def native(monkeypatch, flags=("fpu", "avx2", "amx_bf16")):
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset(flags))


class FakeTrial:
    """A run whose steps take the given seconds in each precision; counts the calls."""

    def __init__(self, seconds: dict[str, float], shape: dict | None = None, processes: int = 1):
        self.seconds, self.shape, self.calls = seconds, shape or {"model": "fake"}, []
        self.processes = processes  # of the run timed: more than one does not time

    def make_timer(self, device):
        def time_step(name: str) -> float:
            self.calls.append(name)
            return self.seconds[name]
        return time_step


class NeverTimed:
    shape = {"model": "fake"}
    processes = 1

    def make_timer(self, device):
        raise AssertionError("timed where it should not have")


def test_an_explicit_precision_is_kept_without_timing(tmp_path):
    for value in ("no", "bf16", "fp16"):
        choice = precision.choose(value, CPU, NeverTimed(), tmp_path)
        assert choice.precision == value and not choice.fp32_step_s


def test_a_cpu_without_native_bf16_gets_fp32_without_timing(monkeypatch, tmp_path):
    native(monkeypatch, flags=("fpu", "avx2", "avx512f"))  # AVX-512 but no bf16 instructions
    choice = precision.choose("auto", CPU, NeverTimed(), tmp_path)
    assert choice.precision == "no"
    assert "no native bf16" in choice.reason
    assert not (tmp_path / "precision").exists()  # nothing cached either


@pytest.mark.parametrize("fp32, bf16, expected", [
    (1.0, 0.5, "bf16"),  # bf16 faster
    (1.0, 1.7, "no"),  # bf16 slower
    (1.0, 0.97, "no"),  # within the noise: fp32
    (1.0, 0.94, "bf16"),  # just beyond it
])
def test_auto_keeps_the_faster_precision(monkeypatch, tmp_path, fp32, bf16, expected):
    native(monkeypatch)
    probe = FakeTrial({"no": fp32, "bf16": bf16})
    choice = precision.choose("auto", CPU, probe, tmp_path)
    assert choice.precision == expected
    assert choice.fp32_step_s == [fp32] * precision.REPEATS
    assert choice.bf16_step_s == [bf16] * precision.REPEATS
    # warm-up in each, then interleaved with the order alternating
    warm = ["no"] * precision.WARMUP + ["bf16"] * precision.WARMUP
    assert probe.calls[:len(warm)] == warm
    assert probe.calls[len(warm):len(warm) + 4] == ["no", "bf16", "bf16", "no"]


def test_the_decision_reads_medians_so_one_slow_step_does_not_decide():
    assert precision.decide([1.0, 1.0, 9.0], [0.8, 0.8, 0.8]) == "bf16"
    assert precision.decide([1.0, 1.0, 1.0], [0.5, 2.0, 2.0]) == "no"


def test_a_cached_answer_is_not_timed_again_and_the_cache_is_per_shape(monkeypatch, tmp_path):
    native(monkeypatch)
    first = precision.choose("auto", CPU, FakeTrial({"no": 1.0, "bf16": 0.5}), tmp_path)
    assert first.precision == "bf16" and not first.cached
    again = precision.choose("auto", CPU, NeverTimed(), tmp_path)  # same machine and shape
    assert again.precision == "bf16" and again.cached
    assert again.fp32_step_s == first.fp32_step_s
    other = FakeTrial({"no": 1.0, "bf16": 2.0}, shape={"model": "fake", "seq_length": 512})
    assert precision.choose("auto", CPU, other, tmp_path).precision == "no"
    assert other.calls  # a new shape is timed
    # another machine (other flags) does not read this machine's answer
    native(monkeypatch, flags=("amx_bf16", "avx512_bf16"))
    assert precision.choose("auto", CPU, FakeTrial({"no": 1.0, "bf16": 3.0}),
                            tmp_path).precision == "no"


def test_the_run_dir_records_both_timings_and_the_choice(monkeypatch, tmp_path, caplog):
    native(monkeypatch)
    probe = FakeTrial({"no": 0.2, "bf16": 0.1})
    with caplog.at_level(logging.INFO, logger="bertology.training.precision"):
        chosen = precision.resolve_precision(AUTO, probe, tmp_path, tmp_path / "cache")
    assert chosen == "bf16"
    record = json.loads((tmp_path / "precision.json").read_text())
    assert record["precision"] == "bf16" and record["requested"] == "auto"
    assert record["fp32_step_s"] == [0.2] * precision.REPEATS
    assert record["bf16_step_s"] == [0.1] * precision.REPEATS
    assert "fp32 0.2000 s/step, bf16 0.1000 s/step" in caplog.text


def test_a_resumed_auto_run_keeps_the_precision_it_began_in(monkeypatch, tmp_path):
    native(monkeypatch)
    precision.resolve_precision(AUTO, FakeTrial({"no": 0.2, "bf16": 0.1}), tmp_path,
                                tmp_path / "cache")
    (tmp_path / "checkpoints" / "step_250").mkdir(parents=True)
    # the machine now times fp32 faster (a fresh cache), yet the run continues in bf16
    assert precision.resolve_precision(AUTO, FakeTrial({"no": 0.1, "bf16": 0.2}), tmp_path,
                                       tmp_path / "fresh") == "bf16"


def test_a_gpu_without_bf16_gets_fp32(monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Old GPU")
    choice = precision.choose("auto", torch.device("cuda"), NeverTimed(), tmp_path)
    assert choice.precision == "no" and "does not support bf16" in choice.reason


def test_the_cpu_flags_come_from_proc_cpuinfo(monkeypatch, tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: fpu avx2 amx_bf16\n\n"
                    "processor\t: 1\nmodel name\t: Some CPU\nflags\t\t: fpu avx2 amx_bf16\n")
    monkeypatch.setattr(precision, "CPUINFO", info)
    assert precision.cpu_flags() == {"fpu", "avx2", "amx_bf16"}
    assert precision.cpu_model() == "Some CPU"
    assert precision.native_bf16(CPU)[0]
    monkeypatch.setattr(precision, "CPUINFO", tmp_path / "absent")  # off Linux
    assert precision.cpu_flags() == frozenset() and not precision.native_bf16(CPU)[0]


RUN = ["logger=none", "trainer=smoke", "trainer.max_steps=6", "trainer.log_every=3",
       "data.num_sentences=300", "data.eval_docs=10"]


@pytest.mark.slow
def test_timing_a_real_run_leaves_it_unchanged_and_is_cached(monkeypatch, tmp_path):
    """auto on a (pretended) native-bf16 CPU times real steps of the run's model on a copy:
    the run then trains exactly as one forced to the chosen precision, and the next run of
    that shape reads the cache instead of timing."""
    native(monkeypatch)
    cache = tmp_path / "cache"
    monkeypatch.setenv("BERTOLOGY_CACHE_DIR", str(cache))
    runs = {}
    for name, value in (("auto", "auto"), ("again", "auto")):
        (tmp_path / name).mkdir()
        runs[name] = pretrain.run(compose_config(
            "pretrain", [*RUN, f"trainer.mixed_precision={value}"]), tmp_path / name)
    timed = json.loads((tmp_path / "auto" / "precision.json").read_text())
    assert len(timed["fp32_step_s"]) == len(timed["bf16_step_s"]) == precision.REPEATS
    assert all(s > 0 for s in timed["fp32_step_s"] + timed["bf16_step_s"])
    assert timed["shape"]["objective"] == "mlm_nsp" and not timed["cached"]
    assert json.loads((tmp_path / "again" / "precision.json").read_text())["cached"]
    assert len(list((cache / "precision").glob("*.json"))) == 1
    (tmp_path / "forced").mkdir()
    forced = pretrain.run(compose_config(
        "pretrain", [*RUN, f"trainer.mixed_precision={timed['precision']}"]),
        tmp_path / "forced")
    assert without_wall_clock(runs["auto"]) == without_wall_clock(forced)
    assert without_wall_clock(runs["again"]) == without_wall_clock(forced)


def test_the_matmul_timer_reports_a_plausible_rate():
    rate = precision.matmul_flops_per_s((256, 256, 256), torch.float32, repeats=3)
    assert 1e8 < rate < 1e14


LOG_PREFIX = len("[2026-11-27 20:40:55,664][bertology.training.precision][INFO] - ")


def test_every_precision_line_fits_the_log_contract(monkeypatch, tmp_path):
    """Each branch of the choice, on a CPU with every native-bf16 flag and on a GPU with a long
    name, is one log line under the 200 characters of tests/reliability/test_logs.py; the
    method is in the record, not the line."""
    native(monkeypatch, flags=("amx_bf16", "avx512_bf16", "amx_tile"))
    deep = tmp_path / ("a-long-cache-directory-name" * 4)
    timed = precision.choose("auto", CPU, FakeTrial({"no": 0.0259, "bf16": 0.0477}), deep)
    cached = precision.choose("auto", CPU, NeverTimed(), deep)
    several = precision.choose("auto", CPU, FakeTrial({"no": 1, "bf16": 1}, {"other": 1}, 16),
                               tmp_path / "cold")
    untimed = precision.choose("auto", CPU, None, deep)
    assert timed.method and cached.cached and cached.cache_file == timed.cache_file
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name",
                        lambda device=None: "NVIDIA H100 80GB HBM3 with a long marketing name")
    gpu = precision.choose("auto", torch.device("cuda"), None, deep)
    lines = [precision.describe_choice(c) for c in (timed, cached, several, untimed, gpu)]
    assert "fp32 0.0259 s/step, bf16 0.0477 s/step" in lines[0] and "cached" in lines[1]
    for line in lines:
        assert LOG_PREFIX + len(line) < 200, line
        assert "interleaved" not in line and str(deep) not in line
