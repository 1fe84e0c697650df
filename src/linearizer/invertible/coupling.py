"""Affine coupling: update one channel half with a shift and scale computed from the other.

Conditioner interface
---------------------
A conditioner is any ``nn.Module`` called as ``conditioner(u, flag) -> h`` with

* ``u``: ``Tensor[B, C_c, H, W]``, the half that is kept (read, not changed);
* ``flag``: ``Tensor[B]`` or ``None``, the network's conditioning flag, passed unchanged;
* ``h``: ``Tensor[B, 2 * C_out, H, W]``, channels ``[0, C_out)`` are the shifts ``s`` and
  channels ``[C_out, 2 * C_out)`` the raw log-scales ``l`` of the ``C_out`` updated channels.

The coupling applies ``y = (x + s) * exp(clamp(l))`` (shift *before* scale, as the authors)
and inverts it exactly with ``x = y * exp(-clamp(l)) - s``, because ``u`` is the same on both
sides. A conditioner whose last layer starts at zero makes the coupling start as the identity.

``shift_bound = S > 0`` soft-bounds the shift as ``S tanh(s / S)``. A conditioner that reads
an input far outside its training range extrapolates; unbounded, its shifts compound from block
to block into activations of 1e4 and more, where one float32 rounding of the kept half is
amplified past the image's range (docs/flow/roundtrip.md). Bounded, shift and log-scale both
saturate there: the coupling is affine with constant coefficients, and its inverse scales an
error by at most ``exp(clamp)``.

``odd_flags = (v, ...)`` makes the coupling odd on the rows whose flag is one of them: there the
shift is the odd part of the conditioner's, ``(s(u) - s(-u)) / 2``, and the log-scale its even
part, so ``y(-x) = -y(x)`` to the bit (IEEE sums and differences are exactly (anti)symmetric).
A network whose every stage is odd at a flag maps ``-z`` to ``-g(z)`` there; the flow's noise
side then reaches the latents ``a g(x)`` with ``a < 0``, which training never visits, by the
same computation as ``|a| g(x)``, mirrored (docs/flow/roundtrip.md §10). It costs a second
conditioner pass over those rows.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..checks import check_channels
from ..errors import LinearizerError
from .base import InvertibleModule
from .precision import run_conditioner

UPDATES = ("first", "second")
CLAMP_MODES = ("soft", "hard")


def bound_shift(raw: Tensor, bound: float) -> Tensor:
    """``bound * tanh(raw / bound)``, or ``raw`` itself for ``bound = 0`` (unbounded)."""
    return bound * torch.tanh(raw / bound) if bound else raw


def clamp_log_scale(raw: Tensor, clamp: float, mode: str) -> Tensor:
    """``soft``: ``clamp * tanh(raw / clamp)`` (smooth); ``hard``: clip to ``[-clamp, clamp]``."""
    return clamp * torch.tanh(raw / clamp) if mode == "soft" else raw.clamp(-clamp, clamp)


def _affine(x: Tensor, shift: Tensor, log_scale: Tensor, inverse: bool) -> Tensor:
    """The coupling's map of the changed half, ``(x + s) exp(l)``, or its inverse ``x exp(-l) - s``
    (memory-saving backpropagation re-runs the same arithmetic)."""
    return x * torch.exp(-log_scale) - shift if inverse else (x + shift) * torch.exp(log_scale)


class AffineCoupling(InvertibleModule):
    """Update one half of the channels given the other (see the module docstring).

    Channels split as ``a = [0, C // 2)`` and ``b = [C // 2, C)``. ``update="first"`` changes
    ``a`` given ``b``; ``update="second"`` changes ``b`` given ``a``. The conditioner is the
    submodule ``cond`` (the authors' key name).

    >>> class Shift(nn.Module):  # a toy conditioner: shift = u, log-scale = 0
    ...     def forward(self, u, flag=None):
    ...         return torch.cat([u, torch.zeros_like(u)], dim=1)
    >>> c = AffineCoupling(Shift())
    >>> x = torch.randn(2, 4, 3, 3)
    >>> bool(torch.equal(c(x)[:, :2], x[:, :2] + x[:, 2:]))
    True
    >>> bool(torch.allclose(c.inverse(c(x)), x, rtol=1e-5, atol=1e-6))
    True
    """

    def __init__(
        self,
        conditioner: nn.Module,
        update: str = "first",
        clamp: float = 5.0,
        clamp_mode: str = "soft",
        shift_bound: float = 0.0,
    ) -> None:
        super().__init__()
        if update not in UPDATES:
            raise LinearizerError(f"update must be one of {UPDATES}, got {update!r}")
        if clamp_mode not in CLAMP_MODES:
            raise LinearizerError(f"clamp_mode must be one of {CLAMP_MODES}, got {clamp_mode!r}")
        if not clamp > 0:
            raise LinearizerError(f"clamp must be positive, got {clamp}")
        if shift_bound < 0:
            raise LinearizerError(f"shift_bound must be >= 0 (0: unbounded), got {shift_bound}")
        self.cond = conditioner
        self.update = update
        self.clamp = float(clamp)
        self.clamp_mode = clamp_mode
        self.shift_bound = float(shift_bound)
        self.odd_flags: tuple[float, ...] = ()

    def _halves(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """``(changed, kept)`` halves of ``x``."""
        check_channels(x, None, "AffineCoupling")
        if x.shape[1] < 2:
            raise LinearizerError(f"AffineCoupling needs at least 2 channels, got {x.shape[1]}")
        half = x.shape[1] // 2
        a, b = x[:, :half], x[:, half:]
        return (a, b) if self.update == "first" else (b, a)

    def _join(self, changed: Tensor, kept: Tensor) -> Tensor:
        pair = (changed, kept) if self.update == "first" else (kept, changed)
        return torch.cat(pair, dim=1)

    def shift_log_scale(
        self, kept: Tensor, width: int, flag: Tensor | None
    ) -> tuple[Tensor, Tensor]:
        """Shift and clamped log-scale for ``width`` changed channels, computed from ``kept``."""
        h = run_conditioner(self.cond, kept, flag)
        expected = (kept.shape[0], 2 * width, *kept.shape[2:])
        if tuple(h.shape) != expected:
            raise LinearizerError(
                f"conditioner returned {tuple(h.shape)}, expected {expected} (shifts, log-scales)"
            )
        if self.odd_flags:
            h = self._odd_rows(h, kept, width, flag)
        shift = bound_shift(h[:, :width], self.shift_bound)
        return shift, clamp_log_scale(h[:, width:], self.clamp, self.clamp_mode)

    def _odd_rows(self, h: Tensor, kept: Tensor, width: int, flag: Tensor | None) -> Tensor:
        """``h`` with its rows at the odd flags replaced by the odd shifts and even log-scales
        (``flag=None`` is flag 0, as for :class:`FlagActNorm`)."""
        if flag is None:
            if 0.0 not in self.odd_flags:
                return h
            mirror = run_conditioner(self.cond, -kept, None)
            rows = torch.arange(len(kept), device=kept.device)
        else:
            odd = torch.tensor(self.odd_flags, dtype=flag.dtype, device=flag.device)
            rows = torch.isin(flag.reshape(-1), odd).nonzero().reshape(-1)
            if not len(rows):
                return h
            mirror = run_conditioner(self.cond, -kept[rows], flag[rows])
        mine = h[rows]
        parts = torch.cat(
            [mine[:, :width] - mirror[:, :width], mine[:, width:] + mirror[:, width:]], 1
        )
        return h.index_copy(0, rows, parts / 2)

    def forward(self, x: Tensor, flag: Tensor | None = None) -> Tensor:
        changed, kept = self._halves(x)
        shift, log_scale = self.shift_log_scale(kept, changed.shape[1], flag)
        return self._join(_affine(changed, shift, log_scale, False), kept)

    def inverse(self, z: Tensor, flag: Tensor | None = None) -> Tensor:
        changed, kept = self._halves(z)
        shift, log_scale = self.shift_log_scale(kept, changed.shape[1], flag)
        return self._join(_affine(changed, shift, log_scale, True), kept)

    def extra_repr(self) -> str:
        bound = f", shift_bound={self.shift_bound:g}" if self.shift_bound else ""
        odd = f", odd_flags={self.odd_flags}" if self.odd_flags else ""
        return (
            f"update={self.update!r}, clamp={self.clamp}, clamp_mode={self.clamp_mode!r}"
            f"{bound}{odd}"
        )
