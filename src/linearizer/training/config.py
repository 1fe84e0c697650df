"""Presets per kind and the trainer's settings (:class:`TrainConfig`).

Presets are named configs per *kind* (``flow``, ``projective``, ``style``): the module
:data:`PRESETS` names for a kind (``linearizer.flow.config``) registers them with
:func:`register_preset` when imported, and the first look-up imports it, so
``resolve("flow", "smoke", ["lr=1e-3"])`` works from anywhere. The typed-config machinery
itself (:class:`Config`, :func:`option`, :func:`apply_overrides`, ...) lives in
:mod:`linearizer.config` and is re-exported here.

>>> cfg = resolve("flow", "smoke", ["hidden=16", "network.blocks=2"])  # old flat key still works
>>> cfg.network.hidden, cfg.network.blocks
(16, 2)
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Literal

from ..config import Config, apply_overrides, describe, option, render_options, undocumented
from ..errors import LinearizerError
from ..registry import Registry

__all__ = [
    "FLAT_KEYS",
    "PRESETS",
    "Config",
    "TrainConfig",
    "apply_overrides",
    "config_class",
    "describe",
    "get_preset",
    "option",
    "preset_names",
    "register_preset",
    "render_options",
    "resolve",
    "undocumented",
]

# Keys that were flat before the network and data sections existed (run folders written then,
# and ``--set hidden=32`` in scripts, keep working): old key -> dotted name.
FLAT_KEYS = {
    "network": "network.kind",
    **{
        k: f"network.{k}"
        for k in (
            "blocks",
            "hidden",
            "clamp",
            "clamp_mode",
            "img_size",
            "unet_channel_mult",
            "unet_blocks",
            "unet_attn",
            "dropout",
            "memory_saving",
        )
    },
    "dataset": "data.dataset",
    "data_root": "data.root",
}


# kind -> its presets by name; each kind's config module registers them when imported.
PRESETS: Registry[Registry[Config]] = Registry(
    "config kind",
    {
        "flow": "linearizer.flow.config",
        "projective": "linearizer.projective.config",
        "style": "linearizer.style.config",
    },
)


def register_preset(kind: str, name: str, cfg: Config) -> None:
    """Make ``cfg`` available as ``get_preset(kind, name)``; every field must be documented."""
    if not isinstance(cfg, Config):
        raise TypeError(f"preset {kind}/{name} must be a Config, got {type(cfg).__name__}")
    missing = undocumented(type(cfg))
    if missing:
        raise TypeError(f"{type(cfg).__name__} fields lack help text: {', '.join(missing)}")
    bucket = PRESETS.setdefault(kind, Registry(f"{kind} preset"))
    if bucket.names() and type(cfg) is not config_class(kind):
        raise TypeError(f"presets of kind {kind!r} must all be {config_class(kind).__name__}")
    bucket.add(name, copy.deepcopy(cfg))


def preset_names(kind: str) -> list[str]:
    """The presets of ``kind``, in the order they were registered."""
    return PRESETS.get(kind).names()


def get_preset(kind: str, name: str) -> Config:
    """A fresh copy of preset ``name`` of ``kind``."""
    return copy.deepcopy(PRESETS.get(kind).get(name))


def config_class(kind: str) -> type[Config]:
    """The config class of ``kind`` (the class of its presets)."""
    presets = PRESETS.get(kind)
    return type(presets.get(presets.names()[0]))


def resolve(kind: str, preset: str, overrides: list[str] | None = None) -> Config:
    """Preset + overrides: the fully resolved config a run records in its ``config.json``."""
    return apply_overrides(get_preset(kind, preset), overrides)


@dataclass
class TrainConfig(Config):
    """Settings the generic trainer reads; each trainer's config derives from this one.

    ``batch_size`` is the *global* batch: under ``torchrun`` each of the W processes takes
    ``batch_size / W`` rows of the same draw, so W processes train like one.
    ``RESUME_MUTABLE`` lists the keys ``--resume`` may change (subclasses may extend it).
    """

    RENAMED = FLAT_KEYS
    RESUME_MUTABLE = frozenset(
        {
            "max_steps",
            "max_minutes",
            "finish_minutes",
            "ckpt_every",
            "keep_last",
            "log_every",
            "eval_every",
            "tracker",
            "tracker_project",
            "progress",
            "threads",
        }
    )

    seed: int = option(0, "seed of every random draw (weights init, data order, noise)")
    max_steps: int = option(1000, "optimizer steps to train for (total, including resumed ones)")
    max_minutes: float = option(
        0.0, "wall-clock budget in minutes (0 = none); stops at a step boundary, not bit-exact"
    )
    finish_minutes: float = option(
        0.0,
        "minutes of max_minutes kept for the work after the last step (the flow's latent "
        "calibration): the steps stop at max_minutes - finish_minutes",
    )
    batch_size: int = option(64, "global batch size (split evenly over torchrun processes)")
    optimizer: Literal["adam", "adamw"] = option("adam", "adam (L2 decay) or adamw (decoupled)")
    lr: float = option(1e-4, "peak learning rate")
    betas: tuple[float, float] = option((0.9, 0.999), "Adam beta1,beta2")
    eps: float = option(1e-8, "Adam epsilon")
    weight_decay: float = option(0.0, "weight decay")
    schedule: Literal["constant", "cosine", "linear"] = option(
        "constant", "learning-rate decay after warm-up, reaching min_lr_ratio*lr at max_steps"
    )
    lr_clock: Literal["steps", "time"] = option(
        "steps", "what drives the decay: steps (of max_steps) or wall time (of max_minutes)"
    )
    warmup_steps: int = option(0, "linear learning-rate warm-up steps")
    min_lr_ratio: float = option(0.0, "final learning rate of a decaying schedule, relative to lr")
    grad_clip: float = option(0.0, "clip the global gradient norm to this (0 = no clipping)")
    ema_decay: float = option(0.999, "EMA decay of the weights (0 = no EMA)")
    ema_warmup: int = option(100, "EMA decay ramps linearly from 0 to ema_decay over these steps")
    init_pass: bool = option(
        True, "run the loss once without gradients on the first global batch (data-dependent init)"
    )
    init_from: str = option(
        "",
        "start from the weights of this run folder or pretrained:NAME (its EMA weights if it "
        "has them; the network's shapes must match, its options may differ); the optimizer, "
        "schedule and step count start afresh and the init pass is skipped",
    )
    ckpt_every: int = option(1000, "checkpoint every N steps (0 = only at the end)")
    keep_last: int = option(3, "checkpoints kept in RUN/checkpoints (older ones are deleted)")
    log_every: int = option(10, "write metrics every N steps")
    eval_every: int = option(0, "call the task's on_eval every N steps (0 = only at the end)")
    threads: int = option(0, "torch CPU threads per process (0 = torch default)")
    device: str = option("auto", "auto, cpu, cuda or cuda:N (auto: the local GPU if any)")
    conditioner_precision: Literal["auto", "float32", "bfloat16"] = option(
        "float32",
        "precision of the couplings' conditioners while training (auto: bfloat16 where the "
        "device computes it natively); the trained model runs them in full precision",
    )
    tracker: Literal["jsonl", "trackio", "none"] = option(
        "jsonl", "experiment tracker besides metrics.jsonl (always written): trackio or none"
    )
    tracker_project: str = option("linearizer", "trackio project name")
    progress: bool = option(True, "show a progress bar (tqdm if installed) on rank 0")
    ddp_find_unused: bool = option(False, "DDP find_unused_parameters (slower; for partial graphs)")

    def step_seconds(self) -> float:
        """The wall-clock budget of the steps: ``max_minutes - finish_minutes`` (0 = none)."""
        return max(0.0, self.max_minutes - self.finish_minutes) * 60.0

    def validate(self) -> None:
        super().validate()
        self._require("max_steps batch_size keep_last log_every", ">= 1", lambda v: not v < 1)
        self._require(
            "max_minutes lr eps weight_decay warmup_steps grad_clip ema_warmup ckpt_every "
            "eval_every threads",
            ">= 0",
            lambda v: v >= 0,
        )
        if not self.finish_minutes >= 0 or (
            self.finish_minutes and not self.finish_minutes < self.max_minutes
        ):
            raise LinearizerError(
                f"config key 'finish_minutes' must be >= 0 and below max_minutes "
                f"({self.max_minutes:g}), got {self.finish_minutes:g} (finish_minutes=0: the "
                f"work after the last step runs outside the budget)"
            )
        if self.lr_clock == "time" and self.max_minutes <= 0:
            raise LinearizerError("lr_clock=time needs a wall-clock budget (max_minutes > 0)")
        self._require("ema_decay", "in [0, 1)", lambda v: 0.0 <= v < 1.0)
        self._require("min_lr_ratio", "in [0, 1]", lambda v: 0.0 <= v <= 1.0)
        self._require("betas", "in [0, 1)", lambda v: all(0.0 <= b < 1.0 for b in v))
        if self.device != "auto" and not self.device.startswith(("cpu", "cuda")):
            raise LinearizerError(
                f"config key 'device' must be auto, cpu or cuda[:N]; got {self.device!r}"
            )
