"""Candidate nulls for the attention findings' twin parts (special_heads, head_similarity,
dependency_heads), measured on all-MiniLM-L6-v2 with the statistics the findings read.

A twin part says "more than an untrained model of the same architecture would". The null it is
read against must be able to reach the statistic (attention not near uniform) and carry nothing
learned. Candidates, each on the same UD English-EWT dev sentences the probe_pos study draws
(sample_seed 0, the first `--sentences`, kept whole at 128 sub-words):

- trained: the checkpoint itself (the model arm);
- twin: the random-init twin (transformers' init: weights N(0, initializer_range), LayerNorm
  1 and 0, biases 0), the null the findings read before;
- scaled: every tensor drawn i.i.d. N(mean, std) of the trained tensor;
- shuffled: every trained tensor's entries permuted at random within the tensor (its exact
  values, none in place);
- heads permuted: each head's query/key/value rows and output columns moved to another
  (layer, head) slot at random: learned heads read from other layers' inputs;
- maps permuted: the trained maps with the heads' layer labels permuted (the label-permutation
  null of head_similarity; special_heads_fraction counts heads, so it is invariant by
  construction and that row repeats the trained value);
- twin or scaled, sharpened per head / layer / model: that model's maps with each head's rows
  raised to a factor t and renormalised (softmax(t · log p)), t fitted on the first `--fit`
  sentences to bring the mean word-row entropy of the head (of the layer's heads, of all
  heads) to the trained model's. "twin, sharpened per head" is the null the analysis reads
  (bertology/analysis/attention_null.py, which says why it was chosen).

Per candidate: special_heads_fraction, within/across/across − within JS divergence, mean row
entropy over ln(n + 2) (uniform = 1), the nsubj head's held-out accuracy minus its offset
baseline (dependency_heads' statistic), each as the attention analysis computes it, and the
heads' mean mass on [CLS], [SEP] and punctuation (mean and largest over heads). Results:
bench/RESULTS.md, "Attention nulls".

    python bench/bench_attention_nulls.py [--sentences 300] [--seed 0] [--fit 100]
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

REPO = Path(__file__).resolve().parent.parent
os.environ.setdefault("BERTOLOGY_DATA_DIR", str(REPO.parent / "shared" / "data"))

from bertology.analysis.attention import (  # noqa: E402
    STATS,
    build_punctuation_mask,
    compute_head_stats,
    compute_special_fraction,
)
from bertology.analysis.attention_null import (  # noqa: E402
    SharpenedMaps,
    fit_factors,
    mean_entropy,
)
from bertology.analysis.dependency_heads import run_dependencies  # noqa: E402
from bertology.analysis.features import (  # noqa: E402
    extract_features,
    fits,
    iter_attention_maps,
    load_features,
)
from bertology.analysis.head_similarity import compute_pair_divergence, layer_pairs  # noqa: E402
from bertology.analysis.probe_context import load_encoder  # noqa: E402
from bertology.config.analysis_settings import AttentionSettings  # noqa: E402
from bertology.config.groups import TaskConfig  # noqa: E402
from bertology.config.path_checks import resolve_checkpoint  # noqa: E402
from bertology.data.probe_sentences import load_probe_sentences  # noqa: E402
from bertology.models.build import draw_random_encoder, twin_seed  # noqa: E402

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
MAX_LENGTH = 128


def draw_scaled_twin(model, seed: int):
    """model's architecture with every tensor drawn i.i.d. N(mean, std) of the model's tensor
    of that name (LayerNorm weights and biases included: their trained mean too)."""
    twin = draw_random_encoder(model.config, seed)
    trained = dict(model.named_parameters())
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in twin.named_parameters():
            values = trained[name].detach().float()
            draw = torch.randn(parameter.shape, generator=generator) * values.std() + values.mean()
            parameter.copy_(draw)
    return twin


def shuffle_tensors(model, seed: int):
    """Every tensor's entries permuted within the tensor."""
    shuffled = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in shuffled.parameters():
            order = torch.randperm(parameter.numel(), generator=generator)
            parameter.copy_(parameter.reshape(-1)[order].reshape(parameter.shape))
    return shuffled


def permute_heads(model, seed: int):
    """Each (layer, head)'s query/key/value rows and output-projection columns moved to the
    slot a random permutation of all layers × heads gives it."""
    moved = copy.deepcopy(model)
    layers, heads = model.config.num_hidden_layers, model.config.num_attention_heads
    size = model.config.hidden_size // heads
    order = np.random.default_rng(seed).permutation(layers * heads)
    source = model.encoder.layer
    with torch.no_grad():
        for slot, origin in enumerate(order):
            (layer, head), (from_layer, from_head) = divmod(slot, heads), divmod(origin, heads)
            to, frm = slice(head * size, (head + 1) * size), slice(from_head * size,
                                                                     (from_head + 1) * size)
            for name in ("query", "key", "value"):
                target = getattr(moved.encoder.layer[layer].attention.self, name)
                origin_module = getattr(source[from_layer].attention.self, name)
                target.weight[to] = origin_module.weight[frm]
                target.bias[to] = origin_module.bias[frm]
            moved.encoder.layer[layer].attention.output.dense.weight[:, to] = \
                source[from_layer].attention.output.dense.weight[:, frm]
    return moved


