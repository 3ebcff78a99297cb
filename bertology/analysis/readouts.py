"""What an intervention's effect is read on: the model's own predictions (Elazar et al., 2021,
§3: a property is *used* when removing it changes what the model predicts).

- task: a fine-tuned sequence classifier's predictions on its task's eval examples (the
  readout of a checkpoint without an MLM head, e.g. all-MiniLM-L6-v2 fine-tuned on SST-2);
- mlm: the masked LM's predictions at masked words of the probe sentences (Elazar et al.'s
  own readout), a seeded `mask_prob` of the one-sub-word words masked in one forward pass.

An intervention acts at every non-padding token of a batch ([CLS] and [SEP] included: a
classifier reads [CLS], and Elazar et al. project every position). The unperturbed logits are
computed once per readout; per item (an example, or a sentence's masked words) and condition,
compute_readout_effects counts the predictions scored, those whose top-1 changed, the summed
D_KL(p_original ‖ p_intervened) and the correct ones, so that every metric is a ratio of sums
over items and its bootstrap replicates resample items (run/replicates.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm
from transformers import AutoModelForSequenceClassification, PreTrainedModel

from bertology.analysis.amnesic import build_setting_batches, compute_kl_divergence
from bertology.analysis.interventions import Intervention, Site, intervene
from bertology.config.compose import load_group_file
from bertology.config.data_checks import reads_local_files
from bertology.config.groups import TaskConfig
from bertology.config.path_checks import (
    check_task_architecture,
    read_checkpoint,
    resolve_checkpoint,
)
from bertology.data.encode import IGNORE, build_collate, encode_classification
from bertology.data.probe_sentences import ProbeSentence
from bertology.data.tasks import LOCAL_READERS, load_task, split_files, subsample
from bertology.errors import require
from bertology.models.weights import load_safetensors_model
from bertology.run.replicates import (
    MIN_BOOTSTRAP_ITEMS,
    compute_item_ids,
    compute_sentence_ids,
)

COUNTS = ("scored", "flips", "kl", "correct")  # per item and condition (compute_readout_effects)


@dataclass
class Readout:
    """A model, its batches and what each batch scores: `targets` (batch,) class labels of a
    classifier, or (batch, tokens) token ids at masked positions and IGNORE elsewhere."""

    kind: str  # task | mlm
    model: PreTrainedModel
    batches: list[dict[str, torch.Tensor]]  # model inputs
    targets: list[torch.Tensor]
    item_ids: list[str]  # one per item, in batch order
    pool: int  # the eval set the items were drawn from
    original: list[torch.Tensor] | None = None  # per batch, (scored, classes) logits unperturbed


def positions_of(inputs: dict[str, torch.Tensor]) -> list[list[int]]:
    """Every non-padding token of each example (the intervention's positions)."""
    lengths = inputs["attention_mask"].sum(dim=1).tolist()  # (batch,)
    return [list(range(int(n))) for n in lengths]


def scored_targets(readout: Readout, index: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Batch `index`'s (scored,) targets and (scored,) the row (example) of each."""
    targets = readout.targets[index]
    if readout.kind == "task":
        return targets, torch.arange(len(targets))
    scored = targets != IGNORE  # (batch, tokens)
    return targets[scored], scored.nonzero()[:, 0]


def scored_logits(readout: Readout, logits: torch.Tensor, index: int) -> torch.Tensor:
    """(scored, classes) the logits of batch `index` at what it scores."""
    if readout.kind == "task":
        return logits  # (batch, classes)
    return logits[(readout.targets[index] != IGNORE).to(logits.device)]


@torch.no_grad()
def run_readout(readout: Readout, index: int, site: Site | None = None,
                intervention: Intervention | None = None) -> torch.Tensor:
    """The logits of batch `index`, with the intervention at `site` where one is given."""
    device = next(readout.model.parameters()).device
    inputs = {k: v.to(device) for k, v in readout.batches[index].items()}
    if intervention is None:
        return readout.model(**inputs).logits
    with intervene(readout.model, site, positions_of(inputs), intervention):
        return readout.model(**inputs).logits


def cache_original(readout: Readout) -> Readout:
    readout.original = [scored_logits(readout, run_readout(readout, i), i)
                        for i in range(len(readout.batches))]
    return readout


def compute_readout_effects(readout: Readout, layer: int, conditions: dict[str, Intervention],
                         desc: str) -> dict[str, dict[str, np.ndarray]]:
    """Per condition (and "original"), per item: COUNTS as (items,) arrays."""
    items = len(readout.item_ids)
    out = {c: {k: np.zeros(items) for k in COUNTS} for c in ("original", *conditions)}
    start = 0
    for index in tqdm(range(len(readout.batches)), desc=desc, leave=False):
        original = readout.original[index]
        targets, rows = scored_targets(readout, index)
        targets, rows_np = targets.to(original.device), rows.numpy() + start
        for condition in out:
            logits = original
            if condition != "original":
                logits = scored_logits(readout, run_readout(
                    readout, index, Site(layer), conditions[condition]), index)
            counts = out[condition]
            np.add.at(counts["scored"], rows_np, 1.0)
            np.add.at(counts["flips"], rows_np,
                      (logits.argmax(-1) != original.argmax(-1)).double().cpu().numpy())
            np.add.at(counts["kl"], rows_np, compute_kl_divergence(original, logits).cpu().numpy())
            np.add.at(counts["correct"], rows_np,
                      (logits.argmax(-1) == targets).double().cpu().numpy())
        start += len(readout.batches[index]["input_ids"])
    return out


# ---------------------------------------------------------------- building the two readouts


def load_classifier(path: str, task_name: str, key: str) -> PreTrainedModel:
    """A `bertology finetune` model/ of a classification task (config.json's architectures say
    so); the head is the paper's (features=last, pooling=cls): one that saved a FeatureHead
    beside the model is not what the model's own forward computes."""
    resolved = resolve_checkpoint(path)
    config = read_checkpoint(path, key)  # None: a hub id, whose config transformers reads
    if config is not None:
        check_task_architecture(config, "classification", key, path, task_name)
    require(not (Path(resolved) / "head.json").exists(), f"{key}={path!r} has a feature head "
            "(head.json) that the model's own forward does not run; give a model fine-tuned "
            "with head.features=last and head.pooling=cls")
    model = load_safetensors_model(AutoModelForSequenceClassification, resolved,
                                   attn_implementation="sdpa")
    return model.eval()


def load_eval_examples(task: TaskConfig, data_dir) -> tuple[list[dict], int]:
    """The task's eval examples, sampled as load_task samples them (task.max_eval_examples,
    seed 1), and the size of the eval set; a local file is read alone (SST-2's 67k training
    phrases are not what the readout scores), anything else through load_task."""
    if task.format not in LOCAL_READERS or not reads_local_files(task, data_dir):
        data = load_task(task, data_dir)
        return data.eval, data.eval_pool
    examples = LOCAL_READERS[task.format](split_files(task, data_dir)[1], task)
    require(len(examples) >= MIN_BOOTSTRAP_ITEMS, f"task={task.name}: {len(examples)} eval "
            "example; the readout's intervals resample examples")
    return subsample(examples, task.max_eval_examples, seed=1), len(examples)


def build_task_readout(model: PreTrainedModel, tokenizer, task_name: str, data_dir,
                       max_examples: int, batch_size: int) -> Readout:
    """The task's eval examples (a seeded sample of max_examples), encoded as finetune does."""
    task = TaskConfig(**{**load_group_file("task", task_name), "max_eval_examples": max_examples})
    require(task.kind == "classification", f"analysis.erasure_use.task={task_name} is a "
            f"{task.kind} task; the task readout reads a sequence classifier")
    examples, pool = load_eval_examples(task, data_dir)
    features = encode_classification(examples, tokenizer, task)
    collate = build_collate(tokenizer.pad_token_id)
    batches, targets = [], []
    for start in range(0, len(features), batch_size):
        batch = collate(features[start: start + batch_size])
        targets.append(batch.pop("labels"))  # (batch,)
        batches.append(batch)
    ids = compute_item_ids([[e["text"], e["text_pair"]] for e in examples])
    return cache_original(Readout("task", model, batches, targets, ids, pool))


def build_mlm_readout(model: PreTrainedModel, tokenizer, sentences: list[ProbeSentence],
                      mask_prob: float, seed: int, batch_size: int, max_length: int) -> Readout:
    """The probe's eval sentences with a seeded `mask_prob` of their one-sub-word words masked
    (amnesic.py's masked setting); every masked word is scored, labelled or not."""
    unlabelled = [ProbeSentence(s.words, tuple("w" for _ in s.words)) for s in sentences]
    setting = build_setting_batches(tokenizer, unlabelled, "masked", mask_prob, [seed, 2],
                                    batch_size, max_length)
    require(any(bool((b.targets != IGNORE).any()) for b in setting), "no word was masked; "
            "raise analysis.erasure_use.mask_prob or the number of eval sentences")
    return cache_original(Readout("mlm", model.eval(), [b.inputs for b in setting],
                                  [b.targets for b in setting], compute_sentence_ids(sentences),
                                  len(sentences)))
