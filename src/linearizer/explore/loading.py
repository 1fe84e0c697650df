"""Opening what the explorer shows: a run folder (flow, projective or style) or ``pretrained:NAME``.

Uses :func:`linearizer.training.runs.load_run` when the library has it; otherwise reads the
run's kind from ``run.json`` and calls that application's loader.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import LinearizerError
from ..io import read_json

KINDS = ("flow", "projective", "style")


@dataclass(frozen=True)
class ExploreRun:
    """A loaded run: ``kind`` ("flow" | "projective" | "style" | "ign"), the model in eval mode,
    its config, training step and folder (same fields as ``training.runs.Run``)."""

    kind: str
    model: Any
    config: Any
    step: int
    path: Path


def open_run(spec: str | Path) -> Any:
    """The run ``spec`` names: a run folder, or ``pretrained:NAME``."""
    try:
        runs = importlib.import_module("linearizer.training.runs")
    except ImportError:
        runs = None
    if runs is not None and hasattr(runs, "load_run"):
        return runs.load_run(str(spec))
    spec = str(spec)
    if spec.startswith("pretrained:"):
        try:
            pretrained = importlib.import_module("linearizer.pretrained")
        except ImportError:
            raise LinearizerError(f"{spec}: this version ships no pretrained models") from None
        spec = str(pretrained.resolve(spec.split(":", 1)[1]))
    return _load_folder(Path(spec))


def _load_folder(path: Path) -> ExploreRun:
    if not (path / "config.json").is_file():
        raise LinearizerError(f"{path}: not a run folder (no config.json)")
    kind = read_json(path / "run.json").get("kind") if (path / "run.json").is_file() else None
    if kind is None:
        kind = "projective" if "projector" in read_json(path / "config.json") else "flow"
    if kind == "flow":
        from ..flow.task import load_flow_run as load
    elif kind == "projective":
        from ..projective.task import load_projective_run as load
    elif kind == "style":
        from ..style.task import load_style_run as load
    else:
        raise LinearizerError(f"{path}: a {kind} run cannot be explored (kinds: {KINDS})")
    model, cfg, step = load(path)
    if kind == "projective" and getattr(cfg, "model", "ours") == "ign":
        kind = "ign"
    return ExploreRun(kind, model, cfg, step, path)
