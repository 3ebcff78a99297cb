"""Every training checkpoint is also a model dir (config.json and the tokenizer beside the
weights): plain transformers loads any step, it is what model/ would have been at that step,
and `bertology probe -m model.name_or_path=<run>/checkpoints/step_A,...` probes across
pretraining."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import compose_config, run_cli, write_vocab
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


def tiny_bert_dir(path: Path) -> Path:
    """A 1-layer BertModel saved as a model dir, with a bare vocab.txt (only weights are
    loaded here)."""
    from transformers import BertConfig, BertModel

    config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=32)
    BertModel(config).save_pretrained(path)
    return write_vocab(path, 50)


def test_a_checkpoint_whose_weights_are_named_otherwise_is_refused_not_random(tmp_path):
    """Issue 41: transformers initialises every weight it does not find at random and only
    logs it, so a checkpoint saved under another prefix ran to the end on a random encoder.
    Now: one UserError naming the file, how many of the encoder's weights are missing, and
    the names the checkpoint does hold."""
    from safetensors.torch import save_file
    from transformers import AutoModel

    from bertology.errors import UserError
    from bertology.models.weights import load_safetensors_model

    path = tiny_bert_dir(tmp_path / "model")
    tensors = load_file(path / "model.safetensors")
    save_file({f"wrapper.{k}": v for k, v in tensors.items()}, path / "model.safetensors",
              metadata={"format": "pt"})
    with pytest.raises(UserError) as err:
        load_safetensors_model(AutoModel, path)
    message = str(err.value)
    assert "\n" not in message and str(path) in message and "would be random" in message
    assert "'wrapper.embeddings" in message


def test_a_missing_task_head_or_pooler_loads_and_is_said_in_one_line(tmp_path, caplog):
    """A classifier head missing is what fine-tuning starts from; a pooler missing (a
    masked-LM checkpoint has none) touches no analysis: both load."""
    from safetensors.torch import save_file
    from transformers import AutoModel, AutoModelForSequenceClassification

    from bertology.models.weights import load_safetensors_model

    path = tiny_bert_dir(tmp_path / "model")
    tensors = load_file(path / "model.safetensors")
    save_file({k: v for k, v in tensors.items() if not k.startswith("pooler.")},
              path / "model.safetensors", metadata={"format": "pt"})
    encoder = load_safetensors_model(AutoModel, path)
    assert torch.equal(encoder.embeddings.word_embeddings.weight,
                       tensors["embeddings.word_embeddings.weight"])
    with caplog.at_level("INFO", logger="bertology.models.weights"):
        load_safetensors_model(AutoModelForSequenceClassification, path)
    assert "newly initialised (not in the checkpoint): classifier, pooler" in caplog.text


def test_weights_and_config_json_from_different_models_are_refused_from_the_header(tmp_path):
    """Issue 41: a config.json copied beside another model's weights. The safetensors header's
    embedding shape against config.json's vocab_size × hidden_size, before any model is built."""
    from bertology.config.path_checks import read_checkpoint
    from bertology.errors import UserError

    path = tiny_bert_dir(tmp_path / "model")
    assert read_checkpoint(str(path), "model.name_or_path")["vocab_size"] == 50
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "vocab_size": 30522}))
    with pytest.raises(UserError, match=r"word embeddings of shape \[50, 16\].*\[30522, 16\]"):
        read_checkpoint(str(path), "model.name_or_path")


def test_a_tokenizer_larger_than_the_embeddings_is_refused(tmp_path):
    """A vocab.txt from a larger vocabulary would index past the embedding matrix mid-run."""
    from bertology.config.path_checks import read_checkpoint
    from bertology.errors import UserError

    path = tiny_bert_dir(tmp_path / "model")
    (path / "vocab.txt").write_text("".join(f"tok{i}\n" for i in range(50)))
    read_checkpoint(str(path), "model.name_or_path")  # 50 tokens, 50 rows: fine
    (path / "vocab.txt").write_text("".join(f"tok{i}\n" for i in range(51)))
    with pytest.raises(UserError, match="has 51 tokens but the model's embeddings have 50 rows"):
        read_checkpoint(str(path), "model.name_or_path")


def test_a_damaged_cached_default_pretrain_is_pretrained_again_not_served(tmp_path):
    """The probe's cached default pretrain (<cache>/pretrained/<key>/, reused while finished):
    an intact model/ stays; one whose weights were cut short is removed (the probe then
    pretrains it again), with a warning and a count in the run's metrics."""
    from damage_worlds import copy_checkpoint

    from bertology.pipelines.probe import drop_damaged_pretrain
    from bertology.run.cache_notes import take_recomputed

    take_recomputed()
    run = tmp_path / "pretrained" / "key"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text("seed: 0\n")
    (run / "metrics.json").write_text("{}")
    copy_checkpoint(tmp_path).rename(run / "model")
    drop_damaged_pretrain(run)
    assert (run / "model").is_dir() and take_recomputed() == {}
    weights = run / "model" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    drop_damaged_pretrain(run)
    assert not run.exists()
    assert take_recomputed() == {"cache/recomputed/pretrained_model": 1.0}


def test_weights_copied_without_their_tokenizer_are_refused_before_any_work(tmp_path):
    """config.json and model.safetensors of all-MiniLM-L6-v2 copied alone (as people copy
    weights): the probe once ran to the end on a tokenizer that was not the model's (POS at
    0.31-0.44 against 0.9); now one line naming the folder, exit 2, no run dir."""
    import shutil

    from bertology.config.path_checks import resolve_checkpoint

    source = Path(resolve_checkpoint("sentence-transformers/all-MiniLM-L6-v2"))
    bare = tmp_path / "weights"
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(source / name, bare / name)
    done = run_cli("probe", f"model.name_or_path={bare}", "logger=none", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == (f"bertology probe: error: model.name_or_path: {bare} has no "
                                   "tokenizer (no tokenizer.json, tokenizer_config.json or "
                                   "vocab.txt); copy the tokenizer files saved with these "
                                   "weights beside them")
    assert not (tmp_path / "outputs").exists()


@pytest.mark.skipif(not Path("/sys").is_dir(), reason="needs a /sys, where no folder can be made")
def test_a_run_dir_where_nothing_can_be_made_is_refused_in_one_line(tmp_path):
    """hydra.run.dir under a folder access() calls writable but where mkdir fails (as root,
    /sys): one line naming the folder, exit 2, not Hydra's traceback with exit 1."""
    done = run_cli("pretrain", "hydra.run.dir=/sys/bertology-run", "logger=none", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().startswith("bertology pretrain: error: hydra.run.dir: nothing "
                                          "can be made in /sys (")
    assert len(done.stderr.strip().splitlines()) == 1
