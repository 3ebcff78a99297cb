"""ModernBERT (Warner et al., 2024), the fifth family: its recipe as configured, pretraining on
the embedded corpus into a checkpoint plain transformers loads, and the pipelines that read it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import compose_config
from transformers import AutoModelForMaskedLM, AutoTokenizer

from bertology.models.build import build_random_twin
from bertology.pipelines import pretrain

SMOKE = ["logger=none", "trainer=smoke", "data.num_sentences=800", "data.eval_docs=20"]
STEPS = 40


@pytest.fixture(scope="module")
def modernbert_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("modernbert")
    metrics = pretrain.run(compose_config("pretrain", [
        "model=modernbert", "size=tiny", *SMOKE, f"trainer.max_steps={STEPS}",
        "trainer.log_every=5"]), out)
    return out, metrics


def test_the_recipe_is_modernberts():
    """§2.2: MLM at 30% with dynamic masks and no pair task; §2.1.1: global attention every
    third layer, a 128-token window between, no biases, GeGLU at ModernBERT-base's width."""
    cfg = compose_config("pretrain", ["model=modernbert", "size=base"])
    assert cfg.objective.name == "mlm" and cfg.objective.mask_prob == 0.3
    assert cfg.model.masking == "dynamic" and cfg.model.input_format == "doc_sentences"
    # the user's own rate still wins over the family's default
    assert compose_config("pretrain", ["model=modernbert", "objective.mask_prob=0.2"]
                          ).objective.mask_prob == 0.2
    from bertology.config.pretrain_config import load_pretrain_config
    from bertology.models.build import build_config

    config = load_pretrain_config(cfg)

    class Tok:  # the ids build_config reads from a tokenizer
        pad_token_id, cls_token_id, sep_token_id = 0, 2, 3

        def __len__(self):
            return 1000

    built = build_config(config.model, config.size, Tok())
    assert type(built).__name__ == "ModernBertConfig"
    assert built.layer_types[:6] == ["full_attention", "sliding_attention",
                                     "sliding_attention"] * 2
    assert built.local_attention == 128 and built.intermediate_size == 1152  # ModernBERT-base
    assert not built.attention_bias and not built.mlp_bias and not built.norm_bias
    assert (built.cls_token_id, built.sep_token_id, built.pad_token_id) == (2, 3, 0)
    assert not hasattr(built, "type_vocab_size")  # no segment embeddings


def test_pretraining_writes_a_checkpoint_transformers_loads(modernbert_run):
    out, metrics = modernbert_run
    losses = [json.loads(line)["train/loss"] for line in
              (out / "metrics.jsonl").read_text().splitlines() if "train/loss" in line]
    assert metrics["train/steps"] == STEPS
    assert losses[-1] < losses[0] - 0.5, losses  # MLM loss falls
    loaded = AutoModelForMaskedLM.from_pretrained(out / "model")
    assert type(loaded).__name__ == "ModernBertForMaskedLM"
    assert loaded.config.layer_types == ["full_attention", "sliding_attention"]


def masked_accuracy(model, tokenizer, sentences: list[str], seed: int) -> float:
    """Accuracy at 15% of the word pieces replaced by [MASK] (an independent evaluation: not
    the pipeline's collator), over the given held-out sentences."""
    generator = torch.Generator().manual_seed(seed)
    correct = total = 0
    with torch.no_grad():
        for text in sentences:
            ids = tokenizer(text, return_tensors="pt")["input_ids"]  # (1, seq)
            inner = torch.rand(ids.shape, generator=generator) < 0.15
            inner[:, 0] = inner[:, -1] = False  # never [CLS] / [SEP]
            if not inner.any():
                continue
            masked = ids.masked_fill(inner, tokenizer.mask_token_id)
            predicted = model(input_ids=masked).logits.argmax(-1)  # (1, seq)
            correct += int((predicted[inner] == ids[inner]).sum())
            total += int(inner.sum())
    return correct / total


def test_held_out_mlm_accuracy_beats_the_random_init_twin(modernbert_run):
    assert_beats_its_twin(*modernbert_run)


