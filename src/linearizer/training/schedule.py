"""The learning-rate schedule: linear warm-up, then a constant, cosine or linear decay, over the
steps or the wall-clock budget (``lr_clock``)."""

from __future__ import annotations

import math

from .config import TrainConfig


def lr_at(cfg: TrainConfig, step: int, elapsed_s: float = 0.0) -> float:
    """Learning rate of (0-based) ``step``: linear warm-up, then constant/cosine/linear decay.

    With ``cfg.lr_clock == "time"`` the decay follows the share of the steps' wall-clock budget
    used after warm-up (``elapsed_s`` since the start, ``max_minutes - finish_minutes`` in all)
    or the share of ``max_steps``, whichever is further along, so a run stopped by its budget
    ends on the decayed rate instead of being cut off half-way.
    """
    warm = min(1.0, (step + 1) / cfg.warmup_steps) if cfg.warmup_steps else 1.0
    if cfg.schedule == "constant":
        return cfg.lr * warm
    span = max(1, cfg.max_steps - cfg.warmup_steps)
    progress = min(1.0, max(0.0, (step - cfg.warmup_steps) / span))
    if cfg.lr_clock == "time" and cfg.max_minutes > 0 and step >= cfg.warmup_steps:
        progress = max(progress, min(1.0, elapsed_s / cfg.step_seconds()))
    if cfg.schedule == "cosine":
        shape = 0.5 * (1.0 + math.cos(math.pi * progress))
    else:
        shape = 1.0 - progress
    return cfg.lr * warm * (cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * shape)
