"""Any HF encoder for the reading pipelines: DistilBERT, ALBERT, DeBERTa-v3 (model_type
deberta-v2), XLM-R and MPNet beside the pretraining families, a row each in families.py's
READING. Every row's paths resolve on a tiny model of its type; what a type cannot do is refused
in one line before any work, through the CLI and through the model code alike; probe, finetune,
prune and distill run end to end on a tiny checkpoint of each type."""

from __future__ import annotations

import copy
from operator import attrgetter
from pathlib import Path

import pytest
import torch
import transformers
from conftest import REPO, compose_config, run_cli
from reading_models import (
    READING_TYPES,
    save_checkpoint,
    synthetic_sentences,
    tiny_config,
    train_tokenizer,
)
from torch import nn

from bertology.config.analysis_settings import ANALYSES
from bertology.config.family_checks import OPTION_NEEDS, every_need, render_family_table
from bertology.config.prune_settings import PRUNE_EXPERIMENTS
from bertology.errors import UserError
from bertology.families import (
    CAPABILITIES,
    every_family,
    family_of_checkpoint,
    mlm_transform_path,
    model_types,
    why_not,
)

HEADS, HIDDEN, LAYERS = 2, 32, 2


def tiny_model(model_type: str, auto=None, **extra) -> nn.Module:
    """A random model of the type (its row's MLM class by default), eager attention."""
    row = family_of_checkpoint(model_type)
    torch.manual_seed(0)
    config = tiny_config(model_type, 100, 1, layers=LAYERS, heads=HEADS, hidden=HIDDEN, **extra)
    if auto is not None:
        return auto.from_config(config, attn_implementation="eager").eval()
    model_class = getattr(transformers, row.mlm_class)
    return model_class._from_config(config, attn_implementation="eager").eval()


def check_attention_paths(layer: nn.Module, model_type: str) -> None:
    """q/k/v, the output projection and the core of one layer are where the row says, with
    the widths heads x head_dim that head gating and removal slice."""
    layout = family_of_checkpoint(model_type).attention
    core = attrgetter(layout.core)(layer)
    head_dim = getattr(core, layout.head_dim)
    assert head_dim == HIDDEN // HEADS
    if layout.head_count is not None:
        assert getattr(core, layout.head_count) == HEADS
    blocks = 3 if len(layout.qkv) == 1 else 1  # a fused projection: [q; k; v]
    for path in layout.qkv:
        assert attrgetter(path)(layer).out_features == blocks * HEADS * head_dim, path
    assert attrgetter(layout.output)(layer).in_features == HEADS * head_dim


@pytest.mark.parametrize("model_type", model_types(every_family()))
def test_every_row_resolves_on_a_tiny_model_of_its_type(model_type):
    """Layers, attention paths, MLM head and config names of the row exist on a model of the
    type; hidden states are layers + 1 of the hidden size, attention maps one per layer whose
    rows sum to 1; the row's sdpa flag is what transformers does."""
    row = family_of_checkpoint(model_type)
    model = tiny_model(model_type)
    layers = attrgetter(row.layers)(model.base_model)
    assert isinstance(layers, nn.ModuleList)
    shared = why_not(row, "layer_modules") is not None  # ALBERT: one layer, applied L times
    assert len(layers) == (1 if shared else LAYERS)
    for layer in layers:
        check_attention_paths(layer, model_type)
    if why_not(row, "mlm_head") is None:
        attrgetter(row.mlm_head)(model)
        attrgetter(mlm_transform_path(row))(model)
    for key, names in row.config_names:
        assert all(hasattr(model.config, name) for name in names), (key, names)
    ids = torch.randint(5, 100, (2, 7))
    with torch.no_grad():
        out = model.base_model(input_ids=ids, output_hidden_states=True, output_attentions=True)
    assert [tuple(h.shape) for h in out.hidden_states] == [(2, 7, HIDDEN)] * (LAYERS + 1)
    assert [tuple(a.shape) for a in out.attentions] == [(2, HEADS, 7, 7)] * LAYERS
    torch.testing.assert_close(out.attentions[-1].sum(-1), torch.ones(2, HEADS, 7))
    config = tiny_config(model_type, 100, 1, layers=LAYERS, heads=HEADS, hidden=HIDDEN)
    if row.sdpa:
        transformers.AutoModel.from_config(config, attn_implementation="sdpa")
    else:
        with pytest.raises(ValueError, match="scaled_dot_product_attention"):
            transformers.AutoModel.from_config(config, attn_implementation="sdpa")


def test_what_the_checks_name_exists():
    """The analysis and experiment rows and the options need real capabilities, and every
    family row's `cannot` names a real capability."""
    needed = {*every_need(ANALYSES).values(), *every_need(PRUNE_EXPERIMENTS).values(),
              *OPTION_NEEDS.values()}
    assert needed == set(CAPABILITIES)  # each capability is needed by something
    for name, row in every_family().items():
        assert {c for c, _ in row.cannot} <= set(CAPABILITIES), name


