"""Every finding fed noise must not hold, raw or after Holm's correction.

The noise reaches each study where its evidence comes from, and everything downstream of it
(the analyses, the metrics, the item replicates, the verdict) is the real code:
- probe studies: every extraction (hidden states, attention maps, numbers) is replaced by
  random features: Gaussian states, attention rows drawn from a flat Dirichlet;
- finetune, prune and distill studies: the training labels are shuffled, so the fine-tuned
  model (and the teacher) can learn nothing about the task;
- pretrain studies: the encoder is left untrained (one step at a negligible learning rate).
Studies run on tiny models and data with three seeds, as the report needs seeds.

A raw verdict is a one-sided test at level 0.05, so on noise each one may hold with
probability up to 0.05 by construction (tests/study/test_statistics.py measures that rate at the
boundary; Holm's corrected verdict bounds it for the whole suite). The noise is therefore
seeded from the data and the model's weights, never from anything machine-specific, so CI and
every clone test the same realization.

The second null is the random-init twin (issue 28): each study run on an untrained model of
its architecture, through the real pipelines, data and labels. I.i.d. noise has no layers and
no architecture, so it cannot show a claim that is as true of an untrained encoder as of a
pretrained one (a random-init MiniLM grows more anisotropic with depth too). On the twin no
finding `about: model` may hold, raw or corrected; `about: method` findings (properties of a
probe or a metric, e.g. that probes memorise) may, and are left out:
- probe studies: the model under study is a random-init MiniLM (its architecture and
  tokenizer, fresh weights), so the analyses' own twin contrasts compare one random init with
  another; compare_to is that model briefly fine-tuned, and compare_to_twin each seed's twin
  fine-tuned the same way (init=random);
- finetune, prune and distill studies: MiniLM's architecture and tokenizer with random weights
  (finetune_sst2 at init=random; finetune_conll, which sweeps init itself, with MiniLM replaced
  by a random MiniLM; prune and distill start from the random MiniLM's fine-tuned SST-2 model,
  prune's own twin arm from finetune_sst2's init=random runs), on the
  true labels of the real SST-2 and CoNLL-2003, at the reduced scale of tests/helpers/twin_scale.py,
  where MiniLM itself learns the tasks: the same runs on MiniLM must meet every guard;
- pretrain studies: the encoder left untrained is already the twin (the last i.i.d. test)."""

from __future__ import annotations

import dataclasses
import hashlib
import random
from pathlib import Path

import numpy as np
import pytest
from conftest import compose_config
from omegaconf import OmegaConf
from study_runs import (
    CATALOG,
    SEEDS,
    assert_no_finding_holds,
    judge_studies,
    plan_study,
    run_in_lanes,
    run_study,
    start_lanes,
)
from twin_scale import CONLL, PRUNE, SST2, assert_it_learns, conll_arms, print_verdicts

from bertology.analysis.features import Features
from bertology.pipelines import load_pipeline
from bertology.study.judge.results import find_runs
from bertology.study.judge.verdicts import judge

pytestmark = pytest.mark.usefixtures("one_thread")


# ---------------------------------------------------------------- random features


def noise_key(model, sentences) -> bytes:
    """A seed from the model's first weight tensor and the words, the same on every machine.
    (The run's model fingerprint would not do: a checkpoint's path is part of it, and the
    path of the installed MiniLM differs between clones, so CI would draw other noise.)"""
    digest = hashlib.sha256(next(model.parameters()).detach().cpu().numpy().tobytes())
    for sentence in sentences:
        digest.update(" ".join(sentence.words).encode() + b"\x1e")
    return digest.digest()


