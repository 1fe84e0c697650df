"""``linearizer svd RUN --out DIR``: singular spectrum and induced singular directions of the
one-step generator of a flow run."""

from __future__ import annotations

import argparse

from .flowargs import add_spec_options, invertible_spec, load_spec_run


def run(args: argparse.Namespace) -> int:
    from ..repro.runner import check_flow_run
    from ..repro.svd import induced_svd, render_svd
    from ..training.runs import run_folder

    check_flow_run(run_folder(args.run))
    loaded, spec = load_spec_run(args)
    spec = invertible_spec(spec)
    if args.dry_run:
        print(f"would render the SVD of {args.run} ({spec.describe()}, k={args.k}) into {args.out}")
        return 0
    result = induced_svd(loaded.model, spec, k=args.k, seed=args.seed)
    paths = render_svd(result, args.out)
    top = ", ".join(f"{float(s):.4g}" for s in result.sigma[: min(args.k, 8)])
    print(
        f"{args.run} (step {loaded.step}): B = {spec.describe()} (the run's sampler, last "
        f"interval skipped), cond {result.cond:.4g}"
    )
    print(f"top singular values: {top}")
    for path in paths.values():
        print(f"wrote {path}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "svd", help="singular spectrum and singular directions of a flow run's generator"
    )
    p.add_argument("run", help="flow run folder")
    add_spec_options(p)
    p.add_argument("--k", type=int, default=16, help="singular directions to draw")
    p.add_argument("--seed", type=int, default=0, help="seed of the noise that sets the scales")
    p.add_argument("--no-ema", action="store_true", help="use the raw weights, not the EMA")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--dry-run", action="store_true", help="check the run and exit")
    p.set_defaults(func=run)
