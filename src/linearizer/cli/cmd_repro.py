"""``linearizer repro RUN_OR_PRESET --out DIR``: the paper's claims, measured, with verdicts."""

from __future__ import annotations

import argparse
import shlex
import sys


def run(args: argparse.Namespace) -> int:
    import torch

    from ..repro import ReproOptions, run_repro

    if args.threads:
        torch.set_num_threads(args.threads)
    opts = ReproOptions(
        n=args.n, fid_n=args.fid_n, invert_n=args.invert_n, steps=args.steps,
        long_steps=args.long_steps, svd_k=args.k, seed=args.seed, quick=args.quick,
    )  # fmt: skip
    command = "linearizer " + " ".join(shlex.quote(a) for a in (args.argv or sys.argv[1:]))
    run_repro(
        args.target, args.out, opts, no_train=args.no_train, dry_run=args.dry_run,
        device=_device(args.device), command=command,
    )  # fmt: skip
    return 0


def _device(name: str) -> str:
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "repro", help="measure the paper's claims on a flow run (or train a preset first)",
        description="Measure each claim of the paper on a trained one-step flow model and "
        "write results.json, REPORT.md and figures into --out. RUN_OR_PRESET is a flow run "
        "folder, or a preset name (smoke, cpu, paper) to train into OUT/run first.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )  # fmt: skip
    p.add_argument("target", metavar="RUN_OR_PRESET", help="flow run folder or preset name")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--n", type=int, default=256,
                   help="pairs/samples/images of the float64 exactness checks")  # fmt: skip
    p.add_argument("--fid-n", type=int, default=10_000, help="samples per FID (LeNet) set")
    p.add_argument("--invert-n", type=int, default=0,
                   help="test images of the invertibility check (0: all)")  # fmt: skip
    p.add_argument("--steps", type=int, default=100, help="T of the main time grid")
    p.add_argument("--long-steps", type=int, default=1000, help="T of the long time grid")
    p.add_argument("--k", type=int, default=16, help="singular directions to draw")
    p.add_argument("--seed", type=int, default=0, help="seed of every noise draw")
    p.add_argument("--quick", action="store_true",
                   help="small sizes everywhere (seconds on a smoke run)")  # fmt: skip
    p.add_argument("--no-train", action="store_true",
                   help="never train: a preset needs an existing OUT/run")  # fmt: skip
    p.add_argument("--dry-run", action="store_true", help="say what would run and exit")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda", "auto"],
                   help="device of the evaluation")  # fmt: skip
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.set_defaults(func=run, argv=None)
