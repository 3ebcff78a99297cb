"""Speed levers change how fast, never what: a run with them is the run without them."""

from __future__ import annotations

import pytest
from conftest import compose_config

from bertology.pipelines import pretrain
from bertology.run.tracking import without_wall_clock
from bertology.training.loop import prefetch

RUN = ["logger=none", "trainer=smoke", "trainer.max_steps=12", "trainer.log_every=4",
       "data.num_sentences=400", "data.eval_docs=10"]


def test_prefetch_keeps_the_order_and_raises_the_sources_error_in_place():
    assert list(prefetch(iter(range(50)), depth=3)) == list(range(50))

    def broken():
        yield from range(5)
        raise ValueError("bad shard")

    seen = []
    with pytest.raises(ValueError, match="bad shard"):
        for item in prefetch(broken(), depth=2):
            seen.append(item)
    assert seen == [0, 1, 2, 3, 4]


def test_a_consumer_that_stops_early_stops_the_thread():
    import threading

    items = prefetch(iter(range(10_000)), depth=2)
    assert next(items) == 0
    items.close()  # what happens when training ends or raises
    threads = [t for t in threading.enumerate() if t.name == "bertology-prefetch"]
    for thread in threads:
        thread.join(timeout=2)
    assert not any(t.is_alive() for t in threads)


def with_and_without(lever: str, tmp_path) -> tuple[dict, dict]:
    """Final metrics of the same small run without the lever, then with it."""
    metrics = []
    for name, extra in (("without", []), ("with", [lever])):
        (tmp_path / name).mkdir()
        metrics.append(pretrain.run(compose_config("pretrain", [*RUN, *extra]), tmp_path / name))
    return metrics[0], metrics[1]


@pytest.mark.slow
def test_prefetching_batches_leaves_the_metrics_unchanged(tmp_path):
    inline, ahead = with_and_without("trainer.prefetch_batches=3", tmp_path)
    assert without_wall_clock(ahead) == without_wall_clock(inline)
    assert 0 <= ahead["train/data_wait_share"] < 1


@pytest.mark.slow
def test_a_compiled_run_follows_the_eager_one_and_saves_plain_weights(tmp_path):
    from transformers import AutoModelForPreTraining

    eager, compiled = with_and_without("trainer.compile=true", tmp_path)
    # Inductor fuses and reorders float work, so the numbers agree closely, not exactly.
    for key in ("train/loss", "eval/mlm_loss"):
        assert compiled[key] == pytest.approx(eager[key], rel=1e-3), key
    reloaded = AutoModelForPreTraining.from_pretrained(tmp_path / "with" / "model")
    assert not any("_orig_mod" in key for key in reloaded.state_dict())
