"""Knowledge distillation: the KD loss against hand computations, TinyBERT's intermediate terms,
the student's initialisation from teacher layers, what the optimizer sees, and the pipeline end
to end from a briefly fine-tuned teacher to a student that plain transformers reloads."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pytest
import torch
from conftest import NEGATION, compose_config, write_vocab
from transformers import (
    AutoModelForSequenceClassification,
    AutoTokenizer,
    BertConfig,
    BertForSequenceClassification,
)

from bertology.config.distill_config import (
    KDConfig,
    StudentConfig,
    choose_layers,
    load_distill_config,
)
from bertology.config.groups import HeadConfig, SizeConfig, TrainerConfig
from bertology.errors import UserError
from bertology.models.student import build_student, default_layer_map
from bertology.models.task_model import TaskModel
from bertology.objectives import kd
from bertology.objectives.kd import compute_attention_mse, compute_hidden_mse, compute_kd_loss
from bertology.pipelines import distill
from bertology.training.loop import build_optimizer

QUIET = ["logger=none"]
TASK = NEGATION


pytestmark = pytest.mark.usefixtures("one_thread")


def tiny_teacher(layers: int = 2, attn: str = "sdpa") -> BertForSequenceClassification:
    torch.manual_seed(0)
    config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=layers,
                        num_attention_heads=4, intermediate_size=64, num_labels=2,
                        attn_implementation=attn)
    return BertForSequenceClassification(config).eval()


def tiny_batch() -> dict[str, torch.Tensor]:
    torch.manual_seed(1)
    ids = torch.randint(5, 100, (3, 8))
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids),
            "labels": torch.tensor([0, 1, 1])}


def inputs_of(batch: dict) -> dict:
    return {k: v for k, v in batch.items() if k != "labels"}


# ---------------------------------------------------------------- the KD loss


def test_kd_loss_is_zero_when_the_student_matches_the_teacher():
    logits = torch.tensor([[2.0, -1.0, 0.5], [0.1, 0.3, -2.0]])
    labels = torch.tensor([1, 2])  # the teacher is wrong on both: CE is large
    loss, logs = compute_kd_loss(logits, logits.clone(), labels, temperature=2.0, alpha=1.0)
    assert loss.item() == pytest.approx(0.0, abs=1e-7)
    loss, logs = compute_kd_loss(logits, logits.clone(), labels, temperature=2.0, alpha=0.3)
    assert logs["kd_loss"].item() == pytest.approx(0.0, abs=1e-7)
    assert logs["ce_loss"].item() > 1.0
    assert loss.item() == pytest.approx(0.7 * logs["ce_loss"].item())


def softmax(row: list[float], temperature: float) -> list[float]:
    exps = [math.exp(z / temperature) for z in row]
    return [e / sum(exps) for e in exps]


def test_kd_loss_equals_a_hand_computation():
    student, teacher = [[1.0, 2.0, 0.0], [0.0, -1.0, 3.0]], [[0.5, 0.0, 1.0], [2.0, 0.0, 1.0]]
    labels, temperature, alpha = [1, 0], 2.0, 0.3
    kl = sum(sum(pt * math.log(pt / ps) for pt, ps in zip(softmax(t, temperature),
                                                          softmax(s, temperature)))
             for s, t in zip(student, teacher)) / 2
    ce = -sum(math.log(softmax(s, 1.0)[y]) for s, y in zip(student, labels)) / 2
    expected = alpha * temperature ** 2 * kl + (1 - alpha) * ce
    loss, logs = compute_kd_loss(torch.tensor(student), torch.tensor(teacher),
                                 torch.tensor(labels), temperature, alpha)
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    assert logs["kd_loss"].item() == pytest.approx(temperature ** 2 * kl, rel=1e-5)
    assert logs["ce_loss"].item() == pytest.approx(ce, rel=1e-5)


@pytest.mark.parametrize("temperature", [1.0, 3.0, 8.0])
def test_the_soft_term_is_scaled_by_t_squared(temperature):
    """Hinton et al. §2: soft gradients shrink as 1/T², so the term is multiplied by T²."""
    student, teacher = torch.tensor([[0.2, 1.5, -0.7]]), torch.tensor([[1.0, -0.5, 0.3]])
    kl = torch.nn.functional.kl_div(torch.log_softmax(student / temperature, -1),
                                    torch.softmax(teacher / temperature, -1), reduction="sum")
    _, logs = compute_kd_loss(student, teacher, torch.tensor([0]), temperature, alpha=1.0)
    assert logs["kd_loss"].item() == pytest.approx(temperature ** 2 * kl.item(), rel=1e-5)


# ---------------------------------------------------------------- TinyBERT's terms


def test_hidden_and_attention_mse_are_zero_for_a_copy_of_the_mapped_layers():
    teacher = tiny_teacher(layers=3, attn="eager")
    student, copied = build_student(teacher, "classification",
                                    StudentConfig(layers=[0, 1]), SizeConfig(), "eager")
    batch = tiny_batch()
    with torch.no_grad():
        t = teacher(**inputs_of(batch), output_hidden_states=True, output_attentions=True)
        s = student.eval()(**inputs_of(batch), output_hidden_states=True,
                           output_attentions=True)
    layer_map = default_layer_map(2, 3, copied)
    assert layer_map == [0, 1, 2]
    mask = batch["attention_mask"]
    identity = torch.nn.Identity()
    assert compute_hidden_mse(s.hidden_states, t.hidden_states, layer_map, identity,
                              mask).item() == pytest.approx(0.0, abs=1e-10)
    assert compute_attention_mse(s.attentions, t.attentions, layer_map,
                                 mask).item() == pytest.approx(0.0, abs=1e-10)
    shifted = [0, 2, 3]  # student layer 1 against teacher layer 2: different states
    assert compute_hidden_mse(s.hidden_states, t.hidden_states, shifted, identity,
                              mask).item() > 1e-4


def test_the_uniform_layer_map_is_tinyberts():
    assert default_layer_map(4, 12, None) == [0, 3, 6, 9, 12]  # TinyBERT's g(m) = 3m
    assert default_layer_map(2, 6, [0, 3]) == [0, 1, 4]


# ---------------------------------------------------------------- the student


def test_the_student_copies_exactly_the_chosen_layers():
    teacher = tiny_teacher(layers=4)
    student, copied = build_student(teacher, "classification", StudentConfig(layers=[1, 3]),
                                    SizeConfig(), "sdpa")
    assert copied == [1, 3] and student.config.num_hidden_layers == 2
    t_layers, s_layers = teacher.bert.encoder.layer, student.bert.encoder.layer
    for s_index, t_index in enumerate([1, 3]):
        t_state, s_state = t_layers[t_index].state_dict(), s_layers[s_index].state_dict()
        assert t_state.keys() == s_state.keys()
        assert all(torch.equal(t_state[k], s_state[k]) for k in t_state)
    assert not torch.equal(s_layers[0].attention.self.query.weight,
                           t_layers[0].attention.self.query.weight)
    for module in ("bert.embeddings", "bert.pooler", "classifier"):
        t_state = teacher.get_submodule(module).state_dict()
        s_state = student.get_submodule(module).state_dict()
        assert all(torch.equal(t_state[k], s_state[k]) for k in t_state)


def test_layer_choices():
    assert choose_layers(6, StudentConfig(layer_choice="alternate", num_layers=3)) == [0, 2, 4]
    assert choose_layers(6, StudentConfig(layer_choice="first", num_layers=2)) == [0, 1]
    assert choose_layers(6, StudentConfig(layer_choice="last", num_layers=2)) == [4, 5]
    assert choose_layers(12, StudentConfig()) == [0, 2, 4, 6, 8, 10]  # DistilBERT: half
    with pytest.raises(UserError, match=r"student.layers=\[0, 6\]"):
        choose_layers(6, StudentConfig(layers=[0, 6]))
    with pytest.raises(UserError, match="student.num_layers=7"):
        choose_layers(6, StudentConfig(num_layers=7))


def test_a_random_student_has_size_and_the_teachers_vocabulary():
    teacher = tiny_teacher()
    size = SizeConfig(num_hidden_layers=1, hidden_size=16, num_attention_heads=4,
                      intermediate_size=32)
    student, copied = build_student(teacher, "classification", StudentConfig(init="random"),
                                    size, "sdpa")
    assert copied is None
    assert (student.config.hidden_size, student.config.num_hidden_layers) == (16, 1)
    assert student.config.vocab_size == 100 and student.config.num_labels == 2


def test_the_optimizer_sees_the_student_and_projection_never_the_teacher():
    teacher = tiny_teacher()
    teacher_task = TaskModel(teacher, "classification", HeadConfig()).requires_grad_(False)
    size = SizeConfig(num_hidden_layers=1, hidden_size=16, num_attention_heads=4,
                      intermediate_size=32)
    student, _ = build_student(teacher, "classification", StudentConfig(init="random"), size,
                               "sdpa")
    model = kd.DistillationModel(TaskModel(student, "classification", HeadConfig()), 32)
    assert isinstance(model.projection, torch.nn.Linear)  # 16 → 32: TinyBERT's W_h
    optimizer = build_optimizer(model, TrainerConfig())
    optimized = {id(p) for group in optimizer.param_groups for p in group["params"]}
    assert {id(p) for p in model.projection.parameters()} <= optimized
    assert {id(p) for p in student.parameters()} <= optimized
    assert not optimized & {id(p) for p in teacher.parameters()}
    objective = kd.build(KDConfig(hidden_weight=1.0), teacher_task, [0, 2], pad_token_id=0)
    loss, logs = objective.loss(model, tiny_batch())
    loss.backward()
    assert model.projection.weight.grad is not None and model.projection.weight.grad.abs().sum() > 0
    assert all(p.grad is None for p in teacher.parameters())
    assert logs["hidden_loss"] > 0 and not teacher.training


# ---------------------------------------------------------------- the pipeline


def run_distill(out: Path, overrides: list[str]) -> dict[str, float]:
    return distill.run(compose_config("distill", QUIET + TASK + overrides), out)


@pytest.fixture(scope="module")
def distill_run(negation_model, tmp_path_factory):
    out = tmp_path_factory.mktemp("distill")
    return out, run_distill(out, [f"teacher.name_or_path={negation_model}", "trainer.epochs=2",
                                  "trainer.lr=1e-3"])


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_student_beats_the_majority_class_and_keeps_the_teachers_accuracy(distill_run):
    out, metrics = distill_run
    rows = read_jsonl(out / "predictions.jsonl")
    majority = Counter(r["gold"] for r in rows).most_common(1)[0][1] / len(rows)
    student, teacher = metrics["distill/student/accuracy"], metrics["distill/teacher/accuracy"]
    assert teacher > majority + 0.1, (teacher, majority)
    assert student > majority + 0.1, (student, majority)
    assert metrics["distill/retained"] == pytest.approx(student / teacher)
    assert metrics["distill/student/parameters"] < metrics["distill/teacher/parameters"]
    assert metrics["distill/student/layers"] == 1 and metrics["distill/teacher/layers"] == 2
    assert metrics["distill/speedup"] == pytest.approx(
        metrics["distill/teacher/latency_ms"] / metrics["distill/student/latency_ms"])
    assert json.loads((out / "metrics.json").read_text()) == pytest.approx(metrics)
    assert "train/kd_loss" in metrics and "train/ce_loss" in metrics


def test_the_student_reloads_in_plain_transformers(distill_run):
    out, metrics = distill_run
    model = AutoModelForSequenceClassification.from_pretrained(out / "model").eval()
    tokenizer = AutoTokenizer.from_pretrained(out / "model")
    assert model.config.num_hidden_layers == 1
    rows = read_jsonl(out / "predictions.jsonl")[:32]
    encoded = tokenizer([r["text"] for r in rows], padding=True, return_tensors="pt")
    with torch.no_grad():
        predicted = model(**encoded).logits.argmax(-1).tolist()
    assert [model.config.id2label[p] for p in predicted] == [r["predicted"] for r in rows]


@pytest.mark.slow
def test_tinybert_terms_train_a_narrower_random_student(negation_model, tmp_path):
    metrics = run_distill(tmp_path, [
        f"teacher.name_or_path={negation_model}", "trainer.max_steps=8", "student.init=random",
        "size.num_hidden_layers=1", "size.hidden_size=64", "size.num_attention_heads=2",
        "size.intermediate_size=128", "kd.hidden_weight=1.0", "kd.attention_weight=1.0"])
    assert metrics["train/hidden_loss"] > 0 and metrics["train/attention_loss"] > 0
    assert metrics["distill/student/parameters"] < metrics["distill/teacher/parameters"]


@pytest.mark.slow
def test_with_no_teacher_one_is_fine_tuned_first(tmp_path):
    metrics = run_distill(tmp_path, ["task.num_sentences=300", "teacher.trainer.epochs=1",
                                     "trainer.max_steps=4"])
    assert (tmp_path / "teacher" / "model" / "model.safetensors").exists()
    assert (tmp_path / "teacher" / "metrics.json").exists()
    assert "distill/speedup" in metrics


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize("overrides, words", [
    (["kd.alpha=1.5"], "kd.alpha"),
    (["kd.temperature=0"], "kd.temperature"),
    (["kd.hidden_weight=-1"], "kd.hidden_weight"),
    (["student.init=pretrained"], "student.init"),
    (["student.layer_choice=middle"], "student.layer_choice"),
    (["student.init=random", "student.num_layers=2"], "size="),
    (["teacher.trainer.lr=-1"], "teacher"),
    (["+teacher.path=x"], "teacher.path"),
    (["task=squad"], "distill supports"),
])
def test_bad_config_is_a_user_error(overrides, words):
    with pytest.raises(UserError, match=words):
        load_distill_config(compose_config("distill", overrides))


def test_a_checkpoint_that_is_not_a_task_model_is_refused(tmp_path):
    plain = tmp_path / "plain"
    tiny_teacher().bert.save_pretrained(plain)  # an encoder without a classification head
    write_vocab(plain, 100)
    with pytest.raises(UserError, match="is not a classification model"):
        run_distill(tmp_path / "run", [f"teacher.name_or_path={plain}"])


def test_the_default_config_is_checked_and_composes():
    config = load_distill_config(compose_config("distill"))
    assert config.teacher_path is None and config.teacher_finetune is not None
    assert config.kd.temperature == 2.0 and config.kd.alpha == 0.5
    assert config.student.init == "teacher_layers"


def test_a_distill_run_has_its_training_figure_and_page(distill_run):
    """Issue 42: every pipeline's run dir has plots/ and index.html; distill's figure draws
    the student's kd and ce losses and its evaluation over the steps."""
    out, _ = distill_run
    assert (out / "plots" / "training.png").stat().st_size > 10_000
    page = (out / "index.html").read_text()
    assert 'src="plots/training.png"' in page
    logged = {k for r in read_jsonl(out / "metrics.jsonl") for k in r}
    assert {"train/kd_loss", "train/ce_loss"} <= logged  # what the loss panel draws
