"""``linearizer train style``: a bank of style operators over one shared invertible network."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import LinearizerError
from .common import add_train_options, run_training


def _list_override(key: str, values: list[str]) -> str:
    bad = [v for v in values if "," in v]
    if bad:
        raise LinearizerError(f"{key} paths may not contain commas: {bad[0]!r}")
    return f"{key}=[{','.join(values)}]"


def run(args: argparse.Namespace) -> int:
    from ..style.task import StyleTask, prepare_config, resolve_content
    from ..training.config import resolve

    overrides = list(args.overrides)
    if args.content:
        overrides.append(_list_override("content", resolve_content(args.content)))
    if args.styles:
        styles = Path(args.styles).expanduser()
        if not styles.is_dir():
            raise LinearizerError(f"no such styles folder: {args.styles}")
        overrides.append(f"styles={styles.resolve()}")
    if not args.resume and not args.list_options:
        # record the style order in config.json: operator s of the bank is style_names[s]
        cfg = prepare_config(resolve("style", args.preset, overrides))
        overrides.append(_list_override("style_names", cfg.style_names))
    args.overrides = overrides
    return run_training("style", StyleTask(), args)


def register(kinds: argparse._SubParsersAction) -> None:
    p = kinds.add_parser(
        "style",
        help="a style bank: one linear operator per style over a shared network",
        description="Learn one operator per style from content image(s) and stylised targets "
        "(make targets offline with `linearizer style targets`).",
    )
    add_train_options(p, "style", "cpu")
    p.add_argument(
        "--content",
        action="append",
        default=[],
        metavar="IMG",
        help="content image: a file or skimage:NAME (repeat for several)",
    )
    p.add_argument(
        "--styles",
        default=None,
        metavar="DIR",
        help="targets folder: DIR/<style>/<content name>.png",
    )
    p.set_defaults(func=run)
