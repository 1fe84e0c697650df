"""One place that turns a config's network fields into an invertible network."""

from __future__ import annotations

from typing import Any

from .network import InvertibleNetwork, cpu_network


def make_network(
    kind: str,
    channels: int,
    img_size: int,
    blocks: int,
    hidden: int,
    *,
    dropout: float = 0.0,
    clamp: float = 2.0,
    clamp_mode: str = "soft",
    **unet: Any,
) -> InvertibleNetwork:
    """``kind="paper"``: the authors' U-Net couplings (``unet`` holds ``channel_mult``,
    ``unet_blocks``, ``attn_resolutions``); ``"cpu"``: the small CNN couplings."""
    if kind == "paper":
        from .unet import paper_network

        return paper_network(
            in_channels=channels, img_size=img_size, num_blocks=blocks, model_channels=hidden,
            dropout=dropout, **unet,
        )  # fmt: skip
    return cpu_network(
        in_channels=channels, num_blocks=blocks, hidden=hidden, clamp_mode=clamp_mode,
        clamp=clamp, dropout=dropout,
    )  # fmt: skip
