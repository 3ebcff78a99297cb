"""Compute accounting and budgets: the FLOP estimate against a measured count, the learning
rate schedule against HF's, and runs that stop at whichever budget ends first."""

from __future__ import annotations

import json
import logging
import sys

import pytest
import torch
from conftest import compose_config
from torch.utils.flop_counter import FlopCounterMode
from transformers import BertConfig, BertForMaskedLM, BertForPreTraining

from bertology.config.groups import ObjectiveConfig, TrainerConfig
from bertology.errors import Interrupted
from bertology.objectives import OBJECTIVES
from bertology.objectives.mlm import IGNORE
from bertology.pipelines import pretrain
from bertology.training.flops import masked_lm_flops
from bertology.training.loop import (
    BudgetBar,
    LoopState,
    budget_progress,
    compute_lr,
    resolve_budget,
)

SMOKE = ["logger=none", "trainer=smoke", "data.num_sentences=800", "data.eval_docs=20"]


def hand_batch(vocab: int, pairs: bool, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """4 sequences of 24 tokens (no padding: the count then has no padded work), 5 masked."""
    input_ids = torch.randint(5, vocab, (4, 24), generator=generator)
    labels = torch.full_like(input_ids, IGNORE)
    labels[:, 3:8] = input_ids[:, 3:8]
    batch = {"input_ids": input_ids, "labels": labels, "attention_mask": torch.ones_like(input_ids),
             "token_type_ids": torch.zeros_like(input_ids)}
    if pairs:
        batch["sentence_label"] = torch.tensor([0, 1, 0, 1])
    return batch


@pytest.mark.parametrize("objective,model_class", [("mlm", BertForMaskedLM),
                                                   ("mlm_nsp", BertForPreTraining)])
def test_flop_estimate_matches_counted_matmuls(synthetic_tokenizer, objective, model_class):
    config = BertConfig(vocab_size=len(synthetic_tokenizer), hidden_size=64, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=256)
    model = model_class._from_config(config, attn_implementation="eager")  # matmuls, countable
    build = OBJECTIVES[objective](ObjectiveConfig(name=objective), synthetic_tokenizer, "bert", 0)
    generator = torch.Generator().manual_seed(0)
    batch = hand_batch(len(synthetic_tokenizer), objective != "mlm", generator)
    with FlopCounterMode(display=False) as counter:
        loss, _ = build.loss(model, batch)
        loss.backward()
    measured = counter.get_total_flops()
    assert masked_lm_flops(model, batch) == pytest.approx(measured, rel=0.01)


def test_lr_schedule_equals_hf_linear_warmup_with_a_step_budget():
    from transformers import get_linear_schedule_with_warmup

    cfg = TrainerConfig(max_steps=50, warmup_steps=7, lr=1e-3)
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=cfg.lr)
    scheduler = get_linear_schedule_with_warmup(optimizer, cfg.warmup_steps, cfg.max_steps)
    state = LoopState()
    for step in range(cfg.max_steps):
        assert compute_lr(state, cfg) == pytest.approx(scheduler.get_last_lr()[0], abs=1e-12)
        optimizer.step()
        scheduler.step()
        state.step = step + 1
        if state.step == cfg.warmup_steps:
            state.warmup_progress = budget_progress(state, cfg)


def test_a_warmup_ratio_warms_pretraining_up_over_that_share_of_its_flops_budget():
    """Pretraining's budget may be FLOPs: trainer.warmup_ratio=0.1 warms up while the first
    10% of it is spent, whatever the step count (it was silently ignored there, leaving the
    100-step default), peaks there, and decays to zero at the end."""
    cfg = TrainerConfig(max_steps=100_000, max_flops=1e9, warmup_ratio=0.1, lr=1e-3)
    for step, flops, lr in [(0, 0.0, 0.0), (150, 5e7, 5e-4), (300, 1e8, 1e-3),
                            (1_600, 5.5e8, 5e-4), (3_000, 1e9, 0.0)]:
        assert compute_lr(LoopState(step=step, flops=flops), cfg) == pytest.approx(lr), step


