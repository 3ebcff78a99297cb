"""Students for knowledge distillation: a smaller model that keeps the teacher's tokenizer.

student.init=teacher_layers is DistilBERT's initialisation (Sanh et al., 2019, §3): the
teacher's architecture with k of its L layers, the student's embeddings, chosen layers and task
head copied from the teacher ("taking one layer out of two"). student.init=random is a model of
size= (the Turc et al., 2019 miniatures; TinyBERT's student) with new weights and the teacher's
vocabulary. Either way the student is a plain AutoModelFor<Task>, so model/ loads in transformers.
"""

from __future__ import annotations

import copy
import logging
import re

import torch
from transformers import PretrainedConfig, PreTrainedModel

from bertology.config.distill import StudentConfig, choose_layers
from bertology.config.groups import SizeConfig
from bertology.families import family_of_checkpoint
from bertology.models.task_model import AUTO_CLASSES

log = logging.getLogger(__name__)

# "<prefix>.encoder.layer.<i>.<rest>" in every BERT-family state dict (bert, roberta, electra)
LAYER_KEY = re.compile(r"^(.*\.)?encoder\.layer\.(\d+)\.(.*)$")


def student_config(teacher_config: PretrainedConfig, num_layers: int,
                   size: SizeConfig | None = None) -> PretrainedConfig:
    """The teacher's config (vocabulary, positions, labels) with k layers, or of size=."""
    config = copy.deepcopy(teacher_config)
    config.num_hidden_layers = num_layers
    if size is not None:
        for key, value in vars(size).items():
            setattr(config, key, value)
        if family_of_checkpoint(config.model_type).embedding_size_is_hidden:
            config.embedding_size = size.hidden_size
    return config


def select_layer_weights(teacher_state: dict[str, torch.Tensor], layers: list[int]
                         ) -> dict[str, torch.Tensor]:
    """The teacher's state dict with only `layers`, renumbered 0..k-1; everything outside the
    encoder's layers (embeddings, pooler, task head) is kept as it is."""
    position = {teacher_layer: student_layer for student_layer, teacher_layer in enumerate(layers)}
    selected = {}
    for key, value in teacher_state.items():
        match = LAYER_KEY.match(key)
        if match is None:
            selected[key] = value
        elif int(match.group(2)) in position:
            prefix, rest = match.group(1) or "", match.group(3)
            selected[f"{prefix}encoder.layer.{position[int(match.group(2))]}.{rest}"] = value
    return selected


def build_student(teacher: PreTrainedModel, kind: str, cfg: StudentConfig, size: SizeConfig,
                  attn_implementation: str) -> tuple[PreTrainedModel, list[int] | None]:
    """(student AutoModelFor<kind>, the teacher layers it copies; None for random init)."""
    auto = AUTO_CLASSES[kind]
    if cfg.init == "random":
        config = student_config(teacher.config, size.num_hidden_layers, size)
        return auto.from_config(config, attn_implementation=attn_implementation), None
    layers = choose_layers(teacher.config.num_hidden_layers, cfg)
    student = auto.from_config(student_config(teacher.config, len(layers)),
                               attn_implementation=attn_implementation)
    weights = select_layer_weights(teacher.state_dict(), layers)
    student.load_state_dict(weights, strict=True)
    log.info("student: teacher layers %s (of %d)", layers, teacher.config.num_hidden_layers)
    return student, layers


def default_layer_map(num_student: int, num_teacher: int, copied: list[int] | None
                      ) -> list[int]:
    """Student hidden state i (0 = embeddings) ↔ teacher hidden state map[i]: the output of the
    layer each student layer was copied from, or TinyBERT's uniform map g(m) = m·L/k."""
    if copied is not None:
        return [0, *(layer + 1 for layer in copied)]
    return [round(m * num_teacher / num_student) for m in range(num_student + 1)]
