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

from bertology.config.distill_config import StudentConfig, choose_layers
from bertology.config.groups import SizeConfig
from bertology.errors import require
from bertology.families import (
    attention_kernel,
    config_names_of,
    family_of_checkpoint,
    require_capability,
)
from bertology.models.task_model import AUTO_CLASSES

log = logging.getLogger(__name__)

def layer_key(layers_path: str) -> re.Pattern:
    """"<prefix>.<layers>.<i>.<rest>": "encoder.layer" in BERT, RoBERTa, ELECTRA state dicts,
    "layers" in ModernBERT's (families.py's `layers`)."""
    return re.compile(rf"^(.*\.)?{re.escape(layers_path)}\.(\d+)\.(.*)$")


def student_config(teacher_config: PretrainedConfig, num_layers: int,
                   size: SizeConfig | None = None, layers: list[int] | None = None
                   ) -> PretrainedConfig:
    """The teacher's config (vocabulary, positions, labels) with k layers, or of size=.
    `layers`: the teacher layers the student copies, whose kinds (ModernBERT's global or local
    attention, config.layer_types) it keeps; a student of size= takes the family's pattern."""
    family = family_of_checkpoint(teacher_config.model_type)
    config = copy.deepcopy(teacher_config)
    config.num_hidden_layers = num_layers
    if size is not None:
        shape = vars(size) | {
            "intermediate_size": round(size.intermediate_size * family.intermediate_fraction)}
        for key, value in shape.items():  # under the config's names (DistilBERT: hidden_dim)
            for name in config_names_of(family, key):
                setattr(config, name, value)
        if family.embedding_size_is_hidden:
            config.embedding_size = size.hidden_size
    kinds = getattr(teacher_config, "layer_types", None)
    if kinds is not None:
        if layers is not None:
            config.layer_types = [kinds[i] for i in layers]
        else:  # the class's own pattern for this depth (ModernBERT: global every n-th)
            fields = {k: v for k, v in config.to_dict().items() if k != "layer_types"}
            config = type(config)(**fields)
    return config


def select_layer_weights(teacher_state: dict[str, torch.Tensor], layers: list[int],
                         layers_path: str = "encoder.layer") -> dict[str, torch.Tensor]:
    """The teacher's state dict with only `layers`, renumbered 0..k-1; everything outside the
    encoder's layers (embeddings, pooler, task head) is kept as it is."""
    position = {teacher_layer: student_layer for student_layer, teacher_layer in enumerate(layers)}
    pattern = layer_key(layers_path)
    selected = {}
    for key, value in teacher_state.items():
        match = pattern.match(key)
        if match is None:
            selected[key] = value
        elif int(match.group(2)) in position:
            prefix, rest = match.group(1) or "", match.group(3)
            selected[f"{prefix}{layers_path}.{position[int(match.group(2))]}.{rest}"] = value
    return selected


def build_student(teacher: PreTrainedModel, kind: str, cfg: StudentConfig, size: SizeConfig,
                  attn_implementation: str) -> tuple[PreTrainedModel, list[int] | None]:
    """(student AutoModelFor<kind>, the teacher layers it copies; None for random init)."""
    auto = AUTO_CLASSES[kind]
    attn_implementation = attention_kernel(teacher.config.model_type, attn_implementation)
    if cfg.init == "random":
        config = student_config(teacher.config, size.num_hidden_layers, size)
        return auto.from_config(config, attn_implementation=attn_implementation), None
    require_capability(teacher.config.model_type, "layer_modules",
                       "student.init=teacher_layers", "the teacher")
    layers = choose_layers(teacher.config.num_hidden_layers, cfg)
    student = auto.from_config(student_config(teacher.config, len(layers), layers=layers),
                               attn_implementation=attn_implementation)
    layers_path = family_of_checkpoint(teacher.config.model_type).layers
    weights = select_layer_weights(teacher.state_dict(), layers, layers_path)
    load_student_weights(student, weights)
    log.info("student: teacher layers %s (of %d)", layers, teacher.config.num_hidden_layers)
    return student, layers


def load_student_weights(student: PreTrainedModel, weights: dict[str, torch.Tensor]) -> None:
    """The copied weights, every parameter of the student from the teacher. A copied layer's
    weight the student's layer has no place for is left out, said in the log: ModernBERT's
    first layer has no attention norm (it reads the normalised embeddings), so a teacher layer
    above the first, copied there, loses its own."""
    missing, unexpected = student.load_state_dict(weights, strict=False)
    missing = sorted(set(missing) - set(getattr(student, "all_tied_weights_keys", {})))
    require(not missing, f"the student has weights the teacher does not: {missing}")
    if unexpected:
        log.info("student: not copied, no place for them in its layers: %s", unexpected)


def default_layer_map(num_student: int, num_teacher: int, copied: list[int] | None
                      ) -> list[int]:
    """Student hidden state i (0 = embeddings) ↔ teacher hidden state map[i]: the output of the
    layer each student layer was copied from, or TinyBERT's uniform map g(m) = m·L/k."""
    if copied is not None:
        return [0, *(layer + 1 for layer in copied)]
    return [round(m * num_teacher / num_student) for m in range(num_student + 1)]
