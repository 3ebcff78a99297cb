"""Amnesic probing (Elazar et al., 2021): does the model *use* what a probe finds?

A probe that decodes POS from layer l shows the information is there, not that the model relies
on it. Elazar et al. remove the linearly decodable labels from layer l with INLP (Ravfogel et
al., 2020), let the rest of the network run on the projected states, and measure how much the
masked-LM accuracy drops. The control removes as many random directions: a drop beyond the
control's is the model's use of the property.

Masking choice: `mask_prob` of the words that are a single sub-word are replaced by the mask
token, and accuracy is top-1 on those positions. A word of one sub-word is a whole-word
prediction with no leak from its other sub-words, as Elazar et al.'s word-level tasks; words of
several sub-words are never masked. The projection is applied to every token's vector at the
layer, masked or not, as they do.
"""

from __future__ import annotations

import contextlib
import logging
import statistics
import warnings
from dataclasses import dataclass

import numpy as np
import scipy.linalg
import torch
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from threadpoolctl import threadpool_limits
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from bertology.analysis.context import ProbeContext
from bertology.analysis.features import Features, encode_words, word_spans
from bertology.config.probe import AmnesicSettings
from bertology.data.probe_sentences import ProbeSentence
from bertology.errors import require
from bertology.run.figures import save_figure
from bertology.run.tables import write_table

log = logging.getLogger(__name__)

CONDITIONS = ("original", "inlp", "random")
PROBE_MAX_ITER = 300  # lbfgs iterations; the projected problems converge in far fewer
RANK_TOLERANCE = 1e-8  # singular values below this share of the largest are numerical zeros
DEV_SHARE = 0.1  # of the train words: INLP's dev set, which decides when to stop
MAJORITY_MARGIN = 0.01  # INLP stops once its probe is within a point of the majority baseline


# ---------------------------------------------------------------- INLP and its control


@dataclass(frozen=True)
class INLPResult:
    projection: np.ndarray  # (dim, dim) P: onto the intersection of the classifiers' nullspaces
    directions_removed: int  # rank of the removed space, dim - rank(P)
    accuracies: list[float]  # per round: the round's classifier on dev (or its train) words
    ranks: list[int]  # per round: directions removed after it


def fit_linear_probe(x: np.ndarray, y: np.ndarray, seed: int) -> LogisticRegression:
    """A multinomial logistic-regression probe (Ravfogel et al. allow any linear classifier;
    lbfgs is far faster than LinearSVC here). Convergence warnings are expected on the late
    INLP rounds, where nothing is left to separate. One BLAS thread: these matrices are small,
    and OpenBLAS threads contending with torch's made a 20000 × 384 fit 7× slower (5.1 s vs
    0.8 s on 2 cores)."""
    probe = LogisticRegression(max_iter=PROBE_MAX_ITER, random_state=seed)
    with warnings.catch_warnings(), threadpool_limits(1, user_api="blas"):
        warnings.simplefilter("ignore", ConvergenceWarning)
        return probe.fit(x, y)


def compute_rowspace_projection(w: np.ndarray) -> np.ndarray:
    """(rows, dim) → (dim, dim) orthogonal projection onto span(rows) (Ravfogel's
    get_rowspace_projection: an orthonormal basis B of Wᵀ, then B Bᵀ)."""
    basis = scipy.linalg.orth(w.T, rcond=RANK_TOLERANCE)  # (dim, rank)
    return basis @ basis.T


def compute_decision_rows(probe: LogisticRegression) -> np.ndarray:
    """(rows, dim) weights that span what the probe reads. A multinomial softmax only sees
    differences of its class rows, so they are centred: their mean is optimiser noise and
    would remove a direction that carries no label. Binary probes have one row."""
    w = probe.coef_  # (classes, dim), or (1, dim) for two classes
    return w - w.mean(axis=0, keepdims=True) if w.shape[0] > 2 else w


def compute_nullspace_projection(rowspace_projections: list[np.ndarray], dim: int
                                 ) -> tuple[np.ndarray, int]:
    """Ravfogel et al.'s final formula: P = I − P_R(Σ_i P_Ri), the projection onto the
    intersection of the nullspaces. The product of the per-round projections would not be a
    projection when the row spaces are not orthogonal. Returns P and the removed rank."""
    if not rowspace_projections:
        return np.eye(dim), 0
    summed = np.sum(rowspace_projections, axis=0)  # (dim, dim)
    basis = scipy.linalg.orth(summed, rcond=RANK_TOLERANCE)  # (dim, removed)
    return np.eye(dim) - basis @ basis.T, basis.shape[1]


