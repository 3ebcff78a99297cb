"""bertology distill: a fine-tuned teacher → a smaller student (the survey's §6.2 on compression).

config → teacher (a finetune run's model/, or one fine-tuned here first) → task data encoded
with the teacher's tokenizer → student (models/student.py) → train on the KD objective
(objectives/kd.py) with the one training loop → evaluate teacher and student, count their
parameters, time them on CPU → the student in model/, loadable by plain transformers.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from transformers import PretrainedConfig

from bertology.config.distill_config import DistillConfig, check_layer_map, load_distill_config
from bertology.config.groups import HeadConfig
from bertology.config.path_checks import resolve_checkpoint
from bertology.data.encode import encode
from bertology.data.stream import InMemoryExamples
from bertology.data.tasks import TaskData, load_task
from bertology.data.tokenizers import load_pretrained_tokenizer, tokenizer_options
from bertology.errors import require
from bertology.evaluation.predictions import compute_score_replicates, evaluate_task
from bertology.models.build import count_parameters, load_checkpoint_config
from bertology.models.latency import compare_latency, eval_latency_batch
from bertology.models.student import build_student, default_layer_map
from bertology.models.task_model import (
    TaskModel,
    build_task_model,
    check_task_checkpoint,
    save_task_model_atomic,
    write_task_model,
)
from bertology.models.windows import matched_reaches
from bertology.objectives import kd
from bertology.pipelines.nested import run_nested
from bertology.run.atomic import write_predictions
from bertology.run.replicates import compute_item_ids, write_replicates
from bertology.run.resume import refuse_fresh_start
from bertology.run.tracking import build_tracker
from bertology.run.training_figures import write_run_page
from bertology.training.loop import TrainJob, TrainOutput, resolve_budget, train

log = logging.getLogger(__name__)

LATENCY_BATCH = 32  # eval sequences per timed forward pass


def run(cfg: DictConfig, out_dir: Path) -> dict[str, float]:
    config = load_distill_config(cfg)
    refuse_fresh_start(out_dir, config.resume)
    teacher_path = resolve_checkpoint(config.teacher_path) if config.teacher_path \
        else build_teacher(config, out_dir / "teacher")
    data = load_task(config.task, config.data_dir, config.trainer.max_train_examples)
    teacher_config = load_teacher_config(teacher_path, config, data)
    tokenizer = load_pretrained_tokenizer(
        teacher_path, **tokenizer_options(teacher_config.model_type))
    train_features = encode(data.train, tokenizer, config.task)
    eval_features = encode(data.eval, tokenizer, config.task)
    trainer = resolve_budget(config.trainer, len(train_features))
    # Attention maps are only returned by eager attention (DESIGN §2): eager only when read.
    attn = "eager" if config.kd.attention_weight > 0 else "sdpa"
    teacher = load_teacher(teacher_path, teacher_config, config, data, attn)
    model, layer_map = build_distillation_model(teacher, config, attn)
    log.info("teacher %.2fM → student %.2fM parameters; layer map %s; %d train / %d eval; "
             "%d steps", count_parameters(teacher.model) / 1e6,
             count_parameters(model.student.model) / 1e6, layer_map, len(train_features),
             len(eval_features), trainer.max_steps)
    tracker = build_tracker(config.logger, out_dir, OmegaConf.to_container(cfg, resolve=True),
                            name=f"distill-{config.task.name}-{out_dir.name}")
    reaches = attention_reaches(model, teacher, layer_map, config.kd.attention_weight)
    objective = kd.build(config.kd, teacher, layer_map, tokenizer.pad_token_id, reaches)
    examples = InMemoryExamples(train_features, eval_features, config.seed)
    output = TrainOutput(out_dir, tracker,
                         export=lambda path: write_task_model(model.student, tokenizer, path),
                         desc="distill",
                         eval_name="eval_subset")  # compare_models() scores the whole dev set
    metrics = train(TrainJob(model, objective, examples, trainer, output, config.seed))
    student = model.student.to("cpu")
    metrics.update(compare_models(teacher.to("cpu"), student, config, data, eval_features,
                           tokenizer.pad_token_id, out_dir))
    save_task_model_atomic(student, tokenizer, out_dir / "model")
    metrics = tracker.finish(metrics)
    write_run_page(out_dir, f"bertology distill: {config.task.name}", metrics)
    return metrics


def attention_reaches(model: kd.DistillationModel, teacher: TaskModel, layer_map: list[int],
                      attention_weight: float) -> list[int | None] | None:
    """Where attention maps are matched, the window each pair shares (ModernBERT's local
    layers), said in one line; None where no map is matched."""
    if attention_weight <= 0:
        return None
    reaches, line = matched_reaches(model.student.model.config, teacher.model.config, layer_map)
    if line is not None:
        log.info(line)
    return reaches


def build_teacher(config: DistillConfig, teacher_dir: Path) -> str:
    """teacher.name_or_path=null: fine-tune teacher.model on the task with `bertology
    finetune` into <run>/teacher (a finished one is reused); its model/ is the teacher."""
    run_nested("finetune", config.teacher_finetune, teacher_dir,
               "no teacher.name_or_path: fine-tuning the teacher")
    return str(teacher_dir / "model")


def load_teacher_config(path: str, config: DistillConfig, data: TaskData) -> PretrainedConfig:
    """The teacher checkpoint's config, checked: fine-tuned on this task, standard head."""
    teacher_config = load_checkpoint_config(path, "teacher.name_or_path")
    check_task_checkpoint(path, teacher_config, "teacher.name_or_path", config.task.kind,
                          config.task.name, data.labels)
    return teacher_config


