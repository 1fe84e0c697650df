"""Build a :class:`OneStepFlow` from its config (the constructor arguments saved with a run)."""

from __future__ import annotations

from ..invertible.factory import make_network
from ..operators.lora import TimeLoRA
from .config import FlowConfig
from .model import OneStepFlow


def build_flow(cfg: FlowConfig, channels: int = 1) -> OneStepFlow:
    """The network and operator ``cfg`` describes, freshly initialised (seeded by the caller)."""
    net = make_network(
        cfg.network, channels, cfg.img_size, cfg.blocks, cfg.hidden, dropout=cfg.dropout,
        clamp=cfg.clamp, clamp_mode=cfg.clamp_mode, channel_mult=cfg.unet_channel_mult,
        unet_blocks=cfg.unet_blocks, attn_resolutions=cfg.unet_attn,
    )  # fmt: skip
    dim = channels * cfg.img_size * cfg.img_size
    op = TimeLoRA(
        dim,
        cfg.rank,
        emb_dim=cfg.lora_emb,
        hidden=cfg.lora_hidden,
        depth=cfg.lora_depth,
        activation=cfg.lora_activation,
        v_scale=cfg.v_scale,
    )
    model = OneStepFlow(net, op, (channels, cfg.img_size, cfg.img_size))
    model.memory_saving = cfg.memory_saving
    return model
