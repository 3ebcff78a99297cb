"""The probe pipeline's core: extract-once features and their cache, layer-wise probes with
control tasks (Hewitt & Liang, 2019), the dispatch in sync with conf/analysis/, and the CLI's
answers to bad input. MDL probing has its own file, tests/analysis/test_mdl.py."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import DATA_DIR, REPO, compose_config
from schema_walk import mlm_checkpoint

from bertology.analysis import features as feats
from bertology.analysis import probe_fits, probes
from bertology.config.analysis_settings import (
    ANALYSES,
    LinearSettings,
    MLPSettings,
)
from bertology.config.probe_config import load_probe_config
from bertology.data.probe_sentences import ProbeSentence, load_probe_sentences
from bertology.errors import UserError
from bertology.pipelines import probe
from bertology.run.replicates import REPLICATES, bootstrap_indices, read_replicates
from bertology.run.rundir import RunDir
from bertology.study.judge.catalog import load_catalog
from bertology.study.judge.evidence import reduce_slope
from bertology.study.judge.verdicts import judge

# init=random: a random tiny BERT of size=, not the default pretrain run's checkpoint (80 s)
QUIET = ["logger=none", "init=random", "seeds=[0]", "max_train_sentences=300",
         "max_eval_sentences=100"]


# ---------------------------------------------------------------- dispatch and config


def test_analyses_match_their_configs_and_settings():
    files = {p.stem for p in (REPO / "conf" / "analysis").glob("*.yaml")}
    assert files == set(ANALYSES)


@pytest.mark.parametrize("name", sorted(ANALYSES))
def test_every_analysis_composes_alone_and_nested_under_its_name(name):
    # cloze and amnesic read an MLM head, so the config check wants a checkpoint with one
    head = ([f"model.name_or_path={mlm_checkpoint()}"] if ANALYSES[name].needs == "mlm_head"
            else [])
    config = load_probe_config(compose_config("probe", [f"analysis={name}", *head]))
    assert list(config.analyses) == [name]
    assert isinstance(config.analyses[name], ANALYSES[name].settings)


def test_several_analyses_compose_side_by_side():
    config = load_probe_config(compose_config(
        "probe", ["analysis=[linear,structural,attention]", "analysis.linear.c=0.5"]))
    assert list(config.analyses) == ["linear", "structural", "attention"]
    assert config.analyses["linear"].c == 0.5


@pytest.mark.parametrize("overrides,words", [
    (["pooling=last"], "pooling"),
    (["seeds=[0,0]"], "lists 0 twice"),
    (["analysis.linear.c=0"], "analysis.linear.c"),
    (["analysis=structural", "analysis.structural.probes=[width]"], "probes"),
    (["analysis=cloze", "analysis.cloze.suites=[winograd]"], "suites"),
    (["+analysis.linear.nope=1"], "analysis.linear.nope"),
])
def test_bad_probe_config_is_a_user_error(overrides, words):
    with pytest.raises(UserError, match=words):
        load_probe_config(compose_config("probe", overrides))


# ---------------------------------------------------------------- sentences


def test_ewt_sentences_carry_trees_and_universal_relations():
    task = load_probe_config(compose_config("probe", ["task=ud_deps"])).task
    splits = load_probe_sentences(task, DATA_DIR, 20, 10)
    assert len(splits.train) == 20 and len(splits.eval) == 10
    for sentence in splits.train:
        assert len(sentence.heads) == len(sentence.words) == len(sentence.labels)
        assert sentence.heads.count(0) == 1  # one root per UD sentence
        assert all(":" not in rel for rel in sentence.labels)  # nmod:poss → nmod


def test_synthetic_agreement_labels_only_the_agreeing_verb():
    task = load_probe_config(compose_config("probe", ["task=synthetic_agreement"])).task
    splits = load_probe_sentences(task, Path("."), 200, 50)
    for sentence in splits.train:
        labelled = [(i, label) for i, label in enumerate(sentence.labels) if label is not None]
        assert len(labelled) == 1 and labelled[0][1] in ("sing", "plur")
        assert sentence.upos[labelled[0][0]] in ("VERB", "AUX")


# ---------------------------------------------------------------- features


def test_word_pooling_and_word_level_attention():
    hidden = torch.arange(2 * 5 * 3, dtype=torch.float).view(2, 5, 3)  # (layers+1, tokens, dim)
    spans = [(1, 3), (3, 4)]  # [CLS] w0a w0b w1 [SEP]
    first = feats.pool_words(hidden, spans, "first")
    mean = feats.pool_words(hidden, spans, "mean")
    assert torch.equal(first[:, 0], hidden[:, 1])
    assert torch.allclose(mean[:, 0], hidden[:, 1:3].mean(dim=1))
    attention = torch.softmax(torch.randn(2, 3, 5, 5), dim=-1)  # (layers, heads, q, k)
    words = feats.attention_to_words(attention, spans, 5)
    assert words.shape == (2, 3, 4, 4)
    assert torch.allclose(words.sum(dim=-1), torch.ones(2, 3, 4), atol=1e-6)
    # attention from word 0 to word 1 = mean over w0a, w0b of their attention to w1
    assert torch.isclose(words[0, 0, 1, 2], attention[0, 0, 1:3, 3].mean())


@pytest.fixture(scope="module")
def tiny_encoder(synthetic_tokenizer):
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(synthetic_tokenizer), hidden_size=32,
                        num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                        attn_implementation="eager")
    return BertModel(config).eval(), synthetic_tokenizer


def sentences_of(words_list: list[list[str]]) -> list[ProbeSentence]:
    return [ProbeSentence(tuple(w), tuple("X" for _ in w)) for w in words_list]


def test_extraction_matches_a_direct_forward_pass_and_is_cached(tiny_encoder, tmp_path):
    model, tokenizer = tiny_encoder
    sentences = sentences_of([["the", "dog", "barks", "."], ["cats", "sleep"]])
    fingerprint = feats.fingerprint_model(model, "tiny")
    extracted = feats.extract_or_load(model, fingerprint, tokenizer, sentences, tmp_path,
                                      "first", True, 8, 64, "test")
    assert extracted.hidden.shape == (3, 6, 32) and extracted.num_sentences == 2
    encoded = tokenizer(["cats", "sleep"], is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        direct = model(**encoded, output_hidden_states=True).hidden_states
    first = [encoded.word_ids().index(i) for i in range(2)]
    assert np.allclose(extracted.sentence(1, 2), direct[2][0, first].numpy(), atol=1e-2)
    assert extracted.attention_map(0).shape == (2, 2, 6, 6)
    again = feats.extract_or_load(model, fingerprint, tokenizer, sentences, tmp_path, "first",
                                  False, 8, 64, "test")
    assert isinstance(again.hidden, np.memmap)  # read back, not re-extracted
    assert len(list((tmp_path / "features").iterdir())) == 1


def test_the_cache_key_follows_the_weights(tiny_encoder):
    model, _ = tiny_encoder
    before = feats.fingerprint_model(model, "tiny")
    with torch.no_grad():
        model.encoder.layer[0].output.dense.bias[0] += 1.0
    after = feats.fingerprint_model(model, "tiny")
    with torch.no_grad():
        model.encoder.layer[0].output.dense.bias[0] -= 1.0
    assert before != after and feats.fingerprint_model(model, "tiny") == before


# ---------------------------------------------------------------- probes


def labelled_features(n: int, dim: int, classes: int, signal: float, seed: int):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    x = rng.normal(size=(n, dim)).astype(np.float32)
    x[:, :classes] += signal * np.eye(classes)[y]
    return x, y


@pytest.mark.parametrize("kind,settings", [("linear", LinearSettings()),
                                           ("mlp", MLPSettings(epochs=10))])
def test_a_probe_reads_an_encoded_label_and_not_noise(kind, settings):
    x, y = labelled_features(3000, 16, 4, signal=6.0, seed=0)
    proba = probe_fits.FITS[kind](x[:2000], y[:2000], 4, settings, 0)(x[2000:])
    assert probe_fits.compute_accuracy(proba, y[2000:]) > 0.97
    noise, _ = labelled_features(3000, 16, 4, signal=0.0, seed=1)
    proba = probe_fits.FITS[kind](noise[:2000], y[:2000], 4, settings, 0)(noise[2000:])
    assert abs(probe_fits.compute_accuracy(proba, y[2000:]) - 0.25) < 0.06  # chance: 4 classes


def test_control_labels_are_fixed_per_type_and_follow_the_label_distribution():
    rng = np.random.default_rng(0)
    types = [f"w{i}" for i in rng.integers(0, 3000, 20000)]
    distribution = np.array([0.6, 0.3, 0.1])
    mapping = probes.compute_control_labels(types, distribution, seed=3)
    assert set(mapping) == set(types)
    assert probes.compute_control_labels(list(reversed(types)), distribution, 3) == mapping
    shares = np.bincount(list(mapping.values()), minlength=3) / len(mapping)
    assert np.allclose(shares, distribution, atol=0.03)
    assert probes.compute_control_labels(types, distribution, seed=4) != mapping


def test_edge_units_pair_each_dependent_with_its_head():
    sentence = ProbeSentence(("the", "dog", "barks"), ("det", "nsubj", "root"), (2, 3, 0))
    features = feats.Features(hidden=np.zeros((1, 5, 2)), offsets=np.array([0, 2, 5]))
    units = probes.build_units([ProbeSentence(("a", "b"), ("x", "y"), (0, 1)), sentence],
                               features, "edge", ["det", "nsubj", "x", "y", "root"])
    assert units.rows.tolist() == [[1, 0], [2, 3], [3, 4]]  # root words have no edge
    assert units.labels.tolist() == [3, 0, 1]
    assert units.types[1] == "the|dog"


# ---------------------------------------------------------------- item replicates


def clustered_data(hits_per_sentence: list[list[int]]):
    """ProbeData whose eval units are the given sentences' words (labels unused) and the
    matching 0/1 hits."""
    sentence = np.repeat(np.arange(len(hits_per_sentence)), [len(h) for h in hits_per_sentence])
    units = probes.Units(np.arange(len(sentence)), np.zeros(len(sentence), dtype=np.int64),
                         ["w"] * len(sentence))
    data = probes.ProbeData(units, units, 2, np.array([1.0, 0.0]), sentence,
                            len(hits_per_sentence))
    return data, np.concatenate([np.array(h, dtype=float) for h in hits_per_sentence])


def test_hit_replicates_resample_sentences_as_clusters_by_hand():
    """Four sentences of three words, two all right and two all wrong: accuracy 0.5, and the
    ideal bootstrap SD of a mean of 4 equal-weight clusters is sqrt(pop. var / 4) =
    sqrt(0.25 / 4) = 0.25; resampling the 12 words alone would say sqrt(0.25 / 12) = 0.144."""
    data, hits = clustered_data([[1, 1, 1], [0, 0, 0], [1, 1, 1], [0, 0, 0]])
    indices = bootstrap_indices(4)
    reps = probes.compute_hit_replicates([{"accuracy": hits}], data, indices)["accuracy"]
    assert reps.shape == (REPLICATES,)
    assert reps.mean() == pytest.approx(0.5, abs=0.03)
    assert reps.std() == pytest.approx(0.25, rel=0.12)
    # seeds average per sentence, and control/selectivity pair on the same resample
    flipped = 1.0 - hits
    both = probes.compute_hit_replicates(
        [{"accuracy": hits, "control_accuracy": flipped},
         {"accuracy": flipped, "control_accuracy": flipped}], data, indices)
    assert np.allclose(both["accuracy"], 0.5)  # each sentence's seed mean is 0.5
    assert np.allclose(both["selectivity"], both["accuracy"] - both["control_accuracy"])


def test_hit_replicates_pool_words_of_uneven_sentences():
    # sentences (2 of 2), (0 of 1), (1 of 3): accuracy 3/6; a resample [0, 0, 2] is 5/7
    data, hits = clustered_data([[1, 1], [0], [1, 0, 0]])
    reps = probes.compute_hit_replicates([{"accuracy": hits}], data,
                                         np.array([[0, 1, 2], [0, 0, 2]]))["accuracy"]
    assert reps.tolist() == pytest.approx([0.5, 5 / 7])


def test_unit_sentences_follow_the_word_offsets():
    offsets = np.array([0, 2, 2, 5])  # sentence 1 has no words
    assert probes.compute_unit_sentences(offsets, np.array([0, 1, 2, 4])).tolist() == [0, 0, 2, 2]
    assert probes.compute_unit_sentences(offsets, np.array([[3, 2], [1, 0]])).tolist() == [2, 0]


def noise_layer_slopes(trial: int) -> tuple[float, np.ndarray]:
    """A linear probe per 'layer' of pure-noise features with balanced random labels: every
    fitted probe's population accuracy is exactly 0.5, so the true layer slope is 0."""
    rng = np.random.default_rng(trial)
    sentences, words, layers = 60, 5, 4
    sentence = np.repeat(np.arange(sentences), words)
    labels = rng.integers(0, 2, len(sentence))
    units = probes.Units(np.arange(len(sentence)), labels, [f"w{i}" for i in range(len(sentence))])
    train = probes.Units(np.arange(400), rng.integers(0, 2, 400), ["t"] * 400)
    data = probes.ProbeData(train, units, 2, np.array([0.5, 0.5]), sentence, sentences)
    indices = bootstrap_indices(sentences)
    values, table = [], []
    for _ in range(layers):
        train_x, eval_x = rng.normal(size=(400, 6)), rng.normal(size=(len(sentence), 6))
        row, hits = probes.score_layer("linear", LinearSettings(), data, train_x, eval_x, 0,
                                       control=False)
        values.append(row["accuracy"])
        table.append(probes.compute_hit_replicates([hits], data, indices)["accuracy"])
    depth = np.arange(layers, dtype=float)
    return (float(reduce_slope(depth, np.array(values))),
            reduce_slope(depth, np.stack(table, axis=-1)))


