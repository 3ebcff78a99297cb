"""Every figure draws exactly the numbers its run wrote: each plotted series is read back from
matplotlib (a line's data, a bar's height, a scatter's offsets, a heat map's cells) and
compared with the metrics.json key, the metrics.jsonl record or the table cell it is tied to
(bertology/run/figures.py `tie`, `tie_table`). A labelled line, a bar, a scatter or a heat map
that is tied to nothing fails, as does a figure with nothing tied; reference lines (a loss
budget, chance) say they are references. The probe, prune, pretrain and finetune pipelines are
run end to end and every figure they save is checked."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import matplotlib.figure
import numpy as np
import pytest
from conftest import compose_config
from matplotlib.collections import PathCollection
from matplotlib.image import AxesImage
from matplotlib.patches import Rectangle

from bertology.analysis import cloze
from bertology.pipelines import finetune, pretrain, probe, prune
from bertology.run import figures

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def drawn(monkeypatch) -> list:
    """(file name, figure) of every PNG saved while the test runs."""
    seen = []
    original = matplotlib.figure.Figure.savefig

    def spy(self, fname, *args, **kwargs):
        original(self, fname, *args, **kwargs)
        if str(fname).endswith(".png"):
            seen.append((Path(fname).name.removeprefix(".").split(".tmp")[0], self))

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", spy)
    return seen


# ---------------------------------------------------------------- reading a figure back


def read_log_value(run_dir: Path, log: str, key: str, step: float) -> float:
    """The value of key in the metrics.jsonl record of that step."""
    for line in (run_dir / log).read_text().splitlines():
        record = json.loads(line)
        if record["step"] == step and key in record:
            return record[key]
    raise AssertionError(f"{log} has no {key} at step {step}")


def expected(run_dir: Path, metrics: dict, tied: dict, xs: np.ndarray) -> np.ndarray:
    if tied.get("log"):
        return np.array([read_log_value(run_dir, tied["log"], key, x)
                         for key, x in zip(tied["y"], xs)])
    missing = [key for key in tied["y"] if key not in metrics]
    assert not missing, f"drawn but not in metrics.json: {missing}"
    return np.array([metrics[key] for key in tied["y"]])


def check_series(run_dir: Path, metrics: dict, tied: dict, xs, ys, what: str) -> int:
    """One tied series: its y values (and x where tied) equal what the run wrote."""
    xs, ys = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    if len(tied["y"]) == 1 and len(ys) > 1:  # a horizontal line: two ends, one number
        ys, xs = ys[:1], xs[:1]
    assert len(tied["y"]) == len(ys), f"{what}: {len(ys)} points, {len(tied['y'])} keys"
    np.testing.assert_allclose(ys, expected(run_dir, metrics, tied, xs), rtol=1e-9,
                               atol=1e-12, err_msg=what)
    if tied.get("x"):
        np.testing.assert_allclose(xs, [metrics[key] for key in tied["x"]], rtol=1e-9,
                                   err_msg=f"{what} (x)")
    return len(ys)


def check_image(run_dir: Path, image: AxesImage, what: str) -> int:
    """A layers × heads heat map against its table's cells."""
    tied = json.loads(image.get_gid())
    with (run_dir / "tables" / f"{tied['table']}.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    cells = np.asarray(image.get_array())
    table = np.full(cells.shape, np.nan)
    for row in rows:
        value = row[tied["column"]]
        table[int(row["layer"]) - 1, int(row["head"])] = (
            tied["categories"].index(value) if tied["categories"] else float(value))
    np.testing.assert_allclose(cells, table, rtol=1e-6, err_msg=what)
    return cells.size


def check_figure(name: str, figure, run_dir: Path) -> int:
    """Every drawn series of the figure against the run's files; returns the points checked."""
    metrics = json.loads((run_dir / "metrics.json").read_text())
    checked = 0
    for axis in figure.axes:
        bars = {id(patch) for container in axis.containers
                for patch in getattr(container, "patches", ())}
        for line in axis.lines:
            what = f"{name}: line {line.get_label()!r} ({axis.get_ylabel()})"
            gid = line.get_gid()
            if gid == figures.REFERENCE:
                assert line.get_linestyle() in ("--", ":"), what
                continue
            if line.get_label().startswith("_"):  # error-bar caps and the like: drawn by bars
                continue
            assert gid, f"{what} is tied to no metric"
            checked += check_series(run_dir, metrics, json.loads(gid), line.get_xdata(),
                                    line.get_ydata(), what)
        for patch in axis.patches:
            if isinstance(patch, Rectangle) and id(patch) in bars:
                what = f"{name}: a bar ({axis.get_ylabel() or axis.get_xlabel()})"
                assert patch.get_gid(), f"{what} is tied to no metric"
                horizontal = patch.get_x() == 0 and patch.get_width() != 0 and \
                    axis.get_xlabel().startswith("accuracy")
                value = patch.get_width() if horizontal else patch.get_height()
                checked += check_series(run_dir, metrics, json.loads(patch.get_gid()), [0],
                                        [value], what)
        for collection in axis.collections:
            if isinstance(collection, PathCollection):  # a scatter
                what = f"{name}: scatter {collection.get_label()!r}"
                assert collection.get_gid(), f"{what} is tied to no metric"
                offsets = np.asarray(collection.get_offsets())
                checked += check_series(run_dir, metrics, json.loads(collection.get_gid()),
                                        offsets[:, 0], offsets[:, 1], what)
        for image in axis.images:
            assert image.get_gid(), f"{name}: a heat map tied to no table"
            checked += check_image(run_dir, image, name)
    assert checked, f"{name}: nothing in it is tied to the run's numbers"
    return checked


def check_all(drawn: list, run_dir: Path, expected_names: set[str]) -> None:
    names = {name for name, _ in drawn}
    assert expected_names <= names, expected_names - names
    for name, figure in drawn:
        check_figure(name, figure, run_dir)


def series_of(drawn: list, name: str, ylabel: str) -> dict[str, list[float]]:
    figure = next(f for n, f in drawn if n == name)
    axis = next(a for a in figure.axes if a.get_ylabel() == ylabel)
    return {line.get_label(): list(line.get_ydata()) for line in axis.lines}


# ---------------------------------------------------------------- the probe figure


def test_the_probe_figure_draws_the_model_the_twin_and_each_control_task(tmp_path, drawn):
    """The control task of the model and of its twin are two lines, each equal to its own
    metrics.json values at every layer (they were once pooled into one)."""
    cfg = compose_config("probe", [
        "init=random", "logger=none", "seeds=[0,1]", "max_train_sentences=40",
        "max_eval_sentences=20", f"paths.cache_dir={tmp_path / 'cache'}"])
    metrics = probe.run(cfg, tmp_path / "run")
    curves = series_of(drawn, "linear_synthetic_pos", "accuracy")
    assert set(curves) == {figures.MODEL, figures.TWIN, "control task (model)",
                           "control task (twin)"}
    layers = range(len(curves[figures.MODEL]))
    assert curves["control task (model)"] == pytest.approx(
        [metrics[f"probe/layer_{n:02d}/control_accuracy"] for n in layers], abs=1e-12)
    assert curves["control task (twin)"] == pytest.approx(
        [metrics[f"probe/random/layer_{n:02d}/control_accuracy"] for n in layers], abs=1e-12)
    check_all(drawn, tmp_path / "run", {"linear_synthetic_pos"})


def test_a_figure_that_pools_two_series_fails_the_check(tmp_path, drawn):
    """The check itself: a control curve drawn as the mean of the model's and the twin's (the
    old figure) does not equal either key it claims."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    model, twin = [0.80, 0.82], [0.84, 0.86]
    (run_dir / "metrics.json").write_text(json.dumps(
        {f"probe/{scope}layer_{n:02d}/control_accuracy": values[n]
         for scope, values in (("", model), ("random/", twin)) for n in range(2)}))
    rows = [{"model": "control task (model)", "layer": n, "seed": 0,
             "accuracy": (model[n] + twin[n]) / 2} for n in range(2)]
    figures.plot_layer_curves(rows, ["accuracy"], "pooled", run_dir, "pooled",
                              keys=figures.encoder_keys("probe", **{
                                  "control task (model)":
                                      "probe/layer_{layer:02d}/control_accuracy"}))
    with pytest.raises(AssertionError, match="control task"):
        check_figure("pooled", drawn[0][1], run_dir)


def test_an_untied_line_fails_the_check(tmp_path, drawn):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.json").write_text(json.dumps({"probe/layer_00/accuracy": 0.5}))
    rows = [{"model": "model", "layer": 0, "seed": 0, "accuracy": 0.5}]
    figures.plot_layer_curves(rows, ["accuracy"], "untied", run_dir, "untied")
    with pytest.raises(AssertionError, match="tied to no metric"):
        check_figure("untied", drawn[0][1], run_dir)


def test_cloze_bars_are_the_metrics(tmp_path, drawn):
    metrics = {"cloze/blimp/accuracy": 0.625, "cloze/lama/p_at_1": 0.125}
    (tmp_path / "metrics.json").write_text(json.dumps(metrics))
    cloze.plot_metrics(metrics, "cloze", tmp_path, "cloze")
    assert check_figure("cloze", drawn[0][1], tmp_path) == 2


# ---------------------------------------------------------------- every pipeline's figures


@pytest.mark.slow
def test_every_probe_figure_draws_its_metrics(tmp_path, drawn):
    cfg = compose_config("probe", [
        "analysis=[linear,mlp,structural,geometry,attention,position,numeracy]",
        "init=random", "logger=none", "seeds=[0,1]", "max_train_sentences=60",
        "max_eval_sentences=30", "analysis.structural.epochs=2",
        "analysis.attention.max_sentences=20", "analysis.attention.kovaleva_sentences=10",
        "analysis.attention.min_dependents=1", f"paths.cache_dir={tmp_path / 'cache'}"])
    probe.run(cfg, tmp_path / "run")
    check_all(drawn, tmp_path / "run", {
        "linear_synthetic_pos", "mlp_synthetic_pos", "structural_synthetic_pos",
        "geometry_synthetic_pos", "attention_layers_synthetic_pos",
        "attention_cls_synthetic_pos", "attention_patterns_synthetic_pos",
        "position_synthetic_pos", "numeracy_0_1000"})


@pytest.mark.slow
def test_the_amnesic_figure_draws_its_metrics(tmp_path, drawn, synthetic_tokenizer):
    from test_amnesic import run_probe, save_bert

    save_bert(tmp_path, synthetic_tokenizer)
    run_probe(tmp_path / "model", tmp_path, ["seeds=[0,1]"])
    check_all(drawn, tmp_path / "run", {"amnesic_synthetic_pos"})


@pytest.mark.slow
def test_every_prune_figure_draws_its_metrics(tmp_path, drawn, negation_model):
    from test_prune import QUIET, TASK

    cfg = compose_config("prune", QUIET + TASK + [
        f"model.name_or_path={negation_model}", "prune.importance_examples=32",
        "prune.experiments=[heads,removal,layers,magnitude,int8,matrix]",
        "prune.scores=[gradient,random]", "prune.random_seeds=[0,1,2]",
        "prune.sparsities=[0.3,0.9]", "trainer.max_steps=10"])
    prune.run(cfg, tmp_path / "run")
    check_all([(n, f) for n, f in drawn if n != "training"], tmp_path / "run", {
        "head_pruning", "head_importance", "layer_dropping", "magnitude_pruning",
        "compression_pareto"})


@pytest.mark.slow
def test_the_pretrain_figure_draws_its_log(tmp_path, drawn):
    cfg = compose_config("pretrain", ["logger=none", "trainer.max_steps=6",
                                      "trainer.log_every=2", "trainer.eval_every=3",
                                      "trainer.eval_batches=1", "trainer.batch_size=2",
                                      "data.num_sentences=300", "data.eval_docs=5",
                                      "data.max_seq_length=64"])
    pretrain.run(cfg, tmp_path / "run")
    check_all(drawn, tmp_path / "run", {"training"})


def test_a_finetune_names_each_accuracy_by_its_set(tmp_path, drawn, caplog):
    """The periodic evaluation reads the first eval_batches batches: eval_subset/…, its size
    in the log line; the whole dev set after training: eval/…; metrics.json never pairs a
    loss of one with an accuracy of the other; the plot shows both, labelled."""
    cfg = compose_config("finetune", ["logger=none", "trainer.max_steps=4",
                                      "trainer.eval_every=2", "trainer.eval_batches=1",
                                      "trainer.batch_size=4", "seeds=[0,1]"])
    caplog.set_level("INFO")
    metrics = finetune.run(cfg, tmp_path / "run")
    assert "eval/accuracy" in metrics and "eval_subset/accuracy" in metrics
    assert "eval/loss" not in metrics and "eval_subset/loss" in metrics
    lines = [r.getMessage() for r in caplog.records if " eval_subset " in r.getMessage()]
    # one prediction a dev example: the whole dev set
    total = len((tmp_path / "run" / "seeds" / "0" / "predictions.jsonl").read_text().splitlines())
    assert len(lines) == 2 * 2  # two seeds, an evaluation every 2 of 4 steps
    assert all(f" eval_subset (4 of {total} held-out): accuracy=" in line for line in lines)
    figure = dict(drawn)["training"]
    labels = {line.get_label() for axis in figure.axes for line in axis.lines}
    assert "seeds/0: eval_subset/accuracy" in labels
    assert "seed_0/eval/accuracy (whole dev set)" in labels
    check_figure("training", figure, tmp_path / "run")


@pytest.mark.slow
def test_the_cka_figure_draws_its_metrics(tmp_path, drawn, synthetic_tokenizer):
    """geometry with compare_to and compare_to_twin: the model's CKA with compare_to and with
    its twin, and the twin's with compare_to_twin, each line its metrics.json values."""
    from test_finetune_twins import geometry_against_itself

    cfg = geometry_against_itself(tmp_path, synthetic_tokenizer, eval_sentences=40)
    probe.run(cfg, tmp_path / "run")
    check_all(drawn, tmp_path / "run", {"geometry_cka_synthetic_pos", "geometry_synthetic_pos"})
