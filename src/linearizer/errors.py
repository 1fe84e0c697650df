"""The one exception type the library raises for bad input.

The CLI turns it into a single line on stderr and a non-zero exit; it subclasses ValueError so
library users can catch it as the natural built-in.
"""


class LinearizerError(ValueError):
    """Bad input: wrong shapes, non-finite values, foreign checkpoints, unknown config keys, ..."""
