"""Build a :class:`OneStepFlow`, or its mixture variant, from its model config (saved with a run
inside its :class:`~linearizer.flow.config.FlowConfig`; no training setting is read)."""

from __future__ import annotations

from ..invertible.factory import build_network
from ..operators.lora import TimeLoRA
from .config import FlowModelConfig
from .mixture import MixtureFlow
from .model import OneStepFlow


def build_flow(cfg: FlowModelConfig, channels: int = 1) -> OneStepFlow:
    """The network and operator ``cfg`` describes, freshly initialised (seeded by the caller);
    ``cfg`` is a :class:`FlowModelConfig` or a whole ``FlowConfig``."""
    net = build_network(cfg.network, channels)
    size = cfg.network.img_size
    op = TimeLoRA(
        channels * size * size,
        cfg.rank,
        emb_dim=cfg.lora_emb,
        hidden=cfg.lora_hidden,
        depth=cfg.lora_depth,
        activation=cfg.lora_activation,
        v_scale=cfg.v_scale,
        basis=cfg.lora_basis,
        classes=mixture_size(cfg),
    )
    shape = (channels, size, size)
    if op.classes:
        model: OneStepFlow = MixtureFlow(net, op, shape, labelled=cfg.conditional)
    else:
        model = OneStepFlow(net, op, shape)
    model.memory_saving = cfg.network.memory_saving
    return model


def mixture_size(cfg: FlowModelConfig) -> int:
    """The number of components of the operator ``cfg`` describes (0: one generator)."""
    if cfg.conditional:
        return cfg.classes
    return cfg.components if cfg.components > 1 else 0
