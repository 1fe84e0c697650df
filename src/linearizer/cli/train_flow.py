"""``linearizer train flow``: one-step flow matching on MNIST (presets smoke, cpu, paper)."""

from __future__ import annotations

import argparse

from .common import add_train_options, run_training


def run(args: argparse.Namespace) -> int:
    from ..flow.task import FlowTask

    return run_training("flow", FlowTask(), args)


def register(kinds: argparse._SubParsersAction) -> None:
    p = kinds.add_parser("flow", help="one-step flow matching inside a Linearizer")
    add_train_options(p, "flow", "cpu")
    p.set_defaults(func=run)
