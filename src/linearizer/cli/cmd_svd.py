"""``linearizer svd RUN --out DIR``: singular spectrum and induced singular directions of the
one-step generator of a flow run."""

from __future__ import annotations

import argparse

from ..flow.solvers import METHODS
from .flowargs import add_calibration_option, apply_calibration_option


def run(args: argparse.Namespace) -> int:

    from ..repro.runner import check_flow_run
    from ..repro.svd import induced_svd, render_svd
    from ..training.runs import load_run, run_folder

    check_flow_run(run_folder(args.run))
    if args.dry_run:
        print(f"would render the SVD of {args.run} ({args.method}, T={args.steps}, "
              f"k={args.k}) into {args.out}")  # fmt: skip
        return 0
    loaded = load_run(args.run, expect="flow")
    model, step = loaded.model, loaded.step
    apply_calibration_option(model, args)
    result = induced_svd(model, steps=args.steps, method=args.method, k=args.k, seed=args.seed)
    paths = render_svd(result, args.out)
    top = ", ".join(f"{float(s):.4g}" for s in result.sigma[: min(args.k, 8)])
    print(f"{args.run} (step {step}): B = {args.method} T={args.steps}, cond {result.cond:.4g}")
    print(f"top singular values: {top}")
    for path in paths.values():
        print(f"wrote {path}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "svd", help="singular spectrum and singular directions of a flow run's generator",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )  # fmt: skip
    p.add_argument("run", help="flow run folder")
    p.add_argument("--steps", type=int, default=100, help="T of the collapsed matrix B")
    p.add_argument("--method", default="euler", choices=METHODS,
                   help="solver whose one-step matrix is decomposed")  # fmt: skip
    p.add_argument("--k", type=int, default=16, help="singular directions to draw")
    p.add_argument("--seed", type=int, default=0, help="seed of the noise that sets the scales")
    add_calibration_option(p)
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--dry-run", action="store_true", help="check the run and exit")
    p.set_defaults(func=run)
