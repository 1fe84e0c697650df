"""Loading any trained run back: one :func:`load_run` for flow, projective (and IGN), style and
converted-official runs, from a run folder or a named source such as ``"pretrained:NAME"``.

A run folder holds ``config.json`` (the resolved config), ``run.json`` (``kind``, status) and
``checkpoints/``. Each application registers how to rebuild its model with
:func:`register_run_kind` when its ``task`` module is imported; :func:`load_run` imports it on
first use (as presets do). A layer above registers how a ``"SCHEME:NAME"`` spec turns into a run
folder with :func:`register_source` (:mod:`linearizer.pretrained` registers ``pretrained``), so
this module knows no source by name.

>>> run = load_run("runs/flow-cpu")                     # doctest: +SKIP
>>> run.kind, run.step, run.config.network.hidden       # doctest: +SKIP
('flow', 3000, 32)
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from ..config import Config
from ..errors import LinearizerError
from ..io import read_json
from .checkpoint import latest_checkpoint, load_weights, unusable_checkpoints

# Where each kind registers itself (imported on first use; no static upward import).
_HOMES = {
    "flow": "linearizer.flow.task",
    "projective": "linearizer.projective.task",
    "style": "linearizer.style.task",
}


@dataclass(frozen=True)
class Run:
    """A loaded run: ``kind`` ("flow" | "projective" | "style" | "ign"), the model in eval mode
    (EMA weights unless asked otherwise), its config, the checkpoint's step and the folder."""

    kind: str
    model: nn.Module
    config: Any
    step: int
    path: Path
    weights: str = "model"  # the checkpoint section loaded: "ema" or "model" (raw)


@dataclass(frozen=True)
class RunKind:
    """How to rebuild the model of one kind of run from its config and folder."""

    name: str
    config: type[Config]
    build: Callable[[Any, Path], nn.Module]
    # The finer kind a config names (a projective run of the IGN baseline is "ign").
    label: Callable[[Any], str] | None = None
    # What the run folder adds to the loaded model: (model, folder, step, weights section).
    attach: Callable[[nn.Module, Path, int, str], None] | None = None


_KINDS: dict[str, RunKind] = {}


def register_run_kind(
    name: str,
    config: type[Config],
    build: Callable[[Any, Path], nn.Module],
    label: Callable[[Any], str] | None = None,
    attach: Callable[[nn.Module, Path, int, str], None] | None = None,
) -> None:
    """Make runs whose ``run.json`` says ``kind: name`` loadable by :func:`load_run`;
    ``attach(model, folder, step, section)`` runs after the weights are loaded (``section``:
    ``"ema"`` or ``"model"``, the weights that were)."""
    _KINDS[name] = RunKind(name, config, build, label, attach)


def run_kind(name: str) -> RunKind:
    if name not in _KINDS and name in _HOMES:
        importlib.import_module(_HOMES[name])
    if name not in _KINDS:
        raise LinearizerError(f"unknown run kind '{name}'; known: {', '.join(sorted(_HOMES))}")
    return _KINDS[name]


# scheme -> NAME -> run folder, filled by the layers above (see register_source)
_SOURCES: dict[str, Callable[[str], Path]] = {}


def register_source(scheme: str, folder: Callable[[str], Path]) -> None:
    """Make ``"<scheme>:NAME"`` a spec every loader accepts: it opens the run folder
    ``folder(NAME)`` returns (made on demand, e.g. unpacked from a package asset)."""
    _SOURCES[scheme] = folder


def sources() -> list[str]:
    """The registered schemes (``["pretrained"]`` once :mod:`linearizer.pretrained` is loaded)."""
    return sorted(_SOURCES)


def run_folder(spec: str | Path) -> Path:
    """The folder ``spec`` names: itself, or for ``"SCHEME:NAME"`` with a registered scheme,
    the folder that scheme's source gives for ``NAME``."""
    scheme, colon, name = str(spec).partition(":")
    if colon and scheme in _SOURCES:
        return Path(_SOURCES[scheme](name))
    if colon and scheme.isidentifier() and not Path(spec).exists():
        known = ", ".join(f"{s}:" for s in sorted(_SOURCES)) or "none"
        raise LinearizerError(f"no source registered for '{scheme}:' (registered: {known}); the "
                              f"module that provides it registers it on import (linearizer."
                              f"pretrained provides 'pretrained:')")  # fmt: skip
    return Path(spec)


def folder_kind(run: Path, default: str | None = None) -> str:
    """The kind a run folder records: ``run.json``, else its newest checkpoint's model kind,
    else ``default``."""
    status = run / "run.json"
    kind = read_json(status).get("kind") if status.is_file() else None
    if kind is None and default is None:
        ckpt = latest_checkpoint(run)
        kind = read_json(ckpt.with_suffix(".json")).get("model_kind") if ckpt else None
    kind = kind or default
    if kind is None:
        raise LinearizerError(f"{run} records no run kind (no run.json and no checkpoint)")
    return str(kind)


def read_run_config(spec: str | Path, expect: str | None = None) -> Any:
    """The resolved config of a run folder, checked to be of kind ``expect`` when given."""
    run = run_folder(spec)
    if not run.is_dir():
        raise LinearizerError(f"no such run folder: {run}")
    kind = folder_kind(run, default=expect)
    if expect is not None and kind != expect:
        raise LinearizerError(f"{run} is a {kind} run, not a {expect} run")
    if not (run / "config.json").is_file():
        raise LinearizerError(f"{run} is not a run folder (no config.json)")
    return run_kind(kind).config.from_dict(read_json(run / "config.json"))


def load_run(spec: str | Path, *, use_ema: bool = True, expect: str | None = None) -> Run:
    """The trained model of a run folder or ``"pretrained:NAME"``, in eval mode.

    ``use_ema`` takes the EMA weights when the checkpoint has them; ``expect`` refuses a run of
    another kind ("flow", "projective", "style") in one line.
    """
    run = run_folder(spec)
    cfg = read_run_config(run, expect)
    kind = run_kind(folder_kind(run, default=expect))
    with warnings.catch_warnings():  # the error below names every unusable checkpoint
        warnings.simplefilter("ignore")
        path = latest_checkpoint(run)
    if path is None:
        why = "; ".join(unusable_checkpoints(run))
        raise LinearizerError(f"{run} holds no usable checkpoint" + (f" ({why})" if why else ""))
    model = kind.build(cfg, run)
    ckpt = load_weights(path, model, use_ema=use_ema, model_kind=kind.name)
    if kind.attach is not None:
        kind.attach(model, run, ckpt.step, ckpt.section)
    label = kind.label(cfg) if kind.label else kind.name
    return Run(label, model.eval(), cfg, ckpt.step, run, ckpt.section)


__all__ = [
    "Run",
    "RunKind",
    "folder_kind",
    "load_run",
    "read_run_config",
    "register_run_kind",
    "register_source",
    "run_folder",
    "sources",
]
