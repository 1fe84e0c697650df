"""The paper's coupling conditioner: a small time-conditioned U-Net, and the paper's network.

Written from the specification ../shared/reference/official/ARCHITECTURE.md §3 (the authors
use a DDPM++-style U-Net; this is an independent implementation of the same computation).

* Time flag tau -> 16 sinusoidal features (frequencies ``(1e-4)^(k/(n-1))``, sin half first)
  -> Linear -> silu -> Linear -> silu: one embedding shared by every residual block.
* Residual block: ``silu(GN(x))`` -> [resample] -> conv3x3 -> ``+ affine(emb)`` ->
  ``silu(GN)`` -> dropout -> conv3x3, plus the skip (1x1 conv where channels or size change),
  times ``1/sqrt(2)``; optionally followed by one self-attention layer, also scaled by
  ``1/sqrt(2)``. GroupNorm uses ``min(32, C/4)`` groups and eps 1e-6.
* Encoder: input conv, then per level (``down`` block for levels > 0) ``num_blocks`` blocks.
  Every encoder output is kept as a skip. Decoder: at the lowest level two blocks (the first
  with attention), at every other level an ``up`` block; then ``num_blocks + 1`` blocks, each
  reading ``[stream, skip]``. Output: conv3x3(silu(GN(x))).

Dropout is :class:`SharedDropout` (one seeded mask shared over the batch), so a coupling that
uses this conditioner stays exactly invertible in train mode.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import TypeVar, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import LinearizerError
from .dropout import SharedDropout
from .network import InvertibleNetwork

SKIP_SCALE = math.sqrt(0.5)
RESAMPLE_MODES = ("none", "down", "up")


_Layer = TypeVar("_Layer", nn.Conv2d, nn.Linear)


def _xavier(layer: _Layer, factor: float = 1.0) -> _Layer:
    """Xavier-uniform weight times ``factor``, zero bias (§3.5)."""
    nn.init.xavier_uniform_(layer.weight, gain=factor)
    nn.init.zeros_(cast(Tensor, layer.bias))
    return layer


def _conv(c_in: int, c_out: int, kernel: int, factor: float = 1.0) -> nn.Conv2d:
    return _xavier(nn.Conv2d(c_in, c_out, kernel, padding=kernel // 2), factor)


def _norm(channels: int) -> nn.GroupNorm:
    return nn.GroupNorm(min(32, max(1, channels // 4)), channels, eps=1e-6)


def time_features(tau: Tensor, channels: int, max_positions: float = 10000.0) -> Tensor:
    """``[B] -> [B, channels]``: ``[sin(tau f_k), cos(tau f_k)]`` with ``f_k = (1/P)^(k/(n-1))``.

    The frequencies are computed in float32 (as the authors) and then cast to ``tau``'s dtype.
    This is the authors' ``[cos | sin]`` embedding with its two halves swapped.

    >>> time_features(torch.zeros(1), 4).tolist()
    [[0.0, 0.0, 1.0, 1.0]]
    """
    half = channels // 2
    freqs = torch.arange(half, dtype=torch.float32, device=tau.device) / max(half - 1, 1)
    freqs = (1.0 / max_positions) ** freqs
    angles = tau[:, None] * freqs.to(tau.dtype)[None, :]
    return torch.cat([angles.sin(), angles.cos()], dim=1)


class ResBlock(nn.Module):
    """One residual block with additive time conditioning and optional self-attention.

    ``mode`` is ``"none"``, ``"down"`` (2x2 mean) or ``"up"`` (nearest x2); resampling acts
    before the convolution that owns it (``conv0`` and ``skip``). ``qkv`` stores the query, key
    and value projections as three contiguous blocks of ``C`` output channels.

    >>> block = ResBlock(8, 16, emb_channels=32, mode="down", attention=True)
    >>> block(torch.randn(2, 8, 8, 8), torch.randn(2, 32)).shape
    torch.Size([2, 16, 4, 4])
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        emb_channels: int,
        mode: str = "none",
        attention: bool = False,
        num_heads: int = 1,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if mode not in RESAMPLE_MODES:
            raise LinearizerError(f"resample mode must be one of {RESAMPLE_MODES}, got {mode!r}")
        if attention and (num_heads < 1 or out_channels % num_heads):
            raise LinearizerError(f"{out_channels} channels do not split into {num_heads} heads")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.mode = mode
        self.num_heads = num_heads if attention else 0
        self.norm0 = _norm(in_channels)
        self.conv0 = _conv(in_channels, out_channels, 3)
        self.affine = _xavier(nn.Linear(emb_channels, out_channels))
        self.norm1 = _norm(out_channels)
        self.dropout = SharedDropout(dropout)
        self.conv1 = _conv(out_channels, out_channels, 3, factor=1e-5)
        needs_skip = in_channels != out_channels or mode != "none"
        self.skip = _conv(in_channels, out_channels, 1) if needs_skip else None
        if attention:
            self.norm2 = _norm(out_channels)
            self.qkv = _conv(out_channels, 3 * out_channels, 1, factor=math.sqrt(0.2))
            self.proj = _conv(out_channels, out_channels, 1, factor=1e-5)
        else:
            # read only when num_heads > 0, so their declared types hold wherever they are used
            self.norm2 = self.qkv = self.proj = None  # type: ignore[assignment]

    def _resample(self, x: Tensor) -> Tensor:
        if self.mode == "down":
            return F.avg_pool2d(x, 2)
        if self.mode == "up":
            return F.interpolate(x, scale_factor=2.0, mode="nearest")
        return x

    def forward(self, x: Tensor, emb: Tensor) -> Tensor:
        h = self.conv0(self._resample(F.silu(self.norm0(x))))
        h = h + self.affine(emb)[:, :, None, None]
        h = self.conv1(self.dropout(F.silu(self.norm1(h))))
        skip = x if self.skip is None else self.skip(self._resample(x))
        x = (h + skip) * SKIP_SCALE
        if self.num_heads:
            x = (self.proj(self._attend(self.norm2(x))) + x) * SKIP_SCALE
        return x

    def _attend(self, n: Tensor) -> Tensor:
        """Multi-head self-attention over the ``H*W`` positions (row-major)."""
        b, c, height, width = n.shape
        heads = self.num_heads
        # [B, 3C, H, W] -> 3 x [B, heads, N, C/heads]. Contiguous on purpose: with a strided last
        # dimension CPU SDPA falls back to its math kernel (~7x slower at N = 256).
        qkv = self.qkv(n).reshape(b, 3, heads, c // heads, height * width)
        qkv = qkv.transpose(3, 4).contiguous()
        out = F.scaled_dot_product_attention(qkv[:, 0], qkv[:, 1], qkv[:, 2])
        return out.transpose(2, 3).reshape(b, c, height, width)

    def extra_repr(self) -> str:
        return f"mode={self.mode!r}, heads={self.num_heads}"


class PaperUNet(nn.Module):
    """The paper's time-conditioned U-Net: ``(u [B, C_in, H, W], tau [B]) -> [B, C_out, H, W]``.

    ``resolution`` is the input size the layout is named after (attention sits at the levels
    whose size is in ``attn_resolutions``); inputs must be divisible by ``2^(levels-1)``.
    ``encoder_roles`` / ``decoder_roles`` list ``(role, resolution, index)`` for every module
    of ``encoder`` / ``decoder`` (roles: conv, down, block / in, up, block), which is what a
    checkpoint translator needs to name them.

    >>> net = PaperUNet(2, 4, resolution=8, attn_resolutions=(8,))
    >>> net(torch.randn(3, 2, 8, 8), torch.ones(3)).shape
    torch.Size([3, 4, 8, 8])
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        model_channels: int = 16,
        channel_mult: Sequence[int] = (1, 1),
        num_blocks: int = 2,
        attn_resolutions: Sequence[int] = (16,),
        resolution: int = 16,
        dropout: float = 0.1,
        emb_mult: int = 4,
        time_channels: int | None = None,
        num_heads: int = 1,
    ) -> None:
        super().__init__()
        if min(in_channels, out_channels, model_channels, num_blocks, len(channel_mult)) < 1:
            raise LinearizerError("PaperUNet sizes must be positive")
        if resolution % 2 ** (len(channel_mult) - 1):
            raise LinearizerError(
                f"resolution {resolution} is not divisible by 2^{len(channel_mult) - 1}"
            )
        self.in_channels, self.out_channels = in_channels, out_channels
        self.levels = len(channel_mult)
        self.time_channels = time_channels or model_channels
        if self.time_channels % 2 or self.time_channels < 4:
            raise LinearizerError("time_channels must be even and >= 4")
        emb = model_channels * emb_mult
        self.time_mlp0 = _xavier(nn.Linear(self.time_channels, emb))
        self.time_mlp1 = _xavier(nn.Linear(emb, emb))

        def block(c_in: int, c_out: int, mode: str = "none", attn: bool = False) -> ResBlock:
            return ResBlock(c_in, c_out, emb, mode, attn, num_heads, dropout)

        attn_at = {int(r) for r in attn_resolutions}
        self.encoder = nn.ModuleList()
        self.encoder_roles: list[tuple[str, int, int]] = []
        skips: list[int] = []
        ch = model_channels
        for level, mult in enumerate(channel_mult):
            res = resolution >> level
            if level == 0:
                self.encoder.append(_conv(in_channels, ch, 3))
                self.encoder_roles.append(("conv", res, 0))
            else:
                self.encoder.append(block(ch, ch, "down"))
                self.encoder_roles.append(("down", res, 0))
            skips.append(ch)
            for idx in range(num_blocks):
                self.encoder.append(block(ch, model_channels * mult, attn=res in attn_at))
                self.encoder_roles.append(("block", res, idx))
                ch = model_channels * mult
                skips.append(ch)

        self.decoder = nn.ModuleList()
        self.decoder_roles: list[tuple[str, int, int]] = []
        for level in reversed(range(self.levels)):
            res = resolution >> level
            if level == self.levels - 1:
                self.decoder.extend([block(ch, ch, attn=True), block(ch, ch)])
                self.decoder_roles += [("in", res, 0), ("in", res, 1)]
            else:
                self.decoder.append(block(ch, ch, "up"))
                self.decoder_roles.append(("up", res, 0))
            for idx in range(num_blocks + 1):
                c_out = model_channels * channel_mult[level]
                attn = idx == num_blocks and res in attn_at
                self.decoder.append(block(ch + skips.pop(), c_out, attn=attn))
                self.decoder_roles.append(("block", res, idx))
                ch = c_out
        self.out_norm = _norm(ch)
        self.out_conv = _conv(ch, out_channels, 3, factor=1e-5)

    def embed_time(self, flag: Tensor | None, batch: int, ref: Tensor) -> Tensor:
        """The shared block embedding ``silu(W1 silu(W0 e(tau)))`` for a ``[B]`` flag."""
        if flag is None:
            tau = torch.zeros(batch, dtype=ref.dtype, device=ref.device)
        else:
            tau = torch.as_tensor(flag, device=ref.device).to(ref.dtype).reshape(-1)
            if tau.numel() == 1 and batch != 1:
                tau = tau.expand(batch)
            if tau.shape[0] != batch:
                raise LinearizerError(f"flag must have shape [{batch}], got {list(tau.shape)}")
        e = time_features(tau, self.time_channels)
        return F.silu(self.time_mlp1(F.silu(self.time_mlp0(e))))

    def forward(self, u: Tensor, flag: Tensor | None = None) -> Tensor:
        if u.dim() != 4 or u.shape[1] != self.in_channels:
            raise LinearizerError(
                f"PaperUNet expects [B, {self.in_channels}, H, W], got {list(u.shape)}"
            )
        if u.shape[2] % 2 ** (self.levels - 1) or u.shape[3] % 2 ** (self.levels - 1):
            raise LinearizerError(
                f"PaperUNet input {u.shape[2]}x{u.shape[3]} is not divisible by 2^{self.levels - 1}"
            )
        emb = self.embed_time(flag, u.shape[0], u)
        x = u
        skips = []
        for layer, (role, _, _) in zip(self.encoder, self.encoder_roles):
            x = layer(x) if role == "conv" else layer(x, emb)
            skips.append(x)
        for layer, (role, _, _) in zip(self.decoder, self.decoder_roles):
            if role == "block":
                x = torch.cat([x, skips.pop()], dim=1)
            x = layer(x, emb)
        return self.out_conv(F.silu(self.out_norm(x)))


def paper_network(
    in_channels: int = 1,
    img_size: int = 32,
    num_blocks: int = 4,
    model_channels: int = 16,
    dropout: float = 0.1,
    channel_mult: Sequence[int] = (1, 1),
    unet_blocks: int = 2,
    attn_resolutions: Sequence[int] | None = None,
    clamp: float = 5.0,
) -> InvertibleNetwork:
    """The authors' invertible network: [squeeze] + ``num_blocks`` coupling blocks whose eight
    (two per block) conditioners are :class:`PaperUNet`, log-scales hard-clamped to ``+-5``.

    Odd channel counts are squeezed 2x2 first (MNIST: ``[1,32,32] -> [4,16,16]``), so the
    U-Nets run at ``img_size / 2``; attention defaults to that top resolution.

    >>> g = paper_network(img_size=8, num_blocks=1, model_channels=8, dropout=0.0)
    >>> x = torch.randn(2, 1, 8, 8)
    >>> bool(torch.allclose(g.inverse(g(x, 1.0), 1.0), x, rtol=1e-5, atol=1e-5))
    True
    """
    squeeze = in_channels % 2 == 1
    res = img_size // 2 if squeeze else img_size
    if res < 1 or (squeeze and img_size % 2):
        raise LinearizerError(f"img_size {img_size} does not fit the squeeze")
    attn = (res,) if attn_resolutions is None else tuple(attn_resolutions)
    make = functools.partial(
        PaperUNet,
        model_channels=model_channels,
        channel_mult=channel_mult,
        num_blocks=unet_blocks,
        attn_resolutions=attn,
        resolution=res,
        dropout=dropout,
    )
    return InvertibleNetwork(in_channels, num_blocks, make, clamp=clamp, clamp_mode="hard")
