"""agreement_used's null through the CLI: the study's bundle (study_probe_agreement) on a
randomly initialised BERT with an MLM head and MiniLM's tokenizer, two seeds, judged by
`bertology report`. An untrained model prefers one verb form whatever the subject, so the
finding's guard (verb accuracy above 0.75) is not met and the verdict is "uninformative", and
the interchange flips no verb at any layer. Its can-fail worlds are test_can_fail's; asked to
read a checkpoint's own MLM head (head=own) where it has none, the study refuses in one line."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from conftest import run_cli

pytestmark = [pytest.mark.slow, pytest.mark.data("marvin_linzen_syneval"),
              pytest.mark.usefixtures("one_thread")]

MINILM = "sentence-transformers/all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def random_mlm(tmp_path_factory) -> Path:
    """A 2-layer BERT with an MLM head at random, with MiniLM's WordPiece vocabulary."""
    from transformers import BertConfig, BertForMaskedLM

    from bertology.config.path_checks import resolve_checkpoint
    from bertology.data.tokenizers import load_pretrained_tokenizer

    tokenizer = load_pretrained_tokenizer(resolve_checkpoint(MINILM))
    path = tmp_path_factory.mktemp("random_mlm")
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=256)
    BertForMaskedLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def judge(model: str, root: Path, *extra: str) -> tuple[int, dict]:
    """The study's sweep (seeds 0 and 1, 200 pairs each) on the model, then the report's row
    of agreement_used; (the sweep's exit status, the row or the sweep's stderr)."""
    probe = run_cli("probe", "-m", "experiment=study_probe_agreement", "seed=0,1",
                    f"model.name_or_path={model}", "logger=none", *extra,
                    "max_train_sentences=200",
                    "max_eval_sentences=200", f"hydra.sweep.dir={root / 'probe'}", cwd=root,
                    timeout=1800)
    if probe.returncode:
        return probe.returncode, {"stderr": probe.stderr}
    report = run_cli("report", str(root / "probe"), f"hydra.run.dir={root / 'report'}",
                     cwd=root, timeout=600)
    assert report.returncode == 0, report.stderr[-2000:]
    with (root / "report" / "tables" / "findings.csv").open() as handle:
        return 0, next(row for row in csv.DictReader(handle)  # the first part's row
                       if row["finding"] == "agreement_used")


def test_an_untrained_model_reads_uninformative(random_mlm, tmp_path):
    status, row = judge(str(random_mlm), tmp_path)
    assert status == 0, row
    assert row["raw_verdict"] == "uninformative", row["note"]
    assert "guard not met" in row["note"] and "verb_accuracy" in row["note"]
    for seed in ("0", "1"):  # no verb flips beyond the control, at any layer's output
        metrics = json.loads((tmp_path / "probe" / seed / "metrics.json").read_text())
        assert abs(metrics["interchange/best_hidden/effect_minus_control"]) < 0.05


def test_a_checkpoint_without_an_mlm_head_is_refused_in_one_line(tmp_path):
    """The bundle's head=auto fits a head where none is; asked for its own, MiniLM has none."""
    status, row = judge(MINILM, tmp_path, "analysis.agreement_interchange.head=own")
    assert status != 0
    assert "has no masked-LM head" in row["stderr"] and "Traceback" not in row["stderr"]
