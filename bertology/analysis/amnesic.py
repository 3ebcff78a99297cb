"""Amnesic probing (Elazar et al., 2021): does the model *use* what a probe finds?

A probe that decodes POS from layer l shows the information is there, not that the model relies
on it. Elazar et al. remove the linearly decodable labels from layer l with INLP (Ravfogel et
al., 2020), let the rest of the network run on the projected states, and measure how much the
masked-LM's predictions change: top-1 accuracy and D_KL(p_original ‖ p_amnesic) of its output
distributions. The control removes as many random directions, measured the same way: a change
beyond the control's is the model's use of the property. Elazar et al.'s two settings, normal
and masked, each fitting INLP on the states it is applied to, with the projection where their
code puts it; unlike their code, `mask_prob` of the words are masked in one forward pass.

The settings, the positions scored, where the projection sits and the metrics:
docs/probing.md, "Amnesic probing: settings and placement".
"""

from __future__ import annotations

import contextlib
import logging
import statistics
from dataclasses import dataclass
from operator import attrgetter

import numpy as np
import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from bertology.analysis.features import encode_words, word_spans
from bertology.analysis.inlp import (
    INLPResult,
    compute_majority_accuracy,
    compute_probe_accuracy,
    fit_inlp,
    random_projection,
    split_dev,
    subsample_words,
)
from bertology.analysis.probe_context import ProbeContext
from bertology.config.analysis_settings import AmnesicSettings
from bertology.data.encode import IGNORE
from bertology.data.probe_sentences import ProbeSentence
from bertology.errors import require
from bertology.families import family_of_checkpoint, mlm_transform_path, require_capability
from bertology.run.figures import GREY, PALETTE, save_figure, tie
from bertology.run.tables import write_table

log = logging.getLogger(__name__)

SETTINGS = ("normal", "masked")
CONDITIONS = ("original", "inlp", "random")
MAJORITY_MARGIN = 0.01  # INLP stops once its probe is within a point of the majority baseline
MASK_STREAMS = {"train": 0, "eval": 1}  # the masks of the two splits are independent draws


# ---------------------------------------------------------------- where the projection sits


def layer_module(model: PreTrainedModel, layer: int) -> torch.nn.Module:
    """The module whose output is hidden state `layer` (0 = embeddings … L = what the MLM head
    reads) of BERT, RoBERTa or an ELECTRA generator. ELECTRA's hidden state 0 is after its
    embeddings_project (embedding size → hidden size). ModernBERT's state L is its last
    layer's output after the final norm, which this module's output is not; projection_site
    reads state L at the MLM head's transform instead."""
    require_capability(model.config.model_type, "layer_modules",
                       f"analysis.amnesic.layer={layer}")  # ALBERT: one module for all layers
    base = model.base_model
    if layer == 0:
        return getattr(base, "embeddings_project", base.embeddings)
    layers = family_of_checkpoint(model.config.model_type).layers  # encoder.layer, layers
    return attrgetter(layers)(base)[layer - 1]


def projection_site(model: PreTrainedModel, layer: int) -> torch.nn.Module:
    """The module whose output is projected, and read for fitting: hidden layer `layer` below
    the last; for the last, the MLM head's transform (families.py's path), whose output the
    decoder reads, as Elazar et al.'s code projects the last layer after it. (ELECTRA's
    transform output has the embedding size, not the hidden size.)"""
    if layer < model.config.num_hidden_layers:
        return layer_module(model, layer)
    path = mlm_transform_path(family_of_checkpoint(model.config.model_type))
    return attrgetter(path)(model)


@contextlib.contextmanager
def project_hidden(module: torch.nn.Module, projection: np.ndarray):
    """A forward hook that replaces the module's output h (batch, tokens, dim) by h P for
    every token (P is symmetric). Layers that return a tuple have h first."""
    def hook(_module, _inputs, output):
        hidden = output[0] if isinstance(output, tuple) else output
        matrix = torch.as_tensor(projection, dtype=hidden.dtype, device=hidden.device)
        projected = hidden @ matrix  # (batch, tokens, dim)
        return (projected, *output[1:]) if isinstance(output, tuple) else projected

    handle = module.register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()


