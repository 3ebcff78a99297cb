"""The intervention engine is exact: patching a run with its own activations gives bit-identical
logits and a two-input swap done twice is the identity, on every family with layers of its own
(a layer site and a head site each); a multi-position zero ablation equals the forward pass
computed by calling the layers by hand; each intervention kind equals a formula written here,
not in the engine, to 1e-6; and no hook outlives its block, however the block ends."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers
from intervention_cases import HEADS, HIDDEN, VOCAB, leace_by_hand, planted, tiny_mlm
from reading_models import tiny_config

from bertology.analysis.erasure import (
    AlterRep,
    compute_concept_directions,
    compute_inlp_erasure,
    fit_leace,
)
from bertology.analysis.inlp import fit_inlp
from bertology.analysis.interventions import (
    Interchange,
    MeanAblation,
    Site,
    ZeroAblation,
    extract_interchange,
    extract_site,
    intervene,
)
from bertology.errors import UserError
from bertology.families import every_family, why_not

HEAD_DIM = HIDDEN // HEADS
# every row whose layers are modules of their own (ALBERT's one layer serves every depth)
ROWS = [name for name, row in every_family().items() if why_not(row, "layer_modules") is None]
SITES = [Site(layer=1), Site(layer=2, head=1)]
# one multi-position list per example; example 1 is padded after position 5
POSITIONS = [[1, 3], [0, 2, 4], [6]]
TOLERANCE = 1e-6  # the brief's bound; float64 models keep the two computations far inside it


def batch(seed: int = 1, size: int = 3, pad: bool = True) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, VOCAB, (size, 8), generator=generator)
    mask = torch.ones_like(ids)
    if pad:
        mask[1, 6:] = 0
    return {"input_ids": ids, "attention_mask": mask}


@torch.no_grad()
def logits(model, inputs) -> torch.Tensor:
    return model(**inputs).logits


def hook_count(model: torch.nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


# ---------------------------------------------------------------- exactness on every family


@pytest.mark.parametrize("site", SITES, ids=["layer", "head"])
@pytest.mark.parametrize("name", ROWS)
def test_patching_a_run_with_its_own_activations_changes_no_bit(name, site, one_thread):
    model, inputs = tiny_mlm(name), batch()
    clean = logits(model, inputs)
    patch = extract_interchange(model, inputs, site, POSITIONS)
    assert patch.source.shape == (6, HIDDEN if site.head is None else HEAD_DIM)
    with intervene(model, site, POSITIONS, patch):
        patched = logits(model, inputs)
    assert torch.equal(patched, clean)
    assert hook_count(model) == 0


class Swap:
    """Exchanges the site's values of example 0 and example 1 (two positions each)."""

    def apply(self, values: torch.Tensor) -> torch.Tensor:
        return values[[2, 3, 0, 1]]


@pytest.mark.parametrize("site", SITES, ids=["layer", "head"])
@pytest.mark.parametrize("name", ROWS)
def test_a_swap_and_the_swap_back_are_the_identity(name, site, one_thread):
    model, inputs = tiny_mlm(name), batch(size=2, pad=False)
    positions = [[1, 4], [2, 5]]
    clean = logits(model, inputs)
    with intervene(model, site, positions, Swap()):
        swapped = logits(model, inputs)
        with intervene(model, site, positions, Swap()):  # acts on what the first swap left
            back = logits(model, inputs)
    assert not torch.allclose(swapped, clean)  # the swap reached the output
    assert torch.equal(back, clean)
    # the swap is an interchange: example 0 given example 1's values at the aligned positions
    alone = {k: v[:1] for k, v in inputs.items()}
    source = {k: v[1:] for k, v in inputs.items()}
    with intervene(model, site, positions[:1], extract_interchange(model, source, site,
                                                                   positions[1:])):
        patched = logits(model, alone)
    torch.testing.assert_close(patched[0], swapped[0], rtol=0, atol=1e-5)


def test_albert_is_refused_in_one_line():
    model = tiny_mlm_albert()
    for site in SITES:
        with pytest.raises(UserError, match="ALBERT shares one layer"):
            extract_site(model, batch(), site, POSITIONS)
    assert hook_count(model) == 0


