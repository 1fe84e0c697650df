"""``linearizer info``: versions, threads and devices, for bug reports and run folders."""

from __future__ import annotations

import argparse
import platform

import torch

from .. import __version__


def environment() -> dict[str, str]:
    return {
        "linearizer": __version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "threads": str(torch.get_num_threads()),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none",
        "platform": platform.platform(),
    }


def run(args: argparse.Namespace) -> int:
    for key, value in environment().items():
        print(f"{key:>10}: {value}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("info", help="print versions and devices")
    p.set_defaults(func=run)
