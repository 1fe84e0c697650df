"""The style operators on image-shaped latents: ``A z = K (M z)``, a depthwise ``k x k``
convolution ``K`` per channel after an optional per-pixel channel mix ``M``, their transposes,
and a fixed weighted sum of them as a :class:`~linearizer.operators.base.LinearOperator`.

>>> z = torch.randn(2, 3, 5, 5)
>>> bool(torch.equal(apply_operator(z, identity_kernel(3, 4)), z))
True
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..errors import LinearizerError
from ..operators.base import LinearOperator
from ..operators.conv import apply_depthwise

OPERATORS = ("depthwise", "channelmix")


def apply_operator(z: Tensor, kernel: Tensor, mix: Tensor | None = None) -> Tensor:
    """``A z = K (M z)`` per sample: ``z [B, C, H, W]``, ``kernel [B, C, k, k]`` or
    ``[C, k, k]``, ``mix [B, C, C]`` / ``[C, C]`` or ``None`` (depthwise only)."""
    if mix is not None:
        pattern = "oc,bchw->bohw" if mix.dim() == 2 else "boc,bchw->bohw"
        z = torch.einsum(pattern, mix, z)
    return apply_depthwise(z, kernel, tuple(z.shape[1:]))


def apply_operator_transpose(y: Tensor, kernel: Tensor, mix: Tensor | None = None) -> Tensor:
    """``A^T y = M^T (K^T y)`` with the same argument conventions as :func:`apply_operator`."""
    y = apply_depthwise(y, kernel, tuple(y.shape[1:]), transpose=True)
    if mix is not None:
        pattern = "oc,bohw->bchw" if mix.dim() == 2 else "boc,bohw->bchw"
        y = torch.einsum(pattern, mix, y)
    return y


def identity_kernel(channels: int, size: int, like: Tensor | None = None) -> Tensor:
    """``[C, k, k]`` with a 1 at the centre tap of 'same' padding: the identity operator."""
    kernel = torch.zeros(channels, size, size)
    kernel[:, (size - 1) // 2, (size - 1) // 2] = 1.0
    return kernel if like is None else kernel.to(like)


class WeightedStyleOperator(LinearOperator):
    """``A = sum_i w_i K_i M_i + w_0 I`` on flattened latents of shape ``latent_shape``.

    Built by :meth:`StyleBank.operator`; holds copies, so it is a fixed operator (for
    :class:`Linearizer`'s pseudo-inverse, transpose, SVD on small images).
    """

    def __init__(
        self,
        kernels: Tensor,
        mixes: Tensor | None,
        weights: Tensor,
        identity: float,
        latent_shape: tuple[int, int, int],
    ) -> None:
        super().__init__()
        self.register_buffer("kernels", kernels.detach().clone())
        self.register_buffer("mixes", None if mixes is None else mixes.detach().clone())
        self.register_buffer("weights", weights.detach().clone())
        self.identity = float(identity)
        self.latent_shape = tuple(latent_shape)
        self.in_features = self.out_features = int(torch.tensor(latent_shape).prod())

    # not `_apply`: that name is nn.Module's hook behind .to(), .double() and .cuda()
    def _act(self, z: Tensor, transpose: bool) -> Tensor:
        if z.dim() != 2 or z.shape[1] != self.in_features:
            raise LinearizerError(f"expected latents [B, {self.in_features}], got {list(z.shape)}")
        x = z.reshape(z.shape[0], *self.latent_shape)
        fn = apply_operator_transpose if transpose else apply_operator
        if self.mixes is None:
            kernel = torch.einsum("s,sckl->ckl", self.weights.to(x), self.kernels.to(x))
            out = fn(x, kernel)
        else:
            out = torch.zeros_like(x)
            for w, k, m in zip(self.weights.tolist(), self.kernels, self.mixes):
                if w != 0.0:
                    out = out + w * fn(x, k.to(x), m.to(x))
        return (out + self.identity * x).reshape(z.shape)

    def forward(self, z: Tensor, t: Any = None) -> Tensor:
        return self._act(z, transpose=False)

    def transpose_apply(self, y: Tensor, t: Any = None) -> Tensor:
        return self._act(y, transpose=True)