def test_noise_features_give_layer_slope_intervals_that_cover_zero():
    covered = 0
    for trial in range(10):
        value, reps = noise_layer_slopes(trial)
        low, high = np.percentile(reps, [2.5, 97.5])
        assert abs(reps.mean() - value) < 0.02
        covered += low <= 0.0 <= high
    assert covered >= 8  # 95% intervals: 10 trials miss 0 twice or more with p ≈ 0.09


def judged_with_items(out: Path, metrics: dict, finding: str) -> list[bool]:
    """Whether each comparison of a catalogued finding, judged on this one run, drew item
    replicates into its estimate (statistics.Estimate.items)."""
    result = judge(load_catalog()[finding], [RunDir(out, metrics, {"seed": 0})])
    return [test.estimate.items for test in result.tests]


# ---------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def linear_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("probe")
    cache = tmp_path_factory.mktemp("cache")
    cfg = compose_config("probe", [*QUIET, "seeds=[0,1]", "analysis.linear.max_iter=100",
                                   f"paths.cache_dir={cache}"])
    return out, cache, probe.run(cfg, out)


def test_linear_probe_run_writes_tables_plots_and_flat_metrics(linear_run):
    out, _, metrics = linear_run
    assert json.loads((out / "metrics.json").read_text()) == pytest.approx(metrics)
    table = (out / "tables" / "linear_synthetic_pos.csv").read_text().splitlines()
    header = table[0].split(",")
    assert header[:4] == ["model", "layer", "seed", "accuracy"]
    assert {"control_accuracy", "selectivity"} <= set(header)
    assert len(table) - 1 == 3 * 2 * 2  # layers 0-2 × seeds × (model, random init)
    assert (out / "plots" / "linear_synthetic_pos.png").stat().st_size > 10_000
    for layer in range(3):
        key = f"probe/layer_{layer:02d}"
        assert metrics[f"{key}/selectivity"] == pytest.approx(
            metrics[f"{key}/accuracy"] - metrics[f"{key}/control_accuracy"])
        assert 0 <= metrics[f"probe/random/layer_{layer:02d}/accuracy"] <= 1


