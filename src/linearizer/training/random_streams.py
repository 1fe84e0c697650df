"""Per-step random streams: every random draw of a training step, reproducible from
``(seed, step, stream)`` alone and identical on every ``torchrun`` process.

Why: a checkpoint then needs only the step (plus weights, optimizer and EMA) for ``--resume`` to
continue bit for bit, and W processes draw the same global batch and keep their own rows.
"""

from __future__ import annotations

import functools
import hashlib
import random
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..errors import LinearizerError
from . import distributed as D


def derive_seed(*parts: object) -> int:
    """A 63-bit seed from any parts (``derive_seed(seed, step, "noise")``), stable everywhere."""
    digest = hashlib.sha256(":".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def seed_globals(*parts: object) -> None:
    """Seed torch's, numpy's and Python's global generators from ``parts``: code that draws
    from them (a model's own dropout, numpy augmentation) repeats exactly on resume."""
    value = derive_seed(*parts)
    torch.manual_seed(value)
    np.random.seed(value % (1 << 32))
    random.seed(value)


@functools.lru_cache(maxsize=4)
def _epoch_permutation(seed: int, epoch: int, n: int) -> Tensor:
    gen = torch.Generator().manual_seed(derive_seed(seed, "epoch", epoch))
    return torch.randperm(n, generator=gen)


class StepRandom:
    """The random draws of one step and one stream, identical on every process.

    Each draw is made for the whole global batch (``global_batch`` rows) from a CPU generator
    seeded by ``(seed, step, stream)``; this process gets its rows (``rows``). Draw shapes are
    per sample: ``rng.randn(1, 32, 32)`` returns ``[local_batch, 1, 32, 32]``.

    >>> a = StepRandom(0, 7, "noise", global_batch=4)
    >>> b = StepRandom(0, 7, "noise", global_batch=4, rank=1, world=2)
    >>> bool(torch.equal(a.randn(3)[2:], b.randn(3)))
    True
    """

    def __init__(
        self, seed: int, step: int, stream: str, global_batch: int, rank: int = 0, world: int = 1
    ) -> None:
        self.seed, self.step, self.stream = int(seed), int(step), stream
        self.global_batch, self.rank, self.world = int(global_batch), int(rank), int(world)
        self.rows = D.shard(self.global_batch, self.rank, self.world)
        self.gen = torch.Generator().manual_seed(derive_seed(seed, step, stream))

    @property
    def local_batch(self) -> int:
        return self.rows.stop - self.rows.start

    def take(self, global_rows: Tensor) -> Tensor:
        """This process's rows of a tensor drawn for the whole global batch."""
        return global_rows[self.rows]

    def _out(self, t: Tensor, like: Tensor | None, device: Any) -> Tensor:
        t = self.take(t)
        if like is not None:
            return t.to(device=like.device, dtype=like.dtype if t.is_floating_point() else None)
        return t if device is None else t.to(device)

    def randn(
        self,
        *shape: int,
        dtype: torch.dtype = torch.float32,
        like: Tensor | None = None,
        device: Any = None,
    ) -> Tensor:
        """Standard normal ``[local_batch, *shape]`` (in ``like``'s dtype/device if given)."""
        dtype = like.dtype if like is not None else dtype
        t = torch.randn((self.global_batch, *shape), generator=self.gen, dtype=dtype)
        return self._out(t, like, device)

    def rand(
        self,
        *shape: int,
        dtype: torch.dtype = torch.float32,
        like: Tensor | None = None,
        device: Any = None,
    ) -> Tensor:
        """Uniform [0, 1) ``[local_batch, *shape]``."""
        dtype = like.dtype if like is not None else dtype
        t = torch.rand((self.global_batch, *shape), generator=self.gen, dtype=dtype)
        return self._out(t, like, device)

    def randint(self, high: int, *shape: int, device: Any = None) -> Tensor:
        """Integers in ``[0, high)``, ``[local_batch, *shape]``."""
        t = torch.randint(high, (self.global_batch, *shape), generator=self.gen)
        return self._out(t, None, device)

    def indices(self, n: int, replacement: bool = False) -> Tensor:
        """Dataset indices of this process's rows.

        Without replacement, step ``s`` reads positions ``[s*B, (s+1)*B)`` of an endless
        sequence of per-epoch permutations (seeded by ``(seed, epoch)``): every sample once per
        epoch, and computable from the step alone.
        """
        if n < 1:
            raise LinearizerError("cannot draw a batch from an empty dataset")
        if replacement:
            return self.randint(n)
        start = self.step * self.global_batch + self.rows.start
        positions = torch.arange(start, start + self.local_batch)
        out = torch.empty_like(positions)
        epochs = positions // n
        for epoch in torch.unique(epochs).tolist():
            mask = epochs == epoch
            out[mask] = _epoch_permutation(self.seed, int(epoch), n)[positions[mask] % n]
        return out

    def int_seed(self, tag: str) -> int:
        """An integer seed for this step and ``tag`` (same on every process)."""
        return derive_seed(self.seed, self.step, self.stream, tag)


__all__ = ["StepRandom", "derive_seed", "seed_globals"]
