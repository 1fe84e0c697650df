"""Exactness of a class-conditional flow run: its one-step sampler against the multi-step
solver of the same spec, per (class, guidance), and the class swap and back.

    python benchmarks/cond_exact.py pretrained:mnist-cond [--n 8] [--out DIR]

One-step vs multi-step: eight noise images of seed 0 (float64), Euler at T = 1000 and RK4 at
T = 100, for (class, w) = (3, 0), (7, 1), (9, 2); the largest pixel difference and
``20 log10(max|x| / max|x_one - x_multi|)``. The swap: the same noise drawn as class 7 at
w = 0.5 with the last interval skipped (B inverts), swapped to every class, then back to 7; the
PSNR of the way back against the drawn 7s, worst and best. Writes ``DIR/cond_exact.json``.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch

import linearizer.pretrained  # noqa: F401  (registers pretrained:NAME)
from linearizer.flow.inversion import psnr_per_image
from linearizer.flow.model import OneStepFlow
from linearizer.flow.spec import SamplerSpec
from linearizer.io import write_json
from linearizer.training.runs import load_run

CASES = [(3, 0.0), (7, 1.0), (9, 2.0)]
SOLVERS = [("euler", 1000), ("rk4", 100)]


def noise(model: OneStepFlow, n: int) -> torch.Tensor:
    """``n`` float64 noise images of seed 0."""
    return torch.randn(n, *model.image_shape, generator=torch.Generator().manual_seed(0)).double()


def agreement(model: OneStepFlow, n: int) -> list[dict]:
    x0 = noise(model, n)
    rows = []
    for method, steps in SOLVERS:
        for label, w in CASES:
            spec = SamplerSpec(steps=steps, method=method, label=label, guidance=w)
            one = model.sample(x0, spec)
            multi = model.sample(x0, spec, one_step=False)
            diff = float((one - multi).abs().max())
            db = 20 * math.log10(float(one.abs().max()) / diff) if diff > 0 else math.inf
            rows.append(
                {
                    "method": method,
                    "steps": steps,
                    "class": label,
                    "guidance": w,
                    "max_abs_diff": diff,
                    "agreement_db": db,
                }
            )
            print(f"{method} T={steps} class {label} w={w}: {diff:.1e} ({db:.0f} dB)")
    return rows


def swap_back(model: OneStepFlow, n: int) -> dict:
    spec = SamplerSpec(label=7, guidance=0.5).invertible()
    with torch.no_grad():
        sevens = model.sample(noise(model, n), spec)
        worst, best = math.inf, -math.inf
        for to in range(10):
            back = model.swap(model.swap(sevens, spec, to), spec.replace(label=to), 7)
            db = psnr_per_image(sevens, back)
            worst, best = min(worst, *db), max(best, *db)
    print(f"swap 7 -> c -> 7, every class c: {worst:.0f} to {best:.0f} dB")
    return {"from": 7, "guidance": 0.5, "back_psnr_db_min": worst, "back_psnr_db_max": best}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run")
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--out", type=Path, default=Path("runs/cond-exact"))
    a = p.parse_args()
    model = load_run(a.run).model.double().eval()
    result = {
        "run": a.run,
        "n": a.n,
        "torch": torch.__version__,
        "one_step_vs_multi_step": agreement(model, a.n),
        "swap": swap_back(model, a.n),
    }
    write_json(a.out / "cond_exact.json", result)


if __name__ == "__main__":
    main()