def fit_inlp(x: np.ndarray, y: np.ndarray, iterations: int, seed: int,
             dev: tuple[np.ndarray, np.ndarray] | None = None,
             min_accuracy: float | None = None) -> INLPResult:
    """Iterative nullspace projection (Ravfogel et al., 2020, Alg. 1): each round fits a linear
    classifier on the projected x, adds its row space W (classes × dim) to the removed space
    and recomputes P from all of them. A round whose classifier scores no more than
    `min_accuracy` on dev (Ravfogel's min_accuracy; Elazar et al. go on until the probe is at
    the majority baseline) has found nothing: it removes nothing and ends INLP, as does
    removing the whole space."""
    x = np.asarray(x, dtype=np.float64)
    dev_x, dev_y = (np.asarray(dev[0], dtype=np.float64), dev[1]) if dev is not None else (x, y)
    dim = x.shape[1]
    projections: list[np.ndarray] = []
    projection, removed = np.eye(dim), 0
    accuracies, ranks = [], []
    for _ in tqdm(range(iterations), desc="INLP", leave=False):
        probe = fit_linear_probe(x @ projection, y, seed)
        accuracies.append(float(probe.score(dev_x @ projection, dev_y)))
        if min_accuracy is not None and accuracies[-1] <= min_accuracy:
            ranks.append(removed)
            break
        projections.append(compute_rowspace_projection(compute_decision_rows(probe)))
        projection, removed = compute_nullspace_projection(projections, dim)
        ranks.append(removed)
        if removed >= dim:
            break
    return INLPResult(projection, removed, accuracies, ranks)


def random_projection(dim: int, k: int, seed: int) -> np.ndarray:
    """Elazar et al.'s control: P = I − Q Qᵀ for k random orthonormal directions Q (dim × k),
    Haar-distributed as the QR factor of a Gaussian matrix."""
    require(0 <= k <= dim, f"cannot remove {k} directions from a {dim}-dimensional space")
    gaussian = np.random.default_rng(seed).standard_normal((dim, k))
    basis, _ = np.linalg.qr(gaussian)  # (dim, k)
    return np.eye(dim) - basis @ basis.T


# ---------------------------------------------------------------- probe data


def load_layer_words(features: Features, sentences: list[ProbeSentence], layer: int
                     ) -> tuple[np.ndarray, np.ndarray]:
    """(words, dim) features and (words,) string labels of the labelled words at one layer."""
    labels = [label for sentence in sentences for label in sentence.labels]
    require(len(labels) == features.offsets[-1], "features and sentences disagree on the "
            "number of words; clear paths.cache_dir/features")
    keep = np.array([label is not None for label in labels])
    y = np.array([label for label in labels if label is not None], dtype=object)
    return features.layer(layer)[keep], y.astype(str)


def subsample_words(x: np.ndarray, y: np.ndarray, limit: int | None, seed: int
                    ) -> tuple[np.ndarray, np.ndarray]:
    if limit is None or limit >= len(y):
        return x, y
    keep = np.sort(np.random.default_rng(seed).choice(len(y), size=limit, replace=False))
    return x[keep], y[keep]


def split_dev(x: np.ndarray, y: np.ndarray, seed: int
              ) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """A seeded DEV_SHARE of the train words for INLP's stopping rule, so the eval words that
    score the probes after INLP take no part in choosing how much INLP removes."""
    order = np.random.default_rng(seed).permutation(len(y))
    cut = max(1, int(len(y) * DEV_SHARE))
    dev, train = order[:cut], order[cut:]
    return (x[train], y[train]), (x[dev], y[dev])


def compute_majority_accuracy(y_train: np.ndarray, y_eval: np.ndarray) -> float:
    """Accuracy of always predicting the commonest train label: where INLP should leave a
    probe (Elazar et al. run it until the probe is at the majority baseline)."""
    values, counts = np.unique(y_train, return_counts=True)
    return float(np.mean(y_eval == values[np.argmax(counts)]))


def compute_probe_accuracy(x_train: np.ndarray, y_train: np.ndarray, x_eval: np.ndarray,
                           y_eval: np.ndarray, projection: np.ndarray, seed: int) -> float:
    """A probe retrained from scratch on projected features, scored on projected eval words."""
    probe = fit_linear_probe(x_train @ projection, y_train, seed)
    return float(probe.score(x_eval @ projection, y_eval))


# ---------------------------------------------------------------- the MLM with a projected layer


def layer_module(model: PreTrainedModel, layer: int) -> torch.nn.Module:
    """The module whose output is hidden state `layer` (0 = embeddings … L = what the MLM head
    reads) of BERT, RoBERTa or an ELECTRA generator. ELECTRA's hidden state 0 is after its
    embeddings_project (embedding size → hidden size)."""
    base = model.base_model
    if layer == 0:
        return getattr(base, "embeddings_project", base.embeddings)
    return base.encoder.layer[layer - 1]


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