def measure(features, sentences, punct, permutations: int = 0, seed: int = 0) -> dict:
    """The findings' statistics on one encoder's maps; with `permutations`, head_similarity's
    across − within under that many random relabellings of the heads' layers instead."""
    count = len(sentences)
    stats = compute_head_stats(iter_attention_maps(features, range(count), "stats"), punct)
    rows = [len(s.words) for s in sentences]
    uniform = sum(n * np.log(n + 2) for n in rows) / sum(rows)  # mean ln(n + 2) over word rows
    layers, heads = features.num_layers, features.num_heads
    within_mask, across_mask = layer_pairs(layers, heads)
    rng = np.random.default_rng(seed)
    orders = [np.arange(layers * heads)] + [rng.permutation(layers * heads)
                                            for _ in range(permutations)]
    within, across = np.zeros(len(orders)), np.zeros(len(orders))
    for index in range(count):
        maps = features.attention_map(index)
        divergence = compute_pair_divergence(maps.reshape(-1, *maps.shape[2:]))
        for k, order in enumerate(orders):
            relabelled = divergence[np.ix_(order, order)]
            within[k] += relabelled[within_mask].mean() / count
            across[k] += relabelled[across_mask].mean() / count
    k = slice(1, None) if permutations else slice(0, 1)
    ctx = SimpleNamespace(out_dir=Path(tempfile.mkdtemp()),
                          config=SimpleNamespace(task=SimpleNamespace(name="ud_pos")))
    deps, _ = run_dependencies(ctx, AttentionSettings(), features, sentences)
    special = stats[..., [STATS.index(k) for k in ("cls", "sep", "punct")]].sum(-1)
    return {"special": float(compute_special_fraction(stats)),
            "special_mass": f"{special.mean():.3f} / {special.max():.3f}",
            "within": float(within[k].mean()), "across": float(across[k].mean()),
            "across_minus_within": float((across[k] - within[k]).mean()),
            "entropy_ratio": float(stats[..., STATS.index("entropy")].mean() / uniform),
            "nsubj_excess": deps["attention/deps/nsubj/accuracy"]
            - deps["attention/deps/nsubj/baseline"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fit", type=int, default=100, help="sentences the factors are fitted on")
    args = parser.parse_args()
    torch.set_num_threads(2)
    path = resolve_checkpoint(MINILM)
    model, tokenizer = load_encoder(path, attention=True)
    task = TaskConfig(name="ud_pos", kind="tagging", format="conllu", path="ud_english_ewt",
                      train_file="en_ewt-ud-train.conllu", eval_file="en_ewt-ud-dev.conllu",
                      label_field="upos", max_seq_length=MAX_LENGTH)
    splits = load_probe_sentences(task, Path(os.environ["BERTOLOGY_DATA_DIR"]), 1,
                                  args.sentences, args.seed)
    sentences = [s for s in splits.eval if fits(tokenizer, s, MAX_LENGTH)]
    punct = [build_punctuation_mask(s) for s in sentences]
    seed = twin_seed(args.seed, path)
    candidates = {
        "trained": lambda: model,
        "twin": lambda: draw_random_encoder(model.config, seed),
        "scaled": lambda: draw_scaled_twin(model, seed),
        "shuffled": lambda: shuffle_tensors(model, seed),
        "heads permuted": lambda: permute_heads(model, args.seed),
    }
    print(f"# {len(sentences)} UD English-EWT dev sentences (sample_seed {args.seed}), "
          f"{path}; torch {torch.__version__}, {os.cpu_count()} CPUs")
    print("| null | special_heads_fraction | JS within | JS across | across − within | "
          "entropy / uniform | nsubj − offset | special mass: mean / max head |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    layers, heads = model.config.num_hidden_layers, model.config.num_attention_heads
    groups = {"head": np.arange(layers * heads).reshape(layers, heads),
              "layer": np.repeat(np.arange(layers), heads).reshape(layers, heads),
              "model": np.zeros((layers, heads), dtype=int)}
    with tempfile.TemporaryDirectory() as tmp:
        extracted = {}
        for name, build in candidates.items():
            start = time.perf_counter()
            out = Path(tmp) / name.replace(" ", "_")
            out.mkdir()
            extract_features(build(), tokenizer, sentences, out, "first", True, 32,
                             MAX_LENGTH, name)
            extracted[name] = load_features(out)
            report(name, measure(extracted[name], sentences, punct), start)
        start = time.perf_counter()
        report("maps permuted", measure(extracted["trained"], sentences, punct, 20, args.seed),
               start)
        fit = range(min(args.fit, len(sentences)))  # the sentences the factors are fitted on
        trained_maps = [extracted["trained"].attention_map(i) for i in fit]
        target = mean_entropy(trained_maps)
        for base in ("twin", "scaled"):
            maps = [extracted[base].attention_map(i) for i in fit]
            for scope, group in groups.items():
                start = time.perf_counter()
                temperature = fit_factors(maps, target, group)
                sharpened = SharpenedMaps(extracted[base], temperature)
                report(f"{base}, sharpened per {scope} (factor {temperature.min():.1f}-"
                       f"{temperature.max():.1f})", measure(sharpened, sentences, punct), start)


def report(name: str, row: dict, start: float) -> None:
    print(f"| {name} | {row['special']:.3f} | {row['within']:.4f} | "
          f"{row['across']:.4f} | {row['across_minus_within']:+.4f} | "
          f"{row['entropy_ratio']:.3f} | {row['nsubj_excess']:+.3f} | "
          f"{row['special_mass']} |", flush=True)
    print(f"#   {name}: {time.perf_counter() - start:.0f} s", file=sys.stderr)

if __name__ == "__main__":
    main()
