"""One prepared GPU check: what matters about bertology on a GPU, measured by one command that
fits ten minutes on one H100, written to one results file (Markdown, and JSON beside it).

    python bench/gpu_check.py [--out DIR] [--data wikipedia]    # make gpu-check
    python bench/gpu_check.py --dry                               # the same steps on a CPU, tiny

Each step runs in its own process under its own time limit, so one that fails or overruns is a
row of the results, not the end of the check:

  machine     torch, CUDA, the cards, bf16
  bench       bench_pretrain.py --device cuda at sizes small and base, bertology against HF
              Trainer (grouped texts), bf16, 3 interleaved repeats of a short window: tokens/s,
              MFU against the card's nominal dense bf16 peak and a measured matmul peak, peak
              GPU memory (its table: bench.md)
  pretrain    300 steps of a base BERT in bf16 on the synthetic corpus: the loss must fall
  probe       a linear POS probe of that checkpoint at every layer, against its random twin
  finetune    a fine-tuning of it on the synthetic negation task
  compile     every family's training step under torch.compile: graph breaks counted (with
              their reasons), then one compiled step run forward and backward
  accelerate  with 2 or more GPUs, a 2-process `accelerate launch` pretraining step

--dry runs every step on the CPU at size tiny with a few steps (make test-slow runs it), so the
script is known to work before a GPU is ever lent. The results name the card, the commit and
the command; docs/gpu.md says how to read them and where they go (bench/RESULTS.md).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FAMILIES = ("bert", "roberta", "spanbert", "electra", "modernbert")


@dataclass(frozen=True)
class Plan:
    """The check's sizes and limits: the GPU's, or --dry's on a CPU."""

    device: str
    bench_sizes: tuple[str, ...]
    bench_steps: tuple[int, ...]
    repeats: int
    size: str  # the pretrained checkpoint's
    steps: int
    precision: str  # trainer.mixed_precision
    compile_size: str
    limits: dict = field(default_factory=dict)  # seconds per step


# One H100's limits add up to 9.5 minutes (the accelerate step runs only where 2 GPUs are)
GPU = Plan("cuda", ("small", "base"), (40, 20), 3, "base", 300, "bf16", "small",
           {"bench": 240, "pretrain": 120, "probe": 60, "finetune": 60, "compile": 90,
            "accelerate": 90})
BUDGET_S = 600  # what the check must fit on one GPU
DRY = Plan("cpu", ("tiny",), (3,), 1, "tiny", 30, "no", "tiny",
           {"bench": 400, "pretrain": 300, "probe": 200, "finetune": 200, "compile": 400,
            "accelerate": 120})


@dataclass
class Step:
    name: str
    ok: bool
    seconds: float
    summary: str
    details: dict = field(default_factory=dict)


def run(command: list[str], limit: float, env: dict | None = None
        ) -> tuple[bool, str, float]:
    """(exited 0 within the limit, the output's tail, seconds)."""
    start = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=limit,
                              env={**os.environ, **(env or {})})
        ok, output = done.returncode == 0, done.stdout + done.stderr
    except subprocess.TimeoutExpired as expired:
        ok, output = False, f"over its limit of {limit:.0f} s\n{expired.stderr or ''}"
    return ok, output[-2000:], time.perf_counter() - start


def bertology(*args: str) -> list[str]:
    return [sys.executable, "-m", "bertology", *args, "logger=none"]


def step_machine(plan: Plan, out: Path) -> Step:
    import torch

    cards = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    details = {"torch": torch.__version__, "cuda": torch.version.cuda, "cards": cards,
               "bf16": bool(cards) and torch.cuda.is_bf16_supported(),
               "commit": commit(), "command": " ".join(sys.argv)}
    ok = plan.device == "cpu" or bool(cards)
    summary = (f"{len(cards)} × {cards[0]}, torch {torch.__version__}, CUDA {torch.version.cuda}"
               if cards else f"no GPU visible to torch {torch.__version__}")
    return Step("machine", ok, 0.0, summary, details)


