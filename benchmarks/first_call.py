"""Wall-clock time of a new process's first ``linearizer sample``, cold and with the disk cache
of one-step matrices warm (:mod:`linearizer.flow.bcache`).

    python benchmarks/first_call.py [--models pretrained:mnist pretrained:mnist-mix] [--n 64]
                                    [--rounds 3] [--one-step] [--threads N] [--out FILE.json]
                                    [--dry-run]

In every round each model gets its own fresh, empty cache folder (``LINEARIZER_CACHE``). The
first call of each model runs against the empty folder, then the second call of each against
the folder the first one left. Every call is a new ``python -m linearizer sample MODEL --n N
--out TMP`` process timed from start to exit, so the times include the interpreter, torch's
import, loading the weights and writing the samples. The models alternate within a round, so
a machine that slows down or speeds up meanwhile affects both alike; the JSON holds every
time, the median per model and call, and the ratios of the medians (second model / first).

A mixture (of classes, or of components found without labels) has one B per class or
component. ``sample`` builds a generator's B only when it draws more than a quarter of the
latent dimension's samples, and otherwise runs the same map by the solver, every component in
one pass; ``route`` records what each model's call printed about it, and ``cache_files`` how
many B's it left in its cache folder. ``--one-step`` passes ``--one-step`` to every call, so
each first call builds and stores its B's (the route every call took before).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
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


def sample_command(model: str, n: int, out: Path, one_step: bool = False) -> list[str]:
    cmd = [sys.executable, "-m", "linearizer", "sample", model, "--n", str(n), "--out", str(out)]
    return cmd + (["--one-step"] if one_step else [])


def timed_call(cmd: list[str], env: dict[str, str]) -> tuple[float, str]:
    """Seconds from starting ``cmd`` to its exit, and the route its summary line names (after
    the spec's parentheses); a failing call stops the benchmark."""
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise SystemExit(f"first_call: {' '.join(cmd[2:])} failed: {tail}")
    line = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    route = line.split("), ", 1)[-1].rsplit(", in ", 1)[0]
    return seconds, route


def plan(
    models: list[str], n: int, root: Path, rounds: int = 1, one_step: bool = False
) -> list[tuple[int, str, str, list[str], Path]]:
    """``(round, model, call, command, cache folder)`` in the order they run: per round the
    first calls, then the warm ones."""
    steps = []
    for r in range(rounds):
        for call in ("first", "warm"):
            for i, model in enumerate(models):
                out = root / f"out-{r}-{i}-{call}"
                cmd = sample_command(model, n, out, one_step)
                steps.append((r, model, call, cmd, root / f"cache-{r}-{i}"))
    return steps


def run(args: argparse.Namespace, root: Path) -> dict:
    every: dict[str, dict[str, list[float]]] = {m: {"first": [], "warm": []} for m in args.models}
    files: dict[str, int] = {}
    routes: dict[str, dict[str, str]] = {m: {} for m in args.models}
    for r, model, call, cmd, cache in plan(args.models, args.n, root, args.rounds, args.one_step):
        env = {**os.environ, "LINEARIZER_CACHE": str(cache)}
        if args.threads:
            env["OMP_NUM_THREADS"] = str(args.threads)
        seconds, routes[model][call] = timed_call(cmd, env)
        every[model][call].append(round(seconds, 2))
        files[model] = len(list(cache.glob("*.safetensors"))) if cache.is_dir() else 0
        print(f"round {r} {model:<24} {call:<5} call {seconds:7.1f} s  ({files[model]} cached B)")
    times = {m: {c: statistics.median(v) for c, v in calls.items()} for m, calls in every.items()}
    report = {
        "device": cpu_name(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "n": args.n,
        "threads": args.threads or "default",
        "rounds": args.rounds,
        "sample_flags": ["--one-step"] if args.one_step else [],
        "seconds": times,
        "seconds_every_round": every,
        "route": routes,
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
    p.add_argument("--rounds", type=int, default=3, help="rounds of first and warm calls")
    p.add_argument(
        "--one-step", action="store_true", help="pass --one-step to every call (B always built)"
    )
    p.add_argument("--threads", type=int, default=0, help="OMP_NUM_THREADS (0: unchanged)")
    p.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    p.add_argument("--dry-run", action="store_true", help="print the calls and stop")
    args = p.parse_args()
    if args.rounds < 1 or args.n < 1:
        p.error("--rounds and --n must be >= 1")
    with tempfile.TemporaryDirectory(prefix="first-call-") as tmp:
        root = Path(tmp)
        if args.dry_run:
            for _, model, call, cmd, cache in plan(
                args.models, args.n, root, args.rounds, args.one_step
            ):
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