def test_linear_run_writes_replicates_of_its_layer_metrics_over_eval_sentences(linear_run):
    out, _, metrics = linear_run
    columns = read_replicates(out)
    for scope in ("probe", "probe/random"):
        for layer in range(3):
            for key in ("accuracy", "selectivity", "control_accuracy")[: 3 if scope == "probe"
                                                                        else 1]:
                name = f"{scope}/layer_{layer:02d}/{key}"
                reps = columns[name]
                assert reps.shape == (REPLICATES,) and np.isfinite(reps).all()
                # the bootstrap mean sits at the point estimate, the spread is a sampling
                # error of 100 sentences (not 0, not the whole range)
                assert reps.mean() == pytest.approx(metrics[name], abs=0.01)
                assert 0.001 < reps.std() < 0.06
    assert columns["probe/majority_accuracy"].mean() == pytest.approx(
        metrics["probe/majority_accuracy"], abs=0.01)
    for finding in ("pretraining_beats_random", "random_init_strong", "pos_layers"):
        assert all(judged_with_items(out, metrics, finding)), finding


def test_without_a_subsample_the_linear_seeds_vary_only_the_control_labels(linear_run):
    """What the log and the figure say: all training words, L-BFGS from zero on a convex
    objective, so the task probe is the same for every seed; the control labels differ."""
    out, _, _ = linear_run
    with (out / "tables" / "linear_synthetic_pos.csv").open() as handle:
        rows = [r for r in csv.DictReader(handle) if r["model"] == "model"]
    by_layer = {}
    for row in rows:
        by_layer.setdefault(row["layer"], []).append(row)
    for layer_rows in by_layer.values():
        assert len({r["accuracy"] for r in layer_rows}) == 1
    assert any(len({r["control_accuracy"] for r in layer_rows}) > 1
               for layer_rows in by_layer.values())
    data = probes.ProbeData(probes.Units(np.zeros(500), np.zeros(500), ["w"] * 500), None, 2,
                            None)
    settings = LinearSettings(max_train_words=None)
    assert probes.seeds_vary_only_the_control("linear", settings, data, [0, 1])
    assert not probes.seeds_vary_only_the_control("linear", LinearSettings(max_train_words=100),
                                                   data, [0, 1])
    assert not probes.seeds_vary_only_the_control("mlp", settings, data, [0, 1])