MARKERS = ("<!-- family-table: rendered by bertology.config.family_checks."
           "render_family_table -->", "<!-- /family-table -->")


def test_the_docs_table_is_the_rendered_one():
    text = (REPO / "docs" / "pipelines.md").read_text()
    start, end = (text.index(marker) for marker in MARKERS)
    assert text[start + len(MARKERS[0]):end].strip() == render_family_table().strip(), \
        "docs/pipelines.md's table is stale: paste render_family_table()'s output in"


# ---------------------------------------------------------------- checkpoints of each type


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    """A tiny masked-LM checkpoint of each reading-only type with its own tokenizer, and an
    ALBERT sentence classifier (a teacher, as `bertology finetune` writes one)."""
    root = tmp_path_factory.mktemp("reading")
    sentences = synthetic_sentences()
    made = {}
    for model_type in READING_TYPES:
        tokenizer = train_tokenizer(model_type, sentences)
        made[model_type] = save_checkpoint(model_type, tokenizer, root / model_type)
    made["albert-classifier"] = save_checkpoint(
        "albert", train_tokenizer("albert", sentences), root / "albert-classifier",
        auto=transformers.AutoModelForSequenceClassification, num_labels=2)
    return made


NEG = ["task=synthetic_negation", "task.num_sentences=300"]
REFUSALS = [  # (checkpoint, pipeline, arguments, what is refused, the capability it needs)
    ("albert", "prune", NEG, "prune.experiments=heads", "head_gates"),
    ("mpnet", "prune", [*NEG, "prune.experiments=[heads,removal]"],
     "prune.experiments=removal", "head_removal"),
    ("albert", "prune", [*NEG, "prune.experiments=[layers]"], "prune.experiments=layers",
     "layer_modules"),
    ("deberta-v2", "probe", ["analysis=[linear,cloze]"], "analysis=cloze", "mlm_head"),
    ("albert", "probe", ["analysis=amnesic", "analysis.amnesic.layer=1"],
     "analysis.amnesic.layer=1", "layer_modules"),
    ("albert", "finetune", [*NEG, "head.layer_lr_decay=0.8"], "head.layer_lr_decay=0.8",
     "layer_modules"),
    ("albert-classifier", "distill", NEG, "student.init=teacher_layers", "layer_modules"),
]


def refused_line(pipeline: str, args: list[str], tmp_path: Path) -> str:
    """`bertology <pipeline> <args>` as a user runs it: exit 2, one error line, no traceback,
    no run dir; the line."""
    run_dir = tmp_path / "run"
    done = run_cli(pipeline, *args, "logger=none", f"hydra.run.dir={run_dir}", cwd=tmp_path,
                   timeout=120)
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(errors) == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert not run_dir.exists()
    return errors[0]


@pytest.mark.parametrize("name,pipeline,args,what,capability", REFUSALS,
                         ids=[f"{c[0]}-{c[1]}-{c[3]}" for c in REFUSALS])
def test_a_refused_analysis_is_one_line_exit_2(name, pipeline, args, what, capability,
                                               checkpoints, tmp_path):
    """The line names what was asked, the checkpoint and its type, and the row's reason."""
    key = "teacher.name_or_path" if pipeline == "distill" else "model.name_or_path"
    path = checkpoints[name]
    line = refused_line(pipeline, [f"{key}={path}", *args], tmp_path)
    model_type = name.split("-classifier")[0]
    reason = why_not(family_of_checkpoint(model_type), capability)
    assert line.startswith(f"bertology {pipeline}: error: {what} cannot run on "
                           f"{key}={str(path)!r} ({model_type}): {reason}; "), line


def test_pretraining_refuses_a_reading_only_checkpoint(checkpoints, tmp_path):
    line = refused_line("pretrain", [f"model.name_or_path={checkpoints['albert']}",
                                     "trainer=smoke"], tmp_path)
    assert "albert checkpoints are read (probe, finetune, prune, distill), not pretrained" in line