def assert_beats_its_twin(out: Path, metrics: dict) -> None:
    """The pretrained model's masked-word accuracy on held-out sentences beats that of its
    random-init twin (the same architecture and tokenizer, new weights) by 5 points."""
    from conftest import DATA_DIR

    from bertology.config.groups import DataConfig
    from bertology.data.corpora import build_corpus

    tokenizer = AutoTokenizer.from_pretrained(out / "model")
    trained = AutoModelForMaskedLM.from_pretrained(out / "model").eval()
    twin = build_random_twin(out / "model", seed=1).eval()
    # another seed's synthetic sentences: held out from the training corpus
    corpus = build_corpus(DataConfig(num_sentences=200, seed=12345), DATA_DIR)
    sentences = [s for doc in corpus.iter_documents() for s in doc][:200]
    assert len(sentences) == 200
    ours = masked_accuracy(trained, tokenizer, sentences, seed=0)
    null = masked_accuracy(twin, tokenizer, sentences, seed=0)
    assert ours > null + 0.05, (ours, null)
    assert metrics["eval/mlm_accuracy"] > null


def tiny_modernbert(layers: int = 4, heads: int = 4, window: int = 8):
    """A random ModernBERT: global layers 0 and 3, local (±window/2) layers 1 and 2."""
    from transformers import ModernBertConfig, ModernBertModel

    torch.manual_seed(0)
    config = ModernBertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=layers,
                              num_attention_heads=heads, intermediate_size=48, pad_token_id=0,
                              cls_token_id=2, sep_token_id=3, bos_token_id=2, eos_token_id=3,
                              local_attention=window, global_attn_every_n_layers=3)
    return ModernBertModel._from_config(config, attn_implementation="eager").eval()


def test_head_gates_and_removal_on_the_fused_qkv(tmp_path):
    """Gating a head to 0 equals zeroing its value rows in the fused Wqkv by hand (an
    independent route: its attention then mixes zero vectors); removing it, and every head of
    a layer, gives the gated output; the pruned checkpoint reloads to the same output."""
    import copy

    from transformers import AutoModel

    from bertology.pruning.heads import HeadGates, kept_heads, load_pruned, prune_heads

    model = tiny_modernbert()
    ids = torch.randint(4, 50, (2, 12))
    hidden, heads, head_dim = 32, 4, 8
    by_hand = copy.deepcopy(model)
    with torch.no_grad():
        for layer, head in ((1, 2), (3, 0), (3, 1), (3, 2), (3, 3)):
            start = 2 * hidden + head * head_dim  # Wqkv rows: [q (32); k (32); v (32)]
            by_hand.layers[layer].attn.Wqkv.weight[start:start + head_dim] = 0
    expected = by_hand(input_ids=ids).last_hidden_state
    gates = torch.ones(4, heads)
    gates[1, 2] = 0
    gates[3] = 0
    with torch.no_grad(), HeadGates(model, gates):
        gated = model(input_ids=ids).last_hidden_state
    assert torch.allclose(gated, expected, atol=1e-5)
    assert not torch.allclose(gated, model(input_ids=ids).last_hidden_state, atol=1e-3)
    prune_heads(model, {1: [2], 3: [0, 1, 2, 3]})
    assert kept_heads(model) == [[0, 1, 2, 3], [0, 1, 3], [0, 1, 2, 3], []]
    assert model.layers[1].attn.Wqkv.out_features == 3 * 3 * head_dim
    with torch.no_grad():
        removed = model(input_ids=ids).last_hidden_state
    assert torch.allclose(removed, expected, atol=1e-5)
    model.save_pretrained(tmp_path)
    with torch.no_grad():
        reloaded = load_pruned(tmp_path, AutoModel)(input_ids=ids).last_hidden_state
    assert torch.allclose(reloaded, expected, atol=1e-5)


