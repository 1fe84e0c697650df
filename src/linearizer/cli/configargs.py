"""Command-line options made from a typed config: each field's flag, type, default and help come
from the config class, so a command never types a default a second time.

>>> import argparse
>>> from dataclasses import dataclass
>>> from linearizer.config import Config, option
>>> @dataclass(frozen=True)
... class Sizes(Config):
...     n: int = option(8, "samples")
...     fast: bool = option(False, "small sizes")
>>> p = argparse.ArgumentParser()
>>> add_config_options(p, Sizes)
>>> config_from_args(Sizes, p.parse_args(["--n", "3", "--fast"]))
Sizes(n=3, fast=True)
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from typing import Any, TypeVar

from ..config import Config

C = TypeVar("C", bound=Config)


def add_config_options(
    p: argparse.ArgumentParser,
    cls: type[Config],
    flags: dict[str, str | tuple[str, ...]] | None = None,
    default_from: str | None = None,
    only: tuple[str, ...] | None = None,
) -> None:
    """``--name`` (underscores as dashes, or ``flags[name]``: one flag or several) for every
    field of ``cls``: its type, its default and its help. A boolean that defaults to False is a
    switch; one that defaults to True is turned off by ``--no-name``. With ``default_from``
    (say "the run's") an option left out is absent from the namespace, so that source's value
    stands. With ``only``, just those fields (in the class's order)."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if only is not None and f.name not in only:
            continue
        flag = (flags or {}).get(f.name, "--" + f.name.replace("_", "-"))
        names = flag if isinstance(flag, tuple) else (flag,)
        help_text, tp = f.metadata["help"], hints[f.name]
        if type(None) in typing.get_args(tp):  # Optional[X]: the option takes an X
            tp = next(a for a in typing.get_args(tp) if a is not type(None))
        if tp is bool and default_from is None:
            off = f.default is True
            # absent unless given: the config's default stands, and help shows no "default"
            p.add_argument(
                "--no-" + flag[2:] if off else flag,
                dest=f.name,
                action="store_false" if off else "store_true",
                default=argparse.SUPPRESS,
                help=f"leave out {help_text}" if off else help_text,
            )
            continue
        default = f.default
        if default_from is not None:  # absent unless given: that source's value stands
            default = argparse.SUPPRESS
            help_text += f" (default: {default_from}; {f.default!r} unless it records another)"
        p.add_argument(
            *names,
            dest=f.name,
            type=_kind(tp),
            default=default,
            choices=_choices(tp),
            help=help_text,
        )


def _choices(tp: Any) -> tuple | None:
    return typing.get_args(tp) if typing.get_origin(tp) is typing.Literal else None


def _kind(tp: Any) -> Any:
    """What argparse converts the text with: a Literal's value type, else the type itself."""
    choices = _choices(tp)
    return type(choices[0]) if choices else tp


def config_from_args(cls: type[C], args: argparse.Namespace, **changes: Any) -> C:
    """``cls`` from the options :func:`add_config_options` added (then ``changes``), checked
    by the config's own validation."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if f.name in args}
    return cls.from_dict({**values, **changes})
