"""Peak memory of streaming pretraining data: 10% against 100% of the Wikipedia corpus.

Each measurement runs in a fresh process that builds the corpus, its tokenizer and the
streaming training data exactly as `bertology pretrain data=wikipedia` does, reads one whole
epoch of training sequences (every shard: tokenised, packed, shuffled through the buffer), and
then trains a few steps at size=mini. Peak RSS comes from getrusage. Streaming means the
peak should not grow with the corpus.

    python bench/bench_memory.py [--fractions 0.1 1.0] [--out bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
from bench_pretrain import compose_pretrain, replace_section  # noqa: E402

STEPS = 20


def measure(fraction: float) -> dict:
    """In this (child) process: one full epoch of the stream, then a short training run."""
    from bertology.config.pretrain_config import load_pretrain_config
    from bertology.data.corpora import build_corpus
    from bertology.data.stream import Cursor, PretrainData
    from bertology.data.tokenizers import load_or_train_tokenizer
    from bertology.pipelines import pretrain

    args = ["data=wikipedia", f"data.fraction={fraction}", "size=mini", "logger=none",
            f"trainer.max_steps={STEPS}", f"trainer.eval_every={STEPS}", "trainer.eval_batches=2"]
    cfg = compose_pretrain(args)
    config = load_pretrain_config(cfg)
    corpus = build_corpus(config.data, config.data_dir)
    tokenizer = load_or_train_tokenizer(corpus, "wordpiece", config.model.vocab_size,
                                        config.cache_dir)
    # the stream measured: NSP pairs, one static copy, seed 0 (not the model's own settings)
    model = dataclasses.replace(config.model, masking="static", dupe_factor=1)
    data = PretrainData(corpus, tokenizer, dataclasses.replace(config, model=model, seed=0), "nsp")
    sequences = tokens = 0
    for example, cursor in data.iter_train(Cursor()):
        if cursor.epoch > 0:
            break
        sequences += 1
        tokens += len(example["input_ids"])
    with tempfile.TemporaryDirectory() as out:
        pretrain.run(cfg, Path(out))
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"fraction": fraction, "sequences": sequences, "tokens": tokens,
            "peak_mib": peak_kib / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fractions", nargs="+", type=float, default=[0.1, 1.0])
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "RESULTS.md")
    parser.add_argument("--child", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(measure(args.child)))
        return
    rows = []
    for fraction in args.fractions:
        start = time.perf_counter()
        child = subprocess.run([sys.executable, __file__, "--child", str(fraction)],
                               capture_output=True, text=True, check=True,
                               env={**os.environ, "TQDM_DISABLE": "1"})
        row = json.loads(child.stdout.strip().splitlines()[-1])
        row["seconds"] = time.perf_counter() - start
        rows.append(row)
        print(f"fraction {fraction}: {row['sequences']:,} sequences, {row['tokens']:,} tokens, "
              f"peak {row['peak_mib']:.0f} MiB", flush=True)
    write_results(args, rows)


def write_results(args, rows: list[dict]) -> None:
    base = rows[0]["peak_mib"]
    lines = [
        "", "## Streaming memory: 10% vs 100% of Wikipedia", "",
        f"`python bench/bench_memory.py --fractions {' '.join(map(str, args.fractions))}`, "
        f"{time.strftime('%Y-%m-%d')}: one full epoch of the streamed training sequences "
        f"(data=wikipedia, max_seq_length 128) plus {STEPS} steps of size=mini, each in a "
        "fresh process; peak resident memory from getrusage.", "",
        "| corpus fraction | sequences in the epoch | tokens | peak RSS (MiB) | vs first |",
        "|---:|---:|---:|---:|---:|",
        *[f"| {r['fraction']:g} | {r['sequences']:,} | {r['tokens']:,} | {r['peak_mib']:.0f} | "
          f"{r['peak_mib'] / base:.2f}x |" for r in rows],
    ]
    replace_section(args.out, "## Streaming memory", lines)


if __name__ == "__main__":
    main()