def test_a_student_copies_teacher_layers_with_their_attention_kinds():
    """DistilBERT's init on ModernBERT: student layers are the chosen teacher layers, each
    keeping its global or local attention; layer 0 (no attention norm) takes teacher layer 1's
    other weights."""
    from transformers import ModernBertForSequenceClassification

    from bertology.config.distill_config import StudentConfig
    from bertology.config.groups import SizeConfig
    from bertology.models.student import build_student

    config = tiny_modernbert().config
    config.num_labels = 2
    teacher = ModernBertForSequenceClassification._from_config(config).eval()
    student, copied = build_student(teacher, "classification",
                                    StudentConfig(layers=[1, 3]), SizeConfig(), "eager")
    assert copied == [1, 3]
    assert student.config.layer_types == ["sliding_attention", "full_attention"]
    assert [layer.attention_type for layer in student.model.layers] == \
        ["sliding_attention", "full_attention"]
    for mine, theirs in ((0, 1), (1, 3)):
        assert torch.equal(student.model.layers[mine].attn.Wqkv.weight,
                           teacher.model.layers[theirs].attn.Wqkv.weight)
        assert torch.equal(student.model.layers[mine].mlp.Wi.weight,
                           teacher.model.layers[theirs].mlp.Wi.weight)
    assert torch.equal(student.classifier.weight, teacher.classifier.weight)
    random, _ = build_student(teacher, "classification", StudentConfig(init="random"),
                              SizeConfig(num_hidden_layers=4, intermediate_size=512), "eager")
    assert random.config.layer_types == ["full_attention", "sliding_attention",
                                         "sliding_attention", "full_attention"]
    assert random.config.intermediate_size == 192  # 512 x 0.375, as pretraining builds it


def test_layer_paths_for_freezing_lr_decay_and_amnesic_probing():
    """The finetune and amnesic helpers find ModernBERT's layers at model.layers (no
    encoder.layer): a silent miss would train every layer at the full rate."""
    from transformers import ModernBertForMaskedLM, ModernBertForSequenceClassification

    from bertology.analysis.amnesic import layer_module
    from bertology.models.task_model import freeze_lower_layers, layer_lr_scale

    config = tiny_modernbert().config
    scale = {name: layer_lr_scale(name, 4, 0.5, "layers") for name, _ in
             ModernBertForSequenceClassification._from_config(config).named_parameters()}
    assert scale["model.embeddings.tok_embeddings.weight"] == 0.5 ** 5
    assert scale["model.layers.0.attn.Wqkv.weight"] == 0.5 ** 4
    assert scale["model.layers.3.mlp.Wo.weight"] == 0.5
    assert scale["classifier.weight"] == 1.0
    classifier = ModernBertForSequenceClassification._from_config(config)
    freeze_lower_layers(classifier.model, 2)
    frozen = {n for n, p in classifier.named_parameters() if not p.requires_grad}
    assert frozen == {n for n, _ in classifier.named_parameters()
                      if n.startswith(("model.embeddings.", "model.layers.0.", "model.layers.1."))}
    mlm = ModernBertForMaskedLM._from_config(config)
    assert layer_module(mlm, 2) is mlm.model.layers[1]


def run_pipeline(pipeline: str, out: Path, *overrides: str) -> dict:
    from bertology.pipelines import load_pipeline

    out.mkdir(parents=True)
    return load_pipeline(pipeline)(compose_config(pipeline, ["logger=none", *overrides]), out)


