"""The report's layer curves across runs (study/pages/curves.py): a sweep over a pretraining run's
checkpoints becomes one probe curve per checkpoint, seeds averaged, named by what differs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from omegaconf import OmegaConf

from bertology.pipelines import report
from bertology.run.rundir import RunDir
from bertology.study.pages.curves import (
    compute_layer_curves,
    differing_labels,
    plot_layer_curves_across_runs,
    shorten_paths,
)

RUN = "/x/outputs/pretrain/2026-11-26/01-00-00"
ACCURACY = "probe/layer_*/accuracy"


def config(name_or_path: str, seed: int, task: str = "synthetic_pos") -> dict:
    return {"seed": seed, "model": {"name_or_path": name_or_path, "family": "bert"},
            "task": {"name": task}, "paths": {"data_dir": f"/data/{seed}"}}


def probe_metrics(values: list[float]) -> dict[str, float]:
    return {f"probe/layer_{i:02d}/accuracy": v for i, v in enumerate(values)}


def sweep_runs() -> list[RunDir]:
    """Three checkpoints; step_10 with two seeds. Written out of training order."""
    return [
        RunDir(Path("/r/2"), probe_metrics([0.9, 0.95, 0.97]), config(f"{RUN}/model", 0)),
        RunDir(Path("/r/1a"), probe_metrics([0.5, 0.6, 0.65]),
            config(f"{RUN}/checkpoints/step_10", 0)),
        RunDir(Path("/r/0"), probe_metrics([0.3, 0.35, 0.4]),
            config(f"{RUN}/checkpoints/step_2", 0)),
        RunDir(Path("/r/1b"), probe_metrics([0.7, 0.8, 0.75]),
            config(f"{RUN}/checkpoints/step_10", 1)),
    ]


def test_shorten_paths_drops_the_shared_folders():
    assert shorten_paths(["/r/checkpoints/step_1", "/r/model"]) == ["checkpoints/step_1",
                                                                     "model"]
    assert shorten_paths(["a/b/model", "c/b/model"]) == ["a/b/model", "c/b/model"]
    assert shorten_paths(["bert", "roberta"]) == ["bert", "roberta"]  # not paths
    assert shorten_paths(["/r/model"]) == ["/r/model"]  # one value: nothing to tell apart


def test_labels_name_only_what_differs():
    one = differing_labels([config("/r/a", 0), config("/r/b", 1)])
    assert one == ["a", "b"]  # seed and paths are not the experiment
    two = [config("/r/a", 0), config("/r/b", 0)]
    two[1]["model"]["family"] = "roberta"
    assert differing_labels(two) == ["model.family=bert, model.name_or_path=a",
                                     "model.family=roberta, model.name_or_path=b"]


def test_curves_average_seeds_and_sort_in_training_order():
    curves = compute_layer_curves(sweep_runs(), ACCURACY)
    assert [c.label for c in curves] == ["checkpoints/step_2", "checkpoints/step_10", "model"]
    assert [c.seeds for c in curves] == [1, 2, 1]
    step_10 = curves[1]
    # by hand: seeds (0.5, 0.7), (0.6, 0.8), (0.65, 0.75) -> means 0.6, 0.7, 0.7; sample std
    # sqrt(((0.1)^2 + (0.1)^2) / 1) = 0.1414 at layers 0 and 1, 0.0707 at layer 2
    seeds = np.array([[0.5, 0.6, 0.65], [0.7, 0.8, 0.75]])  # (seeds, layers)
    assert step_10.layers == [0, 1, 2]
    assert step_10.mean == pytest.approx([0.6, 0.7, 0.7])
    assert step_10.mean == pytest.approx(seeds.mean(axis=0).tolist())
    assert step_10.std == pytest.approx(seeds.std(axis=0, ddof=1).tolist())
    assert step_10.std == pytest.approx([0.1414214, 0.1414214, 0.0707107])
    assert curves[0].std == [0.0, 0.0, 0.0]  # one seed: no band


def test_runs_without_the_metric_make_no_curve():
    runs = [*sweep_runs(), RunDir(Path("/r/f"), {"eval/accuracy": 0.8}, config("/r/f", 0))]
    assert len(compute_layer_curves(runs, ACCURACY)) == 3


def test_a_figure_per_task_with_two_curves_or_more(tmp_path):
    alone = RunDir(Path("/r/n"), probe_metrics([0.2, 0.3, 0.4]), config("/r/m", 0, task="ner"))
    figures = plot_layer_curves_across_runs([*sweep_runs(), alone], tmp_path)
    assert figures == {"probe accuracy per layer on synthetic_pos":
                       "plots/layers_accuracy_synthetic_pos.png"}  # ner has one curve: none
    assert (tmp_path / "plots" / "layers_accuracy_synthetic_pos.png").stat().st_size > 0
    assert (tmp_path / "plots" / "layers_accuracy_synthetic_pos.pdf").stat().st_size > 0


def write_run(path: Path, run: RunDir) -> None:
    (path / ".hydra").mkdir(parents=True)
    (path / ".hydra" / "config.yaml").write_text(yaml.safe_dump(run.config))
    (path / "metrics.json").write_text(json.dumps(run.metrics))


def test_the_report_draws_a_checkpoint_sweep(tmp_path):
    for index, run in enumerate(sweep_runs()):
        write_run(tmp_path / "sweep" / str(index), run)
    out = tmp_path / "report"
    report.run(OmegaConf.create({"runs": [str(tmp_path / "sweep")]}), out)
    text = (out / "REPORT.md").read_text()
    assert "## Layer curves across runs" in text
    assert "![probe accuracy per layer on synthetic_pos]" \
           "(plots/layers_accuracy_synthetic_pos.png)" in text
    assert (out / "plots" / "layers_accuracy_synthetic_pos.png").stat().st_size > 0
    page = (out / "REPORT.html").read_text()  # inlined, as the findings' figures are
    assert "<h2>Layer curves across runs</h2>" in page
    assert 'alt="probe accuracy per layer on synthetic_pos"' in page
    assert page.count("data:image/png;base64,") == 1


def test_labels_with_a_recorded_interpolation_are_drawn_as_text(tmp_path):
    """make reproduce records compare_to=<root>/sst2_model/seed_${seed}/model, and across a
    population that path differs between runs, so it lands in the curves' labels: a `$` there
    opened a mathtext formula that never closed and the report stopped."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bertology.run.figures import literal

    figure, axis = plt.subplots()
    label = ("compare_to=member_0/sst2_model/seed_${seed}/model, "
             "compare_to_twin=member_0/sst2_twin/seed_${seed}/model (n=1)")
    axis.plot([0, 1], [0, 1], label=literal(label))
    axis.legend()
    figure.savefig(tmp_path / "curves.png")  # raised ValueError (mathtext) before
    assert (tmp_path / "curves.png").stat().st_size > 0