def step_bench(plan: Plan, out: Path, data: str) -> Step:
    table = out / "bench.md"
    command = [sys.executable, "bench/bench_pretrain.py", "--device", plan.device, "--sizes",
               *plan.bench_sizes, "--steps", *map(str, plan.bench_steps), "--repeats",
               str(plan.repeats), "--arms", "bertology", "hf_grouped", "--data", data,
               "--out", str(table)]
    command += ["--precisions", "bf16"] if plan.device == "cuda" else ["--precisions", "fp32"]
    ok, output, seconds = run(command, plan.limits["bench"])
    rows = [line for line in table.read_text().splitlines() if line.startswith("|")] \
        if table.exists() else []
    cells = [row for row in rows if row.split("|")[2].strip().isdigit()]  # | size | steps |
    return Step("bench", ok and bool(cells), seconds,
                f"{len(cells)} cells timed (bench.md)" if cells else "no table written",
                {"command": " ".join(command[1:]), "table": rows, "tail": "" if ok else output})


def step_pretrain(plan: Plan, out: Path) -> Step:
    run_dir = out / "pretrain"
    log_every = max(1, plan.steps // 12)
    command = bertology("pretrain", f"size={plan.size}", f"trainer.max_steps={plan.steps}",
                        f"trainer.mixed_precision={plan.precision}",
                        f"trainer.log_every={log_every}", f"trainer.eval_every={plan.steps}",
                        f"trainer.save_every={plan.steps}", f"hydra.run.dir={run_dir}")
    ok, output, seconds = run(command, plan.limits["pretrain"])
    losses = read_losses(run_dir / "metrics.jsonl")
    fell = len(losses) >= 2 and losses[-1] < losses[0]
    metrics = read_metrics(run_dir)
    summary = (f"train/loss {losses[0]:.3f} at step {log_every} → {losses[-1]:.3f} at step "
               f"{plan.steps}; {metrics.get('train/tokens_per_s', 0):,.0f} tok/s"
               if losses else "no loss logged")
    return Step("pretrain", ok and fell, seconds, summary,
                {"command": " ".join(command[2:]), "losses": losses, "metrics": metrics,
                 "tail": "" if ok else output})


def step_probe(plan: Plan, out: Path) -> Step:
    command = bertology("probe", f"model.name_or_path={out / 'pretrain' / 'model'}",
                        "analysis=linear", "seeds=[0]", "max_train_sentences=300",
                        "max_eval_sentences=100", f"hydra.run.dir={out / 'probe'}")
    ok, output, seconds = run(command, plan.limits["probe"])
    metrics = read_metrics(out / "probe")
    layers = sorted(k for k in metrics if k.startswith("probe/layer_") and k.endswith("/accuracy"))
    summary = ", ".join(f"layer {k.split('/')[1][6:]} {metrics[k]:.3f} (twin "
                        f"{metrics.get(k.replace('probe/', 'probe/random/'), float('nan')):.3f})"
                        for k in layers) or "no probe metrics"
    return Step("probe", ok and bool(layers), seconds, summary,
                {"command": " ".join(command[2:]), "tail": "" if ok else output})


def step_finetune(plan: Plan, out: Path) -> Step:
    command = bertology("finetune", f"model.name_or_path={out / 'pretrain' / 'model'}",
                        "task=synthetic_negation", "trainer.max_steps=60",
                        f"hydra.run.dir={out / 'finetune'}")
    ok, output, seconds = run(command, plan.limits["finetune"])
    metrics = read_metrics(out / "finetune")
    summary = (f"eval/accuracy {metrics['eval/accuracy']:.3f} on the whole dev set "
               f"(majority {metrics.get('eval/majority_accuracy', float('nan')):.3f})"
               if "eval/accuracy" in metrics else "no eval/accuracy")
    return Step("finetune", ok and "eval/accuracy" in metrics, seconds, summary,
                {"command": " ".join(command[2:]), "tail": "" if ok else output})


def step_compile(plan: Plan, out: Path) -> Step:
    command = [sys.executable, __file__, "--compile-step", "--device", plan.device,
               "--compile-size", plan.compile_size, "--out", str(out)]
    ok, output, seconds = run(command, plan.limits["compile"])
    path = out / "compile.json"
    found = json.loads(path.read_text()) if path.exists() else {}
    summary = ", ".join(f"{family} {row['breaks']} break(s)"
                        + ("" if row.get("ran") else " (step failed)")
                        for family, row in found.items()) or "not run"
    clean = bool(found) and all(row["breaks"] == 0 and row.get("ran") for row in found.values())
    return Step("compile", ok and clean, seconds, summary,
                {"families": found, "tail": "" if ok else output})


def step_accelerate(plan: Plan, out: Path) -> Step:
    import torch

    if torch.cuda.device_count() < 2:
        return Step("accelerate", True, 0.0, "skipped: fewer than 2 GPUs")
    command = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "2", "-m",
               "bertology", "pretrain", "size=small", "trainer.max_steps=20",
               "trainer.mixed_precision=bf16", "logger=none",
               f"hydra.run.dir={out / 'accelerate'}"]
    ok, output, seconds = run(command, plan.limits["accelerate"])
    metrics = read_metrics(out / "accelerate")
    return Step("accelerate", ok and bool(metrics), seconds,
                f"2 processes, {metrics.get('train/tokens_per_s', 0):,.0f} tok/s" if metrics
                else "failed", {"tail": "" if ok else output})


