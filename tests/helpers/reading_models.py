"""Tiny random models of every model type bertology reads, and checkpoints of the reading-only
ones (families.py's READING), each with a tokenizer of its own kind learnt from the synthetic
corpus (WordPiece for DistilBERT and MPNet, a SentencePiece-style Unigram for ALBERT, DeBERTa-v3
and XLM-R), saved as the model dir a user would give the pipelines: config.json,
model.safetensors, tokenizer.json and its config."""

from __future__ import annotations

from pathlib import Path

import torch
import transformers
from conftest import DATA_DIR

READING_TYPES = ("distilbert", "albert", "deberta-v2", "xlm-roberta", "mpnet")
MAX_POSITIONS = 130  # task.max_seq_length 128, plus XLM-R's and MPNet's two unusable slots

# model type -> the arguments of its config class beyond the shape (the published base
# models' settings where they change the architecture: DeBERTa-v3-base's disentangled
# attention over 256 log buckets, shared q/k projections, no absolute positions or segments)
ARCHITECTURE = {
    "bert": {}, "roberta": {}, "electra": {},
    "modernbert": {"cls_token_id": 2, "sep_token_id": 3, "bos_token_id": 2, "eos_token_id": 3},
    "distilbert": {},
    "albert": {"embedding_size": 16},  # factorised: narrower than the hidden size
    "deberta-v2": {"relative_attention": True, "pos_att_type": ["p2c", "c2p"],
                   "position_buckets": 256, "max_relative_positions": -1,
                   "norm_rel_ebd": "layer_norm", "share_att_key": True, "type_vocab_size": 0,
                   "position_biased_input": False},
    "xlm-roberta": {"type_vocab_size": 1},
    "mpnet": {},
}
# model type -> (tokenizer class, how its vocabulary is learnt)
TOKENIZERS = {"distilbert": ("DistilBertTokenizer", "wordpiece"),
              "mpnet": ("MPNetTokenizer", "wordpiece"),
              "albert": ("AlbertTokenizer", "unigram"),
              "deberta-v2": ("DebertaV2Tokenizer", "unigram"),
              "xlm-roberta": ("XLMRobertaTokenizer", "unigram")}
MPNET_SPECIALS = ["<s>", "<pad>", "</s>", "[UNK]", "<mask>"]  # mpnet-base's ids 0-4


def tiny_config(model_type: str, vocab_size: int, pad_token_id: int, layers: int = 2,
                heads: int = 2, hidden: int = 32, **extra) -> transformers.PretrainedConfig:
    """A config of the type's class: DistilBERT's names (dim, n_layers, hidden_dim) set
    directly, the others BERT's."""
    config_class = transformers.CONFIG_MAPPING[model_type]
    shape = ({"dim": hidden, "n_layers": layers, "n_heads": heads, "hidden_dim": 2 * hidden}
             if model_type == "distilbert" else
             {"hidden_size": hidden, "num_hidden_layers": layers, "num_attention_heads": heads,
              "intermediate_size": 2 * hidden})
    return config_class(vocab_size=vocab_size, pad_token_id=pad_token_id,
                        max_position_embeddings=MAX_POSITIONS,
                        **shape, **(ARCHITECTURE[model_type] | extra))


def synthetic_sentences(count: int = 2000) -> list[str]:
    from bertology.config.groups import DataConfig
    from bertology.data.corpora import build_corpus

    corpus = build_corpus(DataConfig(num_sentences=count), DATA_DIR)
    return [sentence for document in corpus.iter_documents() for sentence in document]


def train_tokenizer(model_type: str, sentences: list[str], vocab_size: int = 400):
    """The type's own tokenizer class over a vocabulary learnt from the sentences."""
    from bertology.data.corpora import text_corpus
    from bertology.data.tokenizers import train_tokenizer as train_bertology

    name, kind = TOKENIZERS[model_type]
    cls = getattr(transformers, name)
    if kind == "unigram":
        return cls().train_new_from_iterator(sentences, vocab_size=vocab_size)
    wordpiece = train_bertology(text_corpus("reading", sentences), "wordpiece", vocab_size)
    pieces = [t for t, _ in sorted(wordpiece.get_vocab().items(), key=lambda item: item[1])
              if not (t.startswith("[") and t.endswith("]"))]
    if model_type == "mpnet":
        return cls(vocab={t: i for i, t in enumerate(MPNET_SPECIALS + pieces)})
    return cls(vocab=wordpiece.get_vocab())


def save_checkpoint(model_type: str, tokenizer, path: Path, auto=None, seed: int = 0,
                    **config_extra) -> Path:
    """A random model of the type (its MaskedLM class unless `auto` says otherwise) and the
    tokenizer, saved together."""
    auto = auto or transformers.AutoModelForMaskedLM
    torch.manual_seed(seed)
    config = tiny_config(model_type, len(tokenizer), tokenizer.pad_token_id, **config_extra)
    auto.from_config(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