def test_pos_probes_beat_the_majority_tag_and_their_control_matches_them(linear_run):
    _, _, metrics = linear_run
    best = f"probe/layer_{int(metrics['probe/best_layer']):02d}"
    assert metrics[f"{best}/accuracy"] > metrics["probe/majority_accuracy"] + 0.3
    # The grammar's POS is a function of the word type, and a random tiny BERT adds nothing to
    # word identity: a probe can memorise the control task as well as the task (Hewitt &
    # Liang's point), so selectivity is about zero at every layer.
    for layer in range(3):
        assert abs(metrics[f"probe/layer_{layer:02d}/selectivity"]) < 0.05


@pytest.mark.slow
def test_a_second_analysis_reads_the_cache_instead_of_the_model(linear_run, tmp_path,
                                                                monkeypatch):
    _, cache, _ = linear_run
    monkeypatch.setattr(feats, "extract_features", lambda *a, **k: pytest.fail("re-extracted"))
    cfg = compose_config("probe", [*QUIET, "seeds=[0,1]", "analysis=mlp",
                                   "analysis.mlp.epochs=2", f"paths.cache_dir={cache}"])
    metrics = probe.run(cfg, tmp_path)
    assert "mlp/layer_02/selectivity" in metrics
    columns = read_replicates(tmp_path)
    assert columns["mlp/layer_02/selectivity"].mean() == pytest.approx(
        metrics["mlp/layer_02/selectivity"], abs=0.01)
    assert "mlp/random/layer_02/accuracy" in columns
    assert all(judged_with_items(tmp_path, metrics, "control_memorised"))


