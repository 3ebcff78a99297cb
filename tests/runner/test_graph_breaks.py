"""A step ready for a GPU: the model + loss compiles to one graph, with no graph break (each
break is a host synchronisation or a shape only the device knows), for BERT, RoBERTa,
SpanBERT, ELECTRA and ModernBERT at a tiny size on the CPU; and the MLM head's static count of
masked positions (objectives/mlm.py, as Cramming's sparse prediction) leaves the loss as it was
with the exact, dynamic set of masked positions. The loop's side: the finite check and the
window's sums stay on the device until a log step or checkpoint reads them (training/loop.py)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from bertology.config.groups import ModelConfig, ObjectiveConfig, SizeConfig
from bertology.data.formats import Specials
from bertology.errors import RunFailed
from bertology.models.build import build_model
from bertology.objectives import OBJECTIVES, mlm
from bertology.training import loop
from bertology.training.loop import Health, LoopState
from bertology.training.objective import Objective

SEED = 0
TINY = SizeConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                  intermediate_size=128)
# family -> its pretraining objective (conf/model/*.yaml defaults)
VARIANTS = {"bert": "mlm_nsp", "roberta": "mlm", "spanbert": "span_sbo", "electra": "electra",
            "modernbert": "mlm"}


def examples(tokenizer, lengths: list[int]) -> list[dict]:
    """[CLS] words [SEP] examples of the given lengths, every token a word start."""
    specials = Specials.of(tokenizer)
    rng = np.random.default_rng(SEED)
    pool = np.setdiff1d(np.arange(len(tokenizer)), sorted(specials.all))
    out = []
    for index, length in enumerate(lengths):
        ids = np.concatenate([[tokenizer.cls_token_id], rng.choice(pool, length - 2),
                              [tokenizer.sep_token_id]]).astype(np.int64)
        out.append({"id": index, "input_ids": ids, "word_starts": np.ones(length, bool),
                    "token_type_ids": np.zeros(length, np.int64), "mask_key": (index, 0),
                    "sentence_label": index % 2})
    return out


def setup(tokenizer, family: str) -> tuple[torch.nn.Module, Objective, dict]:
    name = VARIANTS[family]
    objective = OBJECTIVES[name](ObjectiveConfig(name=name), tokenizer, family, SEED)
    model = build_model(ModelConfig(family=family, hidden_dropout_prob=0.0,
                                    attention_probs_dropout_prob=0.0),
                        TINY, tokenizer, name in ("mlm_nsp", "mlm_sop"), SEED)
    batch = objective.collate(examples(tokenizer, [24, 17, 24, 9]))  # padded rows too
    return model.train(), objective, batch


@pytest.mark.slow  # ~30-40 s each on 2 loaded cores: dynamo and AOTAutograd tracing
@pytest.mark.parametrize("family", sorted(VARIANTS))
def test_model_and_loss_compile_without_a_graph_break(synthetic_tokenizer, family):
    model, objective, batch = setup(synthetic_tokenizer, family)
    torch._dynamo.reset()

    def step(batch):
        return objective.loss(model, batch)[0]

    explained = torch._dynamo.explain(step)(batch)
    reasons = [f"{b.reason} at {b.user_stack[-1] if b.user_stack else '?'}"
               for b in explained.break_reasons]
    assert explained.graph_break_count == 0, "\n".join(reasons)
    # one graph forward, so AOTAutograd's backward is one graph too: run both
    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    loss = compiled(batch)
    loss.backward()
    assert torch.isfinite(loss)
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


@pytest.mark.parametrize("family", ["bert", "roberta", "electra"])
def test_the_static_count_leaves_the_loss_as_with_every_masked_position(synthetic_tokenizer,
                                                                       family):
    model, objective, batch = setup(synthetic_tokenizer, family)
    width = batch["mlm_positions"].shape[1]
    assert batch["mlm_positions"].numel() > int((batch["labels"] != mlm.IGNORE).sum())  # spares
    assert width == max(1, round(batch["labels"].shape[1] * 0.15))
    exact = {k: v for k, v in batch.items() if k != "mlm_positions"}  # the dynamic path
    for mode in (model.train, model.eval):
        mode()
        torch.manual_seed(1)  # ELECTRA samples: the same draws for the masked slots
        static_loss, static_logs = objective.loss(model, batch)
        torch.manual_seed(1)
        dynamic_loss, dynamic_logs = objective.loss(model, exact)
        if family != "electra":  # ELECTRA's spare slots also draw samples, shifting the rest
            assert float(static_loss.detach()) == pytest.approx(float(dynamic_loss.detach()),
                                                                abs=1e-6)
        for key in ("mlm_loss", "gen_loss"):
            if key in static_logs:
                assert float(static_logs[key]) == pytest.approx(float(dynamic_logs[key]),
                                                                abs=1e-6)
        if mode == model.eval:
            for key, value in dynamic_logs.items():
                if key.startswith(("mlm_", "seq_mlm", "gen_", "seq_gen")):
                    assert torch.allclose(static_logs[key].float(), value.float(),
                                          atol=1e-6), key


def test_positions_list_every_masked_token_in_order_with_spare_slots():
    labels = np.array([[-100, 7, -100, 9], [-100, -100, -100, -100], [5, -100, -100, -100]])
    assert mlm.list_positions(labels, 2).tolist() == [[1, 3], [-1, -1], [0, -1]]
    with pytest.raises(RuntimeError, match="3 masked tokens"):
        mlm.list_positions(np.array([[1, 2, 3, -100]]), 2)
    flat, targets = mlm.masked_slots({"labels": torch.from_numpy(labels),
                                      "mlm_positions": torch.tensor([[1, 3], [-1, -1],
                                                                     [0, -1]])})
    assert flat.tolist() == [1, 3, 4, 4, 8, 8] and targets.tolist() == [7, 9, -100, -100, 5,
                                                                        -100]


# ------------------------------------------------------------ no host sync in the step


def test_health_keeps_the_first_non_finite_step_until_it_is_read():
    health = Health()
    health.check()  # nothing recorded: fine
    health.record(1, torch.tensor(2.5), torch.tensor(1.0), scaled=False)
    health.check()
    health.record(2, torch.tensor(3.0), torch.tensor(float("inf")), scaled=False)
    health.record(3, torch.tensor(float("nan")), torch.tensor(float("nan")), scaled=False)
    with pytest.raises(RunFailed, match=r"\(3, gradient norm inf\) at step 2;"):
        health.check()
    scaled = Health()  # fp16: an inf gradient is the scaler's business, the loss is not
    scaled.record(1, torch.tensor(3.0), torch.tensor(float("inf")), scaled=True)
    scaled.check()
    scaled.record(2, torch.tensor(float("inf")), torch.tensor(1.0), scaled=True)
    with pytest.raises(RunFailed, match="at step 2"):
        scaled.check()


def test_a_checkpoint_after_a_non_finite_step_is_not_written(tmp_path):
    state = LoopState(step=4)
    state.health.record(4, torch.tensor(float("nan")), torch.tensor(1.0), scaled=False)
    with pytest.raises(RunFailed, match="at step 4"):
        # a loop that would write (rank 0, one process) into tmp_path, had the check passed
        loop.Loop.save(SimpleNamespace(
            state=state, optimizer=None,
            accelerator=SimpleNamespace(num_processes=1, is_main_process=True),
            job=SimpleNamespace(model=None, trainer=SimpleNamespace(keep_checkpoints=2),
                                output=SimpleNamespace(out_dir=tmp_path, export=None))))
    assert not (tmp_path / "checkpoints").exists()


def test_the_window_sums_on_the_device_as_the_floats_it_replaced():
    state = LoopState(window={"loss": 0.5})  # a window restored from a checkpoint: floats
    values = [torch.tensor(v, dtype=torch.float32) for v in (1.1, 2.3, 0.7)]
    for value in values:
        loop._accumulate(state, {"loss": value, "mlm_correct": torch.tensor(3)}, 2)
    expected = 0.5
    for value in values:
        expected += float(value) / 2
    assert set(state.window) == {"loss"} and isinstance(state.window["loss"], torch.Tensor)
    assert state.saved()["window"] == {"loss": expected}
