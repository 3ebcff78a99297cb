"""Extract once, analyse many (Clark et al., 2019's attention-analysis; Hewitt & Manning's
structural-probes cache their hidden states the same way).

One forward pass per batch collects every layer's hidden states (0 = embeddings … L) pooled
from sub-words to words, and, when an analysis reads attention, every head's attention map
converted to words. The arrays go to a cache dir keyed by the checkpoint's weights, the
sentences and the settings, and are memory-mapped when read back, so a second analysis, a
second probe seed or a second run of the same data never runs the model again.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from bertology.data.probe_sentences import ProbeSentence
from bertology.errors import UserError, require
from bertology.run.atomic import write_dir_atomic
from bertology.run.cache_notes import recompute

log = logging.getLogger(__name__)

CACHE_VERSION = 1
POOLINGS = ("first", "mean")


@dataclass(frozen=True)
class Features:
    """Word-level activations of one model on one list of sentences.

    hidden:     (layers + 1, words, dim) float16, memory-mapped; layer 0 is the embeddings
    offsets:    (sentences + 1,) word offsets: sentence i is words offsets[i]:offsets[i+1]
    attention:  flat float16; sentence i's (layers, heads, n + 2, n + 2) map starts at
                attention_offsets[i]; rows/columns 0 and n + 1 are [CLS] and [SEP]
    """

    hidden: np.ndarray
    offsets: np.ndarray
    attention: np.ndarray | None = None
    attention_offsets: np.ndarray | None = None
    num_heads: int = 0

    @property
    def num_layers(self) -> int:
        """Transformer layers L; hidden has L + 1 entries."""
        return self.hidden.shape[0] - 1

    @property
    def num_sentences(self) -> int:
        return len(self.offsets) - 1

    def layer(self, layer: int) -> np.ndarray:
        """(words, dim) float32 of one layer, read from the memory map."""
        return np.asarray(self.hidden[layer], dtype=np.float32)

    def sentence(self, index: int, layer: int) -> np.ndarray:
        """(n, dim) float32: one sentence's words at one layer."""
        start, end = self.offsets[index], self.offsets[index + 1]
        return np.asarray(self.hidden[layer, start:end], dtype=np.float32)

    def attention_map(self, index: int) -> np.ndarray:
        """(layers, heads, n + 2, n + 2) float32 word-level attention, [CLS] … [SEP]."""
        require(self.attention is not None, "these features were extracted without attention")
        n = int(self.offsets[index + 1] - self.offsets[index]) + 2
        start = int(self.attention_offsets[index])
        block = self.attention[start: start + self.num_layers * self.num_heads * n * n]
        return np.asarray(block, dtype=np.float32).reshape(self.num_layers, self.num_heads, n, n)


def iter_attention_maps(features: Features, indices: Iterable[int], desc: str
                        ) -> Iterator[np.ndarray]:
    """(layers, heads, n + 2, n + 2) maps of the given sentences, read one at a time."""
    for i in tqdm(list(indices), desc=desc, unit="sentence"):
        yield features.attention_map(i)


# ---------------------------------------------------------------- sub-words → words


def word_spans(word_ids: list[int | None], num_words: int) -> list[tuple[int, int]]:
    """[start, end) token positions of each word, from the tokenizer's word_ids()."""
    spans: list[list[int]] = [[] for _ in range(num_words)]
    for position, word in enumerate(word_ids):
        if word is not None:
            spans[word].append(position)
    return [(s[0], s[-1] + 1) for s in spans]


def pool_words(hidden: torch.Tensor, spans: list[tuple[int, int]], pooling: str) -> torch.Tensor:
    """(layers + 1, tokens, dim) → (layers + 1, words, dim): each word's first sub-word (as
    Devlin et al. tag) or the mean of its sub-words."""
    if pooling == "first":
        return hidden[:, [start for start, _ in spans]]
    return torch.stack([hidden[:, start:end].mean(dim=1) for start, end in spans], dim=1)