def random_features(model, model_fingerprint, tokenizer, sentences, cache_dir, pooling,
                    attention, batch_size, max_length, desc) -> Features:
    """What extract_or_load returns, made of noise: Gaussian states for every word of every
    layer, and (when asked) flat-Dirichlet attention rows, seeded by model and sentences."""
    rng = np.random.default_rng(list(noise_key(model, sentences)[:8]))
    layers, heads = model.config.num_hidden_layers, model.config.num_attention_heads
    lengths = [len(s.words) for s in sentences]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    hidden = rng.normal(size=(layers + 1, int(offsets[-1]), model.config.hidden_size))
    if not attention:
        return Features(hidden.astype(np.float16), offsets, num_heads=heads)
    maps = [rng.dirichlet(np.ones(n + 2), size=(layers, heads, n + 2)).ravel() for n in lengths]
    map_offsets = np.concatenate([[0], np.cumsum([len(m) for m in maps])]).astype(np.int64)
    return Features(hidden.astype(np.float16), offsets, np.concatenate(maps).astype(np.float16),
                    map_offsets, num_heads=heads)


@pytest.mark.slow
def test_probing_findings_do_not_hold_on_random_features(tmp_path, monkeypatch):
    monkeypatch.setattr("bertology.analysis.probe_context.extract_or_load", random_features)
    monkeypatch.setattr("bertology.analysis.numeracy.extract_or_load", random_features)
    sizes = ["max_train_sentences=80", "max_eval_sentences=40",
             "analysis.attention.max_sentences=40", "analysis.attention.min_dependents=5",
             "analysis.numeracy.max_number=200",
             "analysis.numeracy.train_below=100",
             "compare_to=sentence-transformers/all-MiniLM-L6-v2",
             "compare_to_twin=sentence-transformers/all-MiniLM-L6-v2",
             "analysis=[linear,mlp,structural,geometry,attention,position,numeracy]"]
    run_study("probe_pos", tmp_path / "probe_pos", sizes)
    run_study("probe_ner", tmp_path / "probe_ner", sizes[:2])
    # erasure_use erases at the model's own states through a hook, which random features do
    # not replace, and reads a fine-tuned classifier: its findings' nulls are the twin's below
    # and tests/analysis/test_erasure_use.py's noise test
    assert_no_finding_holds(tmp_path, {"probe_pos", "probe_ner"},
                            only=tuple(i for i in CATALOG if i not in ERASURE_FINDINGS))


# ---------------------------------------------------------------- shuffled labels


def shuffle_labels(examples: list[dict]) -> None:
    """Permute the labels across examples, or the tags across every word of every example
    (each sentence keeps its length): no model can learn the task from them."""
    rng = random.Random(0)
    if "label" in examples[0]:
        labels = [e["label"] for e in examples]
        rng.shuffle(labels)
        for example, label in zip(examples, labels):
            example["label"] = label
        return
    tags = [tag for e in examples for tag in e["tags"]]
    rng.shuffle(tags)
    for example in examples:
        example["tags"], tags = tags[:len(example["tags"])], tags[len(example["tags"]):]


def shuffled(load_task):
    """load_task, with the training labels shuffled."""

    def load(task, data_dir, max_train_examples=None):
        data = load_task(task, data_dir, max_train_examples)
        shuffle_labels(data.train)
        return data

    return load


@pytest.fixture
def shuffled_labels(monkeypatch):
    for pipeline in ("finetune", "prune", "distill"):
        module = f"bertology.pipelines.{pipeline}"
        monkeypatch.setattr(f"{module}.load_task", shuffled(
            __import__(module, fromlist=["load_task"]).load_task))


TINY_TASK = ["task.num_sentences=600", "trainer.max_steps=40", "trainer.lr=2e-3"]


def run_finetuning_studies(root: Path) -> set[str]:
    """finetune_sst2 on a random-initialised tiny BERT (no model.name_or_path: fine-tuning
    starts from random weights). finetune_conll's findings are differences in differences
    against an init=random arm, which needs a checkpoint to draw fresh weights for; their null
    is the twin null below (a random MiniLM against its own twin, on real CoNLL-2003)."""
    run_study("finetune_sst2", root / "sst2", ["model=bert", "size=deep_narrow",
                                               "task=synthetic_negation", *TINY_TASK],
              arms=[["head.freeze_layers=0"], ["head.freeze_layers=3"]])
    return {"finetune_sst2"}


