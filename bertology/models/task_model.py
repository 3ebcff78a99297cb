"""Task models: a checkpoint's encoder with a classification, tagging or span head.

The model is always a transformers `AutoModelFor<Task>` (what model/ saves, so plain
transformers loads it). With the paper's fine-tuning head (features=last, pooling=cls) its own
forward runs and the saved model reproduces every prediction. Other choices (mean pooling, a
frozen encoder read at other layers: BERT Table 7, a BiLSTM) put a `FeatureHead` on the
encoder's hidden states; it is saved beside the model as head.safetensors + head.json.
"""

from __future__ import annotations

import json
import logging
from operator import attrgetter
from pathlib import Path

import torch
from safetensors.torch import save_model
from torch import nn
from transformers import (
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    PretrainedConfig,
    PreTrainedModel,
)

from bertology.config.groups import HeadConfig
from bertology.errors import UserError, require
from bertology.families import attention_kernel, family_of_checkpoint, require_capability
from bertology.models.build import draw_random_encoder, twin_seed
from bertology.models.weights import load_safetensors_model
from bertology.run.atomic import write_dir_atomic

log = logging.getLogger(__name__)

AUTO_CLASSES = {"classification": AutoModelForSequenceClassification,
                "tagging": AutoModelForTokenClassification,
                "qa": AutoModelForQuestionAnswering}
INPUT_KEYS = ("input_ids", "attention_mask", "token_type_ids")
# what `bertology finetune` saves for each task kind: <Family><suffix>
ARCHITECTURE_SUFFIXES = {"classification": "ForSequenceClassification",
                         "tagging": "ForTokenClassification",
                         "qa": "ForQuestionAnswering"}


class ScalarMix(nn.Module):
    """γ · Σ_l softmax(w)_l · h_l over all layers (Peters et al., 2018; Tenney et al., 2019)."""

    def __init__(self, num_layers: int):
        super().__init__()
        self.weights = nn.Parameter(torch.zeros(num_layers))
        self.gamma = nn.Parameter(torch.ones(()))

    def forward(self, layers: list[torch.Tensor]) -> torch.Tensor:
        stacked = torch.stack(layers)  # (layers, batch, seq, hidden)
        weights = torch.softmax(self.weights, dim=0).view(-1, 1, 1, 1)
        return self.gamma * (weights * stacked).sum(dim=0)


def select_features(hidden: tuple[torch.Tensor, ...], features: str,
                    mix: ScalarMix | None) -> torch.Tensor:
    """BERT Table 7's choices over hidden states (layer 0 = embeddings ... L = last)."""
    if features == "embeddings":
        return hidden[0]
    if features == "last":
        return hidden[-1]
    if features == "second_to_last":
        return hidden[-2]
    if features == "sum_last_four":
        return torch.stack(hidden[-4:]).sum(dim=0)
    if features == "concat_last_four":
        return torch.cat(hidden[-4:], dim=-1)  # (batch, seq, 4 * hidden)
    return mix(list(hidden))


class FeatureHead(nn.Module):
    """features → (pooling) → (2-layer BiLSTM, BERT §5.3) → dropout → linear."""

    def __init__(self, cfg: HeadConfig, kind: str, num_layers: int, hidden: int, outputs: int):
        super().__init__()
        require(not cfg.features.endswith("_last_four") or num_layers >= 4,
                f"head.features={cfg.features} reads the last four hidden states, but the model "
                f"has {num_layers} (embeddings + {num_layers - 1} layers); pick a model with at "
                "least 3 layers or head.features=last")
        self.cfg, self.kind = cfg, kind
        self.mix = ScalarMix(num_layers) if cfg.features == "scalar_mix" else None
        width = 4 * hidden if cfg.features == "concat_last_four" else hidden
        self.lstm = None
        if cfg.lstm_hidden:
            self.lstm = nn.LSTM(width, cfg.lstm_hidden, num_layers=2, bidirectional=True,
                                batch_first=True)
            width = 2 * cfg.lstm_hidden
        self.dropout = nn.Dropout(cfg.dropout)
        self.classifier = nn.Linear(width, outputs)

    def forward(self, hidden: tuple[torch.Tensor, ...], mask: torch.Tensor) -> torch.Tensor:
        states = select_features(hidden, self.cfg.features, self.mix)  # (batch, seq, width)
        if self.lstm is not None:
            states, _ = self.lstm(states)
        if self.kind == "classification":
            states = pool(states, mask, self.cfg.pooling)  # (batch, width)
        return self.classifier(self.dropout(states))


