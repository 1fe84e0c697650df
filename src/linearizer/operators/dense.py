"""Dense matrices, the identity, and lazy products of operators.

>>> import torch
>>> A = Dense(torch.tensor([[2.0, 0.0], [1.0, 1.0]]), trainable=False)
>>> A(torch.tensor([[1.0, 1.0]]))
tensor([[2., 2.]])
>>> Product(A, A).matrix()
tensor([[4., 0.],
        [3., 1.]])
"""

from __future__ import annotations

from typing import cast

import torch
from torch import Tensor, nn

from ..errors import LinearizerError
from .base import LinearOperator


def check_rows(z: Tensor, features: int, what: str = "input") -> None:
    """Raise :class:`LinearizerError` unless ``z`` is a ``[B, features]`` tensor."""
    if not isinstance(z, Tensor):
        raise LinearizerError(f"{what} must be a torch.Tensor, got {type(z).__name__}")
    if z.dim() != 2 or z.shape[1] != features:
        raise LinearizerError(
            f"{what} must have shape [B, {features}] (a batch of flattened latents), "
            f"got {list(z.shape)}"
        )


def param_dtype(module: nn.Module, default: torch.dtype | None = None) -> torch.dtype:
    """The dtype of the first floating parameter or buffer (``default`` or torch's default)."""
    for tensor in list(module.parameters()) + list(module.buffers()):
        if tensor.is_floating_point():
            return tensor.dtype
    return default or torch.get_default_dtype()


class Dense(LinearOperator):
    """A stored ``[D_out, D_in]`` matrix: a parameter, or a buffer when ``trainable=False``."""

    def __init__(self, matrix: Tensor, trainable: bool = True) -> None:
        super().__init__()
        if not isinstance(matrix, Tensor) or matrix.dim() != 2:
            shape = list(matrix.shape) if isinstance(matrix, Tensor) else type(matrix).__name__
            raise LinearizerError(f"Dense needs a 2-D matrix [D_out, D_in], got {shape}")
        if not matrix.is_floating_point():
            raise LinearizerError(f"Dense needs a floating-point matrix, got {matrix.dtype}")
        self.out_features, self.in_features = matrix.shape
        weight = matrix.detach().clone()
        if trainable:
            self.weight = nn.Parameter(weight)
        else:
            self.register_buffer("weight", weight)

    def forward(self, z: Tensor, t: float | Tensor | None = None) -> Tensor:
        check_rows(z, self.in_features)
        # a matrix kept in a wider dtype than its inputs (a float64 B) is applied in it
        return (z.to(self.weight.dtype) @ self.weight.T).to(z.dtype)

    def transpose_apply(self, y: Tensor, t: float | Tensor | None = None) -> Tensor:
        check_rows(y, self.out_features)
        return (y.to(self.weight.dtype) @ self.weight).to(y.dtype)

    def matrix(self, t: float | Tensor | None = None, dtype: torch.dtype | None = None) -> Tensor:
        return self.weight if dtype is None else self.weight.to(dtype)

    def extra_repr(self) -> str:
        return f"out_features={self.out_features}, in_features={self.in_features}"


class Identity(LinearOperator):
    """The ``D x D`` identity (``power(0)`` of a square operator)."""

    def __init__(self, features: int) -> None:
        super().__init__()
        self.in_features = self.out_features = int(features)

    def forward(self, z: Tensor, t: float | Tensor | None = None) -> Tensor:
        check_rows(z, self.in_features)
        return z

    def transpose_apply(self, y: Tensor, t: float | Tensor | None = None) -> Tensor:
        check_rows(y, self.out_features)
        return y

    def matrix(self, t: float | Tensor | None = None, dtype: torch.dtype | None = None) -> Tensor:
        return torch.eye(self.in_features, dtype=dtype or torch.get_default_dtype())


class Product(LinearOperator):
    """The lazy product ``ops[0] @ ops[1] @ ... @ ops[-1]`` (the last one is applied first).

    Nothing is materialised: applying the product applies each factor in turn, so factored
    operators stay factored. A time ``t`` is handed to every factor.
    """

    def __init__(self, *ops: LinearOperator) -> None:
        super().__init__()
        if not ops:
            raise LinearizerError("Product needs at least one operator")
        for left, right in zip(ops[:-1], ops[1:]):
            if left.in_features != right.out_features:
                raise LinearizerError(
                    f"cannot multiply operators: left takes {left.in_features} features, "
                    f"right gives {right.out_features}"
                )
        self.ops = nn.ModuleList(ops)
        self.out_features = ops[0].out_features
        self.in_features = ops[-1].in_features
        self.time_dependent = any(op.time_dependent for op in ops)

    def forward(self, z: Tensor, t: float | Tensor | None = None) -> Tensor:
        for op in reversed(self.ops):
            z = op(z, t)
        return z

    def transpose_apply(self, y: Tensor, t: float | Tensor | None = None) -> Tensor:
        for op in self.ops:
            y = cast(LinearOperator, op).transpose_apply(y, t)
        return y

    def matrix(self, t: float | Tensor | None = None, dtype: torch.dtype | None = None) -> Tensor:
        mats = [cast(LinearOperator, op).matrix(t, dtype=dtype) for op in self.ops]
        return mats[0] if len(mats) == 1 else torch.linalg.multi_dot(mats)

    @property
    def idempotent(self) -> bool:
        """A power of one projector is that projector."""
        first = self.ops[0]
        return bool(getattr(first, "idempotent", False)) and all(op is first for op in self.ops)


def dense_size_ok(op: LinearOperator, limit: int = 1 << 26) -> None:
    """Refuse to materialise operators whose dense matrix would not fit comfortably in memory."""
    entries = op.out_features * op.in_features
    if entries > limit:
        raise LinearizerError(
            f"this needs the dense {op.out_features}x{op.in_features} matrix "
            f"({entries * 8 / 2**30:.1f} GiB in float64); use a factored operator instead"
        )
