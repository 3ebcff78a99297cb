"""Logs for people and for clusters (issue 30): plain step lines in the log every log_every
steps, no progress bar (and so no carriage return) when stderr is not a terminal, the run dir
at the start, the final metrics as a short aligned table."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bertology.cli.entry import format_summary
from bertology.config.groups import TrainerConfig
from bertology.training.loop import LoopState, format_duration, format_step_line

STEP_LINE = re.compile(r"step (\d+)/(\d+)  loss \d+\.\d{4}  lr \S+  [\d,]+ tok/s  "
                       r"ETA (\d+:\d\d:\d\d|\?)")


def test_the_step_line_reads_step_loss_lr_rate_and_time_left():
    # 250 of 1000 steps in 50 s of training: 750 steps left at 0.2 s a step is 150 s.
    state = LoopState(step=250, train_seconds=50.0)
    cfg = TrainerConfig(max_steps=1000)
    line = format_step_line(state, cfg, {"train/loss": 2.34567, "train/lr": 1e-4,
                                         "train/tokens_per_s": 12345.6})
    assert line == "step 250/1000  loss 2.3457  lr 0.0001  12,346 tok/s  ETA 0:02:30"


def test_a_flops_budget_says_how_much_of_it_is_spent():
    # 3e9 of 1.2e10 FLOPs (25%) in 10 s: 30 s left, whatever max_steps says.
    state = LoopState(step=7, train_seconds=10.0, flops=3e9)
    cfg = TrainerConfig(max_steps=10_000, max_flops=1.2e10)
    line = format_step_line(state, cfg, {"train/loss": 1.0, "train/lr": 0.5,
                                         "train/tokens_per_s": 10.0})
    assert line.startswith("step 7 (25% of the budget)") and line.endswith("ETA 0:00:30")


def test_durations_are_hours_minutes_seconds():
    assert format_duration(3723.4) == "1:02:03"
    assert format_duration(0.4) == "0:00:00"
    assert format_duration(float("nan")) == "?"


def test_the_summary_is_an_aligned_table_results_first():
    metrics = {"train/epoch": 4.0, "train/loss": 4.98, "eval/mlm_accuracy": 0.095,
               "train/tokens_per_s": 2932.0, "probe/layer_02/accuracy": 0.5}
    lines = format_summary(metrics).splitlines()
    names = [line.split()[0] for line in lines]
    assert names == ["eval/mlm_accuracy", "probe/layer_02/accuracy", "train/loss",
                     "train/tokens_per_s", "train/epoch"]
    assert len({len(line) for line in lines}) == 1  # values right-aligned in one column
    many = format_summary({f"eval/m{i:02d}": float(i) for i in range(30)}).splitlines()
    assert len(many) == 17 and many[-1].strip() == "... 14 more in metrics.json"


LOG_LINE_LIMIT = 200  # the log contract: a line a cluster's log viewer shows whole

# `python -m bertology` as on a CPU with the given flags, whose whole training steps take the
# given seconds in each precision: the CPU flags and the step timer are faked, so both branches
# of `auto` run (and are logged) on any machine.
FAKED_CPU = """
import sys
from bertology.training import precision
flags, fp32_s, bf16_s = sys.argv[1].split(), float(sys.argv[2]), float(sys.argv[3])
precision.cpu_flags = lambda: frozenset(flags)
precision.TimingTrial.make_timer = lambda trial, device: {"no": fp32_s, "bf16": bf16_s}.get
from bertology.cli.entry import main
sys.exit(main(sys.argv[4:]))
"""

CPUS = {  # name: (flags, fp32 s/step, bf16 s/step, the precision auto must choose)
    "no native bf16": ("fpu sse avx2", 0.0259, 0.0477, "fp32"),
    "amx, fp32 faster": ("fpu avx2 avx512_bf16 amx_bf16 amx_tile", 0.0259, 0.0477, "fp32"),
    "amx, bf16 faster": ("fpu avx2 avx512_bf16 amx_bf16 amx_tile", 0.0477, 0.0259, "bf16"),
}


@pytest.mark.parametrize("cpu", [  # make test keeps the native-bf16 branch: every machine
    pytest.param(cpu, marks=() if cpu == "amx, fp32 faster" else pytest.mark.slow) for cpu in CPUS])
def test_pretrain_without_a_terminal_writes_plain_step_lines_and_no_carriage_return(
        tmp_path, cpu):
    """A real `python -m bertology pretrain` as under SLURM or nohup: stdout and stderr
    redirected to files, not a terminal; on a CPU with and without native bf16."""
    flags, fp32_s, bf16_s, chosen = CPUS[cpu]
    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1",
           "BERTOLOGY_CACHE_DIR": str(tmp_path / "cache")}  # time afresh: no cached answer
    for name in ("TQDM_DISABLE", "HF_HUB_DISABLE_PROGRESS_BARS"):  # the CLI's own choice
        env.pop(name, None)
    out, err = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    with out.open("w") as stdout, err.open("w") as stderr:
        status = subprocess.run(
            [sys.executable, "-c", FAKED_CPU, flags, str(fp32_s), str(bf16_s),
             "pretrain", "logger=none", "trainer=smoke",
             "trainer.max_steps=12", "trainer.log_every=3", "trainer.eval_every=6",
             "data.num_sentences=300", "data.eval_docs=5", f"hydra.run.dir={run_dir}"],
            cwd=tmp_path, env=env, stdout=stdout, stderr=stderr, timeout=300).returncode
    assert status == 0, err.read_text()
    log = (run_dir / "pretrain.log").read_text()
    for text in (log, out.read_text(), err.read_text()):
        assert "\r" not in text
    steps = [int(m.group(1)) for m in STEP_LINE.finditer(log)]
    assert steps == [3, 6, 9, 12], log
    assert log.splitlines()[0].endswith(f"run dir: {run_dir}")  # said first, not only at the end
    table = log[log.index("finished: "):].splitlines()[1:]
    assert any(line.split()[0] == "eval/mlm_accuracy" for line in table)
    longest = max(log.splitlines(), key=len)
    assert len(longest) < LOG_LINE_LIMIT, longest
    assert str(Path(run_dir)) in out.read_text()
    line = next(line for line in log.splitlines() if "mixed precision auto: " in line)
    assert f"mixed precision auto: {chosen}" in line
    timed = "native" not in cpu
    assert (f"fp32 {fp32_s:.4f} s/step, bf16 {bf16_s:.4f} s/step" in line) == timed, line
    record = json.loads((run_dir / "precision.json").read_text())
    assert record["precision"] == {"fp32": "no", "bf16": "bf16"}[chosen]
    assert bool(record["method"]) == timed  # how it timed: in the record, not the line


class Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.mark.slow  # loads MiniLM: make test stays under 3 minutes
def test_library_load_reports_carry_no_escape_codes_off_a_terminal():
    """Issue 42: transformers v5 bolds its LOAD REPORT title with ANSI codes whatever the
    stream, so a log file or a pipe showed `[1m…[0m`. Off a terminal the CLI strips them
    from the loggers that print it (a real from_pretrained with a missing head)."""
    from transformers import AutoModelForSequenceClassification

    from bertology.cli import entry
    from bertology.config.path_checks import resolve_checkpoint

    entry.plain_library_logs()
    logger, collect = logging.getLogger("transformers.modeling_utils"), Collect()
    logger.addHandler(collect)  # transformers' loggers do not propagate to caplog's root
    try:
        AutoModelForSequenceClassification.from_pretrained(
            resolve_checkpoint("sentence-transformers/all-MiniLM-L6-v2"), use_safetensors=True,
            num_labels=2)
    finally:
        logger.removeHandler(collect)
    reports = [m for m in collect.messages if "LOAD REPORT" in m]
    assert reports and not any("\x1b" in message for message in reports)
