"""The CLI: dispatch in sync with conf/, every config composes, bad input exits 2 in one line."""

from __future__ import annotations

import pytest
from conftest import REPO, compose_config, run_cli
from omegaconf import OmegaConf
from own_data_files import PRESET_FILES

from bertology.cli.entry import main
from bertology.config.pretrain_config import load_pretrain_config
from bertology.config.verbs import VERBS, pipeline_names
from bertology.errors import UserError


def test_pipelines_match_primary_configs():
    primaries = {p.stem for p in (REPO / "conf").glob("*.yaml")}
    assert primaries == set(pipeline_names())
    assert all(VERBS[name].check for name in primaries)


def test_help_lists_every_pipeline(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in VERBS:
        assert name in out


def test_unknown_pipeline_is_exit_2(capsys):
    assert main(["pretrian"]) == 2
    err = capsys.readouterr().err
    assert "pretrian" in err and "pretrain" in err and len(err.strip().splitlines()) == 1


def _group_options(group: str) -> list[str]:
    return sorted(p.stem for p in (REPO / "conf" / group).glob("*.yaml"))


def changed_by_checks(config, composed, group: str) -> dict:
    """The group's scalar keys that the checked config holds otherwise than Hydra composed them
    (a key its dataclass lacks shows as missing): {} where the option was kept as written."""
    section = getattr(config, group)
    written = OmegaConf.to_container(composed[group], resolve=True)
    return {key: (value, getattr(section, key, "missing")) for key, value in written.items()
            if not isinstance(value, (list, dict)) and getattr(section, key, "missing") != value}


@pytest.mark.slow
@pytest.mark.parametrize("group", ["model", "size", "objective", "data", "trainer", "logger"])
def test_every_group_option_composes_and_checks(group):
    for option in _group_options(group):
        overrides = [f"{group}={option}"]
        if option == "files":
            overrides.append(f"data.files=[{REPO / 'README.md'}]")  # a text file that exists
        if option == "hub":
            overrides.append("data.path=json")
        if group == "model" and option == "roberta":
            overrides.append("objective=mlm")
        if group == "objective" and option == "electra":
            overrides.append("model=electra")
        if group == "objective" and option == "span_sbo":
            overrides.append("model=spanbert")
        composed = compose_config("pretrain", overrides)
        assert changed_by_checks(load_pretrain_config(composed), composed, group) == {}, option


@pytest.mark.slow
@pytest.mark.parametrize("group", ["task", "model", "trainer"])
def test_every_finetune_option_composes_and_checks(group, monkeypatch, tmp_path):
    from bertology.config.finetune_config import load_finetune_config

    # some/checkpoint stands for a hub id; offline (as in CI) the check would ask for it in
    # the local cache, which test_bad_inputs covers
    for flag in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(flag, raising=False)
    monkeypatch.chdir(tmp_path)  # the own_* tasks read their files from the working dir
    for write in PRESET_FILES.values():
        write(tmp_path)
    for option in _group_options(group):
        overrides = [f"{group}={option}"]
        if group == "model" and option in ("spanbert", "electra"):
            overrides.append("model.name_or_path=some/checkpoint")
        composed = compose_config("finetune", overrides)
        assert changed_by_checks(load_finetune_config(composed), composed, group) == {}, option


def test_model_picks_paper_default_objective_and_cli_overrides_it():
    assert compose_config("pretrain", ["model=bert"]).objective.name == "mlm_nsp"
    assert compose_config("pretrain", ["model=roberta"]).objective.name == "mlm"
    assert compose_config("pretrain", ["model=bert", "objective=mlm_sop"]).objective.name \
        == "mlm_sop"
    roberta = load_pretrain_config(compose_config("pretrain", ["model=roberta"]))
    assert (roberta.model.masking, roberta.model.input_format, roberta.model.tokenizer) == \
        ("dynamic", "full_sentences", "bpe")
    spanbert = load_pretrain_config(compose_config("pretrain", ["model=spanbert"]))
    assert (spanbert.objective.name, spanbert.model.masking, spanbert.model.input_format) == \
        ("span_sbo", "dynamic", "doc_sentences")


def test_sizes_follow_turc_et_al():
    expected = {"tiny": (2, 128, 2), "mini": (4, 256, 4), "small": (4, 512, 8),
                "medium": (8, 512, 8), "base": (12, 768, 12), "large": (24, 1024, 16)}
    for name, (layers, hidden, heads) in expected.items():
        size = compose_config("pretrain", [f"size={name}"]).size
        assert (size.num_hidden_layers, size.hidden_size, size.num_attention_heads) == \
            (layers, hidden, heads)
        assert size.intermediate_size == 4 * hidden


# Each bad input: the override, and words its one-line message must contain.
BAD_CONFIGS = [
    (["objective.mask_prob=0"], "objective.mask_prob"),
    (["objective.mask_prob=1.2"], "objective.mask_prob"),
    (["objective.mask_token_ratio=0.5"], "sum to 1"),
    (["objective.keep_ratio=-0.1", "objective.mask_token_ratio=1.0"], "sum to 1"),
    (["size.hidden_size=130", "size.num_attention_heads=4"], "not divisible"),
    (["data.max_seq_length=600"], "max_position_embeddings"),
    (["model=roberta", "data.max_seq_length=513"], "max_position_embeddings"),
    (["objective=mlm_nsp", "model.input_format=full_sentences"], "input_format"),
    (["model=roberta", "objective=mlm_nsp"], "sentence-pair head"),
    (["objective=electra"], "do not go together"),
    (["model=electra", "objective=mlm"], "do not go together"),
    (["model=electra", "model.generator_fraction=0"], "model.generator_fraction"),
    (["model=electra", "objective.disc_weight=-1"], "objective.disc_weight"),
    (["objective=span_sbo"], "do not go together"),
    (["model=spanbert", "objective=mlm"], "do not go together"),
    (["model=spanbert", "objective=mlm_nsp"], "sentence-pair head"),
    (["model=spanbert", "objective.span_geometric_p=1"], "objective.span_geometric_p"),
    (["model=spanbert", "objective.max_span_words=0"], "objective.max_span_words"),
    (["model=spanbert", "objective.sbo_weight=-1"], "objective.sbo_weight"),
    (["model=spanbert", "model.sbo_position_embeddings=0"], "model.sbo_position_embeddings"),
    (["model.masking=sometimes"], "model.masking"),
    (["trainer.max_steps=0"], "trainer.max_steps"),
    (["trainer.lr=-1"], "trainer.lr"),
    (["data=files"], "data.files"),
    (["+trainer.max_step=5"], "trainer.max_step"),
]


@pytest.mark.parametrize("overrides,words", BAD_CONFIGS)
def test_bad_config_is_a_user_error(overrides, words):
    with pytest.raises(UserError, match=words.replace(".", r"\.")):
        load_pretrain_config(compose_config("pretrain", overrides))


def test_the_console_script_answers_bad_input_in_one_line_with_exit_2(tmp_path):
    """docs/reliability.md's example, through a real `python -m bertology` process: the exit status
    and stderr a shell sees. The bad-input suite (test_bad_inputs.py) covers the cases."""
    result = run_cli("pretrain", "objective.mask_token_ratio=0.7", "logger=none", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        "bertology pretrain: error: objective.mask_token_ratio + random_token_ratio + "
        "keep_ratio = 0.9; they must be >= 0 and sum to 1 (BERT: 0.8/0.1/0.1)"]
    assert not (tmp_path / "outputs").exists()


@pytest.mark.parametrize("args, says", [
    (["probe", "task=sst2"], "task=sst2 (glue_tsv) has no word labels to probe"),
    (["probe", "task=synthetic_negation"], "task=synthetic_negation (synthetic) has no word"),
    (["finetune", "head.freeze_layers=50"], "head.freeze_layers=50 exceeds the model's 2 layers"),
    (["finetune", "model=minilm", "head.freeze_layers=7"], "exceeds the model's 6 layers"),
    (["pretrain", "trainer.max_steps=[1,"], "no viable alternative at input '[1,'"),
])
def test_late_refusals_come_before_the_run_dir(args, says, tmp_path, capsys):
    """Issue 42: these were refused after the data load (probe task=sst2 6 s later, having
    printed a run dir) or as a traceback from the CLI's own pre-check (Hydra's grammar).
    Now: one line, exit 2, before Hydra makes the run dir."""
    run_dir = tmp_path / "run"
    try:
        code = main([*args, "logger=none", f"hydra.run.dir={run_dir}"])
    except SystemExit as stop:
        code = stop.code
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and says in err, err
    assert not run_dir.exists()