def load_teacher(path: str, teacher_config: PretrainedConfig, config: DistillConfig,
                 data: TaskData, attn: str) -> TaskModel:
    """The teacher with its trained head, frozen: it never trains and is never checkpointed."""
    teacher = build_task_model(path, teacher_config, config.task.kind, data.labels,
                               HeadConfig(), random_init=False, attn_implementation=attn)
    teacher.requires_grad_(False)
    return teacher.eval()


def build_distillation_model(teacher: TaskModel, config: DistillConfig, attn: str
                             ) -> tuple[kd.DistillationModel, list[int]]:
    """The student (and TinyBERT's projection) the loop trains, and the checked layer map."""
    torch.manual_seed(config.seed)  # a random student's (and the projection's) initial weights
    student, copied = build_student(teacher.model, config.task.kind, config.student,
                                    config.size, attn)
    num_student = student.config.num_hidden_layers
    num_teacher = teacher.model.config.num_hidden_layers
    layer_map = check_layer_map(config.kd.layer_map, num_student, num_teacher) \
        if config.kd.layer_map is not None \
        else default_layer_map(num_student, num_teacher, copied)
    if config.kd.attention_weight > 0:
        heads = (student.config.num_attention_heads, teacher.model.config.num_attention_heads)
        require(heads[0] == heads[1], f"kd.attention_weight > 0 matches attention maps head by "
                f"head (TinyBERT); the student has {heads[0]} heads, the teacher {heads[1]}")
        require(min(layer_map[1:]) >= 1, f"kd.layer_map={layer_map} maps a student layer to "
                "the embeddings (0), which have no attention map; use layers >= 1")
    student_model = TaskModel(student, config.task.kind, HeadConfig())
    return kd.DistillationModel(student_model, teacher.model.config.hidden_size), layer_map


def compare_models(teacher: TaskModel, student: TaskModel, config: DistillConfig, data: TaskData,
            eval_features: list[dict], pad_token_id: int, out_dir: Path) -> dict[str, float]:
    """Both models on the whole eval set, their sizes and CPU latency; the student's
    predictions go to predictions.jsonl and its scores are also the run's eval/*."""
    metrics: dict[str, float] = {}
    replicates: dict[str, np.ndarray] = {}
    models = {"teacher": teacher, "student": student}
    for name, model in models.items():
        scores, rows = evaluate_task(model, config.task, data.eval, eval_features, data.labels,
                                     pad_token_id)
        metrics.update({f"distill/{name}/{k}": v for k, v in scores.items()})
        replicates.update({f"distill/{name}/{k}": v for k, v in compute_score_replicates(
            config.task.kind, rows, data.labels).items()})
        metrics[f"distill/{name}/parameters"] = float(count_parameters(model.model))
        metrics[f"distill/{name}/layers"] = float(model.model.config.num_hidden_layers)
    # Interleaved rounds: a slowdown of the machine mid-measurement hits both models.
    timings = compare_latency({name: model.model for name, model in models.items()},
                              eval_latency_batch(eval_features, pad_token_id, LATENCY_BATCH),
                              rounds=3, repeats=7)
    for name, timing in timings.items():
        metrics[f"distill/{name}/latency_ms"] = timing["median_ms"]
        metrics[f"distill/{name}/latency_p90_ms"] = timing["p90_ms"]
    metric = config.task.metric
    teacher_score = metrics[f"distill/teacher/{metric}"]
    metrics["distill/retained"] = metrics[f"distill/student/{metric}"] / teacher_score \
        if teacher_score > 0 else float("nan")
    # the same resampled examples for both models: the ratio pairs them item by item
    replicates["distill/retained"] = (replicates[f"distill/student/{metric}"]
                                      / replicates[f"distill/teacher/{metric}"])
    student_prefix = "distill/student/"
    replicates.update({f"eval/{k[len(student_prefix):]}": v for k, v in replicates.items()
                       if k.startswith(student_prefix)})
    write_replicates(out_dir, "eval", replicates, compute_item_ids(data.eval), data.eval_pool)
    metrics["distill/speedup"] = (metrics["distill/teacher/latency_ms"]
                                  / metrics["distill/student/latency_ms"])
    metrics["distill/latency_threads"] = float(torch.get_num_threads())
    metrics.update({f"eval/{k}": v for k, v in scores.items()})  # the student's
    write_predictions(rows, out_dir / "predictions.jsonl")
    log.info("%s", " ".join(f"{k}={v:.4g}" for k, v in sorted(metrics.items())
                            if k.startswith("distill/")))
    return metrics
