"""Build a :class:`OneStepFlow` from its config (the constructor arguments saved with a run)."""

from __future__ import annotations

from ..operators.lora import TimeLoRA
from .config import FlowConfig
from .model import OneStepFlow


def build_flow(cfg: FlowConfig, channels: int = 1) -> OneStepFlow:
    """The network and operator ``cfg`` describes, freshly initialised (seeded by the caller)."""
    if cfg.network == "paper":
        from ..invertible.unet import paper_network

        net = paper_network(
            in_channels=channels,
            img_size=cfg.img_size,
            num_blocks=cfg.blocks,
            model_channels=cfg.hidden,
            dropout=cfg.dropout,
            channel_mult=cfg.unet_channel_mult,
            unet_blocks=cfg.unet_blocks,
            attn_resolutions=cfg.unet_attn,
        )
    else:
        from ..invertible.network import cpu_network

        net = cpu_network(
            in_channels=channels,
            num_blocks=cfg.blocks,
            hidden=cfg.hidden,
            clamp_mode=cfg.clamp_mode,
            clamp=cfg.clamp,
            dropout=cfg.dropout,
        )
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
