"""A mixture's multi-step pass by its two routes: rows stepped in the operator's basis
(:class:`linearizer.operators.lora.BasisRows`) against every class's factors.

    python benchmarks/rows_route.py [--models pretrained:mnist-mix pretrained:mnist-cond]
                                    [--rows 64 128 256] [--steps 1000] [--rounds 2]
                                    [--threads 2] [--out FILE.json]

For each model and row count, the rows' classes are drawn from the mixture weights (seed 0),
the noise latents are standard normal (seed 0), and :func:`linearizer.flow.solvers.integrate_each`
runs the model's sampler (Euler, ``--steps``, final predict, float64) once by each route
(the basis route forced, whatever :meth:`BasisRows.pays` says), the routes alternating round
by round; the JSON holds every time, the medians, and the largest
difference between the two routes' data latents beside the latents' largest size. This is the
measurement behind :meth:`BasisRows.pays` (which route ``sample`` takes).
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import time
from pathlib import Path

import torch

from linearizer.flow import solvers
from linearizer.io import write_json
from linearizer.operators import lora
from linearizer.training.runs import load_run

ROUTES = ("basis", "factors")


def solve(model, labels: torch.Tensor, z: torch.Tensor, steps: int, route: str) -> torch.Tensor:
    """The data latents of ``z`` (rows grouped by class) by one route."""
    ks = labels.unique().tolist()
    ops = [model.op.given(k, 0.0) for k in ks]
    zs = [z[labels == k] for k in ks]
    keep_apply, keep_pays = solvers.rows_apply, lora.BasisRows.pays
    if route == "factors":
        solvers.rows_apply = lambda *args: None
    else:  # whatever the rule says
        lora.BasisRows.pays = staticmethod(lambda *args: True)  # type: ignore[method-assign]
    try:
        out = solvers.integrate_each(ops, zs, steps=steps, method="euler", final="predict")
    finally:
        solvers.rows_apply, lora.BasisRows.pays = keep_apply, keep_pays
    return torch.cat(out)


def measure(name: str, rows: int, steps: int, rounds: int) -> dict:
    model = load_run(name).model.double().eval()
    gen = torch.Generator().manual_seed(0)
    labels = model.draw_components(rows, generator=gen)
    counts = labels.unique()
    z = torch.randn(rows, model.op.in_features, dtype=torch.float64, generator=gen)
    times: dict[str, list[float]] = {r: [] for r in ROUTES}
    outs: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for _ in range(rounds):
            for route in ROUTES:
                start = time.perf_counter()
                outs[route] = solve(model, labels, z, steps, route)
                times[route].append(round(time.perf_counter() - start, 3))
    medians = {r: statistics.median(t) for r, t in times.items()}
    return {
        "model": name,
        "rows": rows,
        "classes_drawn": len(counts),
        "seconds": medians,
        "seconds_every_round": times,
        "factors_over_basis": round(medians["factors"] / medians["basis"], 2),
        "sample_takes": "basis" if lora.BasisRows.pays(model.op, rows, len(counts)) else "factors",
        "max_abs_difference": float((outs["basis"] - outs["factors"]).abs().max()),
        "max_abs_latent": float(outs["factors"].abs().max()),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=["pretrained:mnist-mix", "pretrained:mnist-cond"])
    p.add_argument("--rows", nargs="+", type=int, default=[64, 128, 256])
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    cases = [measure(m, n, args.steps, args.rounds) for m in args.models for n in args.rows]
    result = {
        "torch": torch.__version__,
        "date": datetime.date.today().isoformat(),
        "threads": args.threads,
        "sampler": f"Euler, T = {args.steps}, final predict, float64, guidance 0",
        "cases": cases,
    }
    if args.out:
        write_json(args.out, result)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
