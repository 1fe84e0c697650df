"""``linearizer convert-official``: the authors' released checkpoint -> a flow run folder.

The pickle inside ``model.pth`` is read without executing anything (see
:mod:`linearizer.safe_pickle`); ``args.json`` is read from two folders up, as the
authors' loader does. The result is an ordinary flow run (``config.json``, ``run.json``,
``checkpoints/``) plus ``official.json`` recording the source and what was inferred, so every
command that takes a run folder opens it. See docs/official.md.
"""

from __future__ import annotations

import argparse
import json


def run(args: argparse.Namespace) -> int:
    from ..compat.official import convert_official

    result = convert_official(args.path, args.out, dry_run=args.dry_run, log=print)
    if args.dry_run:
        shown = {"config": result["config"], "inferred": result["official"]["inferred"]}
        print(json.dumps(shown, indent=2))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "convert-official",
        help="convert the authors' models/model.pth into a flow run folder (no pickle code runs)",
        description=(
            "Read an official one-step checkpoint (PATH/models/model.pth, with args.json two "
            "folders up) safely, map it onto the paper network and TimeLoRA, and write a flow "
            "run folder: RUN/config.json, RUN/run.json, RUN/official.json and the weights as "
            "the step-0 checkpoint in RUN/checkpoints/. Every run command then opens RUN."
        ),
    )
    p.add_argument("path", metavar="PATH", help="the official model.pth")
    p.add_argument("--out", required=True, metavar="RUN", help="run folder to create")
    p.add_argument("--dry-run", action="store_true", help="read and check only; print the config")
    p.set_defaults(func=run)
