"""Entry point of the ``linearizer`` command.

Sub-commands live in ``cmd_*.py`` modules beside this one; each exposes
``register(subparsers) -> None`` and sets ``func(args) -> int`` on its parser. Errors the user can
fix (``LinearizerError``) print one line and exit 2; nothing prints a traceback for bad input.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
import warnings
from typing import Any

from .. import __version__
from ..errors import LinearizerError


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
    package = importlib.import_module(__package__)
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if info.name.startswith("cmd_"):
            importlib.import_module(f"{__package__}.{info.name}").register(sub)
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
        importlib.import_module("linearizer.pretrained")  # registers the pretrained:NAME runs
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
