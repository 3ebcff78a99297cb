"""The planted-truth check of the intervention engine: does a BERT pretrained on the embedded
grammar *use* its subject's number to predict the verb's form, and at which layers?

For every minimal pair of agreement_items.py and every layer L (0 = embeddings … the top), the
residual stream at the subject noun's token(s) is replaced by the counterfactual sentence's
(the subject in the other number) at the same positions: Geiger et al.'s (2021) interchange
intervention, the causal mediation of Finlayson et al. (2021). The readout is the masked-LM's
preference between the agreeing word's singular and plural forms at the masked verb,
d = logit(singular) − logit(plural).

Per item and layer:
- effect: [after the interchange the MLM prefers the counterfactual's form] − [it did
  before], in {−1, 0, 1}; its mean is the net share of items whose preferred form flips to the
  counterfactual number. A share, not a logit change, so a threshold (0.5) means the same on
  any model: a model whose logits barely move but cross zero near it (an untrained one) does
  not read as "using" number, and flips in both directions cancel.
- logit_shift: the change of d towards the counterfactual's form: the log of Finlayson et
  al.'s ratio change p(cf form)/p(base form) (the softmax's normaliser cancels in a ratio).
- control: the same interchange at as many positions of other words (neither the subject nor
  the verb, drawn at random with the run's seed, aligned in the pair): number reaches them
  only through attention to the subject, so what the control moves is what the layer has
  already spread beyond the subject. Reported as effect − control, per item (paired).

Beside the effect, a linear probe decodes the subject's number from the subject's first
sub-word at each layer (trained on the train split's items, scored on the eval split's):
"decodable" beside "used". The random-init twin (the checkpoint's architecture with fresh
weights, models/build.py twin_seed) is measured the same way under interchange/random/: it
can decode number from the word's identity but, untrained, uses none of it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch
from transformers import AutoModelForMaskedLM, PreTrainedModel

from bertology.analysis.agreement_figure import plot_decodable_vs_used
from bertology.analysis.agreement_items import (
    InterchangeItem,
    build_items,
    choose_control_positions,
    collate_items,
)
from bertology.analysis.fitted_head import fit_head
from bertology.analysis.inlp import compute_majority_accuracy, fit_linear_probe
from bertology.analysis.interventions import Site, extract_interchange, intervene
from bertology.analysis.probe_context import ProbeContext, device
from bertology.config.analysis_settings import AgreementInterchangeSettings
from bertology.errors import require
from bertology.models.build import twin_seed
from bertology.run.replicates import (
    bootstrap_indices,
    compute_item_ids,
    compute_mean_replicates,
    write_replicates,
)
from bertology.run.tables import write_table

log = logging.getLogger(__name__)

INTERCHANGE_PREFIX = "interchange"
# metrics.json: interchange/layer_LL/... (the model), interchange/random/layer_LL/... (its twin)
INTERCHANGE_SCOPES = {"model": "", "random": "random/"}
CONTROL_STREAM = 1  # the control positions' draws: a stream of the run's seed of their own
# best/…: the layer of the largest effect − control, the embeddings included, where the
# interchange at the subject is the counterfactual input itself (the total effect of the
# subject's number, Finlayson et al.'s); best_hidden/…: among the layers' outputs only, where it
# is the subject's representation that was computed (their indirect effect through it)
BEST_OVER = {"best": 0, "best_hidden": 1}


@dataclass(frozen=True)
class AgreementReadings:
    """The MLM's preference d = logit(singular) − logit(plural) at the masked verb, per item."""

    base: np.ndarray  # (items,) the base input, unpatched
    counterfactual: np.ndarray  # (items,) the counterfactual input, unpatched
    subject: np.ndarray  # (layers + 1, items) the base with layer L's subject interchanged
    control: np.ndarray  # (layers + 1, items) ... with layer L's control positions interchanged


# ---------------------------------------------------------------- the models