def attention_to_words(attention: torch.Tensor, spans: list[tuple[int, int]],
                       length: int) -> torch.Tensor:
    """(layers, heads, tokens, tokens) → (layers, heads, n + 2, n + 2) as Clark et al. (2019,
    §A): attention *to* a word is the sum over its sub-words, attention *from* a word the mean
    over its sub-words, so each row still sums to 1. [CLS] (position 0) and the final [SEP]
    (position length - 1) stay as their own rows and columns."""
    groups = [(0, 1), *spans, (length - 1, length)]
    to_words = torch.stack([attention[..., s:e].sum(dim=-1) for s, e in groups], dim=-1)
    return torch.stack([to_words[..., s:e, :].mean(dim=-2) for s, e in groups], dim=-2)


# ---------------------------------------------------------------- extraction


def encode_words(tokenizer: PreTrainedTokenizerBase, sentences: list[ProbeSentence],
                 max_length: int):
    return tokenizer([list(s.words) for s in sentences], is_split_into_words=True,
                     padding=True, truncation=True, max_length=max_length, return_tensors="pt")


def fits(tokenizer: PreTrainedTokenizerBase, sentence: ProbeSentence, max_length: int) -> bool:
    """Whether the sentence is whole after tokenising: within max_length, and every word has
    at least one sub-word (a tree probe needs every word)."""
    encoded = tokenizer(list(sentence.words), is_split_into_words=True)
    covered = {w for w in encoded.word_ids() if w is not None}
    return len(encoded["input_ids"]) <= max_length and len(covered) == len(sentence.words)


@torch.no_grad()
def extract_batch(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                  batch: list[ProbeSentence], pooling: str, attention: bool, max_length: int):
    """Per sentence: (layers + 1, n, dim) hidden and, if asked, (layers, heads, n+2, n+2)."""
    device = next(model.parameters()).device
    encoded = encode_words(tokenizer, batch, max_length)
    inputs = {k: v.to(device) for k, v in encoded.items() if k != "token_type_ids"}
    outputs = model(**inputs, output_hidden_states=True, output_attentions=attention)
    hidden = torch.stack(outputs.hidden_states, dim=1).float().cpu()  # (batch, layers+1, seq, dim)
    maps = torch.stack(outputs.attentions, dim=1).float().cpu() if attention else None
    results = []
    for b, sentence in enumerate(batch):
        spans = word_spans(encoded.word_ids(b), len(sentence.words))
        length = int(encoded["attention_mask"][b].sum())
        words = pool_words(hidden[b], spans, pooling)
        word_maps = None
        if maps is not None:  # (layers, heads, seq, seq) of this sentence, padding cut off
            word_maps = attention_to_words(maps[b, :, :, :length, :length], spans, length)
        results.append((words, word_maps))
    return results


def extract_features(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                     sentences: list[ProbeSentence], out: Path, pooling: str = "first",
                     attention: bool = False, batch_size: int = 32, max_length: int = 128,
                     desc: str = "extract") -> None:
    """Run the model once over the sentences and write the arrays of `Features` into out/."""
    require(pooling in POOLINGS, f"pooling={pooling!r} is not an option; use one of: "
            f"{', '.join(POOLINGS)}")
    model.eval()
    lengths = np.array([len(s.words) for s in sentences])
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    layers, dim = model.config.num_hidden_layers, model.config.hidden_size
    heads = model.config.num_attention_heads
    hidden = np.lib.format.open_memmap(out / "hidden.npy", mode="w+", dtype=np.float16,
                                       shape=(layers + 1, int(offsets[-1]), dim))
    sizes = layers * heads * (lengths + 2) ** 2
    attention_offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    maps = (np.lib.format.open_memmap(out / "attention.npy", mode="w+", dtype=np.float16,
                                      shape=(int(attention_offsets[-1]),))
            if attention else None)
    for start in tqdm(range(0, len(sentences), batch_size), desc=desc, unit="batch"):
        batch = sentences[start: start + batch_size]
        for i, (words, word_maps) in enumerate(
                extract_batch(model, tokenizer, batch, pooling, attention, max_length)):
            index = start + i
            hidden[:, offsets[index]: offsets[index + 1]] = words.numpy()
            if maps is not None:
                a = attention_offsets[index]
                maps[a: a + sizes[index]] = word_maps.reshape(-1).numpy()
    hidden.flush()
    np.save(out / "offsets.npy", offsets)
    if maps is not None:
        maps.flush()
        np.save(out / "attention_offsets.npy", attention_offsets)
    (out / "meta.json").write_text(json.dumps({"layers": layers, "heads": heads, "dim": dim,
                                               "sentences": len(sentences)}))


