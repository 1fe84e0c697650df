"""Shared training machinery of every trainer (flow, projective, style).

* :mod:`.config` — presets per kind (``PRESETS``, imported on first look-up) and
  :class:`TrainConfig` (the typed-config machinery is :mod:`linearizer.config`).
* :mod:`.trainer` — the loop: :class:`Task` protocol, :func:`train`
  (EMA, checkpoints, exact resume, NaN stop, time budget, progress, metrics).
* :mod:`.runs` — :func:`load_run`: any trained run (or ``pretrained:NAME``) back as a model;
  the tables of run kinds and sources (``RUN_KINDS``, ``SOURCES``), imported on first look-up.
* :mod:`.checkpoint` — safetensors + JSON checkpoints, verified, pruned, with fallback.
* :mod:`.ema` — weight EMA with warm-up and a swap-in context for evaluation.
* :mod:`.distributed` — ``torchrun`` / DDP (gloo on CPU, NCCL on GPUs), batch sharding.
* :mod:`.tracking` — ``metrics.jsonl`` always, trackio optionally.
* :mod:`.model_folder` — ``save_pretrained`` and the package's one :func:`from_pretrained`
  (a saved folder, a run folder, ``pretrained:NAME`` or a bare shipped name such as ``"mnist"``).
* :mod:`.random_streams` — :class:`StepRandom`, the per-step random draws.

See :mod:`linearizer.training.trainer` for how a task plugs in.
"""

from .checkpoint import latest_checkpoint, load_checkpoint, load_weights, save_checkpoint
from .config import (
    Config,
    TrainConfig,
    apply_overrides,
    get_preset,
    option,
    register_preset,
    render_options,
    resolve,
)
from .ema import EMA
from .model_folder import from_pretrained, save_pretrained
from .random_streams import StepRandom
from .resume import resume_config
from .runs import Run, load_run
from .trainer import Task, Trainer, TrainResult, train

__all__ = [
    "EMA",
    "Config",
    "Run",
    "StepRandom",
    "Task",
    "TrainConfig",
    "TrainResult",
    "Trainer",
    "apply_overrides",
    "from_pretrained",
    "load_run",
    "get_preset",
    "latest_checkpoint",
    "load_checkpoint",
    "load_weights",
    "option",
    "register_preset",
    "render_options",
    "resolve",
    "resume_config",
    "save_checkpoint",
    "save_pretrained",
    "train",
]
