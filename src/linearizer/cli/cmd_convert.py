"""``linearizer convert-official``: the authors' released checkpoint -> a run folder.

The pickle inside ``model.pth`` is read without executing anything (see
:mod:`linearizer.compat.pickle_reader`); ``args.json`` is read from two folders up, as the
authors' loader does.
"""

from __future__ import annotations

import argparse
import json


def run(args: argparse.Namespace) -> int:
    from ..compat.official import convert_official

    config = convert_official(args.path, args.out, dry_run=args.dry_run, log=print)
    if args.dry_run:
        print(json.dumps({k: config[k] for k in ("network", "operator", "sampling")}, indent=2))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "convert-official",
        help="convert the authors' models/model.pth into a run folder (no pickle code runs)",
        description=(
            "Read an official one-step checkpoint (PATH/models/model.pth, with args.json two "
            "folders up) safely, map it onto the paper network and TimeLoRA, and write RUN/"
            "config.json and RUN/checkpoints/model.safetensors."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("path", metavar="PATH", help="the official model.pth")
    p.add_argument("--out", required=True, metavar="RUN", help="run folder to create")
    p.add_argument("--dry-run", action="store_true", help="read and check only; print the config")
    p.set_defaults(func=run)