def draw_twin_mlm(model: PreTrainedModel, seed: int) -> PreTrainedModel:
    """The checkpoint's architecture with its MLM head, freshly initialised after
    manual_seed(seed) (transformers' init; the decoder tied to the new embeddings), without
    touching the run's own random stream."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        twin = AutoModelForMaskedLM.from_config(model.config)
    return twin.to(device()).eval()


def load_readout(ctx: ProbeContext, settings: AgreementInterchangeSettings
                 ) -> tuple[PreTrainedModel, bool]:
    """The checkpoint in its masked-LM class, and whether the readout is a fitted head
    (settings.head; auto: where the checkpoint has none). A checkpoint without a head under
    head=own is refused in one line, before anything runs."""
    model, missing = ctx.masked_lm()
    fitted = settings.head == "fitted" or (settings.head == "auto" and bool(missing))
    require(fitted or not missing, f"model.name_or_path={ctx.config.model.name_or_path!r} has "
            f"no masked-LM head (missing {missing[0] if missing else ''}); "
            "analysis=agreement_interchange reads one: use a bertology pretrain model/ dir, or "
            "set analysis.agreement_interchange.head=fitted (or auto) to fit one on the frozen "
            "encoder")
    return model, fitted


def build_mlm_models(ctx: ProbeContext, settings: AgreementInterchangeSettings,
                     model: PreTrainedModel, fitted: bool) -> dict[str, PreTrainedModel]:
    """"model": the checkpoint's MLM (init=random: its architecture at random, drawn from
    seed=, as the probe's init=random encoder is); "random": the random-init twin. With a
    fitted readout each gets a head trained on its own frozen encoder (fitted_head.py)."""
    path = ctx.config.model.name_or_path
    models = {"model": model if ctx.config.init == "pretrained"
              else draw_twin_mlm(model, ctx.config.seed)}
    if settings.random_init:
        models["random"] = draw_twin_mlm(model, twin_seed(ctx.config.seed, path))
    if fitted:
        tokenizer = ctx.encoder("model").tokenizer
        for scope, mlm in models.items():
            log.info("fitting the %s's masked-LM head on its frozen encoder", scope)
            fit_head(mlm, tokenizer, ctx.sentences("train"), ctx.config.seed,
                     steps=settings.head_steps, max_length=ctx.config.task.max_seq_length)
    return models


# ---------------------------------------------------------------- the readout


def compute_preference(logits: torch.Tensor, items: list[InterchangeItem]) -> np.ndarray:
    """(batch, tokens, vocab) → (batch,) logit(singular) − logit(plural) at each masked verb."""
    rows = torch.arange(len(items))
    verbs = torch.tensor([i.verb_position for i in items])
    forms = torch.tensor([i.form_ids for i in items])  # (batch, 2)
    at_verb = logits[rows, verbs].float()  # (batch, vocab)
    chosen = at_verb.gather(1, forms.to(at_verb.device))  # (batch, 2)
    return (chosen[:, 0] - chosen[:, 1]).cpu().numpy().astype(np.float64)


@torch.no_grad()
def extract_patched_preference(model: PreTrainedModel, base: dict, counterfactual: dict,
                               items: list[InterchangeItem], layer: int,
                               positions: list[list[int]]) -> np.ndarray:
    """(batch,) d on the base input with the site's values at `positions` (per example)
    taken from the counterfactual input at the same positions."""
    site = Site(layer=layer)
    swap = extract_interchange(model, counterfactual, site, positions)
    with intervene(model, site, positions, swap):
        return compute_preference(model(**base).logits, items)


@torch.no_grad()
def extract_readings(model: PreTrainedModel, items: list[InterchangeItem],
                     controls: list[list[int]], batch_size: int, pad_id: int) -> AgreementReadings:
    """Every item's d unpatched, on the counterfactual, and interchanged at each layer at the
    subject and at the control positions."""
    layers = range(model.config.num_hidden_layers + 1)
    parts: dict[str, list] = {"base": [], "counterfactual": [], "subject": [], "control": []}
    for start in range(0, len(items), batch_size):
        chunk, chunk_controls = items[start:start + batch_size], controls[start:start + batch_size]
        base, other = (
            {k: v.to(device()) for k, v in inputs.items()}
            for inputs in collate_items(chunk, pad_id))
        subjects = [i.subject_positions for i in chunk]
        parts["base"].append(compute_preference(model(**base).logits, chunk))
        parts["counterfactual"].append(compute_preference(model(**other).logits, chunk))
        parts["subject"].append(np.stack([extract_patched_preference(
            model, base, other, chunk, layer, subjects) for layer in layers]))
        parts["control"].append(np.stack([extract_patched_preference(
            model, base, other, chunk, layer, chunk_controls) for layer in layers]))
    return AgreementReadings(np.concatenate(parts["base"]), np.concatenate(parts["counterfactual"]),
                    np.concatenate(parts["subject"], axis=1),
                    np.concatenate(parts["control"], axis=1))


# ---------------------------------------------------------------- per-item arithmetic


def compute_toward(items: list[InterchangeItem]) -> np.ndarray:
    """(items,) +1 where the counterfactual's form is the singular (the base subject is
    plural: d rises towards it), −1 where it is the plural."""
    return np.array([1.0 if i.pair.number == "plur" else -1.0 for i in items])


def compute_item_effects(readings: AgreementReadings, toward: np.ndarray) -> dict[str, np.ndarray]:
    """(layers + 1, items) per-item effects: the net flip to the counterfactual's form
    (effect, control, their paired difference) and the logit shift towards it."""
    before = (toward * readings.base > 0).astype(np.float64)  # (items,)
    effect = (toward * readings.subject > 0) - before  # (layers + 1, items)
    control = (toward * readings.control > 0) - before
    return {"effect": effect, "control": control, "effect_minus_control": effect - control,
            "logit_shift": toward * (readings.subject - readings.base),
            "control_logit_shift": toward * (readings.control - readings.base)}


def compute_verb_accuracy(readings: AgreementReadings, toward: np.ndarray) -> dict[str, np.ndarray]:
    """(items,) whether the MLM prefers the right form on the base and on the counterfactual
    input (the base's right form is the one away from the counterfactual's)."""
    return {"verb_accuracy": (toward * readings.base < 0).astype(np.float64),
            "counterfactual_verb_accuracy": (toward * readings.counterfactual > 0)
            .astype(np.float64)}


# ---------------------------------------------------------------- decodable: the probe


@torch.no_grad()
def extract_subject_states(model: PreTrainedModel, items: list[InterchangeItem],
                           batch_size: int, pad_id: int) -> np.ndarray:
    """(layers + 1, items, dim) each layer's hidden state at the subject's first sub-word of
    the base input."""
    states = []
    for start in range(0, len(items), batch_size):
        chunk = items[start:start + batch_size]
        base, _ = collate_items(chunk, pad_id)
        hidden = model(**{k: v.to(device()) for k, v in base.items()},
                       output_hidden_states=True).hidden_states  # (layers + 1) × (b, t, dim)
        rows = torch.arange(len(chunk))
        firsts = torch.tensor([i.subject_positions[0] for i in chunk])
        states.append(torch.stack([h[rows, firsts] for h in hidden]).float().cpu().numpy())
    return np.concatenate(states, axis=1)


def fit_number_probes(train: np.ndarray, y_train: np.ndarray, test: np.ndarray,
                      y_test: np.ndarray, seed: int) -> np.ndarray:
    """(layers + 1, test items) whether a logistic-regression probe per layer, fit on the train
    items' subject states, gets each test item's subject number right."""
    return np.stack([fit_linear_probe(train[layer], y_train, seed).predict(test[layer])
                     == y_test for layer in range(train.shape[0])]).astype(np.float64)


# ---------------------------------------------------------------- one encoder


def measure_encoder(model: PreTrainedModel, items: dict[str, list[InterchangeItem]],
                    controls: list[list[int]], batch_size: int, pad_id: int, seed: int
                    ) -> dict[str, np.ndarray]:
    """Per-item values of one encoder on the eval items: the effects of agreement and the
    probe's hits, (layers + 1, items) each, and its verb accuracies, (items,) each."""
    readings = extract_readings(model, items["eval"], controls, batch_size, pad_id)
    toward = compute_toward(items["eval"])
    numbers = {split: np.array([i.pair.number for i in items[split]]) for split in items}
    states = {split: extract_subject_states(model, items[split], batch_size, pad_id)
              for split in items}
    hits = fit_number_probes(states["train"], numbers["train"], states["eval"],
                             numbers["eval"], seed)
    return {**compute_item_effects(readings, toward), "probe_accuracy": hits,
            **compute_verb_accuracy(readings, toward)}


