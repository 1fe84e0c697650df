"""A chain of invertible blocks."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import cast

from torch import Tensor, nn

from .base import InvertibleModule


def run_blocks(
    blocks: Iterable[nn.Module], x: Tensor, flag: Tensor | None, inverse: bool = False
) -> Tensor:
    """``x`` through ``blocks`` in order, or through their inverses in reverse order."""
    for block in reversed(list(blocks)) if inverse else blocks:
        x = cast(InvertibleModule, block).inverse(x, flag) if inverse else block(x, flag)
    return x


class InvertibleSequential(InvertibleModule):
    """Apply blocks in order; the inverse applies their inverses in reverse order.

    ``flag`` is handed to every block.

    >>> import torch
    >>> from linearizer.invertible import ActNorm, Squeeze
    >>> seq = InvertibleSequential(Squeeze(), ActNorm(4))
    >>> x = torch.randn(2, 1, 4, 4)
    >>> bool(torch.allclose(seq.inverse(seq(x)), x, rtol=1e-5, atol=1e-6))
    True
    """

    def __init__(self, *blocks: InvertibleModule) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(blocks)

    def forward(self, x: Tensor, flag: Tensor | None = None) -> Tensor:
        return run_blocks(self.blocks, x, flag)

    def inverse(self, z: Tensor, flag: Tensor | None = None) -> Tensor:
        return run_blocks(self.blocks, z, flag, inverse=True)

    def __len__(self) -> int:
        return len(self.blocks)

    def __getitem__(self, index: int) -> InvertibleModule:
        return cast(InvertibleModule, self.blocks[index])

    def __iter__(self) -> Iterator[InvertibleModule]:
        return iter(cast("Iterable[InvertibleModule]", self.blocks))
