"""RoBERTa's DOC-SENTENCES at FULL-SENTENCES' tokens per step (Liu et al., 2019, §4.2: "we
dynamically increase the batch size to achieve a similar number of total tokens as
FULL-SENTENCES"). In experiment=pretrain_input_format the two formats then differ in how
sequences are cut, not in how many tokens a step trains on."""

from __future__ import annotations

import pytest
from conftest import compose_config

from bertology.config.pretrain_config import load_pretrain_config
from bertology.pipelines import pretrain

STUDY = ["experiment=pretrain_input_format", "logger=none", "trainer=smoke",
         "trainer.max_steps=16", "trainer.eval_every=16", "trainer.save_every=16",
         "data.num_sentences=3000", "data.eval_docs=20"]
TOLERANCE = 0.10  # sampling: 16 steps of ~20 sequences whose lengths vary by document


def tokens_per_step(tmp_path, input_format: str) -> float:
    metrics = pretrain.run(compose_config("pretrain", [*STUDY, f"+input_format={input_format}"]),
                           tmp_path / input_format)
    return metrics["train/tokens"] / metrics["train/steps"]


@pytest.mark.slow
def test_doc_sentences_trains_on_full_sentences_tokens_per_step(tmp_path):
    full = tokens_per_step(tmp_path, "full_sentences")
    doc = tokens_per_step(tmp_path, "doc_sentences")
    assert doc == pytest.approx(full, rel=TOLERANCE), (doc, full)


def test_only_the_format_comparison_raises_the_batch():
    """Studies that pick doc_sentences for other reasons (SpanBERT, the masking study) keep
    their batch: the raise comes with conf/input_format/doc_sentences.yaml."""
    direct = load_pretrain_config(compose_config("pretrain", ["model=spanbert"]))
    assert direct.model.input_format == "doc_sentences"
    assert not direct.model.doc_sentences_equal_tokens
    study = load_pretrain_config(compose_config("pretrain",
                                                [*STUDY, "+input_format=doc_sentences"]))
    assert study.model.doc_sentences_equal_tokens