def interchange_key(scope: str, layer: int | None, name: str) -> str:
    """The metrics.json key of one encoder's value: at a layer, or of the whole run (None)."""
    at = "" if layer is None else f"layer_{layer:02d}/"
    return f"{INTERCHANGE_PREFIX}/{INTERCHANGE_SCOPES[scope]}{at}{name}"


def summarise_encoder(values: dict[str, np.ndarray], scope: str, indices: np.ndarray
                      ) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """metrics.json keys and their item replicates (the mean over a resample of the items,
    every encoder and layer on the same resamples): per layer, the means of the per-item
    values; the best layer (largest effect − control) and its values under best/."""
    metrics, columns = {}, {}
    for name, per_item in values.items():
        if per_item.ndim == 1:  # a number per item, not per layer
            key = interchange_key(scope, None, name)
            metrics[key], columns[key] = float(per_item.mean()), compute_mean_replicates(
                per_item, indices)
            continue
        for layer, row in enumerate(per_item):
            key = interchange_key(scope, layer, name)
            metrics[key], columns[key] = float(row.mean()), compute_mean_replicates(row, indices)
    net = values["effect_minus_control"].mean(axis=1)  # (layers + 1,)
    for prefix, first in BEST_OVER.items():
        best = first + int(np.argmax(net[first:]))
        metrics[interchange_key(scope, None, f"{prefix}_layer")] = float(best)
        for name in ("effect", "control", "effect_minus_control"):
            key = interchange_key(scope, None, f"{prefix}/{name}")
            metrics[key], columns[key] = metrics[interchange_key(scope, best, name)], columns[
                interchange_key(scope, best, name)]
    return metrics, columns