def tiny_mlm_albert() -> torch.nn.Module:
    config = tiny_config("albert", VOCAB, 0, heads=HEADS, hidden=HIDDEN)
    return transformers.AlbertForMaskedLM(config).eval()


@pytest.mark.parametrize("site, positions, message", [
    (Site(layer=3), POSITIONS, "not in 0..2"),
    (Site(layer=0, head=1), POSITIONS, "not in 1..2"),
    (Site(layer=1, head=4), POSITIONS, "head 4 is not in 0..3"),
    (Site(layer=1), [[1], [8], [0]], r"example 1's positions \[8\] must be distinct, in 0..7"),
    (Site(layer=1), [[1, 1], [0], [0]], "must be distinct"),
    (Site(layer=1), [[1], [0]], "positions name 2 examples, the batch has 3"),
])
def test_a_wrong_site_or_position_is_refused(site, positions, message):
    model = tiny_mlm()
    with pytest.raises(UserError, match=message):
        extract_site(model, batch(), site, positions)
    assert hook_count(model) == 0


def test_an_interchange_needs_as_many_source_positions_as_base_ones():
    model, inputs = tiny_mlm(), batch()
    short = extract_interchange(model, inputs, Site(1), [[1], [0], [6]])
    with pytest.raises(UserError, match="same number of positions"), \
            intervene(model, Site(1), POSITIONS, short):
        logits(model, inputs)


# ---------------------------------------------------------------- hooks never outlive a block


def test_no_hook_survives_an_exception_in_the_block_or_in_the_hook():
    model, inputs = tiny_mlm(), batch()
    clean = logits(model, inputs)
    with pytest.raises(RuntimeError, match="interrupted"), \
            intervene(model, Site(1, head=0), POSITIONS, ZeroAblation()):
        logits(model, inputs)
        raise RuntimeError("interrupted")
    assert hook_count(model) == 0

    class Broken:
        def apply(self, values):
            raise ValueError("broken intervention")

    with pytest.raises(ValueError, match="broken"), intervene(model, Site(2), POSITIONS, Broken()):
        logits(model, inputs)
    assert hook_count(model) == 0
    assert torch.equal(logits(model, inputs), clean)


# ---------------------------------------------------------------- against hand computations


@torch.no_grad()
def bert_by_hand(model, ids: torch.Tensor, edit_layer: int | None = None, edit=None,
                 final: bool = False) -> torch.Tensor:
    """A BERT masked-LM's forward pass by calling its modules, with `edit(hidden)` applied
    to the output of layer `edit_layer` (1-based): the logits, or the final hidden states."""
    hidden = model.bert.embeddings(input_ids=ids)  # (batch, seq, hidden), no padding
    for i, layer in enumerate(model.bert.encoder.layer, start=1):
        hidden = layer(hidden)
        hidden = hidden[0] if isinstance(hidden, tuple) else hidden
        if i == edit_layer:
            hidden = edit(hidden)
    return hidden if final else model.cls(hidden)


def test_zeroing_two_positions_of_layer_one_matches_the_layers_called_by_hand():
    """Zero layer 1's output at positions {1, 3} of example 0 and {0, 2, 5} of example 1 of a
    2-layer BERT; the final hidden states equal layer 2 run by hand on the zeroed states."""
    model, inputs = tiny_mlm(dtype=torch.float64), batch(size=2, pad=False)
    positions = [[1, 3], [0, 2, 5]]

    def zero(hidden):
        hidden = hidden.clone()
        hidden[0, [1, 3]] = 0
        hidden[1, [0, 2, 5]] = 0
        return hidden

    expected = bert_by_hand(model, inputs["input_ids"], 1, zero, final=True)
    with torch.no_grad(), intervene(model, Site(1), positions, ZeroAblation()):
        got = model.bert(**inputs).last_hidden_state
    clean = bert_by_hand(model, inputs["input_ids"], final=True)
    assert (got - clean).abs().amax() > 0.1  # the zeroing changed the output
    torch.testing.assert_close(got, expected, rtol=0, atol=TOLERANCE)


def alterrep_by_hand(v: np.ndarray, directions: np.ndarray, alpha: float, side: int | None):
    out = []
    for h in v:
        parts = [(w @ h) * w for w in directions]
        pushed = [alpha * (side if side is not None else -np.sign(w @ h)) * abs(w @ h) * w
                  for w in directions]
        out.append(h - sum(parts) + sum(pushed))
    return np.array(out)