def suite_run(name: str, seed: int, step: int, values: list[float]) -> RunDir:
    model = {"name_or_path": None, "family": "bert", "suite": "multiberts", "suite_seed": seed,
             "suite_step": step}
    return RunDir(Path(f"/s/{name}"), probe_metrics(values),
                  {"seed": 0, "model": model, "task": {"name": "ud_pos"}})


def test_a_suite_sweep_is_drawn_against_the_tokens_seen(tmp_path):
    """Runs on MultiBERTs seeds 0 and 1 at steps 20k and 2M: each layer's curve has a point per
    step at step x 131,072 tokens, the mean over the two seeds (std by hand); runs with no
    token count (a plain checkpoint) are left out, and a figure is drawn."""
    from bertology.study.pages.curves import compute_token_curves, plot_token_curves

    runs = [suite_run("a", 0, 20000, [0.5, 0.6]), suite_run("b", 1, 20000, [0.7, 0.8]),
            suite_run("c", 0, 2000000, [0.9, 0.95]), suite_run("d", 1, 2000000, [0.92, 0.97]),
            RunDir(Path("/r/x"), probe_metrics([0.1, 0.1]), config("/r/model", 0))]
    curves = compute_token_curves(runs, ACCURACY)
    assert [c.layer for c in curves] == [0, 1]
    assert curves[0].tokens == [20000 * 131072, 2000000 * 131072]
    assert curves[1].mean == pytest.approx([0.7, 0.96])
    assert curves[0].std[0] == pytest.approx(float(np.std([0.5, 0.7], ddof=1)))
    path = plot_token_curves(runs, "ud_pos", ACCURACY, "probe accuracy", tmp_path)
    assert path == "plots/pretraining_accuracy_ud_pos.png" and (tmp_path / path).is_file()
    # one step: nothing across pretraining to draw
    assert plot_token_curves(runs[:2], "ud_pos", ACCURACY, "probe accuracy", tmp_path) is None