def run_compression_studies(root: Path) -> set[str]:
    """prune_sst2 and distill_sst2, the model pruned (the teacher) fine-tuned from random
    weights."""
    run_study("prune_sst2", root / "prune", ["model=bert", "task=synthetic_negation",
                                             "trainer=finetune_tiny", *TINY_TASK,
                                             "prune.importance_examples=32"])
    run_study("distill_sst2", root / "distill", [
        "model@teacher.model=bert", "trainer@teacher.trainer=finetune_tiny",
        "task=synthetic_negation", *TINY_TASK, "student.num_layers=1"])
    return {"prune_sst2", "distill_sst2"}


@pytest.mark.slow
def test_finetuning_findings_do_not_hold_on_shuffled_labels(tmp_path, shuffled_labels):
    assert_no_finding_holds(tmp_path, run_finetuning_studies(tmp_path))


@pytest.mark.slow
def test_compression_findings_do_not_hold_on_shuffled_labels(tmp_path, shuffled_labels):
    assert_no_finding_holds(tmp_path, run_compression_studies(tmp_path))


# ---------------------------------------------------------------- untrained encoders


UNTRAINED = ["trainer.max_steps=1", "trainer.lr=1e-12", "trainer.warmup_steps=0",
             "trainer.batch_size=8", "trainer.eval_batches=4", "data.num_sentences=800",
             "data.eval_docs=20", "data.max_seq_length=64"]


@pytest.mark.slow
def test_pretraining_findings_do_not_hold_on_untrained_encoders(tmp_path):
    run_study("pretrain_masking", tmp_path / "masking", UNTRAINED,
              arms=[["model.masking=static"], ["model.masking=dynamic"]])
    run_study("pretrain_shape", tmp_path / "shape", UNTRAINED,
              arms=[["size=deep_narrow"], ["size=shallow_wide"]])
    downstream = [*UNTRAINED, "++downstream.trainer.max_train_examples=300",
                  "downstream.trainer.epochs=null", "+downstream.trainer.max_steps=30"]
    run_study("pretrain_nsp", tmp_path / "nsp", downstream,
              arms=[["objective=mlm_nsp"], ["objective=mlm"]])
    run_study("pretrain_electra", tmp_path / "electra",
              [*downstream, "trainer.max_flops=null"],
              arms=[["model=roberta"], ["model=electra"]])
    assert_no_finding_holds(tmp_path, {"pretrain_masking", "pretrain_shape", "pretrain_nsp",
                                       "pretrain_electra"})


# ---------------------------------------------------------------- the random-init twin


MINILM = "sentence-transformers/all-MiniLM-L6-v2"
ERASURE_FINDINGS = ("pos_used", "pos_unused")  # read analysis=erasure_use
MODEL_ONLY = ("model",)  # on the twin, findings about a method may hold


@pytest.fixture(scope="module")
def random_minilm(tmp_path_factory) -> Path:
    """all-MiniLM-L6-v2's architecture and tokenizer with fresh weights, saved as a
    checkpoint: the random-init twin of the probe studies' model."""
    from bertology.analysis.probe_context import load_encoder, random_like

    model, tokenizer = load_encoder(MINILM, attention=False)
    path = tmp_path_factory.mktemp("random_minilm")
    random_like(model, seed=28).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def random_minilm_finetuned(tmp_path_factory, random_minilm) -> Path:
    """The random MiniLM briefly fine-tuned on the synthetic negation task: compare_to's twin
    (the study compares MiniLM with MiniLM fine-tuned on SST-2)."""
    out = tmp_path_factory.mktemp("random_minilm_finetuned")
    cfg = compose_config("finetune", ["logger=none", f"model.name_or_path={random_minilm}",
                                      "task=synthetic_negation", *TINY_TASK])
    load_pipeline("finetune")(cfg, out)
    return out / "model"


