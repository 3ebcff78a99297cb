"""Head gating and pruning: a gate touches only its own head's slice, a gated-off head is a
head whose values are zero, a pruned model computes exactly what the masked one does (every
family, whole layers included), and pruned or layer-dropped checkpoints reload."""

from __future__ import annotations

import copy
import random

import pytest
import torch
from reading_models import READING_TYPES, tiny_config
from transformers import (
    AutoModel,
    AutoModelForSequenceClassification,
    BertConfig,
    ElectraConfig,
    RobertaConfig,
)

from bertology.errors import UserError
from bertology.families import family_of_checkpoint, why_not
from bertology.pruning.heads import (
    HeadGates,
    build_gates,
    compute_layers_to_keep,
    drop_layers,
    encoder_layers,
    kept_heads,
    load_pruned,
    prune_heads,
)

CONFIGS = {"bert": BertConfig, "roberta": RobertaConfig, "electra": ElectraConfig}
HEADS = 4
# the reading-only types whose rows can remove heads (families.py's READING), and DeBERTa-v2
# with its own position projections (share_att_key=false), which removal slices too
READING_REMOVABLE = [t for t in READING_TYPES
                     if why_not(family_of_checkpoint(t), "head_removal") is None]
OWN_POSITION_PROJECTIONS = {"share_att_key": False}
REMOVABLE = [*CONFIGS, *READING_REMOVABLE, "deberta-v2/own-position-projections"]


def tiny_model(family: str = "bert", layers: int = 2, auto=AutoModelForSequenceClassification):
    torch.manual_seed(0)
    model_type, _, variant = family.partition("/")
    shape = dict(num_labels=2, initializer_range=0.2)  # larger weights: heads matter visibly
    if model_type in CONFIGS:
        config = CONFIGS[model_type](hidden_size=32, num_hidden_layers=layers,
                                     num_attention_heads=HEADS, intermediate_size=64,
                                     vocab_size=100, **shape)
    else:
        extra = OWN_POSITION_PROJECTIONS if variant else {}
        config = tiny_config(model_type, 100, 1, layers=layers, heads=HEADS, **shape, **extra)
    return auto.from_config(config, attn_implementation="eager").eval()


def batch() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 100, (3, 8), generator=generator)
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def logits(model, gates: torch.Tensor | None = None) -> torch.Tensor:
    with torch.no_grad(), HeadGates(model, gates):
        return model(**batch()).logits