# ---------------------------------------------------------------- the two settings' inputs


@dataclass(frozen=True)
class AmnesicBatch:
    inputs: dict[str, torch.Tensor]  # input_ids, with the mask token at masked words
    targets: torch.Tensor  # (batch, tokens) the original token at evaluated positions, else -100
    labels: np.ndarray  # (positions,) the task label at each evaluated position, row-major


def select_positions(spans: list[tuple[int, int]], labels: tuple, chosen: np.ndarray
                     ) -> tuple[list[int], list[tuple[int, str]]]:
    """Of one sentence's words: the token positions to mask (the chosen words of one sub-word)
    and the evaluated (position, label) pairs (those of them with a label)."""
    masked, evaluated = [], []
    for (first, end), label, pick in zip(spans, labels, chosen):
        if pick and end - first == 1:
            masked.append(first)
            if label is not None:
                evaluated.append((first, str(label)))
    return masked, evaluated


def build_setting_batches(tokenizer: PreTrainedTokenizerBase, sentences: list[ProbeSentence],
                          setting: str, mask_prob: float, seed: int | list[int],
                          batch_size: int, max_length: int) -> list[AmnesicBatch]:
    """normal: every word is chosen and the input is left as it is; masked: a seeded
    `mask_prob` of the words is chosen and the mask token replaces them. Evaluated are the
    labelled chosen words of one sub-word (only those are masked)."""
    rng = np.random.default_rng(seed)
    batches = []
    for start in range(0, len(sentences), batch_size):
        chunk = sentences[start: start + batch_size]
        encoded = encode_words(tokenizer, chunk, max_length)
        input_ids = encoded["input_ids"].clone()  # (batch, tokens)
        targets = torch.full_like(input_ids, IGNORE)
        labels = []
        for row, sentence in enumerate(chunk):
            spans = word_spans(encoded.word_ids(row), len(sentence.words))
            chosen = (rng.random(len(spans)) < mask_prob if setting == "masked"
                      else np.ones(len(spans), dtype=bool))
            masked, evaluated = select_positions(spans, sentence.labels, chosen)
            for position, label in evaluated:
                targets[row, position] = input_ids[row, position]
                labels.append(label)
            if setting == "masked":
                input_ids[row, masked] = tokenizer.mask_token_id
        inputs = {"input_ids": input_ids, "attention_mask": encoded["attention_mask"]}
        batches.append(AmnesicBatch(inputs, targets, np.array(labels, dtype=str)))
    return batches


@torch.no_grad()
def extract_site_states(model: PreTrainedModel, site: torch.nn.Module,
                        batches: list[AmnesicBatch], desc: str
                        ) -> tuple[np.ndarray, np.ndarray]:
    """(positions, dim) outputs of the projection site at the evaluated positions, and their
    (positions,) labels: what INLP is fit on, read from the same inputs it is applied to."""
    device = next(model.parameters()).device
    captured = []
    handle = site.register_forward_hook(
        lambda _module, _inputs, output: captured.append(
            output[0] if isinstance(output, tuple) else output))
    states = []
    try:
        for batch in tqdm(batches, desc=desc, leave=False):
            model(**{k: v.to(device) for k, v in batch.inputs.items()})
            hidden = captured.pop()  # (batch, tokens, dim)
            states.append(hidden[batch.targets.to(device) != IGNORE].float().cpu().numpy())
    finally:
        handle.remove()
    labels = np.concatenate([batch.labels for batch in batches])
    require(len(labels) > 0, "no labelled word of one sub-word was chosen; raise "
            "analysis.amnesic.mask_prob or the number of sentences")
    return np.concatenate(states), labels  # (positions, dim), (positions,)


# ---------------------------------------------------------------- the MLM's change


def compute_kl_divergence(original_logits: torch.Tensor, amnesic_logits: torch.Tensor
                          ) -> torch.Tensor:
    """(n, vocab) logits twice → (n,) D_KL(p_original ‖ p_amnesic) in nats, each row's
    Σ p (log p − log q), as Elazar et al.'s dkl (scipy's entropy(p, q)). In float64: a small
    divergence is a difference of nearly equal log-probabilities."""
    log_p = torch.log_softmax(original_logits.double(), dim=-1)  # (n, vocab)
    log_q = torch.log_softmax(amnesic_logits.double(), dim=-1)  # (n, vocab)
    return (log_p.exp() * (log_p - log_q)).sum(dim=-1)