def test_with_no_checkpoint_the_probe_reads_the_default_pretrain_run():
    """The no-argument probe probes a model that has learned the grammar: the default
    `bertology pretrain` of model=/size= (every setting but the logger and paths), pretrained
    once into the cache; init=random keeps the random tiny model, and a checkpoint needs none."""
    from omegaconf import OmegaConf

    nested = OmegaConf.to_container(load_probe_config(compose_config("probe")).pretrain_cfg)
    default = OmegaConf.to_container(compose_config("pretrain"), resolve=True)
    for key in ("model", "size", "objective", "data", "trainer", "seed", "resume", "downstream"):
        assert nested[key] == default[key], key
    assert load_probe_config(compose_config("probe", ["init=random"])).pretrain_cfg is None
    assert load_probe_config(compose_config("probe", ["analysis=cloze"])).pretrain_cfg  # MLM head
    # pretrain_trainer= overrides that pretrain run's trainer (the planted check's is longer)
    # and nothing else
    longer = OmegaConf.to_container(load_probe_config(compose_config(
        "probe", ["pretrain_trainer={max_steps: 7, lr: 0.001}"])).pretrain_cfg)
    expected = OmegaConf.to_container(compose_config(
        "pretrain", ["trainer.max_steps=7", "trainer.lr=0.001"]), resolve=True)
    for key in ("model", "size", "objective", "data", "trainer", "seed", "resume", "downstream"):
        assert longer[key] == expected[key], key