@pytest.mark.slow
def test_the_pipelines_run_on_the_pretrained_checkpoint(modernbert_run, tmp_path,
                                                        fresh_logging):
    """finetune (classification, tagging), probe (hidden states, attention), prune (heads
    gated on and removed from the fused Wqkv) and distill, on pretraining's model/."""
    from transformers import AutoModelForSequenceClassification

    out, _ = modernbert_run
    model_dir = out / "model"
    task = ["task=synthetic_negation", "task.num_sentences=300", "trainer.max_steps=4"]
    run_pipeline("finetune", tmp_path / "finetune", f"model.name_or_path={model_dir}", *task)
    tuned = AutoModelForSequenceClassification.from_pretrained(tmp_path / "finetune" / "model")
    assert type(tuned).__name__ == "ModernBertForSequenceClassification"
    tagged = run_pipeline("finetune", tmp_path / "tagging", f"model.name_or_path={model_dir}",
                          "task=synthetic_pos", "task.num_sentences=300", "trainer.max_steps=4")
    assert 0.0 <= tagged["eval/accuracy"] <= 1.0
    probed = run_pipeline("probe", tmp_path / "probe", f"model.name_or_path={model_dir}",
                          "analysis=[linear,attention]", "max_train_sentences=200",
                          "max_eval_sentences=100")
    assert 0.0 <= probed["probe/layer_02/accuracy"] <= 1.0
    assert "attention/layer_02/entropy" in probed
    pruned = run_pipeline("prune", tmp_path / "prune",
                          f"model.name_or_path={tmp_path}/finetune/model", *task,
                          "prune.importance_examples=32")
    assert pruned["prune/heads_remaining"] < 2 * 2  # size=tiny: 2 layers x 2 heads
    assert pruned["prune/removal/max_logit_diff"] < 1e-4  # removed equals masked
    distilled = run_pipeline("distill", tmp_path / "distill",
                             f"teacher.name_or_path={tmp_path}/finetune/model", *task)
    assert distilled["distill/student/layers"] == 1
    student = AutoModelForSequenceClassification.from_pretrained(tmp_path / "distill" / "model")
    assert student.config.layer_types == ["full_attention"]


def test_local_windows_are_read_only_where_a_sentence_fits(synthetic_tokenizer):
    """ModernBERT's local layers see ±sliding_window tokens: checked against the eager maps
    themselves (zero mass beyond the reach), then the sentences the attention analysis keeps
    are exactly those whose tokens lie inside it, and a BERT model is read as before."""
    from transformers import BertConfig

    from bertology.analysis.window_subsets import SentenceSubset, within_windows
    from bertology.data.probe_sentences import ProbeSentence
    from bertology.models.windows import local_reach

    model = tiny_modernbert(layers=4, window=8)  # local layers 2 and 3 (1-based), reach 4
    assert local_reach(model.config) == [None, 4, 4, None]
    with torch.no_grad():
        maps = model(input_ids=torch.randint(4, 50, (1, 12)), output_attentions=True).attentions
    far = (torch.arange(12)[:, None] - torch.arange(12)[None, :]).abs() > 4  # (12, 12)
    assert maps[1][0][:, far].abs().max() == 0 and maps[0][0][:, far].min() > 0
    words = [["the"] * n for n in (1, 2, 3, 6)]  # "the" is one word piece: n + 2 tokens
    sentences = [ProbeSentence(words=tuple(w), labels=(None,) * len(w)) for w in words]
    keep, line = within_windows(model.config, synthetic_tokenizer, sentences, 128)
    assert keep == [0, 1, 2]  # 3, 4, 5 tokens: farthest pair 2, 3, 4 apart; 8 tokens: 7
    assert "local layers 2, 3 attend within ±4 tokens" in line and "1 of 4" in line
    assert within_windows(model.config, synthetic_tokenizer, sentences[:3], 128)[0] is None
    bert = BertConfig(num_hidden_layers=2)
    assert within_windows(bert, synthetic_tokenizer, sentences, 128) == (None, None)

    class Maps:
        num_layers, num_heads, num_sentences = 2, 2, 4

        def attention_map(self, index):
            return index

    subset = SentenceSubset(Maps(), keep[1:])
    assert subset.num_sentences == 2 and subset.attention_map(1) == 2


def test_flops_count_the_gated_ffn_and_the_local_windows():
    """Kaplan's count by hand: GeGLU's Wi is H x 2I (3 H I a token with Wo), and a local
    layer of reach 4 scores only the pairs |i - j| <= 4, counted here pair by pair; BERT's
    count is unchanged (4 H^2 + 2 H I, n^2 pairs in every layer)."""
    from transformers import BertConfig

    from bertology.training.flops import encoder_flops

    config = tiny_modernbert(layers=3, window=8).config  # global, local, local; reach 4
    assert config.layer_types == ["full_attention", "sliding_attention", "sliding_attention"]
    lengths = torch.tensor([3, 12])
    hidden, inner, tokens = 32, 48, 15

    def pairs(n: int, reach: int | None) -> int:
        return sum(1 for i in range(n) for j in range(n) if reach is None or abs(i - j) <= reach)

    scored = sum(pairs(n, reach) for n in (3, 12) for reach in (None, 4, 4))
    assert scored == 3 * 9 + 144 + 2 * (144 - 7 * 8)  # 12 tokens: 56 pairs more than 4 apart
    dense = 6 * 3 * (4 * hidden ** 2 + 3 * hidden * inner) * tokens
    assert encoder_flops(config, lengths) == pytest.approx(dense + 12 * hidden * scored)
    bert = BertConfig(num_hidden_layers=3, hidden_size=32, num_attention_heads=4,
                      intermediate_size=48)
    assert encoder_flops(bert, lengths) == pytest.approx(
        6 * 3 * (4 * hidden ** 2 + 2 * hidden * inner) * tokens + 12 * 3 * hidden * (9 + 144))


