"""The style model a :class:`~linearizer.style.config.StyleConfig` describes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .bank import StyleBank
from .index_net import IndexStyleNet
from .model import StyleModel


def build_style_model(cfg: Any, styles: Sequence[str], channels: int = 3) -> StyleModel:
    """The model a :class:`~linearizer.style.config.StyleConfig` describes (freshly initialised)."""
    from ..invertible.factory import build_network

    g = build_network(cfg.network, channels)
    common = dict(
        channels=channels,
        operator=cfg.operator,
        kernel_size=cfg.kernel_size,
        latent_squeeze=cfg.latent_squeeze,
        x_flag=1.0,
        y_flag=1.0 if cfg.flags == "shared" else 0.0,
    )
    if cfg.bank == "index":
        return IndexStyleNet(
            g,
            styles,
            emb_dim=cfg.index_emb,
            hidden=cfg.index_hidden,
            depth=cfg.index_depth,
            **common,
        )
    return StyleBank(g, styles, **common)
