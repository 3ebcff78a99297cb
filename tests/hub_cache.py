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
    """A 6-layer (as MiniLM: the studies freeze its lower half), 32-wide BERT of random weights drawn with `seed`, with MiniLM's uncased
    WordPiece tokenizer (so the real data sets tokenize as for MiniLM)."""
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
