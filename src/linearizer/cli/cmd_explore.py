"""``linearizer explore RUN``: an interactive page over a trained run (needs ``linearizer[app]``).

Serves on 127.0.0.1 unless ``--host`` says otherwise; stop it with Ctrl-C.
"""

from __future__ import annotations

import argparse

from ..errors import LinearizerError
from .flowargs import add_spec_options, default_guidance, spec_from_args

LOCAL = ("127.0.0.1", "localhost", "::1")


def run(args: argparse.Namespace) -> int:
    from ..explore.app import build_app, gradio, launch
    from ..explore.loading import open_run
    from ..explore.session import Explorer

    gradio()  # one line naming the extra when Gradio is missing
    if not 0 <= args.port <= 65535:
        raise LinearizerError(f"--port must be in 0..65535, got {args.port}")
    index = open_run(args.index) if args.index else None
    run = open_run(args.run)
    sampler = getattr(run.config, "sampler", None)  # flow runs only
    spec = None if sampler is None else spec_from_args(args, sampler)
    recommended = default_guidance(args, run)
    if spec is not None and recommended is not None:
        spec = spec.replace(guidance=recommended)
    explorer = Explorer(run, k=args.k, spec=spec, index=index)
    print(
        f"{args.run}: {explorer.kind} run at step {explorer.run.step}; "
        f"tabs: {', '.join(explorer.tabs)}"
    )
    if args.dry_run:
        print(f"would serve on http://{args.host}:{args.port}")
        return 0
    if args.host not in LOCAL:
        print(f"warning: serving on {args.host}: anyone who can reach this machine can use it")
    launch(build_app(explorer), host=args.host, port=args.port or None)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "explore", help="interactive page over a run: generate, walk, invert, project, style"
    )
    p.add_argument(
        "run",
        nargs="?",
        default="pretrained:mnist-mix",
        help="run folder (flow, projective or style) or pretrained:NAME",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (localhost only)")
    p.add_argument("--port", type=int, default=7860, help="port (0: the first free one)")
    p.add_argument("--k", type=int, default=6, help="singular directions offered in the Walk tab")
    # flow runs: Generate's sampler; Walk and Invert skip its last interval
    add_spec_options(p, recommended=True)
    p.add_argument(
        "--index",
        default=None,
        metavar="RUN",
        help="style run of the index model (bank=index) shown beside a bank's mixtures",
    )
    p.add_argument("--dry-run", action="store_true", help="load the run, list its tabs and exit")
    p.set_defaults(func=run)