@dataclass(frozen=True)
class MaskedBatch:
    inputs: dict[str, torch.Tensor]  # input_ids with the mask token at the masked words
    targets: torch.Tensor  # (batch, tokens) the original token at masked positions, else -100


def build_masked_batches(tokenizer: PreTrainedTokenizerBase, sentences: list[ProbeSentence],
                         mask_prob: float, seed: int, batch_size: int, max_length: int
                         ) -> list[MaskedBatch]:
    """Masks `mask_prob` of the single-sub-word words (seeded), the same for every condition."""
    rng = np.random.default_rng(seed)
    batches = []
    for start in range(0, len(sentences), batch_size):
        chunk = sentences[start: start + batch_size]
        encoded = encode_words(tokenizer, chunk, max_length)
        input_ids = encoded["input_ids"].clone()  # (batch, tokens)
        targets = torch.full_like(input_ids, -100)
        for row, sentence in enumerate(chunk):
            spans = word_spans(encoded.word_ids(row), len(sentence.words))
            chosen = rng.random(len(spans)) < mask_prob
            for (first, end), masked in zip(spans, chosen):
                if masked and end - first == 1:
                    targets[row, first] = input_ids[row, first]
                    input_ids[row, first] = tokenizer.mask_token_id
        inputs = {"input_ids": input_ids, "attention_mask": encoded["attention_mask"]}
        batches.append(MaskedBatch(inputs, targets))
    return batches


@torch.no_grad()
def extract_mlm_accuracy(model: PreTrainedModel, batches: list[MaskedBatch], desc: str
                         ) -> float:
    """Top-1 accuracy of the MLM head on the masked positions."""
    device = next(model.parameters()).device
    correct = total = 0
    for batch in tqdm(batches, desc=desc, leave=False):
        inputs = {k: v.to(device) for k, v in batch.inputs.items()}
        logits = model(**inputs).logits  # (batch, tokens, vocab)
        targets = batch.targets.to(device)
        masked = targets != -100
        correct += int((logits.argmax(dim=-1)[masked] == targets[masked]).sum())
        total += int(masked.sum())
    require(total > 0, "no word was masked; raise analysis.amnesic.mask_prob or "
            "max_eval_sentences (only words of one sub-word are masked)")
    return correct / total


# ---------------------------------------------------------------- the analysis


def run_seed(ctx: ProbeContext, settings: AmnesicSettings,
             mlm: tuple[PreTrainedModel, PreTrainedTokenizerBase], layer: int, seed: int,
             words: dict[str, tuple[np.ndarray, np.ndarray]]) -> tuple[list[dict], list[dict]]:
    """One seed: INLP and its random control at `layer`, their probe and MLM accuracies (a row
    per condition), and INLP's rounds (a row per round)."""
    (x_train, y_train), (x_eval, y_eval) = words["train"], words["eval"]
    x_train, y_train = subsample_words(x_train, y_train, settings.max_train_words, seed)
    (x_fit, y_fit), (x_dev, y_dev) = split_dev(x_train, y_train, seed)
    inlp = fit_inlp(x_fit, y_fit, settings.iterations, seed, dev=(x_dev, y_dev),
                    min_accuracy=compute_majority_accuracy(y_fit, y_dev) + MAJORITY_MARGIN)
    log.info("seed %d: INLP removed %d directions; dev accuracy per round %s", seed,
             inlp.directions_removed, [round(a, 3) for a in inlp.accuracies])
    if inlp.directions_removed == x_train.shape[1]:
        log.warning("INLP removed all %d dimensions before its probe reached the majority "
                    "baseline: the layer is zeroed, and the random control is the same "
                    "projection", x_train.shape[1])
    rounds = [{"layer": layer, "seed": seed, "round": i + 1, "directions_removed": rank,
               "probe_accuracy": accuracy}
              for i, (rank, accuracy) in enumerate(zip(inlp.ranks, inlp.accuracies))]
    dim = x_train.shape[1]
    removed = inlp.directions_removed
    projections = {"original": (np.eye(dim), 0), "inlp": (inlp.projection, removed),
                   "random": (random_projection(dim, removed, seed), removed)}
    model, tokenizer = mlm
    batches = build_masked_batches(tokenizer, ctx.sentences("eval"), settings.mask_prob, seed,
                                   ctx.config.batch_size, ctx.config.task.max_seq_length)
    majority = compute_majority_accuracy(y_train, y_eval)
    rows = []
    for condition, (projection, directions) in projections.items():
        with project_hidden(layer_module(model, layer), projection):
            accuracy = extract_mlm_accuracy(model, batches, desc=f"MLM {condition}")
        rows.append({
            "condition": condition, "layer": layer, "seed": seed, "dim": dim,
            "directions_removed": directions,
            "probe_accuracy": compute_probe_accuracy(x_train, y_train, x_eval, y_eval,
                                                     projection, seed),
            "majority_accuracy": majority, "mlm_accuracy": accuracy})
    return rows, rounds


