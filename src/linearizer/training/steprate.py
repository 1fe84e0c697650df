"""Steps per second of a config's training step on this machine (a short throw-away run)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from ..errors import LinearizerError
from .config import TrainConfig, apply_overrides
from .tracking import read_metrics
from .trainer import Task, train


def measure_step_rate(task: Task, cfg: TrainConfig, steps: int = 40, skip: int = 8) -> float:
    """Steps per second of ``cfg``'s training step on this machine, from ``steps`` steps in a
    throw-away run folder (the first ``skip`` steps, which allocate, are not counted).

    ``cfg`` keeps everything that sets a step's cost; checkpoints, evaluations, the clock and
    the progress bar are switched off. Work after the steps (``on_finish``) is the caller's to
    switch off in ``cfg``.
    """
    if steps <= skip or skip < 1:
        raise LinearizerError(f"need steps > skip >= 1, got steps={steps}, skip={skip}")
    probe = apply_overrides(
        cfg,
        [
            f"max_steps={steps}",
            f"log_every={skip}",
            "ckpt_every=0",
            "eval_every=0",
            "max_minutes=0",
            "finish_minutes=0",
            "progress=false",
            "tracker=none",
        ],
    )
    with tempfile.TemporaryDirectory(prefix="linearizer-rate-") as tmp:
        train(task, probe, Path(tmp) / "run")
        rows = [r for r in read_metrics(Path(tmp) / "run") if "elapsed_s" in r]
    first, last = rows[0], rows[-1]
    return (last["step"] - first["step"]) / max(last["elapsed_s"] - first["elapsed_s"], 1e-9)