def kinds_and_formulas(dim: int, source: np.ndarray):
    """(intervention, its formula on (n, dim) values written here) for every kind."""
    x, labels = planted(600, dim, seed=dim)
    inlp = fit_inlp(x, labels, iterations=4, seed=0)
    directions = compute_concept_directions(inlp.projection)
    mean = np.linspace(-1, 1, dim)
    return {
        "zero": (ZeroAblation(), lambda v: np.zeros_like(v)),
        "mean": (MeanAblation(mean), lambda v: np.broadcast_to(mean, v.shape)),
        "interchange": (Interchange(torch.as_tensor(source)), lambda v: source),
        "inlp": (compute_inlp_erasure(inlp), lambda v: v @ inlp.projection),
        "leace": (fit_leace(x, labels), leace_by_hand(x, labels)),
        "alterrep": (AlterRep(directions, 2.0), lambda v: alterrep_by_hand(v, directions, 2.0,
                                                                           None)),
        "alterrep_positive": (AlterRep(directions, 1.5, side=1),
                              lambda v: alterrep_by_hand(v, directions, 1.5, 1)),
    }


KINDS = ["zero", "mean", "interchange", "inlp", "leace", "alterrep", "alterrep_positive"]
HAND_POSITIONS = [[1, 3], [2]]


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_at_a_layer_matches_its_formula_written_here(kind, one_thread):
    model, inputs = tiny_mlm(dtype=torch.float64), batch(size=2, pad=False)
    rows, cols = [0, 0, 1], [1, 3, 2]
    source_states = layer_one_by_hand(model, batch(seed=7, size=2, pad=False)["input_ids"])
    intervention, formula = kinds_and_formulas(HIDDEN, source_states[rows, cols].numpy())[kind]

    def edit(hidden):
        hidden = hidden.clone()
        hidden[rows, cols] = torch.as_tensor(np.array(formula(hidden[rows, cols].numpy())))
        return hidden

    expected = bert_by_hand(model, inputs["input_ids"], 1, edit)
    with intervene(model, Site(1), HAND_POSITIONS, intervention):
        got = logits(model, inputs)
    assert (got - logits(model, inputs)).abs().amax() > 1e-3  # the kind changed the logits
    torch.testing.assert_close(got, expected, rtol=0, atol=TOLERANCE)


@torch.no_grad()
def layer_one_by_hand(model, ids: torch.Tensor) -> torch.Tensor:
    hidden = model.bert.encoder.layer[0](model.bert.embeddings(input_ids=ids))
    return hidden[0] if isinstance(hidden, tuple) else hidden


def head_one_of_layer_two(model) -> torch.nn.Module:
    return model.bert.encoder.layer[1].attention.output.dense  # its input holds the heads


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_at_a_head_matches_its_formula_written_here(kind, one_thread):
    """Head 1 of layer 2: columns 8..15 of the output projection's input, edited here by a
    hook of the test's own."""
    model, inputs = tiny_mlm(dtype=torch.float64), batch(size=2, pad=False)
    rows, cols, width = [0, 0, 1], [1, 3, 2], slice(HEAD_DIM, 2 * HEAD_DIM)
    dense = head_one_of_layer_two(model)
    seen = []
    handle = dense.register_forward_pre_hook(lambda m, args: seen.append(args[0]))
    logits(model, batch(seed=7, size=2, pad=False))
    handle.remove()
    source = seen[0][rows, cols, width].numpy()
    intervention, formula = kinds_and_formulas(HEAD_DIM, source)[kind]

    def edit(_module, args):
        hidden = args[0].clone()  # (batch, seq, heads * head_dim)
        hidden[rows, cols, width] = torch.as_tensor(
            np.array(formula(hidden[rows, cols, width].numpy())))
        return (hidden,)

    handle = dense.register_forward_pre_hook(edit)
    try:
        expected = logits(model, inputs)
    finally:
        handle.remove()
    with intervene(model, Site(2, head=1), HAND_POSITIONS, intervention):
        got = logits(model, inputs)
    assert (got - logits(model, inputs)).abs().amax() > 1e-3
    torch.testing.assert_close(got, expected, rtol=0, atol=TOLERANCE)