def test_the_electra_flops_convention_is_refused_for_modernbert():
    from bertology.config.pretrain_config import load_pretrain_config
    from bertology.errors import UserError

    with pytest.raises(UserError, match="flops_convention=kaplan"):
        load_pretrain_config(compose_config("pretrain", [
            "model=modernbert", "trainer.flops_convention=electra"]))


def test_attention_importance_reads_only_sequences_inside_the_window():
    """Voita et al.'s confidence on a local-window model: a batch holding a sequence longer
    than the window scores the heads exactly as the fitting sequence alone does, and one line
    says so."""
    import logging

    from transformers import ModernBertForSequenceClassification

    from bertology.pruning.importance import compute_entropy_importance

    config = tiny_modernbert(window=8).config  # reach 4: at most 5 tokens fit
    torch.manual_seed(1)
    model = ModernBertForSequenceClassification._from_config(
        config, attn_implementation="eager").eval()
    short = torch.tensor([[2, 7, 8, 9, 3]])  # 5 tokens: the farthest pair is 4 apart
    long = torch.tensor([[2, *range(10, 20), 3]])  # 12 tokens
    mixed = {"input_ids": torch.cat([torch.cat([short, torch.zeros(1, 7, dtype=torch.long)], 1),
                                     long]),
             "attention_mask": torch.tensor([[1] * 5 + [0] * 7, [1] * 12])}
    alone = compute_entropy_importance(model, [{"input_ids": short,
                                                "attention_mask": torch.ones_like(short)}],
                                       "confidence", end_token_id=3)
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = records.append  # our own handler: whatever propagation a run left behind
    logger = logging.getLogger("bertology.pruning.importance")
    logger.addHandler(handler)
    level, disabled = logger.level, logger.disabled
    logger.setLevel(logging.INFO)
    logger.disabled = False
    try:
        both = compute_entropy_importance(model, [mixed], "confidence", end_token_id=3)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.disabled = disabled
    assert np.allclose(both, alone)
    lines = [r.getMessage() for r in records if "local layers" in r.getMessage()]
    assert len(lines) == 1 and "1 of 2 sequences are longer (up to 12 tokens)" in lines[0]
    from bertology.errors import UserError

    with pytest.raises(UserError, match="no sequence lies inside"):
        compute_entropy_importance(model, [{"input_ids": long,
                                            "attention_mask": torch.ones_like(long)}],
                                   "confidence", end_token_id=3)


@pytest.mark.slow
def test_prune_reads_special_token_gradients_and_attention_scores(modernbert_run, tmp_path,
                                                                  fresh_logging):
    """Clark et al.'s special-token gradients and Voita et al.'s confidence on a fine-tuned
    ModernBERT; the layer-dropping curve (Sajjad et al.) runs on its layers."""
    out, _ = modernbert_run
    task = ["task=synthetic_negation", "task.num_sentences=300", "trainer.max_steps=4"]
    run_pipeline("finetune", tmp_path / "finetune", f"model.name_or_path={out / 'model'}", *task)
    pruned = run_pipeline("prune", tmp_path / "prune",
                          f"model.name_or_path={tmp_path}/finetune/model", *task,
                          "prune.importance_examples=32",
                          "prune.experiments=[heads,layers,attention_gradients]",
                          "prune.scores=[confidence,random]")
    assert 0.0 <= pruned["prune/special/attention_share"] <= 1.0
    assert "prune/special/layer_02/gradient_share" in pruned  # the local layer: sentences fit
    assert any(key.startswith("prune/layers/top/") for key in pruned)
    assert any(key.startswith("prune/heads/confidence/") for key in pruned)