@pytest.fixture(scope="module")
def random_minilm_twins_finetuned(tmp_path_factory, random_minilm) -> str:
    """Each seed's twin of the random MiniLM (init=random: the probe's twin of that seed)
    fine-tuned as random_minilm_finetuned was, saved as finetune runs (their config recorded,
    as compare_to_twin's check reads it): compare_to_twin's path, per job."""
    root = tmp_path_factory.mktemp("random_minilm_twins")
    for seed in SEEDS:
        cfg = compose_config("finetune", ["logger=none", f"model.name_or_path={random_minilm}",
                                          "task=synthetic_negation", *TINY_TASK, "init=random",
                                          f"seed={seed}"])
        (root / str(seed) / ".hydra").mkdir(parents=True)
        OmegaConf.save(cfg, root / str(seed) / ".hydra" / "config.yaml")
        load_pipeline("finetune")(cfg, root / str(seed))
    return f"{root}/${{seed}}/model"


TWIN_SIZES = ["max_train_sentences=80", "max_eval_sentences=40"]


@pytest.mark.slow
def test_layer_trends_do_not_hold_on_the_random_init_twin(tmp_path, random_minilm):
    """Issue 28's case, small: the trends over depth an untrained MiniLM shows too
    (anisotropy +0.040 [+0.021, +0.060] held on it as a slope against 0)."""
    run_study("probe_pos", tmp_path / "probe_pos", [
        *TWIN_SIZES, f"model.name_or_path={random_minilm}", "analysis=[geometry,position]"])
    assert_no_finding_holds(tmp_path, {"probe_pos"}, about=MODEL_ONLY,
                            only=("anisotropy", "self_similarity", "position_layers"))


@pytest.mark.slow
def test_probing_findings_do_not_hold_on_the_random_init_twin(tmp_path, random_minilm,
                                                              random_minilm_finetuned,
                                                              random_minilm_twins_finetuned):
    sizes = [*TWIN_SIZES, f"model.name_or_path={random_minilm}"]
    run_study("probe_pos", tmp_path / "probe_pos", [
        *sizes, "analysis.attention.max_sentences=40", "analysis.attention.min_dependents=5",
        "analysis.numeracy.max_number=200", "analysis.numeracy.train_below=100",
        f"compare_to={random_minilm_finetuned}",
        f"compare_to_twin={random_minilm_twins_finetuned}",
        "analysis.erasure_use.max_examples=40"])
    run_study("probe_ner", tmp_path / "probe_ner", sizes)
    print_verdicts("twin", assert_no_finding_holds(tmp_path, {"probe_pos", "probe_ner"},
                                                   about=MODEL_ONLY))


@pytest.fixture(scope="module")
def random_modernbert(tmp_path_factory) -> Path:
    """A random-init ModernBERT with MiniLM's tokenizer: the twin of the encoders `python -m
    bertology.reproduce --encoders modernbert` pretrains (issue 32), smaller. L=3: a global
    layer, then two local ones with a ±32 window, so the attention analyses read only the
    sentences that fit it."""
    import torch
    from transformers import ModernBertConfig, ModernBertForMaskedLM

    from bertology.analysis.probe_context import load_encoder

    _, tokenizer = load_encoder(MINILM, attention=False)
    ids = {"pad_token_id": tokenizer.pad_token_id, "cls_token_id": tokenizer.cls_token_id,
           "sep_token_id": tokenizer.sep_token_id, "bos_token_id": tokenizer.cls_token_id,
           "eos_token_id": tokenizer.sep_token_id}
    config = ModernBertConfig(vocab_size=len(tokenizer), hidden_size=128, num_hidden_layers=3,
                              num_attention_heads=4, intermediate_size=192, local_attention=64,
                              global_attn_every_n_layers=3, **ids)
    torch.manual_seed(32)
    path = tmp_path_factory.mktemp("random_modernbert")
    ModernBertForMaskedLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.mark.slow
