"""The invertible network's settings (:class:`NetworkConfig`) and the one builder that turns
them into a network (:func:`build_network`), shared by the flow, projective and style models.

>>> import torch
>>> g = build_network(NetworkConfig(blocks=1, hidden=8, img_size=8), channels=1)
>>> x = torch.randn(2, 1, 8, 8)
>>> bool(torch.allclose(g.inverse(g(x, 1.0), 1.0), x, rtol=1e-4, atol=1e-5))
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..config import Config, option
from ..errors import LinearizerError
from .network import InvertibleNetwork, cpu_network
from .unet import paper_network


@dataclass
class NetworkConfig(Config):
    """The invertible network g: which couplings, how many, how wide, at which image size."""

    kind: Literal["cpu", "paper"] = option(
        "cpu", "invertible network: small CNN couplings (cpu) or the authors' U-Net (paper)"
    )
    img_size: int = option(32, "images are resized to img_size x img_size (authors: 32)")
    blocks: int = option(2, "invertible blocks (ActNorm, two couplings, 1x1 conv each)")
    hidden: int = option(32, "conditioner width: SmallCNN channels or U-Net model_channels")
    levels: int = option(
        1, "cpu network: squeeze levels; each past the first adds `blocks` blocks at half size"
    )
    clamp: float = option(2.0, "log-scale clamp of the couplings")
    clamp_mode: Literal["soft", "hard"] = option(
        "soft", "soft: c*tanh(l/c); hard: clip (the paper network always clips)"
    )
    dropout: float = option(0.0, "conditioner dropout (masks shared with the inverse pass)")
    flag_actnorm: bool = option(
        False, "cpu network: one ActNorm bias/scale pair per flag (noise 0, data 1)"
    )
    dense_blocks: int = option(
        0,
        "cpu network: coupling blocks with fully connected conditioners (whole-image context) "
        "after the convolutional ones",
    )
    dense_hidden: int = option(256, "cpu network: hidden width of the fully connected conditioners")
    shift_bound: float = option(
        0.0,
        "cpu network: soft bound S of every coupling's shifts, S tanh(s / S), so inputs far off "
        "the data cannot blow the activations up (0 = unbounded)",
    )
    logit: float = option(
        0.0,
        "cpu network: alpha of a logit on data-flag pixels, logit(alpha + (1 - 2 alpha) x), so "
        "samples decode through a sigmoid (0 = none)",
    )
    logit_tails: Literal["sigmoid", "linear"] = option(
        "sigmoid",
        "cpu network: the logit's inverse beyond pixels 0 and 1: the sigmoid's saturating tail, "
        "or the logit continued linearly, so every latent decodes to a pixel that encodes back",
    )
    odd_noise: bool = option(
        False,
        "cpu network: g_noise odd, g(-z) = -g(z) (odd shifts, even log-scales, no ActNorm bias "
        "at the noise flag), so negative scalars of the induced space stay where training was; "
        "needs flag_actnorm, costs a second conditioner pass over noise rows",
    )
    odd_data: bool = option(
        False,
        "cpu network: the blocks odd at the data flag too, after a logit centred on the first "
        "batch's mean logit image, so a negative scalar of the induced space decodes by the "
        "mirrored computation of a positive one; needs odd_noise and a logit, costs a second "
        "conditioner pass over data rows (measured and not adopted: docs/flow/roundtrip.md §13)",
    )
    noise_side: Literal["network", "shift"] = option(
        "network",
        "cpu network: g_noise as the flagged blocks (the authors), or the learned shift "
        "x + mu (condition number 1 everywhere, and noise rows skip the blocks)",
    )
    noise_mean: bool = option(
        False,
        "cpu network: g_noise(x) = h(x) + mu, the blocks h and a learned image-shaped mean mu "
        "(zero at first); with odd_noise, g_noise is odd about mu, and a mixture's components "
        "keep the means B_k mu",
    )
    memory_saving: bool = option(
        False, "recompute g's activations from its exact inverse in backprop (less memory)"
    )
    unet_channel_mult: tuple[int, ...] = option(
        (1, 1), "paper network: U-Net width multiplier per level (authors' MNIST: 1,1)"
    )
    unet_blocks: int = option(2, "paper network: U-Net residual blocks per level")
    unet_attn: tuple[int, ...] | None = option(
        None, "paper network: U-Net resolutions with self-attention (none = the top one)"
    )

    def validate(self) -> None:
        for name in ("img_size", "blocks", "hidden", "unet_blocks", "levels", "dense_hidden"):
            if getattr(self, name) < 1:
                raise LinearizerError(f"config key 'network.{name}' must be >= 1")
        self._require("network.dense_blocks", ">= 0", lambda v: not v < 0)
        if self.dense_blocks and self.kind != "cpu":
            raise LinearizerError(
                "config key 'network.dense_blocks' applies to the cpu network only"
            )
        if not self.unet_channel_mult or min(self.unet_channel_mult) < 1:
            raise LinearizerError(
                "config key 'network.unet_channel_mult' needs positive multipliers"
            )
        self._require("network.dropout", "in [0, 1)", lambda v: 0.0 <= v < 1.0)
        if self.kind == "paper" and self.levels != 1:
            raise LinearizerError("config key 'network.levels' applies to the cpu network only")
        if self.kind == "cpu" and self.img_size % 2**self.levels:
            raise LinearizerError(
                f"network.levels={self.levels} needs img_size divisible by {2**self.levels}, "
                f"got {self.img_size}"
            )
        self._require(
            "network.logit", "0 (none) or in (0, 0.5)", lambda v: v == 0.0 or 0.0 < v < 0.5
        )
        if self.logit and self.kind != "cpu":
            raise LinearizerError("config key 'network.logit' applies to the cpu network only")
        self._require("network.clamp", "> 0", lambda v: v > 0)
        self._require("network.shift_bound", ">= 0 (0: unbounded)", lambda v: not v < 0)
        if self.noise_side == "shift" and (self.kind != "cpu" or self.odd_noise):
            raise LinearizerError(
                "config key 'network.noise_side=shift' needs the cpu network and no "
                "network.odd_noise"
            )
        if self.noise_mean and (self.kind != "cpu" or self.noise_side != "network"):
            raise LinearizerError(
                "config key 'network.noise_mean' needs the cpu network and "
                "network.noise_side=network"
            )
        if self.odd_noise and (self.kind != "cpu" or not self.flag_actnorm or self.dropout):
            raise LinearizerError(
                "config key 'network.odd_noise' needs the cpu network with "
                "network.flag_actnorm=true and network.dropout=0"
            )
        if self.odd_data and not (self.odd_noise and self.logit):
            raise LinearizerError(
                "config key 'network.odd_data' needs network.odd_noise=true and a network.logit"
            )


def build_network(
    cfg: NetworkConfig, channels: int, *, conditioned: bool = True
) -> InvertibleNetwork:
    """The freshly initialised network ``cfg`` describes, for images of ``channels`` channels.

    ``conditioned=False`` builds the cpu couplings without a flag input (the projective model's
    single ``g``); the paper U-Net always takes a flag (hold it constant for one network).
    """
    if cfg.kind == "paper":
        return paper_network(
            in_channels=channels,
            img_size=cfg.img_size,
            num_blocks=cfg.blocks,
            model_channels=cfg.hidden,
            dropout=cfg.dropout,
            channel_mult=cfg.unet_channel_mult,
            unet_blocks=cfg.unet_blocks,
            attn_resolutions=cfg.unet_attn,
            clamp=cfg.clamp,
        )
    flagged = {  # the settings that act at one flag of g, and the side of g that flag picks
        "odd_noise": (cfg.odd_noise, "g_noise"),
        "noise_side=shift": (cfg.noise_side == "shift", "g_noise"),
        "noise_mean": (cfg.noise_mean, "g_noise"),
        "logit": (cfg.logit, "g_data"),
    }
    for key, (active, side) in flagged.items():
        if active and not conditioned:
            raise LinearizerError(
                f"config key 'network.{key}' needs a flagged network (the flow's {side}); this "
                "model's network takes no flag"
            )
    return cpu_network(
        in_channels=channels,
        num_blocks=cfg.blocks,
        hidden=cfg.hidden,
        clamp_mode=cfg.clamp_mode,
        clamp=cfg.clamp,
        dropout=cfg.dropout,
        flag_norm=cfg.flag_actnorm and conditioned,
        levels=cfg.levels,
        logit=cfg.logit,
        dense_blocks=cfg.dense_blocks,
        dense_hidden=cfg.dense_hidden,
        img_size=cfg.img_size,
        shift_bound=cfg.shift_bound,
        logit_tails=cfg.logit_tails,
        odd_flag=0.0 if cfg.odd_noise and conditioned else None,  # 0: the flow's noise flag
        shift_flag=0.0 if cfg.noise_side == "shift" and conditioned else None,
        mean_flag=0.0 if cfg.noise_mean and conditioned else None,
        odd_data=cfg.odd_data and conditioned,
        **({} if conditioned else {"cond_dim": 0}),
    )
