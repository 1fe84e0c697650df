"""Wall-clock time of a new process's first ``linearizer sample``, cold and with the disk cache
of one-step matrices warm (:mod:`linearizer.flow.bcache`).

    python benchmarks/first_call.py [--models pretrained:mnist pretrained:mnist-mix] [--n 64]
                                    [--threads N] [--out FILE.json] [--dry-run]

Each model gets its own fresh, empty cache folder (``LINEARIZER_CACHE``). The first call of each
model runs against the empty folder (every B is built and stored), then the second call of each
against the folder the first one filled (every B read back). Every call is a new
``python -m linearizer sample MODEL --n N --out TMP`` process timed from start to exit, so the
times include the interpreter, torch's import, loading the weights and writing the samples.

A mixture (of classes, or of components found without labels) needs one B per class or
component drawn, so its first call builds up to ten where a one-generator model builds one. The
JSON holds the four times, the ratios second model / first model of the first and of the warm
calls, and the number of files each model left in its cache folder (0: the models do not use
the disk cache).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

DEFAULT_MODELS = ("pretrained:mnist", "pretrained:mnist-mix")


def cpu_name() -> str:
    """lscpu's model name, else what the platform module knows."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    for line in out.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def sample_command(model: str, n: int, out: Path) -> list[str]:
    return [sys.executable, "-m", "linearizer", "sample", model, "--n", str(n), "--out", str(out)]


def timed_call(cmd: list[str], env: dict[str, str]) -> float:
    """Seconds from starting ``cmd`` to its exit; a failing call stops the benchmark."""
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise SystemExit(f"first_call: {' '.join(cmd[2:])} failed: {tail}")
    return seconds


def plan(models: list[str], n: int, root: Path) -> list[tuple[str, str, list[str], Path]]:
    """``(model, call, command, cache folder)`` in the order they run: first calls, then warm."""
    steps = []
    for call in ("first", "warm"):
        for i, model in enumerate(models):
            out = root / f"out-{i}-{call}"
            steps.append((model, call, sample_command(model, n, out), root / f"cache-{i}"))
    return steps


def run(args: argparse.Namespace, root: Path) -> dict:
    times: dict[str, dict[str, float]] = {m: {} for m in args.models}
    files: dict[str, int] = {}
    for model, call, cmd, cache in plan(args.models, args.n, root):
        env = {**os.environ, "LINEARIZER_CACHE": str(cache)}
        if args.threads:
            env["OMP_NUM_THREADS"] = str(args.threads)
        seconds = timed_call(cmd, env)
        times[model][call] = round(seconds, 2)
        files[model] = len(list(cache.glob("*.safetensors"))) if cache.is_dir() else 0
        print(f"{model:<24} {call:<5} call {seconds:7.1f} s  ({files[model]} cached B)")
    report = {
        "device": cpu_name(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "n": args.n,
        "threads": args.threads or "default",
        "seconds": times,
        "cache_files": files,
    }
    if len(args.models) == 2:
        one, other = args.models
        report["ratio_second_to_first"] = {
            call: round(times[other][call] / times[one][call], 2) for call in ("first", "warm")
        }
    return report


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--models",
        nargs="+",
        default=list(DEFAULT_MODELS),
        help="runs to sample (the ratio needs two: the one-generator model first)",
    )
    p.add_argument("--n", type=int, default=64, help="samples per call")
    p.add_argument("--threads", type=int, default=0, help="OMP_NUM_THREADS (0: unchanged)")
    p.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    p.add_argument("--dry-run", action="store_true", help="print the calls and stop")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="first-call-") as tmp:
        root = Path(tmp)
        if args.dry_run:
            for model, call, cmd, cache in plan(args.models, args.n, root):
                print(
                    f"would time the {call} call of {model}: LINEARIZER_CACHE={cache} "
                    f"{' '.join(cmd)}"
                )
            print(f"would write {args.out}" if args.out else "would print the results")
            return 0
        report = run(args, root)
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