def test_layer_and_head_findings_do_not_hold_on_a_random_init_modernbert(tmp_path,
                                                                         random_modernbert):
    """The twin null for the fifth family's own analysis paths (rotary positions, pre-norm,
    attention maps read inside local windows): on a random-init ModernBERT no claim about the
    model holds, raw or corrected."""
    run_study("probe_pos", tmp_path / "probe_pos", [
        *TWIN_SIZES, f"model.name_or_path={random_modernbert}",
        "analysis=[geometry,position,attention]", "analysis.attention.max_sentences=40",
        "analysis.attention.min_dependents=5"])
    results = assert_no_finding_holds(
        tmp_path, {"probe_pos"}, about=MODEL_ONLY,
        only=("anisotropy", "self_similarity", "position_layers", "dependency_heads",
              "special_heads", "head_similarity"))
    assert len(results) == 6


# The fine-tuning, pruning and distillation studies, on MiniLM (model/) and on its twin (twin/),
# at the reduced scale of tests/helpers/twin_scale.py, where the pretrained arm learns the task.


@pytest.fixture(scope="module")
def lanes():
    """Two lanes (tests/helpers/study_runs.py), started once for the twin tests below."""
    with start_lanes() as pool:
        yield pool


@pytest.fixture(scope="module")
def sst2_models(tmp_path_factory, lanes, random_minilm) -> Path:
    """finetune_sst2's all-layers arm, three seeds, on MiniLM (model/sst2), its twin
    (twin/sst2: init=random) and a random MiniLM (null/sst2): the study's runs, and the
    fine-tuned models prune_sst2 and distill_sst2 start from (as `make reproduce`'s
    {sst2_model} and {sst2_twin}: seed s reads seed s's)."""
    root = tmp_path_factory.mktemp("sst2_models")
    all_layers = [*SST2, "head.freeze_layers=0"]
    run_in_lanes(lanes, [*plan_study("finetune_sst2", root / "model" / "sst2", all_layers),
                         *plan_study("finetune_sst2", root / "twin" / "sst2",
                                     [*all_layers, "init=random"]),
                         *plan_study("finetune_sst2", root / "null" / "sst2",
                                     [*all_layers, f"model.name_or_path={random_minilm}"])])
    return root


@pytest.mark.slow
@pytest.mark.data("glue_sst2", "conll2003_ner")
def test_finetuning_findings_do_not_hold_on_the_random_init_twin(tmp_path, lanes, sst2_models,
                                                                 random_minilm):
    """finetune_sst2 on MiniLM and on init=random; finetune_conll, which sweeps init itself, on
    MiniLM and with MiniLM replaced by a random MiniLM (model and twin both untrained). The
    init=random arm never reads the checkpoint's weights, so both studies share its runs."""
    studies = {"finetune_sst2", "finetune_conll"}
    lower_frozen = [*SST2, "head.freeze_layers=3"]
    run_in_lanes(lanes, [
        *plan_study("finetune_sst2", tmp_path / "model" / "sst2", lower_frozen),
        *plan_study("finetune_sst2", tmp_path / "twin" / "sst2", [*lower_frozen, "init=random"]),
        *plan_study("finetune_conll", tmp_path / "model" / "conll", CONLL,
                    arms=conll_arms("pretrained")),
        *plan_study("finetune_conll", tmp_path / "random" / "conll", CONLL,
                    arms=conll_arms("random")),
        *plan_study("finetune_conll", tmp_path / "twin" / "conll",
                    [*CONLL, f"model.name_or_path={random_minilm}"],
                    arms=conll_arms("pretrained"))])
    model = [sst2_models / "model", tmp_path / "model", tmp_path / "random"]
    assert_it_learns(model, studies)
    print_verdicts("model", judge_studies(model, studies))
    print_verdicts("twin", assert_no_finding_holds(
        [sst2_models / "twin", tmp_path / "twin", tmp_path / "random"], studies,
        about=MODEL_ONLY))


