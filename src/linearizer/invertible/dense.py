"""A fully connected coupling conditioner: every changed value sees the whole kept half.

The convolutional conditioners see a few pixels each, so a flow of a handful of them shapes
strokes locally but not where a digit's strokes go relative to each other. A coupling whose
conditioner reads the whole kept half at once (NICE's MLP couplings, Dinh et al. 2015) adds that
global context for about the cost of one convolutional coupling at 16x16.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import LinearizerError
from .cnn import flag_features


class DenseConditioner(nn.Module):
    """flatten -> linear -> ReLU -> linear -> reshape, for ``AffineCoupling`` at a fixed size.

    Reads ``u [B, in_channels, height, width]`` and returns ``[B, out_channels, height, width]``.
    The flag enters as a learned per-sample bias of the hidden layer (as in :class:`SmallCNN`);
    ``cond_dim=0`` ignores it. The last layer starts at zero, so the coupling starts as the
    identity.

    >>> import torch
    >>> net = DenseConditioner(2, 4, 3, 3, hidden=8)
    >>> out = net(torch.randn(5, 2, 3, 3), torch.ones(5))
    >>> out.shape, bool(out.eq(0).all())
    (torch.Size([5, 4, 3, 3]), True)
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        height: int,
        width: int,
        hidden: int = 256,
        cond_dim: int = 4,
    ) -> None:
        super().__init__()
        if min(in_channels, out_channels, height, width, hidden) < 1:
            raise LinearizerError("DenseConditioner sizes must be positive")
        if cond_dim < 0 or cond_dim % 2:
            raise LinearizerError(f"cond_dim must be a non-negative even number, got {cond_dim}")
        self.shape_in = (in_channels, height, width)
        self.shape_out = (out_channels, height, width)
        self.cond_dim = cond_dim
        self.fc_in = nn.Linear(in_channels * height * width, hidden)
        self.embed = nn.Linear(cond_dim, hidden, bias=False) if cond_dim else None
        self.fc_out = nn.Linear(hidden, out_channels * height * width)
        nn.init.zeros_(self.fc_out.weight)
        nn.init.zeros_(self.fc_out.bias)

    def forward(self, u: Tensor, flag: Tensor | None = None) -> Tensor:
        if tuple(u.shape[1:]) != self.shape_in:
            raise LinearizerError(
                f"DenseConditioner reads inputs of shape [B, {', '.join(map(str, self.shape_in))}]"
                f", got {list(u.shape)}"
            )
        h = self.fc_in(u.reshape(u.shape[0], -1))
        if self.embed is not None:
            h = h + self.embed(flag_features(flag, u.shape[0], self.cond_dim, u))
        return self.fc_out(F.relu(h)).reshape(u.shape[0], *self.shape_out)

    def extra_repr(self) -> str:
        return f"{self.shape_in} -> {self.shape_out}"