def load_cached_features(path: Path, attention: bool) -> Features | None:
    """A cache entry read back and checked whole (every array the shape meta.json says), or
    None: an entry without the attention asked for is extracted again, a damaged one is
    removed (cache_notes says so) and extracted again, never served."""
    if (path / "meta.json").is_file() and attention and not (path / "attention.npy").exists():
        return None
    try:
        features = load_features(path)
        meta = json.loads((path / "meta.json").read_text())
        shape = (meta["layers"] + 1, int(features.offsets[-1]), meta["dim"])
        require(features.hidden.shape == shape and features.num_sentences == meta["sentences"],
                f"hidden.npy holds {features.hidden.shape}, meta.json says {shape}")
        return features
    except (OSError, EOFError, ValueError, KeyError, IndexError, TypeError, UserError) as err:
        recompute("features", path, str(err).splitlines()[0] if str(err) else "unreadable")
        return None


def load_features(path: Path) -> Features:
    """Memory-map a cache entry."""
    meta = json.loads((path / "meta.json").read_text())
    attention = path / "attention.npy"
    return Features(
        hidden=np.load(path / "hidden.npy", mmap_mode="r"),
        offsets=np.load(path / "offsets.npy"),
        attention=np.load(attention, mmap_mode="r") if attention.exists() else None,
        attention_offsets=(np.load(path / "attention_offsets.npy") if attention.exists()
                           else None),
        num_heads=int(meta["heads"]),
    )


# ---------------------------------------------------------------- the cache


def fingerprint_model(model: PreTrainedModel, identity: str) -> str:
    """What the activations depend on: the architecture and every weight. Hashing the
    tensors (not a path or mtime) keeps a retrained checkpoint from reusing stale features."""
    digest = hashlib.sha256(identity.encode())
    digest.update(model.config.to_json_string(use_diff=False).encode())
    for name, tensor in model.state_dict().items():
        if name.startswith("pooler."):  # no hidden state reads it; a checkpoint without one
            continue  # (a masked-LM save) gets a random pooler per load: a new key each run
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def cache_key(model_fingerprint: str, sentences: list[ProbeSentence], settings: dict) -> str:
    digest = hashlib.sha256(json.dumps({"version": CACHE_VERSION, "model": model_fingerprint,
                                        **settings}, sort_keys=True).encode())
    for sentence in sentences:
        digest.update("\x1f".join(sentence.words).encode() + b"\x1e")
    return digest.hexdigest()[:24]


def extract_or_load(model: PreTrainedModel, model_fingerprint: str,
                    tokenizer: PreTrainedTokenizerBase, sentences: list[ProbeSentence],
                    cache_dir: Path, pooling: str, attention: bool, batch_size: int,
                    max_length: int, desc: str) -> Features:
    """The cached features of these sentences, extracted first if no cache entry has them.
    An entry with attention also serves a request without it."""
    settings = {"pooling": pooling, "max_length": max_length}
    key = cache_key(model_fingerprint, sentences, settings)
    path = cache_dir / "features" / key
    if path.exists() or path.is_symlink():
        cached = load_cached_features(path, attention)
        if cached is not None:
            log.info("%s: features from the cache (%s)", desc, path)
            return cached
    path.parent.mkdir(parents=True, exist_ok=True)
    write_dir_atomic(path, lambda tmp: (tmp.mkdir(), extract_features(
        model, tokenizer, sentences, tmp, pooling, attention, batch_size, max_length, desc)))
    log.info("%s: features cached in %s", desc, path)
    return load_features(path)