def table_rows(values: dict[str, np.ndarray], columns: dict[str, np.ndarray], scope: str
               ) -> list[dict]:
    """A row per layer: the means, and the effect's 95% percentile interval over item
    resamples (what the figure's band draws)."""
    rows = []
    for layer in range(values["effect"].shape[0]):
        low, high = np.percentile(columns[interchange_key(scope, layer, "effect")], [2.5, 97.5])
        rows.append({"encoder": scope, "layer": layer,
                     **{name: float(values[name][layer].mean()) for name in
                        ("effect", "control", "effect_minus_control", "logit_shift",
                         "control_logit_shift", "probe_accuracy")},
                     "effect_low": float(low), "effect_high": float(high)})
    return rows


# ---------------------------------------------------------------- the analysis


def build_split_items(ctx: ProbeContext, tokenizer) -> dict[str, list[InterchangeItem]]:
    """The minimal pairs of each split: train (the probe's fit) and eval (everything else)."""
    task = ctx.config.task
    require(task.format in ("synthetic", "marvin_linzen") and task.label_field == "agreement",
            f"analysis=agreement_interchange reads subject-verb agreement pairs; task="
            f"{task.name} holds none: use task=synthetic_agreement (the embedded grammar) or "
            "task=marvin_linzen_agreement")
    require(tokenizer.mask_token_id is not None, "the tokenizer has no mask token; the "
            "interchange reads the MLM's prediction at the masked verb")
    items = {split: build_items(tokenizer, ctx.sentences(split), task.max_seq_length)
             for split in ("train", "eval")}
    for split, found in items.items():
        numbers = {i.pair.number for i in found}
        require(len(found) >= 2 and numbers == {"sing", "plur"}, f"the {split} split holds "
                f"{len(found)} agreement pair(s) of numbers {sorted(numbers)}; it needs both "
                "numbers (raise max_train_sentences / max_eval_sentences)")
    return items


def run(ctx: ProbeContext, settings: AgreementInterchangeSettings) -> dict[str, float]:
    model, fitted = load_readout(ctx, settings)  # first: a missing head is refused early
    tokenizer = ctx.encoder("model").tokenizer
    items = build_split_items(ctx, tokenizer)
    rng = np.random.default_rng([ctx.config.seed, CONTROL_STREAM])
    controls = [choose_control_positions(item, rng) for item in items["eval"]]
    indices = bootstrap_indices(len(items["eval"]))
    metrics = {f"{INTERCHANGE_PREFIX}/items": float(len(items["eval"])),
               f"{INTERCHANGE_PREFIX}/probe_train_items": float(len(items["train"])),
               f"{INTERCHANGE_PREFIX}/fitted_head": float(fitted),
               f"{INTERCHANGE_PREFIX}/majority_accuracy": compute_majority_accuracy(
                   np.array([i.pair.number for i in items["train"]]),
                   np.array([i.pair.number for i in items["eval"]]))}
    columns, rows = {}, []
    for scope, mlm in build_mlm_models(ctx, settings, model, fitted).items():
        values = measure_encoder(mlm, items, controls, settings.batch_size,
                                 tokenizer.pad_token_id, ctx.config.seed)
        found, replicates = summarise_encoder(values, scope, indices)
        metrics.update(found)
        columns.update(replicates)
        rows += table_rows(values, replicates, scope)
        log.info("interchange (%s): best layer %d, effect %.3f, control %.3f; verb accuracy "
                 "%.3f", scope, *(found[interchange_key(scope, None, k)] for k in (
                     "best_layer", "best/effect", "best/control", "verb_accuracy")))
    name = f"interchange_{ctx.config.task.name}"
    write_table(ctx.out_dir, name, rows)
    write_replicates(ctx.out_dir, name, columns,
                     compute_item_ids([list(i.pair.words) for i in items["eval"]]),
                     ctx.splits.eval_pool or None)
    plot_decodable_vs_used(rows, metrics, ctx.out_dir, name, interchange_key)
    return metrics