@pytest.mark.slow
def test_the_default_probe_shows_the_model_above_its_baselines(tmp_path):
    """The issue's bar for the first figure a newcomer sees (docs/probing.md, "The default
    run"): at every layer the pretrained model's POS probe beats its random-init twin and the
    control task."""
    cfg = compose_config("probe", ["logger=none", f"paths.cache_dir={tmp_path / 'cache'}"])
    metrics = probe.run(cfg, tmp_path / "run")
    for layer in range(3):
        key, twin = f"probe/layer_{layer:02d}", f"probe/random/layer_{layer:02d}"
        assert metrics[f"{key}/accuracy"] > metrics[f"{twin}/accuracy"] + 0.03
        assert metrics[f"{key}/selectivity"] > 0.05
    assert (tmp_path / "cache" / "pretrained").is_dir()
    assert (tmp_path / "run" / "plots" / "linear_synthetic_pos.pdf").stat().st_size > 0


@pytest.mark.slow
@pytest.mark.data("ud_english_ewt")  # 400 + 150 sentences: the excerpt has 24 + 16
def test_minilm_knows_pos_in_its_middle_layers_and_syntax_beyond_its_random_twin(tmp_path):
    """The issue's bar on a sample of EWT: the best contextual layer beats the embeddings and
    the random-init model clearly, with positive selectivity; structural probes beat the
    random-init control; attention and geometry write their tables, all from one extraction."""
    cfg = compose_config("probe", [
        "model=minilm", "task=ud_pos", "analysis=[linear,structural,attention,geometry]",
        "logger=none", "seeds=[0]", "max_train_sentences=400", "max_eval_sentences=150",
        "analysis.attention.max_sentences=50", "analysis.structural.epochs=10",
        f"paths.cache_dir={tmp_path / 'cache'}"])
    metrics = probe.run(cfg, tmp_path / "run")
    layer = max(range(1, 7), key=lambda n: metrics[f"probe/layer_{n:02d}/accuracy"])
    best = metrics[f"probe/layer_{layer:02d}/accuracy"]
    assert best > metrics["probe/layer_00/accuracy"] + 0.02
    assert best > max(metrics[f"probe/random/layer_{n:02d}/accuracy"] for n in range(7)) + 0.1
    assert metrics[f"probe/layer_{layer:02d}/selectivity"] > 0.1
    for metric in ("uuas", "dist_spearman"):
        assert metrics[f"structural/best/{metric}"] > max(
            metrics[f"structural/random/layer_{n:02d}/{metric}"] for n in range(7))
    tables = {p.name for p in (tmp_path / "run" / "tables").iterdir()}
    assert {"attention_heads_ud_pos.csv", "attention_deps_ud_pos.csv",
            "attention_patterns_ud_pos.csv", "geometry_ud_pos.csv"} <= tables
    assert len(list((tmp_path / "cache" / "features").iterdir())) == 4  # 2 encoders × 2 splits
