"""`bertology convert DIR`: a checkpoint with only pytorch_model.bin gets a model.safetensors
that plain transformers loads to the same weights (tied ones included) and every pipeline
reads; a .bin-only checkpoint given to a pipeline is refused with the command to run; a bad
folder or a .bin that is no state dict is one line, exit 2."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import transformers
from conftest import compose_config, tiny_tokenizer

from bertology.cli import entry as cli
from bertology.cli.completion import query
from bertology.cli.help import format_usage
from bertology.config.verbs import command_names


def bin_checkpoint(folder: Path) -> tuple[Path, dict[str, torch.Tensor]]:
    """A tiny BERT with its MLM head saved the pre-safetensors way: config.json, tokenizer
    and torch.save(state_dict) as pytorch_model.bin (the decoder shares the embeddings)."""
    tokenizer = tiny_tokenizer()
    config = transformers.BertConfig(vocab_size=len(tokenizer), hidden_size=32,
                                     num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.BertForMaskedLM(config)
    folder.mkdir()
    config.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    state = model.state_dict()
    torch.save(state, folder / "pytorch_model.bin")
    return folder, {name: tensor.clone() for name, tensor in state.items()}


def run_cli(args: list[str], capsys) -> tuple[int, str, str]:
    try:
        status = cli.main(args)
    except SystemExit as stop:
        status = stop.code if isinstance(stop.code, int) else 1
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_convert_writes_safetensors_that_transformers_loads_to_the_same_weights(tmp_path,
                                                                                capsys):
    folder, state = bin_checkpoint(tmp_path / "bin")
    before = (folder / "pytorch_model.bin").read_bytes()
    status, out, err = run_cli(["convert", str(folder)], capsys)
    assert status == 0, err
    assert "2 shared or tied tensors stored as copies" in out  # decoder weight and bias
    assert sorted(p.name for p in folder.iterdir() if p.name.startswith(".")) == []  # no temp
    assert (folder / "pytorch_model.bin").read_bytes() == before
    loaded = transformers.AutoModelForMaskedLM.from_pretrained(folder, use_safetensors=True)
    weights = loaded.state_dict()
    assert set(weights) == set(state)
    assert all(torch.equal(weights[name], tensor) for name, tensor in state.items())
    encoder = transformers.AutoModel.from_pretrained(folder, use_safetensors=True).state_dict()
    assert all(torch.equal(encoder[name], state[f"bert.{name}"]) for name in encoder
               if f"bert.{name}" in state) and len(encoder) > 30


def test_a_bin_only_checkpoint_is_refused_with_the_command_then_finetunes_once_converted(
        tmp_path, capsys, monkeypatch, fresh_logging, one_thread):
    folder, _ = bin_checkpoint(tmp_path / "bin")
    monkeypatch.chdir(tmp_path)
    args = ["finetune", f"model.name_or_path={folder}", "task=synthetic_negation",
            "task.num_sentences=200", "trainer=smoke", "logger=none",
            f"hydra.run.dir={tmp_path / 'run'}"]
    status, _, err = run_cli(args, capsys)
    assert status == 2 and err.strip().count("\n") == 0
    assert f"only pytorch_model.bin (a pickle, never opened here); convert it once with " \
           f"`bertology convert {folder}`" in err
    assert not (tmp_path / "run").exists()
    assert run_cli(["convert", str(folder)], capsys)[0] == 0
    from bertology.pipelines import finetune

    metrics = finetune.run(compose_config("finetune", args[1:-1]), tmp_path / "run")
    assert metrics["train/steps"] == 12 and 0.0 <= metrics["eval/accuracy"] <= 1.0


def not_a_state_dict(folder: Path) -> None:
    folder.mkdir()
    torch.save({"step": 3, "model": {"w": torch.zeros(2)}}, folder / "pytorch_model.bin")


def garbage_bin(folder: Path) -> None:
    folder.mkdir()
    (folder / "pytorch_model.bin").write_bytes(os.urandom(512))


def converted_before(folder: Path) -> None:
    folder.mkdir()
    torch.save({"w": torch.zeros(2)}, folder / "pytorch_model.bin")
    (folder / "model.safetensors").write_bytes(b"")


@pytest.mark.parametrize("make, expected", [
    (None, "does not exist; give the checkpoint folder that holds pytorch_model.bin"),
    (lambda f: f.mkdir(), "has no pytorch_model.bin"),
    (not_a_state_dict, "'step' is not a tensor (int), so this is no model's state dict"),
    (garbage_bin, "not a plain state dict torch.load can read with weights_only=True"),
    (converted_before, "model.safetensors exists already; nothing to convert"),
], ids=["missing", "no-bin", "not-a-state-dict", "garbage", "converted-before"])
def test_a_bad_folder_is_one_line_exit_2(tmp_path, capsys, make, expected):
    folder = tmp_path / "checkpoint"
    if make is not None:
        make(folder)
    status, _, err = run_cli(["convert", str(folder)], capsys)
    assert status == 2, err
    assert err.startswith("bertology convert: error: ") and err.strip().count("\n") == 0
    assert expected in err
    assert not (folder / ".model.safetensors.tmp").exists()


def test_convert_takes_folders_or_hub_ids(capsys):
    assert run_cli(["convert"], capsys)[0] == 2
    assert run_cli(["convert", "--all"], capsys)[0] == 2
    status, _, err = run_cli(["convert", "a", "b"], capsys)  # two folders, neither there
    assert status == 2 and "a does not exist" in err
    status, out, _ = run_cli(["convert", "--help"], capsys)
    assert status == 0 and "usage: bertology convert DIR|ORG/NAME[@REVISION]" in out


def test_a_hub_commit_with_only_a_bin_is_refused_then_read_from_its_converted_copy(
        tmp_path, monkeypatch, capsys):
    """A cached hub commit that ships only pytorch_model.bin (as the MultiBERTs do): a run
    that names it is refused with `bertology convert <id>`; that writes a copy of the
    snapshot with model.safetensors into bertology's cache (same SHA, same files), which the
    run then reads, to the same weights; the hub cache is left as it was."""
    from hub_cache import cache_commit

    from bertology.config.groups import ModelConfig
    from bertology.config.hub_revisions import checkpoint_record, converted_snapshot
    from bertology.errors import UserError

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("BERTOLOGY_CACHE_DIR", str(tmp_path / "cache"))
    folder, state = bin_checkpoint(tmp_path / "pickled")
    sha = cache_commit(tmp_path / "hub", "google/multiberts-seed_9", folder, ["main"])
    with pytest.raises(UserError, match="ships only pytorch_model.bin .* convert it once: "
                       "bertology convert google/multiberts-seed_9$"):
        ModelConfig(name_or_path="google/multiberts-seed_9")
    status, out, err = run_cli(["convert", "google/multiberts-seed_9"], capsys)
    assert status == 0, err
    target = converted_snapshot("google/multiberts-seed_9", sha)
    assert str(target / "model.safetensors") in out and target.name == sha
    assert sorted(p.name for p in target.iterdir()) == sorted(
        [*(p.name for p in folder.iterdir() if p.name != "pytorch_model.bin"),
         "model.safetensors"])
    model = ModelConfig(name_or_path="google/multiberts-seed_9")
    assert model.name_or_path == str(target)
    assert checkpoint_record(model.name_or_path, None)["sha"] == sha
    loaded = transformers.BertForMaskedLM.from_pretrained(target)
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in state.items())
    snapshot = tmp_path / "hub" / "models--google--multiberts-seed_9" / "snapshots" / sha
    assert not (snapshot / "model.safetensors").exists()
    assert run_cli(["convert", "google/multiberts-seed_9"], capsys)[0] == 2  # done already


def test_every_command_is_dispatched_and_completed():
    assert {"runs", "data", "convert", "completion"} <= set(command_names())
    assert all(f"\n  {name}" in format_usage() for name in command_names())
    assert all(query(f"bertology {name[:3]}") == [name] for name in command_names())


def test_checkpoints_that_ship_only_a_bin_are_named_in_one_convert_command(tmp_path,
                                                                           monkeypatch):
    """`--checkpoints` over two pickled hub commits is refused before any work with the one
    command that converts both; once converted, the cost is printed from their copies."""
    from hub_cache import cache_commit

    from bertology.errors import UserError
    from bertology.models.convert import convert_hub_checkpoint
    from bertology.study.schedule import command as schedule
    from bertology.study.schedule import external

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("BERTOLOGY_CACHE_DIR", str(tmp_path / "cache"))
    folder, _ = bin_checkpoint(tmp_path / "pickled")
    names = [f"google/multiberts-seed_{s}" for s in (0, 1)]
    for name in names:
        cache_commit(tmp_path / "hub", name, folder, ["main"])
    with pytest.raises(UserError, match="2 of the checkpoints ship only pytorch_model.bin .* "
                       f"convert them once: bertology convert {' '.join(names)}$"):
        external.reproduce_checkpoints(tmp_path / "out", {}, 1, names, dry_run=True)
    for name in names:
        convert_hub_checkpoint(name)
    args = ["--out", str(tmp_path / "out"), "--checkpoints", *names, "--dry-run"]
    assert schedule.main(args) == 0 and not (tmp_path / "out").exists()
