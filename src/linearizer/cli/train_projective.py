"""``linearizer train projective [--baseline ign]``: the globally projective model (presets
smoke, cpu, paper) or its IGN baseline (the same presets with ``-ign``)."""

from __future__ import annotations

import argparse

from .common import add_train_options, run_training


def run(args: argparse.Namespace) -> int:
    from ..projective.task import ProjectiveTask

    if args.baseline:
        if args.resume:  # the run keeps its model; asking for another one is refused there
            args.overrides = [*args.overrides, f"model={args.baseline}"]
        elif not args.preset.endswith(f"-{args.baseline}"):
            args.preset = f"{args.preset}-{args.baseline}"
    return run_training("projective", ProjectiveTask(), args)


def register(kinds: argparse._SubParsersAction) -> None:
    p = kinds.add_parser(
        "projective", help="globally projective model f = g^-1 A g (A^2 = A), or IGN"
    )
    add_train_options(p, "projective", "cpu")
    p.add_argument(
        "--baseline",
        choices=["ign"],
        default=None,
        help="train the IGN baseline instead (uses the preset PRESET-ign)",
    )
    p.set_defaults(func=run)
