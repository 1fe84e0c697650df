"""Opening what the explorer shows: a run folder (flow, projective, IGN or style) or
``pretrained:NAME``, through :func:`linearizer.training.runs.load_run`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

PROJECTIVE_KINDS = ("projective", "ours", "ign")  # "ours": the projective label of some versions


def open_run(spec: str | Path) -> Any:
    """The run ``spec`` names (``training.runs.Run``: kind, model, config, step, path)."""
    from .. import pretrained  # noqa: F401 (the loader learns "pretrained:NAME" from it)
    from ..training.runs import load_run

    return load_run(str(spec))


def kind_of(run: Any) -> str:
    """``run.kind`` with the projective model's labels folded into "projective" (IGN stays)."""
    kind = str(run.kind)
    return "projective" if kind in PROJECTIVE_KINDS[:2] else kind
