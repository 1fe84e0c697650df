"""Depthwise ('same'-padded, per-channel) convolution of image-shaped latents, and its adjoint.

The latent is a flattened ``C x H x W`` image. Padding follows PyTorch's ``padding='same'``:
``k - 1`` zeros in total per axis, ``(k - 1) // 2`` before and the rest after, so even kernels
(the authors' style operator uses 4 x 4) shift by half a pixel the same way. The adjoint is the
transposed convolution cropped by the same offsets, which makes ``<A z, y> = <z, A^T y>`` exact
for every kernel size.

>>> import torch
>>> op = DepthwiseConv(channels=3, kernel_size=4, image_shape=(8, 8), init="random")
>>> z, y = torch.randn(2, 192, dtype=torch.float64), torch.randn(2, 192, dtype=torch.float64)
>>> op = op.double()
>>> bool(torch.allclose((op(z) * y).sum(), (z * op.transpose_apply(y)).sum(), rtol=1e-12))
True
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import LinearizerError
from .base import LinearOperator
from .dense import check_rows


def _pads(size: int) -> tuple[int, int]:
    before = (size - 1) // 2
    return before, size - 1 - before


def _as_images(z: Tensor, image_shape: Sequence[int]) -> Tensor:
    c, h, w = image_shape
    if z.dim() == 4 and tuple(z.shape[1:]) == (c, h, w):
        return z
    if z.dim() == 2 and z.shape[1] == c * h * w:
        return z.view(z.shape[0], c, h, w)
    raise LinearizerError(
        f"expected latents [B, {c * h * w}] or [B, {c}, {h}, {w}], got {list(z.shape)}"
    )


def apply_depthwise(
    z: Tensor, kernel: Tensor, image_shape: tuple[int, int, int], transpose: bool = False
) -> Tensor:
    """Convolve each channel of ``z`` with its own kernel ('same' padding), or apply the adjoint.

    ``z``: ``[B, C*H*W]`` or ``[B, C, H, W]`` (the result has the same layout).
    ``kernel``: ``[C, kh, kw]`` shared by the batch, or ``[B, C, kh, kw]`` one per sample (a style
    bank hands each sample its own style's kernel).
    """
    x = _as_images(z, tuple(image_shape))
    b, c, h, w = x.shape
    if kernel.dim() == 3 and kernel.shape[0] == c:
        weight, groups = kernel.unsqueeze(1), c
    elif kernel.dim() == 4 and kernel.shape[:2] == (b, c):
        # one grouped convolution over all samples: sample b's channels form groups b*C ... b*C+C-1
        x = x.reshape(1, b * c, h, w)
        weight, groups = kernel.reshape(b * c, 1, *kernel.shape[2:]), b * c
    else:
        raise LinearizerError(
            f"kernel must be [{c}, kh, kw] or [{b}, {c}, kh, kw], got {list(kernel.shape)}"
        )
    (top, bottom), (left, right) = _pads(weight.shape[2]), _pads(weight.shape[3])
    if transpose:
        out = F.conv_transpose2d(x, weight, groups=groups)
        out = out[..., top : top + h, left : left + w]
    else:
        out = F.conv2d(F.pad(x, (left, right, top, bottom)), weight, groups=groups)
    return out.reshape(z.shape)


def _image_shape(channels: int, image_shape: tuple[int, ...]) -> tuple[int, int, int]:
    shape = tuple(int(s) for s in image_shape)
    if len(shape) == 2:
        shape = (channels, *shape)
    if len(shape) != 3 or shape[0] != channels or min(shape) < 1:
        raise LinearizerError(
            f"image_shape must be (H, W) or ({channels}, H, W), got {tuple(image_shape)}"
        )
    return shape


def _kernel_size(kernel_size: int | tuple[int, int]) -> tuple[int, int]:
    ks = (kernel_size, kernel_size) if isinstance(kernel_size, int) else tuple(kernel_size)
    if len(ks) != 2 or min(ks) < 1:
        raise LinearizerError(f"kernel_size must be a positive int or pair, got {kernel_size}")
    return ks


class DepthwiseConv(LinearOperator):
    """Per-channel convolution of a flattened ``C x H x W`` latent (``D = C H W``).

    ``init="identity"`` starts at the identity (a 1 at the kernel's centre tap, zeros elsewhere);
    ``init="random"`` draws Gaussian taps with variance ``1/(kh kw)``.
    """

    def __init__(
        self,
        channels: int,
        kernel_size: int | tuple[int, int],
        image_shape: tuple[int, ...],
        init: str = "identity",
    ) -> None:
        super().__init__()
        self.image_shape = _image_shape(channels, image_shape)
        kh, kw = _kernel_size(kernel_size)
        self.in_features = self.out_features = math.prod(self.image_shape)
        if init == "identity":
            kernel = torch.zeros(channels, kh, kw)
            kernel[:, (kh - 1) // 2, (kw - 1) // 2] = 1.0
        elif init == "random":
            kernel = torch.randn(channels, kh, kw) / (kh * kw) ** 0.5
        else:
            raise LinearizerError(f"unknown init {init!r}; use 'identity' or 'random'")
        self.kernel = nn.Parameter(kernel)

    @classmethod
    def from_kernel(
        cls, kernel: Tensor, image_shape: tuple[int, ...], trainable: bool = True
    ) -> DepthwiseConv:
        """Wrap a given ``[C, kh, kw]`` kernel (copied; a buffer when ``trainable=False``)."""
        if not isinstance(kernel, Tensor) or kernel.dim() != 3:
            raise LinearizerError("from_kernel needs a [C, kh, kw] tensor")
        op = cls(kernel.shape[0], cast("tuple[int, int]", tuple(kernel.shape[1:])), image_shape)
        del op.kernel
        if trainable:
            op.kernel = nn.Parameter(kernel.detach().clone())
        else:
            op.register_buffer("kernel", kernel.detach().clone())
        return op

    def forward(self, z: Tensor, t: float | Tensor | None = None) -> Tensor:
        check_rows(z, self.in_features)
        return apply_depthwise(z, self.kernel, self.image_shape)

    def transpose_apply(self, y: Tensor, t: float | Tensor | None = None) -> Tensor:
        check_rows(y, self.out_features)
        return apply_depthwise(y, self.kernel, self.image_shape, transpose=True)

    def matrix(self, t: float | Tensor | None = None, dtype: torch.dtype | None = None) -> Tensor:
        """The dense matrix, by applying the operator to the identity (``D x D``: small D only)."""
        kernel = self.kernel if dtype is None else self.kernel.to(dtype)
        eye = torch.eye(self.in_features, dtype=kernel.dtype, device=kernel.device)
        return apply_depthwise(eye, kernel, self.image_shape).T

    def extra_repr(self) -> str:
        return f"image_shape={self.image_shape}, kernel_size={tuple(self.kernel.shape[1:])}"


class ChannelMix(LinearOperator):
    """Per-pixel ``C x C`` channel mixing followed by a depthwise convolution: ``A = K M``.

    Both start at the identity. Useful when styles need to move colour between channels, which
    a purely depthwise operator cannot do.
    """

    def __init__(
        self, channels: int, kernel_size: int | tuple[int, int], image_shape: tuple[int, ...]
    ) -> None:
        super().__init__()
        self.conv = DepthwiseConv(channels, kernel_size, image_shape)
        self.image_shape = self.conv.image_shape
        self.in_features = self.out_features = self.conv.in_features
        self.mix = nn.Parameter(torch.eye(channels))

    def _mix(self, z: Tensor, m: Tensor) -> Tensor:
        x = _as_images(z, self.image_shape)
        return torch.einsum("oc,bchw->bohw", m, x).reshape(z.shape)

    def forward(self, z: Tensor, t: float | Tensor | None = None) -> Tensor:
        check_rows(z, self.in_features)
        return self.conv(self._mix(z, self.mix))

    def transpose_apply(self, y: Tensor, t: float | Tensor | None = None) -> Tensor:
        check_rows(y, self.out_features)
        return self._mix(self.conv.transpose_apply(y), self.mix.T)

    def matrix(self, t: float | Tensor | None = None, dtype: torch.dtype | None = None) -> Tensor:
        mix = self.mix if dtype is None else self.mix.to(dtype)
        eye = torch.eye(self.in_features, dtype=mix.dtype, device=mix.device)
        return self.conv.matrix(dtype=mix.dtype) @ self._mix(eye, mix).T