@torch.no_grad()
def extract_mlm_effects(model: PreTrainedModel, site: torch.nn.Module,
                        batches: list[AmnesicBatch], projections: dict[str, np.ndarray]
                        ) -> dict[str, dict[str, float]]:
    """Per condition: top-1 accuracy of the MLM at the evaluated positions with the site
    projected, and the mean D_KL from the unprojected model's distribution there ("original":
    no projection, D_KL 0). Every condition goes through the same code, batch by batch, so the
    original logits are never stored whole (positions × vocab)."""
    device = next(model.parameters()).device
    conditions = ("original", *projections)
    correct, divergence, total = dict.fromkeys(conditions, 0), dict.fromkeys(conditions, 0.0), 0
    for batch in tqdm(batches, desc="MLM", leave=False):
        inputs = {k: v.to(device) for k, v in batch.inputs.items()}
        evaluated = batch.targets.to(device) != IGNORE  # (batch, tokens)
        targets = batch.targets.to(device)[evaluated]  # (n,)
        original = model(**inputs).logits[evaluated]  # (n, vocab)
        for condition in conditions:
            logits = original
            if condition != "original":
                with project_hidden(site, projections[condition]):
                    logits = model(**inputs).logits[evaluated]  # (n, vocab)
            correct[condition] += int((logits.argmax(dim=-1) == targets).sum())
            divergence[condition] += float(compute_kl_divergence(original, logits).sum())
        total += int(evaluated.sum())
    require(total > 0, "no labelled word of one sub-word to evaluate; raise "
            "analysis.amnesic.mask_prob or max_eval_sentences")
    return {c: {"mlm_accuracy": correct[c] / total, "kl": divergence[c] / total}
            for c in conditions}


# ---------------------------------------------------------------- the analysis


def extract_setting(ctx: ProbeContext, settings: AmnesicSettings,
                    mlm: tuple[PreTrainedModel, PreTrainedTokenizerBase], site: torch.nn.Module,
                    setting: str, seed: int) -> dict[str, tuple]:
    """Per split: the setting's batches and the site's (positions, dim) states and labels at
    its evaluated positions. The masked setting draws its masks from the seed."""
    model, tokenizer = mlm
    data = {}
    for split in ("train", "eval"):
        batches = build_setting_batches(
            tokenizer, ctx.sentences(split), setting, settings.mask_prob,
            [seed, MASK_STREAMS[split]], ctx.config.batch_size, ctx.config.task.max_seq_length)
        data[split] = (batches, *extract_site_states(model, site, batches,
                                                     desc=f"states {setting}/{split}"))
    return data


def fit_setting_inlp(x_train: np.ndarray, y_train: np.ndarray, iterations: int, seed: int,
                     setting: str) -> INLPResult:
    """INLP on one setting's train states, stopped by its dev words at the majority baseline
    (Elazar et al.)."""
    (x_fit, y_fit), (x_dev, y_dev) = split_dev(x_train, y_train, seed)
    inlp = fit_inlp(x_fit, y_fit, iterations, seed, dev=(x_dev, y_dev),
                    min_accuracy=compute_majority_accuracy(y_fit, y_dev) + MAJORITY_MARGIN)
    log.info("%s, seed %d: INLP removed %d directions; dev accuracy per round %s", setting,
             seed, inlp.directions_removed, [round(a, 3) for a in inlp.accuracies])
    if inlp.directions_removed == x_train.shape[1]:
        log.warning("%s: INLP removed all %d dimensions before its probe reached the majority "
                    "baseline: the site is zeroed, and the random control is the same "
                    "projection", setting, x_train.shape[1])
    return inlp