@pytest.mark.slow
def test_probe_reads_trees_geometry_and_cloze_from_modernbert(modernbert_run, tmp_path,
                                                              fresh_logging):
    """The probes that read hidden states (structural, geometry) and the MLM head (cloze:
    the head is ModernBERT's transform, then its separate decoder)."""
    out, _ = modernbert_run
    probed = run_pipeline("probe", tmp_path / "probe", f"model.name_or_path={out / 'model'}",
                          "analysis=[structural,geometry,cloze]", "seeds=[0]",
                          "max_train_sentences=80", "max_eval_sentences=30",
                          "analysis.structural.epochs=3", "analysis.structural.rank=16",
                          "analysis.cloze.suites=[ettinger]")
    for prefix in ("structural/", "geometry/", "cloze/"):
        assert any(key.startswith(prefix) for key in probed), prefix


def test_a_random_initialised_modernbert_finetunes(tmp_path, fresh_logging):
    """model=modernbert without a checkpoint: its config from size= and a tokenizer trained on
    the task's text, as pretraining builds it."""
    from transformers import AutoConfig

    run_pipeline("finetune", tmp_path / "random", "model=modernbert", "size=tiny",
                 "task=synthetic_negation", "task.num_sentences=300", "trainer.max_steps=4")
    config = AutoConfig.from_pretrained(tmp_path / "random" / "model")
    assert config.model_type == "modernbert" and config.intermediate_size == 192
    assert config.layer_types == ["full_attention", "sliding_attention"]


def test_amnesic_probing_hooks_modernberts_layers_and_its_head():
    """Hidden states 0..L-1 are the embeddings' and layers' outputs (a pre-norm residual
    stream); state L has been through the final norm, so the last layer is projected after
    the MLM head's transform, directly before the separate decoder: zeroing it there leaves
    the decoder's bias."""
    from transformers import ModernBertForMaskedLM

    from bertology.analysis.amnesic import layer_module, project_hidden, projection_site

    model = ModernBertForMaskedLM._from_config(tiny_modernbert().config).eval()
    ids = torch.randint(4, 50, (2, 7))
    seen = []
    with torch.no_grad():
        hidden = model(input_ids=ids, output_hidden_states=True).hidden_states
        for layer in range(4):
            handle = layer_module(model, layer).register_forward_hook(
                lambda _m, _i, output: seen.append(output))
            model(input_ids=ids)
            handle.remove()
            torch.testing.assert_close(seen[-1], hidden[layer])
        assert projection_site(model, 4) is model.head
        with project_hidden(model.head, np.zeros((32, 32))):
            zeroed = model(input_ids=ids).logits  # (batch, tokens, vocab)
    torch.testing.assert_close(zeroed, model.decoder.bias.expand_as(zeroed))


def test_attention_maps_are_matched_only_inside_the_window_a_pair_shares():
    """TinyBERT's attention MSE on a local layer: a hand-worked 3-token case, where the pair
    shares a ±1 window, counts 7 of the 9 (query, key) pairs; then the windows of a ModernBERT
    student and teacher: the narrower of the pair, None where both are global."""
    from bertology.models.windows import matched_reaches
    from bertology.objectives.kd import compute_attention_mse

    teacher = torch.zeros(1, 1, 3, 3)  # (batch, heads, q, k)
    student = teacher.clone()
    student[0, 0, 0, 0] = 0.5  # inside the window: squared error 0.25
    student[0, 0, 0, 2] = student[0, 0, 2, 0] = 1.0  # |i − j| = 2: outside a ±1 window
    mask = torch.ones(1, 3)
    assert compute_attention_mse((student,), (teacher,), [0, 1], mask, [1]).item() == \
        pytest.approx(0.25 / 7)
    assert compute_attention_mse((student,), (teacher,), [0, 1], mask).item() == \
        pytest.approx((0.25 + 1 + 1) / 9)  # both global: every pair
    config = tiny_modernbert(window=8).config  # layers: global, ±4, ±4, global
    from bertology.models.student import student_config

    small = student_config(config, 2, layers=[0, 1])  # global, ±4
    reaches, line = matched_reaches(small, config, [0, 1, 2])
    assert reaches == [None, 4]
    assert "1->1" not in line and "2->2 (±4)" in line
    reaches, line = matched_reaches(small, config, [0, 2, 4])  # global->local, local->global
    assert reaches == [4, 4] and "1->2 (±4)" in line and "2->4 (±4)" in line
    everywhere = student_config(config, 1, layers=[0])
    assert matched_reaches(everywhere, config, [0, 4]) == ([None], None)