def test_fine_tuning_turns_the_warmup_ratio_into_steps():
    cfg = resolve_budget(TrainerConfig(max_steps=1_000, epochs=2, warmup_ratio=0.1,
                                       batch_size=32, lr=1e-3), num_examples=4_000)
    assert (cfg.max_steps, cfg.warmup_steps, cfg.warmup_ratio) == (250, 25, 0.0)
    assert compute_lr(LoopState(step=5), cfg) == pytest.approx(2e-4)


def test_progress_is_the_largest_share_of_any_budget():
    cfg = TrainerConfig(max_steps=100, max_flops=1e9, max_time_s=10.0)
    assert budget_progress(LoopState(step=10, flops=5e8, train_seconds=1.0), cfg) == 0.5
    assert budget_progress(LoopState(step=10, flops=1e8, train_seconds=7.0), cfg) == 0.7
    assert budget_progress(LoopState(step=100, flops=0, train_seconds=0), cfg) == 1.0


def test_the_progress_bar_counts_the_budget_that_ends_the_run(capsys, monkeypatch):
    """A FLOPs budget ends the run long before max_steps: the bar shows the percent spent (a
    resumed run starts where it stopped), and steps where steps are the only budget. (The bar
    is drawn only at a terminal: stderr says it is one here.)"""
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    cfg = TrainerConfig(max_steps=100_000, max_flops=1e9)
    bar = BudgetBar(LoopState(step=3, flops=2.5e8), cfg, "pretrain", enabled=True)
    assert (bar.bar.total, bar.bar.n) == (100.0, 25.0)
    bar.update(LoopState(step=4, flops=1e9))
    bar.close()
    assert bar.bar.n == 100.0 and "100.0/100% of the budget" in capsys.readouterr().err
    steps = BudgetBar(LoopState(step=3), TrainerConfig(max_steps=50), "pretrain", enabled=True)
    steps.update(LoopState(step=4))
    steps.close()
    assert (steps.bar.total, steps.bar.n) == (50, 4) and "4/50" in capsys.readouterr().err


def test_log_lines_at_a_terminal_clear_the_bar_and_it_closes_before_an_interruption(
        capsys, monkeypatch):
    """At a terminal a console log line (the step line, the Ctrl-C warning) goes through
    tqdm.write: it starts on a cleared line, never after the bar's text; leaving the context
    (an Interrupted raised inside it) closes the bar first, ending its line."""
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    console = logging.StreamHandler(sys.stderr)
    logging.getLogger().addHandler(console)
    try:
        with pytest.raises(Interrupted), BudgetBar(LoopState(), TrainerConfig(max_steps=50),
                                                   "pretrain", enabled=True) as bar:
            bar.update(LoopState(step=1))
            logging.getLogger("bertology.training.loop").warning("step 1/50  loss 7.1")
            raise Interrupted("stopped by Ctrl-C")
    finally:
        logging.getLogger().removeHandler(console)
    err = capsys.readouterr().err
    before = err[:err.index("step 1/50")]
    assert before.endswith("\r") or before.endswith("\n"), repr(before[-40:])
    assert bar.bar.disable and err.endswith("\n")  # closed, its line ended


def _run(tmp_path, overrides):
    metrics = pretrain.run(compose_config("pretrain", SMOKE + overrides), tmp_path)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    return metrics, [r for r in rows if "train/lr" in r]


@pytest.mark.slow
def test_flop_budget_stops_the_run_and_the_lr_reaches_zero(tmp_path):
    metrics, rows = _run(tmp_path, ["trainer.max_steps=1000", "trainer.max_flops=1e11",
                                    "trainer.log_every=1"])
    steps = metrics["train/steps"]
    assert 10 < steps < 1000
    per_step = metrics["train/flops"] / steps
    assert 1e11 <= metrics["train/flops"] < 1e11 + 2 * per_step
    flops = [r["train/flops"] for r in rows]
    assert flops == sorted(flops) and flops[-2] < 1e11  # it stopped at the first step past it
    decay = [r["train/lr"] for r in rows if r["step"] > 2]
    assert decay == sorted(decay, reverse=True) and decay[-1] < 0.15 * max(decay)


@pytest.mark.slow
def test_time_budget_stops_the_run(tmp_path):
    metrics, _ = _run(tmp_path, ["trainer.max_steps=100000", "trainer.max_time_s=3"])
    assert metrics["train/steps"] < 100000
    assert (tmp_path / "model" / "model.safetensors").exists()
