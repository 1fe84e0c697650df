"""Training-step speed of the ``cpu`` flow preset with float32 and with bfloat16 conditioners.

    python benchmarks/precision.py [--threads 2] [--steps 20] [--rounds 2] [--out FILE.json]
                                   [--quick]

One process, one model (randomly initialised; speed does not depend on the weights' values),
a random batch of the preset's size. Each round times ``--steps`` steps (loss, backward, Adam)
after 5 warm-up steps in float32, then the same in bfloat16 (``conditioners_in``), so both
settings share the machine's state; the ratio is of the medians over rounds. ``--quick`` uses
the smoke preset and 2 steps (a smoke test of this script, not a measurement).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

from linearizer.flow.build import build_flow
from linearizer.flow.objective import draw_noise, flow_loss, group_times
from linearizer.invertible.precision import conditioners_in, native_bfloat16
from linearizer.training.config import resolve


def steps_per_s(model, cfg, optimizer, x1, precision: str, steps: int) -> float:
    gen = torch.Generator().manual_seed(0)

    def step() -> None:
        draws = draw_noise(x1, gen)
        draws["t"] = group_times(draws["t"], cfg.time_groups)
        with conditioners_in(precision):
            loss, _ = flow_loss(model, x1, draws, noise_level=cfg.noise_level)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    for _ in range(5):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = resolve("flow", "smoke" if args.quick else "cpu")
    steps = 2 if args.quick else args.steps
    size = cfg.network.img_size
    x1 = torch.rand(cfg.batch_size, 1, size, size)
    model = build_flow(cfg, channels=1).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-5)
    rates: dict[str, list[float]] = {"float32": [], "bfloat16": []}
    for _ in range(args.rounds):
        for precision, seen in rates.items():
            seen.append(steps_per_s(model, cfg, optimizer, x1, precision, steps))
    medians = {k: statistics.median(v) for k, v in rates.items()}
    report = {
        "preset": "smoke" if args.quick else "cpu",
        "batch": cfg.batch_size,
        "threads": args.threads,
        "steps_per_round": steps,
        "torch": torch.__version__,
        "cpu": platform.processor() or platform.machine(),
        "native_bfloat16": native_bfloat16(torch.device("cpu")),
        "steps_per_s": rates,
        "ratio_bfloat16_to_float32": medians["bfloat16"] / medians["float32"],
    }
    for precision, value in medians.items():
        print(f"{precision:>9}: {value:.2f} steps/s (rounds: {rates[precision]})")
    print(f"bfloat16 / float32: {report['ratio_bfloat16_to_float32']:.2f}x")
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