@pytest.mark.slow
def test_a_modernbert_teacher_distils_with_matched_local_maps(tmp_path, fresh_logging, caplog):
    """distill with TinyBERT's attention term from a ModernBERT teacher with local layers: the
    run says which pairs are windowed, and a student that is the teacher's first two layers
    (global, then local) starts with an attention loss of zero (the windowed MSE of identical
    maps on identical inputs)."""
    import logging

    from transformers import ModernBertForSequenceClassification

    from bertology.config.distill_config import StudentConfig
    from bertology.config.groups import SizeConfig
    from bertology.models.student import build_student, default_layer_map
    from bertology.models.windows import matched_reaches
    from bertology.objectives.kd import compute_attention_mse

    config = tiny_modernbert(window=4).config
    config.num_labels = 2
    teacher = ModernBertForSequenceClassification._from_config(
        config, attn_implementation="eager").eval()
    student, copied = build_student(teacher, "classification", StudentConfig(layers=[0, 1]),
                                    SizeConfig(), "eager")
    layer_map = default_layer_map(2, 4, copied)
    reaches, _ = matched_reaches(student.config, config, layer_map)
    assert layer_map == [0, 1, 2] and reaches == [None, 2]
    batch = {"input_ids": torch.randint(4, 50, (2, 12)), "attention_mask": torch.ones(2, 12)}
    batch["attention_mask"][1, 9:] = 0
    with torch.no_grad():
        t = teacher(**batch, output_attentions=True)
        s = student.eval()(**batch, output_attentions=True)
    assert compute_attention_mse(s.attentions, t.attentions, layer_map,
                                 batch["attention_mask"], reaches).item() == \
        pytest.approx(0.0, abs=1e-12)
    caplog.set_level(logging.INFO, logger="bertology.pipelines.distill")
    teacher_dir = tmp_path / "teacher"
    run_pipeline("finetune", teacher_dir, "model=modernbert", "size=tiny",
                 "task=synthetic_negation", "task.num_sentences=300", "trainer.max_steps=4",
                 "model.attn_implementation=eager")
    distilled = run_pipeline("distill", tmp_path / "distill",
                             f"teacher.name_or_path={teacher_dir}/model",
                             "task=synthetic_negation", "task.num_sentences=300",
                             "trainer.max_steps=4", "kd.attention_weight=1.0",
                             "student.layers=[1]")  # size=tiny: global, local; the local one
    assert np.isfinite(distilled["eval/accuracy"])
    assert any("matched only on keys within" in r.getMessage() for r in caplog.records)


def bertology_cli(*args: str, timeout: int = 900) -> None:
    """`python -m bertology <args>` as a user types it; it must exit 0."""
    import os
    import subprocess
    import sys

    from conftest import DATA_DIR

    env = {**os.environ, "BERTOLOGY_DATA_DIR": str(DATA_DIR), "PYTHONWARNINGS": "ignore"}
    done = subprocess.run([sys.executable, "-m", "bertology", *args, "logger=none"], env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]


def final_metrics(run: Path) -> dict:
    return json.loads((run / "metrics.json").read_text())


