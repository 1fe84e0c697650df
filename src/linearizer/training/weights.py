"""The two sets of weights a run holds, and the one name each has wherever a user reads it.

A checkpoint keeps the trained weights in its ``model`` section and, when training averaged
them, their exponential moving average in its ``ema`` section (the file format's names, which
stay). Loaders take the EMA weights when there are any, unless asked otherwise
(``use_ema=False``, ``--no-ema``); commands, reports and the shipped models' descriptions call
the two the "EMA" and the "raw" weights.

>>> weights_label("ema"), weights_label("model")
('EMA', 'raw')
"""

from __future__ import annotations

# checkpoint section -> the name users read
LABELS = {"ema": "EMA", "model": "raw"}


def weights_label(section: str) -> str:
    """The name users read for a checkpoint section ("ema" or "model"); others as they are."""
    return LABELS.get(section, section)
