"""Do a model's representations of numbers carry their value? (Wallace et al., 2019, "Do NLP
Models Know Numbers?", §3 decoding; the survey §3.2: BERT does not form good representations
of numbers and fails to generalise away from the training range.)

Each integer 0 … max_number − 1 is encoded alone ([CLS] n [SEP]), its sub-words mean-pooled at
every layer. A ridge regression (standardised features, scikit-learn) decodes the value:
- interpolation: trained on a seeded 80% of the numbers below `train_below`, scored (R²) on
  the other 20%;
- extrapolation: the same decoder scored on the numbers from `train_below` up, which it
  never saw; R² against their own mean, so predictions stuck in the training range score
  below 0.
Beside the model, the same decoder on a digits baseline (each digit's value in each place, in
which the number's value is linear) shows what a representation that encodes it can reach, and
on the random-init twin (`numeracy/random/layer_LL/…`, the same numbers, splits and resamples)
what the architecture and tokenizer give without training: the null for what pretraining adds.
Item replicates resample the scored numbers. Deviations: Wallace et al. decode with an MLP and
also test list maximum and addition; this is their decoding task with a linear decoder.
"""

from __future__ import annotations

import numpy as np
from sklearn.linear_model import Ridge
from sklearn.preprocessing import StandardScaler

from bertology.analysis.features import extract_or_load
from bertology.config.analysis_settings import NumeracySettings
from bertology.data.probe_sentences import ProbeSentence
from bertology.run.figures import encoder_keys, plot_layer_curves
from bertology.run.replicates import bootstrap_indices, write_replicates
from bertology.run.tables import write_table

SPLITS = ("interpolate", "extrapolate")


def compute_r2(truth: np.ndarray, predicted: np.ndarray, indices: np.ndarray | None = None
               ) -> np.ndarray:
    """R² = 1 − Σ(y − ŷ)² / Σ(y − ȳ)², on the items or on each resample (R, n) of them."""
    if indices is None:
        indices = np.arange(len(truth))[None, :]
    y, y_hat = truth[indices], predicted[indices]  # (R, n)
    residual = ((y - y_hat) ** 2).sum(axis=1)
    total = ((y - y.mean(axis=1, keepdims=True)) ** 2).sum(axis=1)
    return 1.0 - residual / np.maximum(total, 1e-12)


def digit_features(numbers: np.ndarray, places: int) -> np.ndarray:
    """Each decimal digit's value in each place: (n, places); the value is linear in them."""
    return ((numbers[:, None] // 10 ** np.arange(places)[None, :]) % 10).astype(np.float64)


def split_numbers(settings: NumeracySettings, seed: int) -> dict[str, np.ndarray]:
    inside = np.random.default_rng([seed, 2019]).permutation(settings.train_below)
    cut = int(round(0.8 * len(inside)))
    return {"train": np.sort(inside[:cut]), "interpolate": np.sort(inside[cut:]),
            "extrapolate": np.arange(settings.train_below, settings.max_number)}


def decode(x: np.ndarray, split: dict[str, np.ndarray], alpha: float
           ) -> dict[str, np.ndarray]:
    """Predicted values of the scored numbers, from a ridge fit on the training numbers."""
    scaler = StandardScaler().fit(x[split["train"]])
    model = Ridge(alpha=alpha).fit(scaler.transform(x[split["train"]]), split["train"])
    return {name: model.predict(scaler.transform(x[split[name]])) for name in SPLITS}


def extract_numbers(ctx, settings: NumeracySettings, which: str = "model") -> np.ndarray:
    """(layers + 1, numbers, dim) mean-pooled states of each number alone."""
    encoder = ctx.encoder(which)
    sentences = [ProbeSentence((str(n),), (None,)) for n in range(settings.max_number)]
    features = extract_or_load(encoder.model, encoder.fingerprint, encoder.tokenizer,
                               sentences, ctx.config.cache_dir, "mean", False,
                               ctx.config.batch_size, 16, desc=f"extract numbers ({which})")
    return np.stack([features.layer(layer) for layer in range(features.num_layers + 1)])


def score(predicted: dict[str, np.ndarray], split: dict[str, np.ndarray],
          indices: dict[str, np.ndarray]) -> dict[str, tuple[float, np.ndarray]]:
    return {name: (float(compute_r2(split[name].astype(float), predicted[name])[0]),
                   compute_r2(split[name].astype(float), predicted[name], indices[name]))
            for name in SPLITS}


def write_split_replicates(out_dir, name: str, replicates: dict[str, np.ndarray],
                           settings: NumeracySettings, seeds: list) -> None:
    """replicates/<name>_<split>.csv, a file per split with the numbers it scored as its item
    ids (in the order its replicates resample them), so the report counts numbers that other
    runs score too: the extrapolation numbers are every run's; the interpolation ones a seed's
    draw (with several seeds in one run, averaged over different numbers: no ids)."""
    for split in SPLITS:
        columns = {k: v for k, v in replicates.items() if k.endswith(f"/r2_{split}")}
        numbers = split_numbers(settings, seeds[0])[split]
        same = all(np.array_equal(split_numbers(settings, s)[split], numbers) for s in seeds)
        write_replicates(out_dir, f"{name}_{split}", columns,
                         [f"number:{n}" for n in numbers] if same else None)


def run(ctx, settings: NumeracySettings) -> dict[str, float]:
    places = len(str(settings.max_number - 1))
    series = {"digits": digit_features(np.arange(settings.max_number), places)}
    for which, prefix in (("model", ""), ("random", "random/")):
        states = extract_numbers(ctx, settings, which)
        series.update({f"{prefix}layer_{layer:02d}": states[layer]
                       for layer in range(len(states))})
    rows, sums, replicates = [], {}, {}
    for seed in ctx.config.seeds:
        split = split_numbers(settings, seed)
        indices = {name: bootstrap_indices(len(split[name])) for name in SPLITS}
        for name, x in series.items():
            scores = score(decode(x, split, settings.alpha), split, indices)
            encoder, found, layer = name.rpartition("layer_")  # "random/layer_03", "digits"
            layer = layer if found else ""
            rows.append({"model": (encoder.rstrip("/") or "model") if layer else "digits",
                         "layer": int(layer) if layer else None, "seed": seed,
                         **{f"r2_{s}": v for s, (v, _) in scores.items()}})
            for s, (value, reps) in scores.items():
                key = f"numeracy/{name}/r2_{s}"
                sums[key] = sums.get(key, 0.0) + value / len(ctx.config.seeds)
                replicates[key] = replicates.get(key, 0.0) + reps / len(ctx.config.seeds)
    name = f"numeracy_0_{settings.max_number}"
    write_table(ctx.out_dir, name, rows)
    write_split_replicates(ctx.out_dir, name, replicates, settings, ctx.config.seeds)
    digit_rows = [r for r in rows if r["model"] == "digits"]
    plot_layer_curves([r for r in rows if r["model"] != "digits"],
                      [f"r2_{s}" for s in SPLITS], "decoding a number's value (ridge)",
                      ctx.out_dir, name, series="model",
                      baselines=[{"model": "digits baseline",
                                  **{f"r2_{s}": float(np.mean([r[f'r2_{s}'] for r in digit_rows]))
                                     for s in SPLITS}}],
                      keys=encoder_keys("numeracy",
                                        **{"digits baseline": "numeracy/digits/{metric}"}))
    return sums