# ---------------------------------------------------------------- the compile step (a child)


def compile_families(device: str, size: str, out: Path) -> None:
    """compile.json: per family, the graph breaks torch._dynamo.explain finds in its training
    step (model + loss), their reasons, and whether one compiled step (inductor on a GPU,
    aot_eager on a CPU) ran forward and backward to a finite loss."""
    import torch
    from hydra import compose, initialize_config_dir

    from bertology.config.pretrain_config import load_pretrain_config
    from bertology.data.corpora import build_corpus
    from bertology.data.stream import PretrainData
    from bertology.models.build import build_model
    from bertology.pipelines.pretrain import build_objective, load_tokenizer

    found = {}
    for family in FAMILIES:  # each as `bertology pretrain model=<family>` builds it
        with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
            cfg = compose(config_name="pretrain", overrides=[
                f"model={family}", f"size={size}", "data.num_sentences=2000",
                "data.eval_docs=20", "logger=none"])
        config = load_pretrain_config(cfg)
        corpus = build_corpus(config.data, config.data_dir)
        config, tokenizer = load_tokenizer(config, corpus)
        objective = build_objective(config, tokenizer, corpus)
        data = PretrainData(corpus, tokenizer, config, objective.pair_task)
        model = build_model(config.model, config.size, tokenizer,
                            pair_head=objective.pair_task is not None,
                            seed=config.seed).to(device).train()
        batch = {k: v.to(device) for k, v in objective.collate(data.eval_examples[:8]).items()}

        def step(batch, model=model, objective=objective):
            return objective.loss(model, batch)[0]

        torch._dynamo.reset()
        explained = torch._dynamo.explain(step)(batch)
        row = {"breaks": explained.graph_break_count,
               "reasons": [str(b.reason) for b in explained.break_reasons][:5]}
        try:
            compiled = torch.compile(step, backend="inductor" if device == "cuda" else "aot_eager")
            loss = compiled(batch)
            loss.backward()
            row["ran"] = bool(torch.isfinite(loss.detach()).item())
        except Exception as error:  # noqa: BLE001 - the check reports any failure as a row
            row["ran"], row["error"] = False, f"{type(error).__name__}: {error}"[:500]
        found[family] = row
        print(f"{family}: {row}", flush=True)
    (out / "compile.json").write_text(json.dumps(found, indent=1))


