"""A faster exact collapse (proposed for ``linearizer.flow.solvers.collapse``).

``solvers.collapse`` integrates the D x D identity step by step: each stage is two thin
products through the rank-r factors plus several elementwise passes over a D x D matrix, so
it is bound by memory traffic, not arithmetic. Here the steps are taken in *blocks*: within a
block of ``s`` steps every quantity the stepper touches has the form

    X = pi * Y0 + U_blk @ R          (Y0: the matrix at the start of the block, [D, D];
                                      U_blk: the block's U(t) factors side by side, [D, K];
                                      R: [K, D], K = r * distinct stage times in the block)

because each stage applies ``A(t) = U(t) V(t)^T``: ``A(t) X = U(t) (pi Q_t + G_t R)`` with
``Q = V_blk^T Y0`` and ``G = V_blk^T U_blk`` computed once per block. The solver's own step
function (:func:`linearizer.flow.solvers._step`) runs unchanged on these ``Span`` objects, so
every method (euler, rk4 with its nested stage products, rk4-authors) is supported and the
result is the same matrix up to rounding. Per block, two [D, K] x [K, D]-sized products
(efficient GEMMs) replace ``s`` passes of elementwise traffic over D x D.

>>> import torch
>>> from linearizer.operators.lora import TimeLoRA
>>> from linearizer.flow import solvers
>>> op = TimeLoRA(16, 2, emb_dim=8, hidden=16).double()
>>> a = collapse_blocked(op, steps=12, method="rk4", block=5)
>>> b = solvers.collapse(op, steps=12, method="rk4")
>>> bool(torch.allclose(a, b, atol=1e-12))
True
"""

from __future__ import annotations

import torch
from torch import Tensor

from linearizer.flow import solvers


class Span:
    """``pi * Y0 + U_blk @ r`` (``r``: [K, m]); supports the operations ``solvers._step`` uses."""

    __slots__ = ("pi", "r")

    def __init__(self, pi: float, r: Tensor) -> None:
        self.pi, self.r = pi, r

    def __add__(self, other: Span) -> Span:
        return Span(self.pi + other.pi, self.r + other.r)

    def __sub__(self, other: Span) -> Span:
        return Span(self.pi - other.pi, self.r - other.r)

    def __mul__(self, c: float) -> Span:
        return Span(self.pi * c, self.r * c)

    __rmul__ = __mul__

    def __truediv__(self, c: float) -> Span:
        return Span(self.pi / c, self.r / c)


class _BlockFactors:
    """``apply(span, t) = A(t) span`` inside one block, through ``Q`` and ``G``."""

    def __init__(self, fac: solvers._Factors, times: list[float], y0: Tensor) -> None:
        self.times = list(dict.fromkeys(times))
        keys = [fac.index[t] for t in self.times]
        d, r = fac.u.shape[1], fac.u.shape[2]
        self.rank = r
        self.u = fac.u[keys].permute(1, 0, 2).reshape(d, len(keys) * r)
        v = fac.v[keys].permute(1, 0, 2).reshape(d, len(keys) * r)
        self.q = v.T @ y0  # [K, m]
        self.g = v.T @ self.u  # [K, K]
        self.slot = {t: k for k, t in enumerate(self.times)}

    def zero(self) -> Span:
        return Span(0.0, self.q.new_zeros(self.q.shape))

    def apply(self, x: Span, t: float) -> Span:
        rows = slice(self.slot[t] * self.rank, (self.slot[t] + 1) * self.rank)
        w = torch.addmm(self.q[rows], self.g[rows], x.r, beta=x.pi)  # V(t)^T X, [r, m]
        out = self.zero()
        out.r[rows] = w
        return out


def collapse_blocked(
    op,
    *,
    steps: int,
    method: str = "euler",
    final: str = "skip",
    dtype: torch.dtype = torch.float64,
    block: int | None = None,
) -> Tensor:
    """The same B as ``solvers.collapse`` (column convention ``z1 = B z0``), in blocks of steps.

    ``block``: steps per block (default: about 256 factor columns per block).
    """
    solvers.check_schedule(steps, method, final)
    h = 1.0 / steps
    plan = solvers.stage_times(steps, method)
    extra = [1.0 - h] if final == "predict" else []
    fac = solvers._Factors(op, [t for ts in plan for t in ts] + extra, dtype)
    rank = fac.u.shape[-1]
    if block is None:
        per_step = 1 if method == "euler" else 2
        block = max(1, 256 // (rank * per_step))
    ref = next(op.parameters())
    y = torch.eye(op.in_features, dtype=dtype, device=ref.device)
    for start in range(0, len(plan), block):
        chunk = plan[start : start + block]
        last = start + block >= len(plan)
        times = [t for ts in chunk for t in ts] + (extra if last else [])
        bf = _BlockFactors(fac, times, y)
        x = Span(1.0, bf.zero().r)
        for ts in chunk:
            x = solvers._step(bf, x, ts, h, method)
        if last and extra:
            x = bf.apply(x, extra[0])
        y = torch.addmm(y, bf.u, x.r, beta=x.pi)
    return y