def record_dense_input(model, layer: int, gates: torch.Tensor | None) -> torch.Tensor:
    """What layer `layer`'s attention output projection receives, (batch, seq, heads, head_dim);
    ungated when gates is None."""
    seen = []
    dense = encoder_layers(model)[layer].attention.output.dense
    hooks = HeadGates(model, gates).attach() if gates is not None else None
    # registered after the gate's hook, so it sees the gated input
    handle = dense.register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    with torch.no_grad():
        model(**batch())
    handle.remove()
    if hooks is not None:
        hooks.detach()
    return seen[0].unflatten(-1, (HEADS, 32 // HEADS))


def masked_gates(model, heads: dict[int, list[int]]) -> torch.Tensor:
    gates = build_gates(model)
    for layer, removed in heads.items():
        gates[layer, removed] = 0.0
    return gates


def test_gate_zeroes_only_its_heads_slice():
    model = tiny_model()
    full = record_dense_input(model, 0, None)
    gated = record_dense_input(model, 0, masked_gates(model, {0: [2]}))
    assert torch.count_nonzero(full[:, :, 2]) > 0
    assert torch.count_nonzero(gated[:, :, 2]) == 0
    others = [0, 1, 3]
    assert torch.equal(gated[:, :, others], full[:, :, others])
    half = build_gates(model)
    half[0, 1] = 0.5
    scaled = record_dense_input(model, 0, half)
    torch.testing.assert_close(scaled[:, :, 1], 0.5 * full[:, :, 1], rtol=0, atol=0)


def test_gated_head_equals_head_with_zero_values():
    """softmax(QK)·V with V = 0 is a zero head output: the same model as gating it off."""
    model = tiny_model()
    gated = logits(model, masked_gates(model, {1: [3]}))
    zeroed = copy.deepcopy(model)
    value = encoder_layers(zeroed)[1].attention.self.value
    with torch.no_grad():
        value.weight[24:32] = 0.0
        value.bias[24:32] = 0.0
    torch.testing.assert_close(gated, logits(zeroed), rtol=0, atol=1e-6)
    assert not torch.allclose(gated, logits(model), atol=1e-4)


def random_heads(seed: int, layers: int) -> dict[int, list[int]]:
    """A random subset of heads per layer, and one layer losing all of them."""
    rng = random.Random(seed)
    heads = {layer: rng.sample(range(HEADS), rng.randint(1, HEADS - 1)) for layer in range(layers)}
    heads[rng.randrange(layers)] = list(range(HEADS))
    return heads


@pytest.mark.parametrize("family", REMOVABLE)
@pytest.mark.parametrize("seed", [0, 1])
def test_pruned_equals_masked(family, seed):
    model = tiny_model(family, layers=3)
    heads = random_heads(seed, 3)
    masked = logits(model, masked_gates(model, heads))
    pruned = copy.deepcopy(model)
    prune_heads(pruned, heads)
    torch.testing.assert_close(logits(pruned), masked, rtol=0, atol=1e-5)
    assert [len(h) for h in kept_heads(pruned)] == [HEADS - len(heads[i]) for i in range(3)]
    assert sum(p.numel() for p in pruned.parameters()) < sum(p.numel() for p in model.parameters())


def test_pruning_again_uses_original_head_numbers():
    model = tiny_model()
    twice = copy.deepcopy(model)
    prune_heads(twice, {0: [1]})
    prune_heads(twice, {0: [1, 2], 1: [0]})  # head 1 is gone already; 2 is still head 2
    once = copy.deepcopy(model)
    prune_heads(once, {0: [1, 2], 1: [0]})
    assert twice.config.pruned_heads == {0: [1, 2], 1: [0]}
    assert kept_heads(twice) == [[0, 3], [1, 2, 3]]
    torch.testing.assert_close(logits(twice), logits(once), rtol=0, atol=0)


def test_gates_on_a_pruned_model_use_original_head_numbers():
    model = tiny_model()
    prune_heads(model, {0: [0, 1]})
    gated = logits(model, masked_gates(model, {0: [0, 3]}))  # head 0 is gone: only 3 is gated
    further = copy.deepcopy(model)
    prune_heads(further, {0: [3]})
    torch.testing.assert_close(gated, logits(further), rtol=0, atol=1e-5)


@pytest.mark.parametrize("family", REMOVABLE)
def test_pruned_checkpoint_reloads(family, tmp_path):
    model = tiny_model(family)
    prune_heads(model, {0: [0, 3], 1: list(range(HEADS))})
    model.save_pretrained(tmp_path)
    loaded = load_pruned(tmp_path, AutoModelForSequenceClassification, attn_implementation="eager")
    assert kept_heads(loaded) == [[1, 2], []]
    assert not loaded.training
    torch.testing.assert_close(logits(loaded), logits(model), rtol=0, atol=0)
    with torch.no_grad():
        attentions = loaded(**batch(), output_attentions=True).attentions
    assert [a.shape[1] for a in attentions] == [2, 0]  # one entry per layer, even with no heads


def test_bare_encoder_prunes_and_reloads(tmp_path):
    model = tiny_model(auto=AutoModel)
    prune_heads(model, {1: [2]})
    model.save_pretrained(tmp_path)
    loaded = load_pruned(tmp_path, AutoModel, attn_implementation="eager")
    with torch.no_grad():
        expected = model(**batch()).last_hidden_state
        torch.testing.assert_close(loaded(**batch()).last_hidden_state, expected, rtol=0, atol=0)


def skip_layers(model, dropped: list[int]):
    """The full model with the dropped layers passing their input through."""
    skipping = copy.deepcopy(model)
    for i in dropped:
        encoder_layers(skipping)[i].register_forward_hook(lambda module, args, out: args[0])
    return skipping


def test_drop_layers_runs_the_kept_layers_and_reloads(tmp_path):
    model = tiny_model(layers=4)
    expected = logits(skip_layers(model, [1, 3]))
    drop_layers(model, [0, 2])
    assert model.config.num_hidden_layers == 2
    torch.testing.assert_close(logits(model), expected, rtol=0, atol=0)
    model.save_pretrained(tmp_path)
    plain = AutoModelForSequenceClassification.from_pretrained(tmp_path,
                                                               attn_implementation="eager")
    torch.testing.assert_close(logits(plain), expected, rtol=0, atol=0)


def test_drop_layers_renumbers_pruned_heads(tmp_path):
    model = tiny_model(layers=3)
    prune_heads(model, {0: [1], 2: [0, 3]})
    drop_layers(model, [1, 2])
    assert model.config.pruned_heads == {1: [0, 3]}
    model.save_pretrained(tmp_path)
    loaded = load_pruned(tmp_path, AutoModelForSequenceClassification, attn_implementation="eager")
    assert kept_heads(loaded) == [[0, 1, 2, 3], [1, 2]]
    torch.testing.assert_close(logits(loaded), logits(model), rtol=0, atol=0)


def test_sajjad_layer_dropping_strategies():
    """Sajjad et al. (2020) on 12 layers, dropping 4 (0-based here)."""
    assert compute_layers_to_keep(12, "top", 4) == list(range(8))
    assert compute_layers_to_keep(12, "bottom", 4) == list(range(4, 12))
    assert compute_layers_to_keep(12, "alternate_even", 4) == [0, 1, 2, 3, 4, 6, 8, 10]
    assert compute_layers_to_keep(12, "alternate_odd", 4) == [0, 1, 2, 3, 5, 7, 9, 11]
    assert compute_layers_to_keep(12, "symmetric", 4) == [0, 1, 2, 3, 8, 9, 10, 11]
    assert compute_layers_to_keep(6, "alternate_even", 3) == [0, 2, 4]


@pytest.mark.parametrize("call, match", [
    (lambda m: prune_heads(m, {0: [4]}), "numbered 0..3"),
    (lambda m: prune_heads(m, {2: [0]}), "layers 0..1"),
    (lambda m: drop_layers(m, [1, 0]), "increasing"),
    (lambda m: HeadGates(m, torch.ones(3, 4)), "shape"),
    (lambda m: compute_layers_to_keep(12, "middle", 2), "valid: top"),
    (lambda m: compute_layers_to_keep(12, "alternate_odd", 7), "at most 6"),
])
def test_bad_input_is_a_user_error(call, match):
    with pytest.raises(UserError, match=match):
        call(tiny_model())