# ---------------------------------------------------------------- reading and writing


def read_losses(path: Path) -> list[float]:
    if not path.exists():
        return []
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r["train/loss"] for r in records if "train/loss" in r]


def read_metrics(run_dir: Path) -> dict:
    path = run_dir / "metrics.json"
    return json.loads(path.read_text()) if path.exists() else {}


def commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                          text=True)
    return done.stdout.strip() or "unknown"


def write_results(steps: list[Step], plan: Plan, out: Path, started: float) -> Path:
    machine = steps[0].summary
    lines = [f"# GPU check{' (dry, on the CPU)' if plan.device == 'cpu' else ''}", "",
             f"`{' '.join(['python', *sys.argv])}` at {commit()}, {time.strftime('%Y-%m-%d %H:%M')}"
             f", on {machine}; {time.perf_counter() - started:.0f} s in all.", "",
             "| step | ok | seconds | result |", "|---|---|---:|---|"]
    lines += [f"| {s.name} | {'yes' if s.ok else '**no**'} | {s.seconds:.0f} | {s.summary} |"
              for s in steps]
    bench = next((s for s in steps if s.name == "bench"), None)
    if bench is not None and bench.details.get("table"):
        lines += ["", "Throughput (bench.md has the whole section):", "",
                  *bench.details["table"]]
    for s in steps:
        if s.details.get("tail"):
            lines += ["", f"{s.name}, the end of its output:", "", "```", s.details["tail"],
                      "```"]
    path = out / "gpu_check.md"
    path.write_text("\n".join(lines) + "\n")
    (out / "gpu_check.json").write_text(json.dumps([asdict(s) for s in steps], indent=1,
                                                   default=str))
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry", action="store_true", help="every step on the CPU, tiny")
    parser.add_argument("--out", type=Path, help="the results dir (default outputs/gpu_check/"
                        "<date>-<time>)")
    parser.add_argument("--data", choices=["synthetic", "wikipedia"], default="synthetic",
                        help="the bench's corpus (wikipedia: `bertology data fetch wikipedia`)")
    parser.add_argument("--compile-step", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--device", default="cpu", help=argparse.SUPPRESS)
    parser.add_argument("--compile-size", default="tiny", help=argparse.SUPPRESS)
    args = parser.parse_args()
    out = args.out or REPO / "outputs" / "gpu_check" / time.strftime("%Y-%m-%d-%H-%M-%S")
    out.mkdir(parents=True, exist_ok=True)
    if args.compile_step:  # a child process
        compile_families(args.device, args.compile_size, out)
        return 0
    plan = DRY if args.dry else GPU
    started = time.perf_counter()
    steps = [step_machine(plan, out)]
    if not steps[0].ok:
        print(f"no GPU: {steps[0].summary}; `--dry` runs the check on the CPU", file=sys.stderr)
        write_results(steps, plan, out, started)
        return 2
    for name, make in (("bench", lambda: step_bench(plan, out, args.data)),
                       ("pretrain", lambda: step_pretrain(plan, out)),
                       ("probe", lambda: step_probe(plan, out)),
                       ("finetune", lambda: step_finetune(plan, out)),
                       ("compile", lambda: step_compile(plan, out)),
                       ("accelerate", lambda: step_accelerate(plan, out))):
        print(f"gpu check: {name} ...", flush=True)
        steps.append(make())
        print(f"gpu check: {name}: {'ok' if steps[-1].ok else 'FAILED'} "
              f"({steps[-1].seconds:.0f} s) {steps[-1].summary}", flush=True)
    path = write_results(steps, plan, out, started)
    print(f"gpu check: {path}")
    return 0 if all(s.ok for s in steps) else 1


if __name__ == "__main__":
    sys.exit(main())
