"""``linearizer train KIND``: train a flow, projective or style model (one run folder each)."""

from __future__ import annotations

import argparse

from .common import TRAIN_KINDS


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train a model (flow, projective, style)",
        description="Train a model. Runs also work under torchrun (one process per GPU).",
    )
    kinds = p.add_subparsers(dest="kind", metavar="KIND", required=True)
    for kind in TRAIN_KINDS.names():
        TRAIN_KINDS.get(kind)(kinds)