def pool(states: torch.Tensor, mask: torch.Tensor, pooling: str) -> torch.Tensor:
    if pooling == "cls":
        return states[:, 0]
    weights = mask.unsqueeze(-1).to(states.dtype)  # (batch, seq, 1)
    return (states * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)


class TaskModel(nn.Module):
    def __init__(self, model: PreTrainedModel, kind: str, head: HeadConfig):
        super().__init__()
        self.model, self.kind, self.head_cfg = model, kind, head
        config = model.config
        outputs = 2 if kind == "qa" else config.num_labels
        self.head = None if head.standard else FeatureHead(
            head, kind, config.num_hidden_layers + 1, config.hidden_size, outputs)
        if head.layer_lr_decay != 1.0:  # layer_lr_scale reads each layer's own weights
            require_capability(config.model_type, "layer_modules",
                               f"head.layer_lr_decay={head.layer_lr_decay}")
        if head.mode == "feature":
            self.encoder.requires_grad_(False)
        elif head.freeze_layers:
            freeze_lower_layers(self.encoder, head.freeze_layers)

    @property
    def encoder(self) -> nn.Module:
        return self.model.base_model

    def train(self, mode: bool = True) -> TaskModel:
        super().train(mode)
        if self.head_cfg.mode == "feature":  # a frozen encoder gives fixed features: no dropout
            self.encoder.eval()
        return self

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Logits: (batch, labels), (batch, seq, labels), or (batch, seq, 2) for start/end."""
        inputs = {k: batch[k] for k in INPUT_KEYS if k in batch}
        if self.head is None:
            out = self.model(**inputs)
            if self.kind == "qa":
                return torch.stack([out.start_logits, out.end_logits], dim=-1)
            return out.logits
        with torch.set_grad_enabled(self.training and self.head_cfg.mode == "finetune"):
            hidden = self.encoder(**inputs, output_hidden_states=True).hidden_states
        return self.head(hidden, batch["attention_mask"])


def freeze_lower_layers(encoder: nn.Module, k: int) -> None:
    """Embeddings and layers 1..k stop training (the survey's 'freeze the lower layers')."""
    require_capability(encoder.config.model_type, "layer_modules", f"head.freeze_layers={k}")
    layers = attrgetter(family_of_checkpoint(encoder.config.model_type).layers)(encoder)
    if k > len(layers):
        raise UserError(f"head.freeze_layers={k} exceeds the model's {len(layers)} layers")
    encoder.embeddings.requires_grad_(False)
    for layer in layers[:k]:
        layer.requires_grad_(False)


def layer_lr_scale(name: str, num_layers: int, decay: float,
                   layers_path: str = "encoder.layer") -> float:
    """Layer-wise learning-rate decay (ELECTRA App. A): the head trains at the full rate,
    layer i (1-based) at decay^(L - i + 1), the embeddings at decay^(L + 1). `layers_path`:
    the family's (families.py), "layers" in ModernBERT."""
    if decay == 1.0:
        return 1.0
    if ".embeddings." in f".{name}":
        return decay ** (num_layers + 1)
    marker = f".{layers_path.rpartition('.')[2]}."
    if marker in name:
        index = int(name.split(marker, 1)[1].split(".", 1)[0])  # 0-based
        return decay ** (num_layers - index)
    return 1.0


def build_task_model(name_or_path: str | None, config, kind: str, labels: list[str],
                     head: HeadConfig, random_init: bool, attn_implementation: str,
                     seed: int = 0) -> TaskModel:
    """From a checkpoint (or a config, for random init); the task head is newly initialised.
    random_init: the encoder is the random-init twin of seed `seed` (load_twin_encoder)."""
    auto = AUTO_CLASSES[kind]
    attn_implementation = attention_kernel(config.model_type, attn_implementation)
    if kind != "qa":
        config.num_labels = len(labels)
        config.id2label = dict(enumerate(labels))
        config.label2id = {label: i for i, label in enumerate(labels)}
    if random_init or name_or_path is None:
        model = auto.from_config(config, attn_implementation=attn_implementation)
        if random_init:
            load_twin_encoder(model, seed, name_or_path)
    else:
        model = load_safetensors_model(auto, name_or_path, config=config,
                             attn_implementation=attn_implementation)
    return TaskModel(model, kind, head)


def load_twin_encoder(model: PreTrainedModel, seed: int, checkpoint: str | None) -> None:
    """The task model's encoder becomes the random-init twin of seed `seed`: the weights a
    probe of that seed contrasts with (models/build.py twin_seed), so that the twin fine-tuned
    here and the probe's twin are one network before and after fine-tuning (CKA compares
    them layer by layer). Drawn beside the run's random stream, which goes on untouched."""
    with torch.random.fork_rng():
        twin = draw_random_encoder(model.config, twin_seed(seed, checkpoint))
    # an encoder class may keep a pooler the task class drops (RoBERTa): unexpected, unused
    missing, _ = model.base_model.load_state_dict(twin.state_dict(), strict=False)
    require(not missing, f"the random-init twin's encoder lacks {', '.join(missing)} of "
            f"{type(model).__name__}'s encoder")


def save_task_model(model: TaskModel, path: Path) -> None:
    """save_pretrained (safetensors) + the FeatureHead, if any, beside it."""
    model.model.save_pretrained(path)
    if model.head is not None:
        save_model(model.head, str(path / "head.safetensors"))
        (path / "head.json").write_text(json.dumps(vars(model.head_cfg), indent=2) + "\n")


def write_task_model(model: TaskModel, tokenizer, path: Path) -> None:
    """What model/ and every training checkpoint hold: the AutoModelFor* (+ a FeatureHead
    beside it) and the tokenizer."""
    save_task_model(model, path)
    tokenizer.save_pretrained(path)


def save_task_model_atomic(model, tokenizer, path: Path) -> None:
    """model/ appears whole or not at all, as in pretraining."""
    write_dir_atomic(path, lambda tmp: write_task_model(model, tokenizer, tmp))


def is_task_checkpoint(config: PretrainedConfig, kind: str) -> bool:
    """Whether a checkpoint already carries a head for this kind of task."""
    return any(a.endswith(ARCHITECTURE_SUFFIXES[kind]) for a in config.architectures or [])


def check_task_checkpoint(path: str, config: PretrainedConfig, key: str, kind: str,
                          task_name: str, labels: list[str]) -> None:
    """A checkpoint fine-tuned on this task with the standard head (what `bertology finetune`
    writes to model/): a supported family, the task's head and label count. `key` names the
    option the path came from, for the error line."""
    family_of_checkpoint(config.model_type, f"{key}={path!r}")
    require(is_task_checkpoint(config, kind),
            f"{key}={path!r} is not a {kind} model (architectures: {config.architectures}); "
            f"give a finetune run's model/ for task={task_name}")
    require(not (Path(path) / "head.json").exists(),
            f"{key}={path!r} has a bertology feature head (head.json); this needs the standard "
            "fine-tuning head (finetune head.mode=finetune head.features=last head.pooling=cls)")
    if kind == "qa":
        return
    require(config.num_labels == len(labels),
            f"{key}={path!r} predicts {config.num_labels} labels but task={task_name} has "
            f"{len(labels)}; give a model fine-tuned on this task")
    names = [config.id2label[i] for i in range(config.num_labels)]
    if names != list(labels):
        log.warning("%s's labels %s are named differently from task %s's %s; they are matched "
                    "by position", path, names, task_name, labels)