def run_setting(settings: AmnesicSettings, model: PreTrainedModel, site: torch.nn.Module,
                layer: int, seed: int, setting: str, data: dict[str, tuple]
                ) -> tuple[list[dict], list[dict]]:
    """One seed in one setting: INLP and its random control of the same rank, their probe
    accuracies and MLM effects (a row per condition), and INLP's rounds (a row per round)."""
    (_, x_train, y_train), (eval_batches, x_eval, y_eval) = data["train"], data["eval"]
    require(len(np.unique(y_train)) >= 2, f"the {setting} setting has fewer than two labels "
            "among its train words; INLP needs a classification task")
    x_train, y_train = subsample_words(x_train, y_train, settings.max_train_words, seed)
    inlp = fit_setting_inlp(x_train, y_train, settings.iterations, seed, setting)
    dim, removed = x_train.shape[1], inlp.directions_removed
    projections = {"original": np.eye(dim), "inlp": inlp.projection,
                   "random": random_projection(dim, removed, seed)}
    effects = extract_mlm_effects(model, site, eval_batches,
                                  {c: projections[c] for c in ("inlp", "random")})
    majority = compute_majority_accuracy(y_train, y_eval)
    rows = [{"setting": setting, "condition": c, "layer": layer, "seed": seed, "dim": dim,
             "directions_removed": 0 if c == "original" else removed,
             "probe_accuracy": compute_probe_accuracy(x_train, y_train, x_eval, y_eval,
                                                      projections[c], seed),
             "majority_accuracy": majority, **effects[c]} for c in CONDITIONS]
    rounds = [{"setting": setting, "layer": layer, "seed": seed, "round": i + 1,
               "directions_removed": rank, "probe_accuracy": accuracy}
              for i, (rank, accuracy) in enumerate(zip(inlp.ranks, inlp.accuracies))]
    return rows, rounds


def summarize(rows: list[dict]) -> dict[str, float]:
    """Means over seeds, per setting; the drops are paired on each seed's positions, and
    INLP's and the control's are computed alike."""
    def mean(setting: str, condition: str, key: str) -> float:
        return statistics.fmean(r[key] for r in rows
                                if r["setting"] == setting and r["condition"] == condition)

    metrics = {}
    for s in SETTINGS:
        original = mean(s, "original", "mlm_accuracy")
        metrics |= {
            f"amnesic/{s}/mlm_accuracy": original,
            **{f"amnesic/{s}/{c}/mlm_accuracy": mean(s, c, "mlm_accuracy") for c in CONDITIONS[1:]},
            **{f"amnesic/{s}/{c}/drop": original - mean(s, c, "mlm_accuracy")
               for c in CONDITIONS[1:]},
            **{f"amnesic/{s}/{c}/kl": mean(s, c, "kl") for c in CONDITIONS[1:]},
            f"amnesic/{s}/probe_accuracy_before": mean(s, "original", "probe_accuracy"),
            f"amnesic/{s}/probe_accuracy_after": mean(s, "inlp", "probe_accuracy"),
            f"amnesic/{s}/random/probe_accuracy": mean(s, "random", "probe_accuracy"),
            f"amnesic/{s}/majority_accuracy": mean(s, "original", "majority_accuracy"),
            f"amnesic/{s}/directions_removed": mean(s, "inlp", "directions_removed"),
        }
    return metrics


def condition_key(setting: str, condition: str, metric: str) -> str:
    """The metrics.json key (summarize) of one condition's mean over seeds."""
    if metric == "probe_accuracy":
        return f"amnesic/{setting}/" + {"original": "probe_accuracy_before",
                                        "inlp": "probe_accuracy_after",
                                        "random": "random/probe_accuracy"}[condition]
    if condition == "original":
        return f"amnesic/{setting}/{metric}"
    return f"amnesic/{setting}/{condition}/{metric}"


