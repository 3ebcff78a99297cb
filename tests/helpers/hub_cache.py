"""A local Hugging Face hub cache laid out by hand, as huggingface_hub leaves it after a
download (models--org--name/refs/<ref> holds a commit SHA, snapshots/<sha>/ its files), with tiny
BERTs in it: the checkpoint suites of the tests, read offline (HF_HUB_OFFLINE=1)."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import torch
from transformers import AutoTokenizer, BertConfig, BertModel

from bertology.config.path_checks import resolve_checkpoint

MINILM = "sentence-transformers/all-MiniLM-L6-v2"


def tiny_bert(folder: Path, seed: int) -> Path:
    """A 6-layer, 32-wide BERT of random weights drawn with `seed` (6 layers, as MiniLM: the
    studies freeze the lower half), with MiniLM's uncased WordPiece tokenizer (so the real
    data sets tokenize as for MiniLM)."""
    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(resolve_checkpoint(MINILM))
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=6,
                        num_attention_heads=2, intermediate_size=64,
                        max_position_embeddings=128)
    BertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def cache_commit(cache: Path, repo: str, source: Path, refs: list[str]) -> str:
    """source's files as the cache holds one commit of repo, pointed to by each of refs; the
    commit's SHA."""
    sha = hashlib.sha1(f"{repo}:{','.join(refs)}".encode()).hexdigest()
    folder = cache / f"models--{repo.replace('/', '--')}"
    shutil.copytree(source, folder / "snapshots" / sha)
    for ref in refs:
        (folder / "refs" / ref).parent.mkdir(parents=True, exist_ok=True)
        (folder / "refs" / ref).write_text(sha)
    return sha


def multiberts_cache(cache: Path, seeds: range, work: Path,
                     steps: tuple[int | None, ...] = (None,)) -> dict[tuple[int, int | None], str]:
    """MultiBERTs' layout: google/multiberts-seed_<s> for step None (the final model), and
    google/multiberts-seed_<s>-step_<k>k for a step; {(seed, step): sha}."""
    shas = {}
    for seed in seeds:
        for step in steps:
            repo = (f"google/multiberts-seed_{seed}" if step is None
                    else f"google/multiberts-seed_{seed}-step_{step // 1000}k")
            model = tiny_bert(work / repo.replace("/", "_"), seed * 100 + (step or 0) // 1000)
            shas[seed, step] = cache_commit(cache, repo, model, ["main"])
    return shas


def branch_suite(cache: Path, repo: str, steps: tuple[int, ...], work: Path) -> dict[int, str]:
    """One repo (`repo`, a template with {seed} for one repo per seed: PolyPythias' layout), a
    branch step<N> per checkpoint (Pythia's and Ettin's layout), main at the last; {step: sha}
    of seed 0's repo."""
    shas = {}
    for seed in range(3 if "{seed}" in repo else 1):
        name = repo.format(seed=seed)
        for step in steps:
            model = tiny_bert(work / f"{name.replace('/', '_')}_{step}", seed * 7919 + step)
            refs = [f"step{step}", *(["main"] if step == steps[-1] else [])]
            sha = cache_commit(cache, name, model, refs)
            if seed == 0:
                shas[step] = sha
    return shas


# The hub checkpoints docs/howto/checkpoint-suites.md names, {repo: refs}: MultiBERTs' seeds 0
# and 1 at step 20k and their final models, and a branch-style repo at two steps.
DOCUMENTED = {**{f"google/multiberts-seed_{s}": ["main"] for s in (0, 1)},
              **{f"google/multiberts-seed_{s}-step_20k": ["main"] for s in (0, 1)},
              "org/encoder": ["step1000", "step2000", "main"]}


def documented_cache(cache: Path, work: Path) -> Path:
    """A hub cache holding every checkpoint the how-to pages name (one tiny BERT's files
    under each; each ref of a repo its own commit)."""
    model = tiny_bert(work / "documented", 0)
    for repo, refs in DOCUMENTED.items():
        for ref in refs:
            cache_commit(cache, repo, model, [ref])
    return cache