def test_the_model_code_refuses_what_the_architecture_cannot():
    """Beside the config checks (a hub id is only known when it loads): ALBERT's shared layer
    is never gated, pruned, dropped, frozen, projected or copied per layer; MPNet's heads are gated
    (a gated-off head is a head whose values are zero) but never removed."""
    from bertology.analysis.amnesic import layer_module
    from bertology.config.distill_config import StudentConfig
    from bertology.config.groups import HeadConfig, SizeConfig
    from bertology.models.student import build_student
    from bertology.models.task_model import TaskModel
    from bertology.pruning.heads import HeadGates, build_gates, drop_layers, prune_heads

    albert = tiny_model("albert", transformers.AutoModelForSequenceClassification, num_labels=2)
    for call, what in ((lambda: HeadGates(albert), "gating heads"),
                       (lambda: prune_heads(albert, {0: [1]}), "removing heads"),
                       (lambda: drop_layers(albert, [0]), "dropping layers"),
                       (lambda: layer_module(albert, 1), "analysis.amnesic.layer=1"),
                       (lambda: TaskModel(albert, "classification", HeadConfig(freeze_layers=1)),
                        "head.freeze_layers=1"),
                       (lambda: build_student(albert, "classification", StudentConfig(),
                                              SizeConfig(), "sdpa"),
                        "student.init=teacher_layers")):
        with pytest.raises(UserError, match=rf"^{what} cannot run on .*\(Lan et al"):
            call()
    mpnet = tiny_model("mpnet", transformers.AutoModel, initializer_range=0.2)
    with pytest.raises(UserError, match=r"^removing heads cannot run on .*\(Song et al"):
        prune_heads(mpnet, {0: [1]})
    ids = torch.randint(5, 100, (2, 7))
    gates = build_gates(mpnet)
    gates[1, 0] = 0.0
    with torch.no_grad(), HeadGates(mpnet, gates):
        gated = mpnet(input_ids=ids).last_hidden_state
    zeroed = copy.deepcopy(mpnet)
    value = zeroed.encoder.layer[1].attention.attn.v  # head 0: rows 0..15
    with torch.no_grad():
        value.weight[:HIDDEN // HEADS] = 0.0
        value.bias[:HIDDEN // HEADS] = 0.0
        torch.testing.assert_close(gated, zeroed(input_ids=ids).last_hidden_state,
                                   rtol=0, atol=1e-6)
        assert not torch.allclose(gated, mpnet(input_ids=ids).last_hidden_state, atol=1e-4)


# ---------------------------------------------------------------- the pipelines, end to end


def run_pipeline(pipeline: str, out: Path, *overrides: str) -> dict:
    from bertology.pipelines import load_pipeline

    out.mkdir(parents=True)
    return load_pipeline(pipeline)(compose_config(pipeline, ["logger=none", *overrides]), out)


def prune_experiments(model_type: str) -> list[str]:
    """The head and layer experiments where the type can run them, else the ones every type
    can (magnitude pruning; attention to special tokens and its gradients)."""
    wanted = [name for name in ("heads", "removal", "layers")
              if why_not(family_of_checkpoint(model_type), PRUNE_EXPERIMENTS[name].needs) is None]
    return wanted or ["magnitude", "attention_gradients"]


@pytest.mark.slow
@pytest.mark.parametrize("model_type", READING_TYPES)
def test_the_reading_pipelines_run_on_each_type(model_type, checkpoints, tmp_path,
                                                fresh_logging):
    """finetune, probe (hidden states against the random-init twin, attention maps), prune
    (what the type supports; removed heads equal masked ones) and distill, on a tiny
    checkpoint of the type; plain transformers loads the models written."""
    model_dir = checkpoints[model_type]
    task = [*NEG, "trainer.max_steps=4"]
    tuned = run_pipeline("finetune", tmp_path / "finetune", f"model.name_or_path={model_dir}",
                         *task)
    assert 0.0 <= tuned["eval/accuracy"] <= 1.0
    classifier = tmp_path / "finetune" / "model"
    loaded = transformers.AutoModelForSequenceClassification.from_pretrained(classifier)
    assert loaded.config.model_type == model_type
    probed = run_pipeline("probe", tmp_path / "probe", f"model.name_or_path={model_dir}",
                          "analysis=[linear,attention]", "task=synthetic_pos", "seeds=[0]",
                          "max_train_sentences=200", "max_eval_sentences=100")
    assert 0.0 <= probed["probe/layer_02/accuracy"] <= 1.0
    assert "probe/random/layer_02/accuracy" in probed and "attention/layer_02/entropy" in probed
    experiments = prune_experiments(model_type)
    pruned = run_pipeline("prune", tmp_path / "prune", f"model.name_or_path={classifier}", *task,
                          f"prune.experiments=[{','.join(experiments)}]",
                          "prune.importance_examples=32")
    if "removal" in experiments:
        assert pruned["prune/heads_remaining"] < LAYERS * HEADS
        assert pruned["prune/removal/max_logit_diff"] < 1e-4  # removed equals masked
    layered = why_not(family_of_checkpoint(model_type), "layer_modules") is None
    distilled = run_pipeline("distill", tmp_path / "distill", f"teacher.name_or_path={classifier}",
                             *task, f"student.init={'teacher_layers' if layered else 'random'}")
    assert distilled["distill/student/layers"] >= 1
    student = transformers.AutoModelForSequenceClassification.from_pretrained(
        tmp_path / "distill" / "model")
    assert student.config.model_type == model_type
