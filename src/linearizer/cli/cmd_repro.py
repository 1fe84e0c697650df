"""``linearizer repro RUN_OR_PRESET --out DIR``: the paper's claims, measured, with verdicts."""

from __future__ import annotations

import argparse
import shlex
import sys

from ..repro.options import ReproOptions
from .common import set_threads
from .configargs import add_config_options, config_from_args


def run(args: argparse.Namespace) -> int:
    from ..repro import run_repro

    set_threads(args)
    opts = config_from_args(ReproOptions, args)
    command = "linearizer " + shlex.join(args.argv or sys.argv[1:])
    run_repro(
        args.target,
        args.out,
        opts,
        no_train=args.no_train,
        dry_run=args.dry_run,
        device=_device(args.device),
        command=command,
    )
    return 0


def _device(name: str) -> str:
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "repro",
        help="measure the paper's claims on a flow run (or train a preset first)",
        description="Measure each claim of the paper on a trained one-step flow model and "
        "write results.json, REPORT.md and figures into --out. RUN_OR_PRESET is a flow run "
        "folder, or a preset name (smoke, cpu, paper) to train into OUT/run first.",
    )
    p.add_argument("target", metavar="RUN_OR_PRESET", help="flow run folder or preset name")
    p.add_argument("--out", required=True, help="output folder")
    add_config_options(p, ReproOptions, flags={"svd_k": "--k"})
    p.add_argument(
        "--no-train", action="store_true", help="never train: a preset needs an existing OUT/run"
    )
    p.add_argument("--dry-run", action="store_true", help="say what would run and exit")
    p.add_argument(
        "--device", default="cpu", choices=["cpu", "cuda", "auto"], help="device of the evaluation"
    )
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.set_defaults(func=run, argv=None)
