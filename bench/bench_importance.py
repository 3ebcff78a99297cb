"""Michel et al. (2019)'s one-pass head importance against leave-one-head-out ablation (the
baseline the issue names), in one run, on the same fine-tuned model and the same examples.

- gradient: I_h = mean over batches of |∂L/∂ξ_h|, one forward + backward per batch
  (bertology.pruning.importance.compute_gradient_importance).
- ablation: L(all heads but h) − L(all heads) per head, 1 + heads forward passes per batch
  (compute_ablation_importance with the metric −loss).

Both score the same batches with the same loss, so the two rankings compare directly: the
Spearman correlation of the gradient scores (raw, and layer-normalised as Michel et al. do)
with the ablation scores, and the time ratio. The model: a finetune run's model/ (--model), or,
by default, all-MiniLM-L6-v2 fine-tuned here on 2,000 SST-2 phrases for one epoch.

    python bench/bench_importance.py [--model outputs/finetune/<run>/model] [--examples 256]
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parent.parent
os.environ.setdefault("BERTOLOGY_DATA_DIR", str(REPO.parent / "shared" / "data"))

from hydra import compose, initialize_config_dir  # noqa: E402
from scipy.stats import spearmanr  # noqa: E402
from transformers import AutoModelForSequenceClassification  # noqa: E402

from bertology.config.finetune_config import load_finetune_config  # noqa: E402
from bertology.data.tasks import load_task  # noqa: E402
from bertology.data.tokenizers import load_pretrained_tokenizer  # noqa: E402
from bertology.pipelines import finetune  # noqa: E402
from bertology.pruning.importance import (  # noqa: E402
    compute_ablation_importance,
    compute_gradient_importance,
)
from bertology.pruning.prune_context import build_importance_batches, task_loss_fn  # noqa: E402


def compose_finetune(overrides: list[str]):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose(config_name="finetune", overrides=overrides)


def finetune_minilm(out: Path) -> Path:
    """all-MiniLM-L6-v2 on 2,000 SST-2 phrases, one epoch: a fine-tuned model in ~1 minute."""
    cfg = compose_finetune(["model=minilm", "task=sst2", "logger=none",
                            "trainer.max_train_examples=2000", "trainer.epochs=1"])
    finetune.run(cfg, out)
    return out / "model"


def load_batches(model_path: Path, examples: int, batch_size: int) -> list[dict]:
    """`examples` SST-2 training phrases (seeded), batched."""
    config = load_finetune_config(compose_finetune(["task=sst2"]))
    data = load_task(config.task, config.data_dir, None)
    tokenizer = load_pretrained_tokenizer(str(model_path))
    return build_importance_batches(data.train, tokenizer, config.task, examples, batch_size,
                                    seed=0)


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="a finetune run's model/ (SST-2)")
    parser.add_argument("--examples", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.model or finetune_minilm(Path(tmp) / "finetune")
        model = AutoModelForSequenceClassification.from_pretrained(path).eval()
        batches = load_batches(path, args.examples, args.batch_size)
    loss_fn = task_loss_fn("classification")
    heads = model.config.num_hidden_layers * model.config.num_attention_heads
    print(f"{path}: {heads} heads; {args.examples} SST-2 examples in {len(batches)} batches; "
          f"{torch.get_num_threads()} threads; {platform.machine()}, torch {torch.__version__}")
    compute_gradient_importance(model, batches[:1], loss_fn)  # warm-up
    raw, grad_s = timed(lambda: compute_gradient_importance(model, batches, loss_fn,
                                                            normalize=False))
    normalized = raw / np.maximum(np.sqrt((raw**2).sum(axis=1, keepdims=True)), 1e-20)
    ablation, ablation_s = timed(lambda: compute_ablation_importance(
        model, batches, lambda m, batch: -float(loss_fn(m, batch))))
    rho_raw = spearmanr(raw.ravel(), ablation.ravel()).statistic
    rho_norm = spearmanr(normalized.ravel(), ablation.ravel()).statistic
    half = heads // 2
    bottom = set(np.argsort(raw.ravel())[:half]) & set(np.argsort(ablation.ravel())[:half])
    print("| method | passes over the data | time (s) | ratio |")
    print("|---|---|---:|---:|")
    print(f"| gradient (Michel et al.) | 1 forward + backward | {grad_s:.2f} | 1.00x |")
    print(f"| leave-one-head-out ablation | {heads + 1} forward | {ablation_s:.2f} | "
          f"**{ablation_s / grad_s:.1f}x** |")
    print(f"Spearman(gradient raw, ablation) = {rho_raw:.3f}; "
          f"Spearman(gradient layer-normalised, ablation) = {rho_norm:.3f}; "
          f"the two agree on {len(bottom)} of the {half} least important heads")


if __name__ == "__main__":
    main()
