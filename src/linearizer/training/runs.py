"""Loading any trained run back: one :func:`load_run` for flow, projective (and IGN), style and
converted-official runs, from a run folder or a named source such as ``"pretrained:NAME"``.

A run folder holds ``config.json`` (the resolved config), ``run.json`` (``kind``, status) and
``checkpoints/``. Two :class:`~linearizer.registry.Registry` tables name what the layers above
define, imported on first use: :data:`RUN_KINDS`, how each kind's model is rebuilt (its ``task``
module registers it with :func:`register_run_kind` when imported), and :data:`SOURCES`, how a
``"SCHEME:NAME"`` spec turns into a run folder (``pretrained`` is
:func:`linearizer.pretrained.unpack`; :func:`register_source` adds others). So
``load_run("pretrained:mnist")`` works with nothing imported first.

>>> run = load_run("runs/flow-cpu")                     # doctest: +SKIP
>>> run.kind, run.step, run.config.network.hidden       # doctest: +SKIP
('flow', 3000, 32)
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from ..config import Config
from ..errors import LinearizerError
from ..io import read_json
from ..registry import Registry
from .checkpoint import latest_checkpoint, load_weights, unusable_checkpoints


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
    # a class-conditional run's recommended guidance w (GUIDANCE_FILE; None: none recorded)
    recommended_guidance: float | None = None


# Where a run folder records its recommended guidance: {"w": ..., "rule": ..., "source": ...}.
GUIDANCE_FILE = "guidance.json"


def read_guidance(folder: Path) -> float | None:
    """The ``w`` of the folder's :data:`GUIDANCE_FILE` (None without one, or when it says none)."""
    path = Path(folder) / GUIDANCE_FILE
    if not path.is_file():
        return None
    record = read_json(path)
    w = record.get("w") if isinstance(record, dict) else "no record"
    if w is None:
        return None
    if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w):
        raise LinearizerError(f"{path}: 'w' must be a finite number or null, got {w!r}")
    return float(w)


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


# Each kind's task module registers it when imported (ImageTask's kind=).
RUN_KINDS: Registry[RunKind] = Registry(
    "run kind",
    {
        "flow": "linearizer.flow.task",
        "projective": "linearizer.projective.task",
        "style": "linearizer.style.task",
    },
)


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
    RUN_KINDS.add(name, RunKind(name, config, build, label, attach))


def run_kind(name: str) -> RunKind:
    """How runs of kind ``name`` are rebuilt (its task module imported on first use)."""
    return RUN_KINDS.get(name)


# scheme -> (NAME -> run folder): "pretrained:mnist" opens linearizer.pretrained.unpack("mnist")
SOURCES: Registry[Callable[[str], Path]] = Registry(
    "source", {"pretrained": "linearizer.pretrained:unpack"}
)


def register_source(scheme: str, folder: Callable[[str], Path]) -> None:
    """Make ``"<scheme>:NAME"`` a spec every loader accepts: it opens the run folder
    ``folder(NAME)`` returns (made on demand, e.g. unpacked from a package asset)."""
    SOURCES.add(scheme, folder)


def sources() -> list[str]:
    """The known schemes, declared or registered (``["pretrained"]``), importing none."""
    return sorted(SOURCES.names())


def run_folder(spec: str | Path) -> Path:
    """The folder ``spec`` names: itself, or for ``"SCHEME:NAME"`` with a registered scheme,
    the folder that scheme's source gives for ``NAME``."""
    scheme, colon, name = str(spec).partition(":")
    if colon and scheme in SOURCES:
        return Path(SOURCES.get(scheme)(name))
    if colon and scheme.isidentifier() and not Path(spec).exists():
        known = ", ".join(f"{s}:" for s in sources()) or "none"
        raise LinearizerError(f"no source registered for '{scheme}:' (known: {known})")
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
    return Run(label, model.eval(), cfg, ckpt.step, run, ckpt.section, read_guidance(run))


__all__ = [
    "GUIDANCE_FILE",
    "Run",
    "RUN_KINDS",
    "RunKind",
    "SOURCES",
    "folder_kind",
    "load_run",
    "read_guidance",
    "read_run_config",
    "register_run_kind",
    "register_source",
    "run_folder",
    "run_kind",
    "sources",
]