def plot_conditions(rows: list[dict], title: str, ctx: ProbeContext, name: str) -> None:
    """A row of bar panels per setting: probe accuracy (with the majority baseline), MLM
    accuracy and D_KL from the original (for the two interventions: the original's is 0),
    per condition; error bars are ±1 std over seeds."""
    import matplotlib.pyplot as plt

    panels = ("probe_accuracy", "mlm_accuracy", "kl")
    colours = dict(zip(CONDITIONS, (GREY, PALETTE[3], PALETTE[0])))
    figure, axes = plt.subplots(len(SETTINGS), len(panels), figsize=(11, 6.4), squeeze=False)
    for row_axes, setting in zip(axes, SETTINGS):
        for axis, metric in zip(row_axes, panels):
            conditions = CONDITIONS[1:] if metric == "kl" else CONDITIONS
            values = [[r[metric] for r in rows if r["setting"] == setting
                       and r["condition"] == c] for c in conditions]
            stds = [statistics.stdev(v) if len(v) > 1 else 0.0 for v in values]
            bars = axis.bar(conditions, [statistics.fmean(v) for v in values], yerr=stds,
                            capsize=4, color=[colours[c] for c in conditions])
            for bar, condition in zip(bars, conditions):
                tie(bar, [condition_key(setting, condition, metric)])
            axis.set_ylabel(f"{setting}: {metric}")
            axis.grid(axis="y", alpha=0.3)
            if metric != "kl":
                axis.set_ylim(0, 1)
        # the mean over seeds, as summarize reports it (each seed samples its own positions)
        majority = statistics.fmean(r["majority_accuracy"] for r in rows
                                    if r["setting"] == setting and r["condition"] == "original")
        tie(row_axes[0].axhline(majority, color="black", linestyle="--", label="majority"),
            [f"amnesic/{setting}/majority_accuracy"])
        row_axes[0].legend(fontsize=8)
    seeds = len({r["seed"] for r in rows})
    figure.suptitle(f"{title}\nerror bars: ±1 s.d. over {seeds} seed(s)")
    save_figure(figure, ctx.out_dir, name)


def run(ctx: ProbeContext, settings: AmnesicSettings) -> dict[str, float]:
    require(ctx.config.init == "pretrained", "analysis=amnesic reads the checkpoint's own MLM "
            "head; init=random would probe other weights than it runs: use init=pretrained")
    mlm = ctx.mlm_model()  # first: a checkpoint without an MLM head fails before extraction
    model, tokenizer = mlm
    require(tokenizer.mask_token_id is not None, "the tokenizer has no mask token; amnesic "
            "probing measures masked-word accuracy")
    num_layers = model.config.num_hidden_layers
    layer = num_layers if settings.layer is None else settings.layer
    require(0 <= layer <= num_layers, f"analysis.amnesic.layer={layer} is outside 0 (embeddings)"
            f" … {num_layers}; null picks the last layer")
    site = projection_site(model, layer)
    # the normal setting masks nothing: its states are the same for every seed
    normal = extract_setting(ctx, settings, mlm, site, "normal", ctx.config.seed)
    results = []  # (rows, rounds) per seed and setting
    for seed in ctx.config.seeds:
        masked = extract_setting(ctx, settings, mlm, site, "masked", seed)  # the seed's masks
        results += [run_setting(settings, model, site, layer, seed, setting, data)
                    for setting, data in (("normal", normal), ("masked", masked))]
    rows = [row for setting_rows, _ in results for row in setting_rows]
    name = f"amnesic_{ctx.config.task.name}"
    write_table(ctx.out_dir, name, rows)
    # INLP's per-round probe accuracy on its dev words: how fast the labels go
    write_table(ctx.out_dir, f"amnesic_rounds_{ctx.config.task.name}",
                [row for _, setting_rounds in results for row in setting_rounds])
    metrics = summarize(rows)
    plot_conditions(rows, f"amnesic probing: {ctx.config.task.name}, layer {layer}"
                    f"{' (after the MLM transform)' if layer == num_layers else ''}", ctx, name)
    for s in SETTINGS:
        log.info("amnesic %s, layer %d: MLM %.3f → INLP %.3f / random %.3f (D_KL %.4f / %.4f);"
                 " probe %.3f → %.3f (majority %.3f)", s, layer,
                 *(metrics[f"amnesic/{s}/{k}"] for k in (
                     "mlm_accuracy", "inlp/mlm_accuracy", "random/mlm_accuracy", "inlp/kl",
                     "random/kl", "probe_accuracy_before", "probe_accuracy_after",
                     "majority_accuracy")))
    return metrics