@pytest.mark.slow
def test_modernbert_end_to_end_through_the_cli(tmp_path):
    """Issue 32, end to end as a user runs it: `bertology pretrain model=modernbert` (the
    sanity budget, embedded corpus), then every pipeline on the checkpoint it writes: finetune
    for classification, tagging and QA, probe (hidden states against the random-init twin,
    attention on its local and global layers, trees, geometry, cloze), prune, and distill with
    the fine-tuned ModernBERT as teacher of a ModernBERT student; plain transformers loads
    every model written."""
    from transformers import (
        AutoModelForQuestionAnswering,
        AutoModelForSequenceClassification,
        AutoModelForTokenClassification,
    )

    pretrained = tmp_path / "pretrain"
    bertology_cli("pretrain", "model=modernbert", f"hydra.run.dir={pretrained}")
    losses = [json.loads(line)["train/loss"] for line in
              (pretrained / "metrics.jsonl").read_text().splitlines() if "train/loss" in line]
    assert losses[-1] < losses[0] - 1.0, losses
    model = pretrained / "model"
    assert type(AutoModelForMaskedLM.from_pretrained(model)).__name__ == "ModernBertForMaskedLM"
    assert_beats_its_twin(pretrained, final_metrics(pretrained))

    runs = {name: tmp_path / name for name in ("cls", "pos", "qa", "probe", "prune", "distill")}
    bertology_cli("finetune", f"model.name_or_path={model}", "task=synthetic_negation",
                  f"hydra.run.dir={runs['cls']}")
    tuned = final_metrics(runs["cls"])
    assert tuned["eval/accuracy"] > tuned["eval/majority_accuracy"] + 0.1, tuned
    AutoModelForSequenceClassification.from_pretrained(runs["cls"] / "model")
    bertology_cli("finetune", f"model.name_or_path={model}", "task=synthetic_pos",
                  f"hydra.run.dir={runs['pos']}")
    assert final_metrics(runs["pos"])["eval/accuracy"] > 0.5
    AutoModelForTokenClassification.from_pretrained(runs["pos"] / "model")
    bertology_cli("finetune", f"model.name_or_path={model}", "task=squad",
                  "task.max_seq_length=192", "task.doc_stride=64", "trainer.max_train_examples=64",
                  "trainer.epochs=1",
                  "task.max_eval_examples=16", f"hydra.run.dir={runs['qa']}")
    qa = final_metrics(runs["qa"])
    assert 0.0 <= qa["eval/exact_match"] <= qa["eval/f1"] <= 1.0
    assert type(AutoModelForQuestionAnswering.from_pretrained(runs["qa"] / "model")).__name__ \
        == "ModernBertForQuestionAnswering"

    bertology_cli("probe", f"model.name_or_path={model}", "seeds=[0]",
                  "analysis=[linear,attention,structural,geometry,cloze]",
                  "analysis.linear.random_init=true", "analysis.structural.epochs=3",
                  "analysis.cloze.suites=[ettinger]", f"hydra.run.dir={runs['probe']}")
    probed = final_metrics(runs["probe"])
    best = max(probed[f"probe/layer_{i:02d}/accuracy"] for i in (1, 2))
    twin = max(probed[f"probe/random/layer_{i:02d}/accuracy"] for i in (1, 2))
    assert best > twin, (best, twin)  # the contextual layers beat the twin's
    assert {"attention/layer_01/entropy", "attention/layer_02/entropy"} <= set(probed)
    for prefix in ("structural/", "geometry/", "cloze/"):
        assert any(key.startswith(prefix) for key in probed), prefix

    bertology_cli("prune", f"model.name_or_path={runs['cls']}/model", "task=synthetic_negation",
                  "prune.importance_examples=64", f"hydra.run.dir={runs['prune']}")
    pruned = final_metrics(runs["prune"])
    assert pruned["prune/removal/max_logit_diff"] < 1e-4  # removed heads equal masked ones
    bertology_cli("distill", f"teacher.name_or_path={runs['cls']}/model",
                  "task=synthetic_negation", f"hydra.run.dir={runs['distill']}")
    distilled = final_metrics(runs["distill"])
    assert distilled["distill/student/accuracy"] > distilled["distill/student/majority_accuracy"]
    student = AutoModelForSequenceClassification.from_pretrained(runs["distill"] / "model")
    assert type(student).__name__ == "ModernBertForSequenceClassification"
