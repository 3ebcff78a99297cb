"""The one source for what the docs say about the default runs: runs `bertology pretrain` and
`bertology probe` with no arguments (a fresh cache, one process each, nothing else asked of the
machine) and writes docs/default_runs.md from what they measured.

    .venv/bin/python bench/default_runs.py      # make default-runs

README.md, docs/pipelines.md, docs/probing.md, conf/trainer/default.yaml and conf/probe.yaml
point here instead of quoting their own numbers; tests/house/test_docs.py checks that the numbers
README.md quotes are this file's.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "docs" / "default_runs.md"

# (run, its command's arguments, the metrics the docs quote)
RUNS = (
    ("pretrain", ["pretrain", "logger=none"],
     ("eval/mlm_accuracy", "eval/perplexity", "eval/nsp_accuracy", "train/steps")),
    ("probe", ["probe", "logger=none"],
     ("probe/best_layer", "probe/best_layer/accuracy", "probe/majority_accuracy")),
    ("probe, again", ["probe", "logger=none"], ()),  # its checkpoint now in the cache
)


def cpu_flags() -> str:
    flags = Path("/proc/cpuinfo").read_text().split() if Path("/proc/cpuinfo").exists() else []
    native = [f for f in ("amx_bf16", "avx512_bf16") if f in flags]
    return ", ".join(native) if native else "no native bf16 (no amx_bf16, avx512_bf16)"


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def run(name: str, args: list[str], work: Path, cache: Path
        ) -> tuple[float, dict[str, float], Path]:
    """One default run in its own dir: wall seconds, metrics.json, the run dir."""
    run_dir = work / name.replace(", ", "_").replace(" ", "_")
    env = {**os.environ, "BERTOLOGY_CACHE_DIR": str(cache), "PYTHONWARNINGS": "ignore"}
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "bertology", *args, f"hydra.run.dir={run_dir}"],
                   cwd=work, env=env, check=True, stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - start
    return seconds, json.loads((run_dir / "metrics.json").read_text()), run_dir


def loss_at(run_dir: Path, step: int | None) -> float:
    """train/mlm_loss (else train/loss) at a logged step (None: the last logged)."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "train/mlm_loss" in r or "train/loss" in r]
    row = rows[-1] if step is None else next(r for r in rows if r["step"] == step)
    return row.get("train/mlm_loss", row.get("train/loss"))


def main() -> None:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                            capture_output=True, text=True).stdout.strip()
    load = os.getloadavg()[0]
    lines = ["# The default runs, measured", "",
             "Written by `make default-runs` (`bench/default_runs.py`): do not edit by hand. The "
             "docs quote these numbers and no others about the default runs "
             "(`tests/house/test_docs.py` checks README.md's).", "",
             f"Measured at {commit} on {date.today().isoformat()}, {os.cpu_count()} cores of "
             f"{cpu_name()} ({cpu_flags()}), load average {load:.1f} at the start and "
             f"{{end_load}} at the end, one run after another, a fresh cache.", "",
             "| command | wall time | metrics |", "|---|---:|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        work, cache = Path(tmp), Path(tmp) / "cache"
        for name, args, quoted in RUNS:
            seconds, metrics, run_dir = run(name, args, work, cache)
            shown = ", ".join(f"{k} {metrics[k]:.4g}" for k in quoted if k in metrics)
            if name == "pretrain":
                shown += (f"; train/mlm_loss {loss_at(run_dir, 25):.3g} at step 25, "
                          f"{loss_at(run_dir, None):.3g} at the end")
            command = " ".join(a for a in args if a != "logger=none")
            lines.append(f"| `bertology {command}`{' (again)' if 'again' in name else ''} "
                         f"| {seconds:.0f} s | {shown or 'as above'} |")
            print(lines[-1], flush=True)
    lines += ["", "The probe's first run pretrains its checkpoint (the default `bertology "
              "pretrain`, cached under `cache_dir/pretrained/`): its time includes that "
              "pretraining; the second run's (again) reads it from the cache."]
    text = "\n".join(lines) + "\n"
    OUT.write_text(text.replace("{end_load}", f"{os.getloadavg()[0]:.1f}"))
    print(f"-> {OUT.relative_to(REPO)}")


if __name__ == "__main__":
    main()
