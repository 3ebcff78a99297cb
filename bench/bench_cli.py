"""How fast the CLI answers `--help` and a bad config, which it does without importing torch.

Each command runs in a fresh process (as a user types it), `--repeats` times; the median wall
time is reported. With `--baseline REV` the same commands run against that git revision too
(checked out into a temporary worktree and put first on PYTHONPATH), in the same run, and the
table gives the ratio.

    python bench/bench_cli.py --baseline 7edc801    # the layout before issue 18
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

COMMANDS = {
    "bertology --help": ["--help"],
    "bertology pretrain trainer.max_steps=0": ["pretrain", "trainer.max_steps=0"],
    "bertology probe batch_size=0": ["probe", "batch_size=0"],
    "bertology prune prune.step_fraction=1.5": ["prune", "prune.step_fraction=1.5"],
}


def time_command(args: list[str], source: Path, repeats: int) -> tuple[float, int]:
    """Median seconds of `python -m bertology <args>` with `source` first on the path."""
    env = {**os.environ, "PYTHONPATH": str(source)}
    times, code = [], 0
    for _ in range(repeats):
        start = time.perf_counter()
        code = subprocess.run([sys.executable, "-m", "bertology", *args], env=env, cwd=source,
                              capture_output=True).returncode
        times.append(time.perf_counter() - start)
    return statistics.median(times), code


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", help="a git revision to time beside the working tree")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    sources = {"this tree": REPO}
    with tempfile.TemporaryDirectory() as tmp:
        if args.baseline:
            old = Path(tmp) / "baseline"
            subprocess.run(["git", "worktree", "add", "--detach", str(old), args.baseline],
                           cwd=REPO, check=True, capture_output=True)
            sources[args.baseline] = old
        try:
            print("| command | exit | " + " | ".join(f"{name} (s)" for name in sources)
                  + (" | ratio |" if args.baseline else " |"))
            print("|---|---:|" + "---:|" * (len(sources) + bool(args.baseline)))
            for label, command in COMMANDS.items():
                results = [time_command(command, src, args.repeats) for src in sources.values()]
                cells = " | ".join(f"{seconds:.2f}" for seconds, _ in results)
                ratio = f" | {results[1][0] / results[0][0]:.1f}x" if args.baseline else ""
                print(f"| `{label}` | {results[0][1]} | {cells}{ratio} |")
        finally:
            if args.baseline:
                subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=REPO,
                               capture_output=True)


if __name__ == "__main__":
    main()
