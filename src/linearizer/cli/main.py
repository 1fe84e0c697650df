"""Entry point of the ``linearizer`` command.

Sub-commands live in ``cmd_*.py`` modules beside this one; each exposes
``register(subparsers) -> None``, which adds its command(s) and sets ``func(args) -> int`` on each
parser. :data:`COMMANDS` names every command with the ``register`` that adds it (a module adding
two commands is named twice). Errors the user can fix (``LinearizerError``) print one line and
exit 2; nothing prints a traceback for bad input.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable
from typing import Any

from .. import __version__
from ..errors import LinearizerError
from ..registry import Registry

# command -> the register(subparsers) that adds it; also the order of the help's list
COMMANDS: Registry[Callable[[argparse._SubParsersAction], None]] = Registry(
    "command",
    {
        "calibrate": "linearizer.cli.cmd_calibrate:register",
        "classifier": "linearizer.cli.cmd_classifier:register",
        "convert-official": "linearizer.cli.cmd_convert:register",
        "data": "linearizer.cli.cmd_data:register",
        "demo": "linearizer.cli.cmd_demo:register",
        "evaluate": "linearizer.cli.cmd_evaluate:register",
        "explore": "linearizer.cli.cmd_explore:register",
        "info": "linearizer.cli.cmd_info:register",
        "interpolate": "linearizer.cli.cmd_interpolate:register",
        "invert": "linearizer.cli.cmd_invert:register",
        "project": "linearizer.cli.cmd_project:register",
        "project-report": "linearizer.cli.cmd_project:register",
        "repro": "linearizer.cli.cmd_repro:register",
        "restore": "linearizer.cli.cmd_restore:register",
        "restore-report": "linearizer.cli.cmd_restore:register",
        "sample": "linearizer.cli.cmd_sample:register",
        "style": "linearizer.cli.cmd_style:register",
        "svd": "linearizer.cli.cmd_svd:register",
        "swap": "linearizer.cli.cmd_swap:register",
        "train": "linearizer.cli.cmd_train:register",
    },
)


class CommandParser(argparse.ArgumentParser):
    """A parser whose help shows every option's default. The parsers ``add_subparsers`` makes
    are of the parent's class, so every command's are too, unless its module says otherwise."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", argparse.ArgumentDefaultsHelpFormatter)
        super().__init__(*args, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="linearizer", description="Linearizer networks: exact linear algebra for neural maps."
    )
    parser.add_argument("--version", action="version", version=f"linearizer {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS.names():
        if name not in sub.choices:  # not added already by the register of another name
            COMMANDS.get(name)(sub)
    return parser


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings reach a command-line user as one line, without source file and code."""
    print(f"linearizer: warning: {message}", file=sys.stderr if file is None else file)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    warnings.showwarning = _one_line_warning
    try:
        return int(args.func(args) or 0)
    except LinearizerError as e:
        print(f"linearizer: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("linearizer: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into `head` and the like
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
