"""Every training checkpoint is also a model dir (config.json and the tokenizer beside the
weights): plain transformers loads any step, it is what model/ would have been at that step,
and `bertology probe -m model.name_or_path=<run>/checkpoints/step_A,...` probes across
pretraining."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import compose_config, run_cli
from omegaconf import OmegaConf
from safetensors.torch import load_file, load_model
from transformers import (
    AutoModelForMaskedLM,
    AutoModelForPreTraining,
    AutoModelForSequenceClassification,
    AutoTokenizer,
)

from bertology.pipelines import distill, finetune, pretrain
from bertology.training.checkpoint import CHECKSUMS, WEIGHTS, find_damage, list_checkpoints

# 12 steps, a checkpoint every 6 (trainer=smoke)
SMOKE = ["logger=none", "trainer=smoke", "data.num_sentences=400", "data.eval_docs=10"]
SENTENCES = (["The chef cooks the soup.", "A farmer sings."],
             ["The soup is hot.", "The cows sleep."])


def run_pretrain(out: Path, overrides: list[str]) -> Path:
    pretrain.run(compose_config("pretrain", SMOKE + overrides), out)
    return out


@pytest.fixture(scope="module")
def bert_run(tmp_path_factory) -> Path:
    return run_pretrain(tmp_path_factory.mktemp("bert"), [])


def logits(path: Path, model=None) -> torch.Tensor:
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = model or AutoModelForPreTraining.from_pretrained(path)
    with torch.no_grad():
        return model.eval()(**tokenizer(*SENTENCES, return_tensors="pt",
                                        padding=True)).prediction_logits


def test_each_checkpoint_loads_in_plain_transformers_as_the_model_of_its_step(bert_run):
    steps = list_checkpoints(bert_run / "checkpoints")
    assert [p.name for p in steps] == ["step_00000006", "step_00000012"]
    by_step = {}
    for step in steps:
        model = AutoModelForPreTraining.from_pretrained(step)
        assert type(model).__name__ == "BertForPreTraining"
        by_step[step.name] = logits(step, model)
        # the export is the trained weights of that step (resume's copy), not another step's
        trained = AutoModelForPreTraining.from_config(model.config)
        load_model(trained, str(step / WEIGHTS))
        assert torch.equal(by_step[step.name], logits(step, trained))
        assert find_damage(step) is None
        assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(
            json.loads((step / CHECKSUMS).read_text()))
    assert torch.equal(by_step["step_00000012"], logits(bert_run / "model"))  # the last: model/
    assert not torch.allclose(by_step["step_00000006"], by_step["step_00000012"])


def test_a_damaged_export_is_found_by_its_checksum(bert_run, tmp_path):
    step = tmp_path / "step"
    step.mkdir()
    source = list_checkpoints(bert_run / "checkpoints")[-1]
    for file in source.iterdir():
        (step / file.name).write_bytes(file.read_bytes())
    (step / "config.json").write_text("{}")
    assert find_damage(step) == "config.json does not match its checksum"


def test_electra_checkpoints_hold_the_discriminator_as_model_dir_does(tmp_path):
    """ELECTRA's loadable model is its discriminator (model/); the generator lives only in
    the training weights resume reads (and in generator/ at the end)."""
    out = run_pretrain(tmp_path, ["model=electra", "trainer.max_steps=4", "trainer.save_every=2"])
    last = list_checkpoints(out / "checkpoints")[-1]
    model = AutoModelForPreTraining.from_pretrained(last)
    assert type(model).__name__ == "ElectraForPreTraining"
    assert (last / "model.safetensors").read_bytes() == \
        (out / "model" / "model.safetensors").read_bytes()
    assert json.loads((last / "config.json").read_text()) == \
        json.loads((out / "model" / "config.json").read_text())
    assert not [k for k in load_file(last / "model.safetensors") if "generator" in k]
    assert any(k.startswith("generator.") for k in load_file(last / WEIGHTS))


def test_spanbert_checkpoints_hold_the_sbo_head_beside_a_plain_masked_lm(tmp_path):
    out = run_pretrain(tmp_path, ["model=spanbert", "trainer.max_steps=4",
                                  "trainer.save_every=2"])
    last = list_checkpoints(out / "checkpoints")[-1]
    assert type(AutoModelForMaskedLM.from_pretrained(last)).__name__ == "BertForMaskedLM"
    for name in ("model.safetensors", "sbo_head.safetensors", "sbo_head.json"):
        assert (last / name).read_bytes() == (out / "model" / name).read_bytes(), name
    assert not [k for k in load_file(last / "model.safetensors") if "sbo" in k]


NEGATION = ["logger=none", "task=synthetic_negation", "task.num_sentences=600",
            "trainer=finetune_tiny", "trainer.save_every=10"]


def assert_last_checkpoint_is_model_dir(checkpoints: Path, model_dir: Path) -> None:
    steps = list_checkpoints(checkpoints)
    assert steps, checkpoints
    for step in steps:
        model = AutoModelForSequenceClassification.from_pretrained(step)
        assert type(model).__name__ == "BertForSequenceClassification"
        assert AutoTokenizer.from_pretrained(step).vocab == \
            AutoTokenizer.from_pretrained(model_dir).vocab
    assert (steps[-1] / "model.safetensors").read_bytes() == \
        (model_dir / "model.safetensors").read_bytes()


def test_finetune_and_distill_checkpoints_load_as_task_models(tmp_path):
    finetune.run(compose_config("finetune", NEGATION), tmp_path / "finetune")  # one seed
    assert_last_checkpoint_is_model_dir(tmp_path / "finetune" / "checkpoints",
                                        tmp_path / "finetune" / "model")
    distill.run(compose_config("distill", [
        *NEGATION, f"teacher.name_or_path={tmp_path / 'finetune' / 'model'}"]),
        tmp_path / "distill")
    assert_last_checkpoint_is_model_dir(tmp_path / "distill" / "checkpoints",
                                        tmp_path / "distill" / "model")


@pytest.mark.slow
def test_a_probe_sweep_over_a_runs_checkpoints_runs_through_the_cli(bert_run, tmp_path):
    """Probing across pretraining: one probe job per checkpoint and the final model/."""
    models = [*map(str, list_checkpoints(bert_run / "checkpoints")), str(bert_run / "model")]
    done = run_cli("probe", "-m", f"model.name_or_path={','.join(models)}", "logger=none",
                   "seeds=[0]", "max_train_sentences=100", "max_eval_sentences=50",
                   "analysis.linear.max_iter=50", f"hydra.sweep.dir={tmp_path / 'sweep'}",
                   cwd=tmp_path, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    for job, model in enumerate(models):
        run = tmp_path / "sweep" / str(job)
        assert OmegaConf.load(run / ".hydra" / "config.yaml").model.name_or_path == model
        metrics = json.loads((run / "metrics.json").read_text())
        assert 0 <= metrics["probe/layer_02/accuracy"] <= 1