@pytest.mark.slow
@pytest.mark.data("glue_sst2")
def test_compression_findings_do_not_hold_on_the_random_init_twin(tmp_path, lanes, sst2_models):
    """prune_sst2 and distill_sst2 on the SST-2 models of MiniLM and of a random MiniLM, seed
    by seed, prune's twin arm on the init=random ones (the prune runs first: they take
    longest)."""
    studies = {"prune_sst2", "distill_sst2"}
    jobs = {"prune": [], "distill": []}
    twin = f"twin_name_or_path={sst2_models / 'twin' / 'sst2'}/${{seed}}/model"
    for arm, source in (("model", "model"), ("twin", "null")):
        tuned = f"{sst2_models / source / 'sst2'}/${{seed}}/model"  # the run of this seed
        jobs["prune"] += plan_study("prune_sst2", tmp_path / arm / "prune",
                                    [*PRUNE, f"model.name_or_path={tuned}", twin])
        jobs["distill"] += plan_study("distill_sst2", tmp_path / arm / "distill",
                                      [*SST2, f"teacher.name_or_path={tuned}"])
    run_in_lanes(lanes, [*jobs["prune"], *jobs["distill"]])
    assert_it_learns([tmp_path / "model"], studies)
    print_verdicts("model", judge_studies([tmp_path / "model"], studies))
    print_verdicts("twin", assert_no_finding_holds(tmp_path / "twin", studies,
                                                   about=MODEL_ONLY))


def test_every_finding_has_a_noise_test():
    """The studies the tests above feed noise cover every finding of the catalog."""
    covered = {"probe_pos", "probe_ner", "finetune_sst2", "finetune_conll", "prune_sst2",
               "distill_sst2", "pretrain_masking", "pretrain_shape", "pretrain_nsp",
               "pretrain_electra",
               # its nulls are in tests/study/test_planted_check.py (the twin through the CLI,
               # a swap that keeps the number); no random-feature run of it here yet
               "probe_planted",
               # the study on a random-init BERT with an MLM head through the CLI:
               # tests/study/test_agreement_used.py (MiniLM, the twin of this file, has none)
               "probe_agreement"}
    assert all(set(spec.studies) <= covered for spec in CATALOG.values())


# ---------------------------------------------------------------- what a claim is about


def type_features(model, model_fingerprint, tokenizer, sentences, cache_dir, pooling,
                  attention, batch_size, max_length, desc) -> Features:
    """Hewitt & Liang's null for a probe: one fixed random vector per word type at every
    layer (a type's vector depends on its spelling only), no context, no attention."""
    layers, dim = model.config.num_hidden_layers, model.config.hidden_size
    words = [w for s in sentences for w in s.words]
    vectors = {w: np.random.default_rng(list(hashlib.sha256(w.encode()).digest()[:8]))
               .normal(size=dim) for w in set(words)}
    hidden = np.stack([vectors[w] for w in words])  # (words, dim)
    offsets = np.concatenate([[0], np.cumsum([len(s.words) for s in sentences])])
    return Features(np.broadcast_to(hidden, (layers + 1, *hidden.shape)).astype(np.float16),
                    offsets.astype(np.int64), num_heads=model.config.num_attention_heads)


@pytest.mark.slow
def test_mlp_less_selective_does_not_hold_on_random_vectors_per_type(tmp_path, monkeypatch):
    """Issue 38: mlp_less_selective was labelled a claim about the method because it "holds on
    random per-type vectors"; measured, it does not. On one fixed random vector per word type
    (the model and its twin alike), the linear probe's mean selectivity minus the MLP's is
    not "holds" (measured at 250/200 sentences: −0.029 [−0.053, −0.006] over 3 seeds, "does
    not hold"), while on MiniLM it was +0.088: so the yaml calls it a claim about the model,
    judged against the twin. 3 minutes on 2 cores."""
    monkeypatch.setattr("bertology.analysis.probe_context.extract_or_load", type_features)
    run_study("probe_pos", tmp_path, ["max_train_sentences=250", "max_eval_sentences=200",
                                      "analysis=[linear,mlp]"])
    spec = CATALOG["mlp_less_selective"]
    first = spec.comparisons[0]
    result = judge(dataclasses.replace(spec, comparisons=(first,)), find_runs([tmp_path]))
    print(f"per-type vectors: {result.tests[0].estimate.mean:+.4f} "
          f"{result.tests[0].estimate.interval()} {result.raw.label}")
    assert result.raw.label != "holds"
    assert spec.about == "model" and spec.reads_twin
