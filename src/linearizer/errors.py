"""The one exception type the library raises for bad input, and its one deprecation warning.

The CLI turns the exception into a single line on stderr and a non-zero exit; it subclasses
ValueError so library users can catch it as the natural built-in.
"""

import warnings


class LinearizerError(ValueError):
    """Bad input: wrong shapes, non-finite values, foreign checkpoints, unknown config keys, ..."""


def deprecated(old: str, new: str, stacklevel: int = 2) -> None:
    """Warn ``<old> is deprecated; use <new>`` (a :class:`DeprecationWarning`) at the code
    ``stacklevel`` frames above the caller, as :func:`warnings.warn` counts from it."""
    warnings.warn(f"{old} is deprecated; use {new}", DeprecationWarning, stacklevel=stacklevel + 1)