def summarize(rows: list[dict]) -> dict[str, float]:
    """Means over seeds; the drops are paired on each seed's masks."""
    def mean(condition: str, key: str) -> float:
        return statistics.fmean(r[key] for r in rows if r["condition"] == condition)

    original = mean("original", "mlm_accuracy")
    return {
        "amnesic/mlm_accuracy": original,
        "amnesic/inlp/mlm_accuracy": mean("inlp", "mlm_accuracy"),
        "amnesic/random/mlm_accuracy": mean("random", "mlm_accuracy"),
        "amnesic/inlp/drop": original - mean("inlp", "mlm_accuracy"),
        "amnesic/random/drop": original - mean("random", "mlm_accuracy"),
        "amnesic/probe_accuracy_before": mean("original", "probe_accuracy"),
        "amnesic/probe_accuracy_after": mean("inlp", "probe_accuracy"),
        "amnesic/random/probe_accuracy": mean("random", "probe_accuracy"),
        "amnesic/majority_accuracy": mean("original", "majority_accuracy"),
        "amnesic/directions_removed": mean("inlp", "directions_removed"),
    }


def plot_conditions(rows: list[dict], title: str, ctx: ProbeContext, name: str) -> None:
    """Two bar panels, probe accuracy (with the majority baseline) and MLM accuracy, per
    condition; error bars are ±1 std over seeds."""
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(8, 3.4))
    for axis, metric in zip(axes, ("probe_accuracy", "mlm_accuracy")):
        values = [[r[metric] for r in rows if r["condition"] == c] for c in CONDITIONS]
        stds = [statistics.stdev(v) if len(v) > 1 else 0.0 for v in values]
        axis.bar(CONDITIONS, [statistics.fmean(v) for v in values], yerr=stds, capsize=4,
                 color=["tab:gray", "tab:red", "tab:blue"])
        axis.set_ylabel(metric)
        axis.set_ylim(0, 1)
        axis.grid(axis="y", alpha=0.3)
    axes[0].axhline(rows[0]["majority_accuracy"], color="black", linestyle="--",
                    label="majority")
    axes[0].legend(fontsize=8)
    figure.suptitle(title)
    save_figure(figure, ctx.out_dir, name)


def run(ctx: ProbeContext, settings: AmnesicSettings) -> dict[str, float]:
    require(ctx.config.init == "pretrained", "analysis=amnesic reads the checkpoint's own MLM "
            "head; init=random would probe other weights than it runs: use init=pretrained")
    mlm = ctx.mlm_model()  # first: a checkpoint without an MLM head fails before extraction
    require(mlm[1].mask_token_id is not None, "the tokenizer has no mask token; amnesic "
            "probing measures masked-word accuracy")
    features = {split: ctx.features("model", split) for split in ("train", "eval")}
    num_layers = features["train"].num_layers
    layer = num_layers if settings.layer is None else settings.layer
    require(0 <= layer <= num_layers, f"analysis.amnesic.layer={layer} is outside 0 (embeddings)"
            f" … {num_layers}; null picks the last layer")
    words = {split: load_layer_words(features[split], ctx.sentences(split), layer)
             for split in ("train", "eval")}
    require(len(np.unique(words["train"][1])) >= 2, f"task={ctx.config.task.name} has fewer "
            "than two labels among the train words; INLP needs a classification task")
    per_seed = [run_seed(ctx, settings, mlm, layer, seed, words) for seed in ctx.config.seeds]
    rows = [row for seed_rows, _ in per_seed for row in seed_rows]
    name = f"amnesic_{ctx.config.task.name}"
    write_table(ctx.out_dir, name, rows)
    # INLP's per-round probe accuracy on its dev words: how fast the labels go
    write_table(ctx.out_dir, f"amnesic_rounds_{ctx.config.task.name}",
                [row for _, seed_rounds in per_seed for row in seed_rounds])
    metrics = summarize(rows)
    plot_conditions(rows, f"amnesic probing: {ctx.config.task.name}, layer {layer}, "
                    f"{metrics['amnesic/directions_removed']:.0f} of {rows[0]['dim']} "
                    "directions removed", ctx, name)
    log.info("amnesic layer %d: MLM %.3f → INLP %.3f / random %.3f; probe %.3f → %.3f "
             "(majority %.3f)", layer, metrics["amnesic/mlm_accuracy"],
             metrics["amnesic/inlp/mlm_accuracy"], metrics["amnesic/random/mlm_accuracy"],
             metrics["amnesic/probe_accuracy_before"], metrics["amnesic/probe_accuracy_after"],
             metrics["amnesic/majority_accuracy"])
    return metrics
