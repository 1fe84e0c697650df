"""Training steps per second of a preset under several override sets, in alternating rounds.

    python benchmarks/preset_rate.py --case "cpu=" --case "odd=network.odd_noise=true"
                                     [--preset cpu] [--rounds 3] [--steps 100] [--skip 20]
                                     [--threads 2] [--out FILE.json]

Each ``--case NAME=OVERRIDES`` names one configuration: the preset with the comma-separated
``key=value`` overrides (none after the ``=``: the preset as it is). Every round times each case
once, in the order given, with the trainer's own step-rate probe (a real training step on the
preset's data: loss, backward, clipping, Adam, EMA), so the cases of one round are measured
seconds apart on one machine; the JSON holds every round, the median per case and each case's
median against the first case's. A ratio is what to compare across machines, not a rate.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
from pathlib import Path

import torch

from linearizer.flow.task import FlowTask
from linearizer.training.config import resolve
from linearizer.training.steprate import measure_step_rate


def parse_case(text: str) -> tuple[str, list[str]]:
    name, sep, overrides = text.partition("=")
    if not sep or not name:
        raise SystemExit(f"error: --case takes NAME=OVERRIDES, got {text!r}")
    return name, [o for o in overrides.split(",") if o]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--case", action="append", required=True, help="NAME=key=value,key=value")
    p.add_argument("--preset", default="cpu", help="flow preset (default: cpu)")
    p.add_argument("--rounds", type=int, default=3, help="rounds (default: 3)")
    p.add_argument("--steps", type=int, default=100, help="timed steps per case (default: 100)")
    p.add_argument("--skip", type=int, default=20, help="warm-up steps first (default: 20)")
    p.add_argument("--threads", type=int, default=2, help="torch threads (default: 2)")
    p.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = p.parse_args()
    cases = dict(parse_case(c) for c in args.case)
    rates: dict[str, list[float]] = {name: [] for name in cases}
    for r in range(args.rounds):
        for name, overrides in cases.items():
            cfg = resolve("flow", args.preset, [*overrides, f"threads={args.threads}"])
            rates[name].append(measure_step_rate(FlowTask(), cfg, steps=args.steps, skip=args.skip))
            print(f"round {r}: {name:<24} {rates[name][-1]:.2f} steps/s", flush=True)
    median = {name: statistics.median(v) for name, v in rates.items()}
    first = next(iter(median.values()))
    report = {
        "preset": args.preset,
        "cases": cases,
        "threads": args.threads,
        "steps": args.steps,
        "rounds": rates,
        "median": median,
        "ratio_to_first": {name: m / first for name, m in median.items()},
        "torch": torch.__version__,
        "date": datetime.date.today().isoformat(),
    }
    print(json.dumps(report["ratio_to_first"], indent=1))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
