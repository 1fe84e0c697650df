"""Latent ODE solvers for one-step flow matching, and their collapse into one matrix.

The model predicts x1 in the latent: ``A(t) z`` is the predicted data latent, so the velocity is
``v(z, t) = (A(t) z - z) / (1 - t)`` — a *linear* ODE ``z' = L(t) z``. Every solver step is
therefore a matrix ``M_i`` and T steps collapse into ``B = M_{T-2} ... M_0`` (column convention).

One step function serves both uses: :func:`integrate` propagates a batch of row vectors (the
multi-step sampler), and :func:`collapse` runs the *same* ``_step`` on the low-rank factors to
build B, so the collapsed matrix equals the multi-step result up to rounding for every method,
including RK4 (whose stage products ``(I + h/2 K1) ...`` are nested automatically). No
``D x D x D`` product is ever formed: steps are taken in blocks, each costing small ``K x K``
updates (``K`` = r x stage times in the block) and two ``D x K x D`` products.

The singularity at t = 1. ``1/(1 - t)`` blows up at t = 1, so like the authors we integrate over
the grid ``t_i = i/T``, ``i = 0 .. T-2`` and stop at ``t = 1 - 1/T`` (``final="skip"``). On the
last interval the Euler coefficient ``h/(1 - t)`` would equal 1, i.e. the step is a jump to the
x1-prediction ``A(1 - h) z`` (rank <= r); ``final="predict"`` takes that jump instead.

Methods (one signature, see :func:`integrate`):

* ``euler``: ``z += h L(t_i) z``.
* ``rk4``: classical Runge-Kutta 4 with stages at ``t_i, t_i + h/2, t_i + h``.
* ``rk4-authors``: the authors' one-step matrix ``I + h/6 [L(t_i) + 4 L(t_i + h/2) + L(t_i + h)]``,
  a first-order (Simpson-averaged generator) step kept only to reproduce their numbers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from ..errors import LinearizerError
from ..operators.base import LinearOperator
from ..operators.lora import rows_apply

FINALS = ("skip", "predict")
Callback = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class Sampler:
    """One explicit Runge-Kutta step for ``z' = v(z, t)``, as coefficients.

    ``times(i, h)``: the distinct times step ``i`` evaluates A at. Stage ``s`` evaluates the
    velocity at ``times[stage_time[s]]`` on ``z + sum_j (h * a) k_j`` for ``(j, a)`` in
    ``inputs[s]``; the step returns ``z + (h / denominator) * sum_s weights[s] k_s``.
    ``new_times``: times a step adds to the previous step's (its first time is the last one's).
    """

    name: str
    times: Callable[[int, float], tuple[float, ...]]
    stage_time: tuple[int, ...]
    inputs: tuple[tuple[tuple[int, float], ...], ...]
    weights: tuple[float, ...]
    denominator: float
    new_times: int


SAMPLERS: dict[str, Sampler] = {
    s.name: s
    for s in (
        Sampler("euler", lambda i, h: (i * h,), (0,), ((),), (1.0,), 1.0, 1),
        Sampler(
            "rk4",
            lambda i, h: (i * h, i * h + h / 2, (i + 1) * h),
            (0, 1, 1, 2),
            ((), ((0, 0.5),), ((1, 0.5),), ((2, 1.0),)),
            (1.0, 2.0, 2.0, 1.0),
            6.0,
            2,
        ),
        Sampler(
            "rk4-authors",
            lambda i, h: (i * h, i * h + h / 2, (i + 1) * h),
            (0, 1, 2),
            ((), (), ()),
            (1.0, 4.0, 1.0),
            6.0,
            2,
        ),
    )
}
METHODS = tuple(SAMPLERS)


class _Factors:
    """A(t) at a fixed list of times, evaluated in chunks of ``chunk`` times and cast to the
    working dtype: all of them at once (``lazy=False``, the table a collapse slices), or one
    chunk at a time as the steps reach it (``lazy=True``, what the multi-step solver reads: the
    memory of two chunks instead of T factors). Both evaluate the same chunks, so they read the
    same factors bit for bit. Small chunks keep the hypernetwork's output in the CPU's cache.
    """

    def __init__(
        self,
        op: LinearOperator,
        times: list[float],
        dtype: torch.dtype,
        chunk: int = 16,
        lazy: bool = False,
        direct: Callable[[Tensor, float], Tensor] | None = None,
    ) -> None:
        self.direct = direct  # A(t) on the solver's whole state (an operator's own route)
        self.times = list(dict.fromkeys(times))
        self.index = {t: k for k, t in enumerate(self.times)}
        self.op, self.dtype, self.chunk, self.lazy = op, dtype, chunk, lazy
        self.u: Tensor | None = None
        self.v: Tensor | None = None
        self.mats: list[Tensor] = []
        self._held: dict[int, tuple] = {}  # lazy: chunk number -> its factors, op's dtype
        self._buffers: dict[int, Tensor] = {}
        if not lazy:
            for s in range(0, len(self.index), chunk):
                self._keep(s, self._evaluate(s))

    def _evaluate(self, start: int) -> tuple:
        """``(U, V)`` ``[n, D, r]`` of the chunk starting at ``start``, or ``(None, matrices)``
        for an operator without low-rank factors; in the operator's dtype."""
        ref = next(self.op.parameters())
        tt = torch.tensor(
            self.times[start : start + self.chunk], dtype=ref.dtype, device=ref.device
        )
        with torch.no_grad():
            fac = self.op.factors(tt)
            if fac is None:
                return None, [self.op.matrix(float(t)) for t in tt]
        # A one-element chunk may come back unbatched ([D, r]); stacked operators give lists.
        return tuple(f if isinstance(f, list) or f.dim() > 2 else f.unsqueeze(0) for f in fac)

    def _keep(self, start: int, fac: tuple) -> None:
        if fac[0] is None:
            self.mats.extend(m.to(self.dtype) for m in fac[1])
            return
        if self.u is None:  # filled in place: one cast-and-copy pass, no concatenation
            kw = {"dtype": self.dtype, "device": fac[0].device}
            self.u = torch.empty(len(self.index), *fac[0].shape[1:], **kw)
            self.v = torch.empty(len(self.index), *fac[1].shape[1:], **kw)
        self.u[start : start + len(fac[0])].copy_(fac[0])
        self.v[start : start + len(fac[1])].copy_(fac[1])

    def _lazy(self, k: int) -> tuple[Tensor | None, Tensor]:
        """Time ``k``'s ``(U, V)`` (or ``(None, A)``) in the working dtype, copied into two
        buffers reused by every step (a fresh cast per step would fault its pages in anew)."""
        number = k // self.chunk
        if number not in self._held:
            # steps move forward: a step's times may straddle two chunks, never three
            self._held = {n: f for n, f in self._held.items() if n == number - 1}
            self._held[number] = self._evaluate(number * self.chunk)
        first, second = self._held[number]
        i = k - number * self.chunk
        if first is None:
            return None, second[i].to(self.dtype)
        return self._into(0, first, i), self._into(1, second, i)

    def _into(self, slot: int, parts: Tensor | list[Tensor], i: int) -> Tensor:
        """``parts[i]`` cast into buffer ``slot``; for stacked operators (a list of their
        factors) each one's ``[i]`` into its row of a ``[K, D, r]`` buffer."""
        stacked = isinstance(parts, list)
        buf = self._buffers.get(slot)
        if buf is None:
            shape = (len(parts), *parts[0].shape[1:]) if stacked else parts.shape[1:]
            buf = self._buffers[slot] = torch.empty(shape, dtype=self.dtype, device=parts[0].device)
        if stacked:
            for j, p in enumerate(parts):
                buf[j].copy_(p[i])
        else:
            buf.copy_(parts[i])
        return buf

    def apply(self, z: Tensor, t: float) -> Tensor:
        """``A(t) z`` for every row of ``z``."""
        if self.direct is not None:
            return self.direct(z, t)
        k = self.index[t]
        if self.lazy:
            u, v = self._lazy(k)
            counts = getattr(self.op, "counts", None)
            if counts is None:
                return z @ v.T if u is None else (z @ v) @ u.T
            # stacked operators: u, v [K, D, r] (or v [K, D, D]), z rows grouped by operator
            parts = z.split(counts)
            if u is None:
                return torch.cat([p @ v[j].T for j, p in enumerate(parts)])
            return torch.cat([(p @ v[j]) @ u[j].T for j, p in enumerate(parts)])
        if self.u is not None:
            return (z @ self.v[k]) @ self.u[k].T
        return z @ self.mats[k].T


def _step(fac: _Factors, z: Tensor, ts: tuple[float, ...], h: float, method: str) -> Tensor:
    """One step of ``method`` from its coefficients (``z`` a batch of rows, or a ``_Span``)."""
    sampler = SAMPLERS[method]
    ks: list = []
    for inputs, slot in zip(sampler.inputs, sampler.stage_time):
        y = z
        for j, a in inputs:
            y = y + (h * a) * ks[j]
        ks.append((fac.apply(y, ts[slot]) - y) / (1.0 - ts[slot]))  # the velocity at y
    total = sampler.weights[0] * ks[0]
    for w, k in zip(sampler.weights[1:], ks[1:]):
        total = total + w * k
    return z + (h / sampler.denominator) * total


def integrate(
    op: LinearOperator,
    z: Tensor,
    *,
    steps: int,
    method: str,
    final: str,
    callback: Callback | None = None,
    dtype: torch.dtype | None = None,
) -> Tensor:
    """Integrate the latent flow from t = 0 for a batch of flattened latents ``z [B, D]``.

    ``dtype`` is the working precision (default: ``z``'s); A's factors are evaluated in the
    operator's own dtype, a few times at once as the steps reach them, and cast (the memory of a
    few steps' factors, not T's). ``callback`` receives ``{"i", "t", "steps", "z"}`` after
    each step.

    >>> from linearizer.operators.dense import Dense
    >>> op = Dense(torch.eye(3, dtype=torch.float64) * 0.5)
    >>> z = torch.ones(1, 3, dtype=torch.float64)
    >>> integrate(op, z, steps=4, method="euler", final="skip").shape
    torch.Size([1, 3])
    """
    sched = Schedule(op, steps, method, final, dtype or z.dtype, lazy=True)
    return sched.propagate(z.to(sched.dtype), callback)


def integrate_each(
    ops: Sequence[LinearOperator],
    zs: Sequence[Tensor],
    *,
    steps: int,
    method: str,
    final: str,
    dtype: torch.dtype | None = None,
) -> list[Tensor]:
    """``integrate(ops[k], zs[k])`` for every ``k`` in one pass: the rows go through every step
    together, each group through its own operator, so a mixture's few samples per component
    cost one solver run, not K. When the operators are classes of one class-conditional
    :class:`~linearizer.operators.lora.TimeLoRA` with under twelve rows each, the solver steps
    every row's coordinates in its basis, one GEMM over the rows a step, and forms no class's
    factors (:class:`~linearizer.operators.lora.BasisRows`): the same map, to float64 rounding.

    >>> from linearizer.operators.dense import Dense
    >>> ops = [Dense(torch.eye(3, dtype=torch.float64) * s) for s in (0.5, 2.0)]
    >>> zs = [torch.ones(1, 3, dtype=torch.float64), torch.ones(2, 3, dtype=torch.float64)]
    >>> [z.shape[0] for z in integrate_each(ops, zs, steps=4, method="euler", final="skip")]
    [1, 2]
    """
    if len(ops) != len(zs) or not ops:
        raise LinearizerError(
            f"integrate_each needs one batch per operator, got {len(zs)} for {len(ops)}"
        )
    dtype = dtype or zs[0].dtype
    stack = _Stack(ops, [len(z) for z in zs])
    rows = torch.cat([z.to(dtype) for z in zs])
    # few rows per operator: the rows through their common operator at once, when it can
    direct = rows_apply(ops, stack.counts, dtype)
    sched = Schedule(stack, steps, method, final, dtype, lazy=True, direct=direct)
    if direct is None:
        out = sched.propagate(rows, None)
    else:  # the solver steps the rows' coordinates in the operator's basis
        out = direct.rows(sched.propagate(direct.start(rows, sched.fac.times), None))
    return list(out.split(stack.counts))


class _Stack(nn.Module):
    """Operators side by side for :func:`integrate_each`, and how many rows each applies to:
    ``factors(t)``, each operator's own factors at the same times (so each reads what it reads
    alone), or ``matrix(t)`` ``[K, D, D]`` when they have no common low-rank shape."""

    def __init__(self, ops: Sequence[LinearOperator], counts: list[int]) -> None:
        super().__init__()
        self.ops = nn.ModuleList(ops)
        self.counts = counts  # rows per operator, in order
        self.in_features = ops[0].in_features

    def factors(self, tt: Tensor) -> tuple[list[Tensor], list[Tensor]] | None:
        """Each operator's ``(U, V)`` ``[n, D, r]`` at times ``tt``, as two lists (never
        stacked: the solver copies one time's factors at a time)."""
        facs = [op.factors(tt) for op in self.ops]
        if any(f is None for f in facs) or len({f[0].shape for f in facs}) > 1:
            return None
        return tuple([f[j].reshape(len(tt), *f[j].shape[-2:]) for f in facs] for j in (0, 1))

    def matrix(self, t: float) -> Tensor:
        return torch.stack([op.matrix(t) for op in self.ops])


def collapse(
    op: LinearOperator,
    *,
    steps: int,
    method: str,
    final: str,
    dtype: torch.dtype = torch.float64,
    callback: Callback | None = None,
    block: int | None = None,
) -> Tensor:
    """The one-step matrix B (column convention: ``z_T = B z_0``) of ``integrate``.

    The same solver step as ``integrate`` runs on the rank-r factors in blocks of ``block`` steps
    (default: about 128 factor columns per block); see :class:`_Span` for why this is exact.
    Operators without low-rank factors fall back to integrating the identity basis step by step.
    Accumulates in ``dtype`` (float64 by default). ``callback`` receives ``{"i", "t", "steps"}``
    after each block.

    >>> from linearizer.operators.lora import TimeLoRA
    >>> op = TimeLoRA(16, 2, emb_dim=8, hidden=16).double()
    >>> b = collapse(op, steps=12, method="rk4", block=5, final="skip")
    >>> z0 = torch.randn(3, 16, dtype=torch.float64)
    >>> bool(torch.allclose(z0 @ b.T, integrate(op, z0, steps=12, method="rk4", final="skip"),
    ...                    rtol=1e-12, atol=1e-12))
    True
    """
    return collapse_dense(Schedule(op, steps, method, final, dtype, block), callback)


def collapse_dense(sched: Schedule, callback: Callback | None = None) -> Tensor:
    """The dense B of a prepared :class:`Schedule` (what :func:`collapse` returns)."""
    eye = torch.eye(sched.dim, dtype=sched.dtype, device=sched.device)
    if sched.fac.u is None:
        return sched.propagate(eye, callback).T.contiguous()
    y = eye
    for start, bf, x in sched.blocks(callback):
        q = bf.v.T if start == 0 else bf.v.T @ y  # V_blk^T Y0; Y0 = I in the first block
        y = torch.addmm(y, bf.u @ x.r, q, beta=x.pi)
    return y


class Schedule:
    """A collapse's steps, its A(t) factors and its blocks; shared by the dense :func:`collapse`
    and the factored one (:mod:`linearizer.flow.factored`), so both run the same ``_step``; also
    :func:`integrate`'s steps (:meth:`propagate`).

    :meth:`blocks` yields ``(start, block_factors, span)`` per block: the block maps the matrix
    ``Y0`` it starts from to ``span.pi * Y0 + (U_blk @ span.r) @ (V_blk^T @ Y0)``.
    ``lazy``: A's factors are evaluated as the steps reach them (:meth:`propagate` only; a
    collapse reads the whole table). ``direct``: ``A(t)`` as one function of the state that
    :meth:`propagate` steps (the rows, or their coordinates in an operator's basis), no factors
    read (:meth:`propagate` only).
    """

    def __init__(
        self,
        op: LinearOperator,
        steps: int,
        method: str,
        final: str,
        dtype: torch.dtype,
        block: int | None = None,
        lazy: bool = False,
        direct: Callable[[Tensor, float], Tensor] | None = None,
    ) -> None:
        if method not in METHODS:
            raise LinearizerError(f"unknown sampling method {method!r}; choose one of {METHODS}")
        if final not in FINALS:
            raise LinearizerError(f"unknown final step {final!r}; choose one of {FINALS}")
        if int(steps) != steps or steps < 2:
            raise LinearizerError(f"steps must be an integer >= 2, got {steps!r}")
        if block is not None and (int(block) != block or block < 1):
            raise LinearizerError(f"block must be a positive integer, got {block!r}")
        self.method, self.h = method, 1.0 / steps
        self.dim, self.dtype = op.in_features, dtype
        self.device = next(op.parameters()).device
        self.plan = [SAMPLERS[method].times(i, self.h) for i in range(steps - 1)]
        self.extra = [1.0 - self.h] if final == "predict" else []
        times = [t for ts in self.plan for t in ts] + self.extra
        self.fac = _Factors(op, times, dtype, lazy=lazy, direct=direct)
        if block is None and self.fac.u is not None:
            block = max(1, 128 // (self.fac.u.shape[-1] * SAMPLERS[method].new_times))
        self.block = block or 1

    def propagate(self, z: Tensor, callback: Callback | None) -> Tensor:
        """``z`` (rows) stepped through the plan and the final jump, one step at a time."""
        for i, ts in enumerate(self.plan):
            z = _step(self.fac, z, ts, self.h, self.method)
            if callback is not None:
                callback({"i": i, "t": ts[0] + self.h, "steps": len(self.plan), "z": z})
        if self.extra:
            z = self.fac.apply(z, self.extra[0])
        return z

    def chunks(self) -> list[tuple[int, list[tuple[float, ...]], list[float]]]:
        """``(start, steps, final jump)`` of every block; the jump only in the last block."""
        n, b = len(self.plan), self.block
        return [(s, self.plan[s : s + b], self.extra if s + b >= n else []) for s in range(0, n, b)]

    def block_times(self, chunk: list[tuple[float, ...]], extra: list[float]) -> list[float]:
        return [t for ts in chunk for t in ts] + extra

    def width(self) -> int | None:
        """Columns of all blocks' factors together: the rank bound of ``B - c I`` (None when
        the operator has no low-rank factors)."""
        if self.fac.u is None:
            return None
        slots = sum(len(dict.fromkeys(self.block_times(c, e))) for _, c, e in self.chunks())
        return slots * self.fac.u.shape[-1]

    def blocks(self, callback: Callback | None = None):
        for start, chunk, extra in self.chunks():
            bf = _BlockFactors(self.fac, self.block_times(chunk, extra))
            x = _Span(1.0, torch.zeros_like(bf.g))
            for ts in chunk:
                x = _step(bf, x, ts, self.h, self.method)  # type: ignore[arg-type]
            if extra:
                x = bf.apply(x, extra[0])
            yield start, bf, x
            if callback is not None:
                i = start + len(chunk) - 1
                callback({"i": i, "t": chunk[-1][0] + self.h, "steps": len(self.plan)})


class _Span:
    """``pi * Y0 + U_blk @ r @ Q`` inside one block of steps (``r``: ``[K, K]``).

    ``Y0`` is the matrix at the start of the block, ``U_blk`` (``[D, K]``) the block's U(t)
    factors side by side (``K = r x`` distinct stage times) and ``Q = V_blk^T Y0``. Every
    quantity a solver step forms from ``Y0`` has this shape, because
    ``A(t) X = U(t) V(t)^T X = U(t) (pi E_t + G_t r) Q`` with ``G = V_blk^T U_blk`` and ``E_t``
    the rows of the identity that pick time t's factors. So ``_step`` runs unchanged on ``K x K``
    coefficients instead of ``D x D`` matrices, and the block ends with two ``D x K x D``
    products; this turns per-step memory traffic over D x D into a few efficient GEMMs.
    """

    __slots__ = ("pi", "r")

    def __init__(self, pi: float, r: Tensor) -> None:
        self.pi, self.r = pi, r

    def __add__(self, other: _Span) -> _Span:
        return _Span(self.pi + other.pi, self.r + other.r)

    def __sub__(self, other: _Span) -> _Span:
        return _Span(self.pi - other.pi, self.r - other.r)

    def __mul__(self, c: float) -> _Span:
        return _Span(self.pi * c, self.r * c)

    __rmul__ = __mul__

    def __truediv__(self, c: float) -> _Span:
        return _Span(self.pi / c, self.r / c)


class _BlockFactors:
    """``apply(span, t) = A(t) span`` for the times of one block (the ``_Factors`` interface)."""

    def __init__(self, fac: _Factors, times: list[float]) -> None:
        slots = list(dict.fromkeys(times))
        keys = [fac.index[t] for t in slots]
        d, self.rank = fac.u.shape[1], fac.u.shape[2]
        # A block's times are consecutive in the factor table, so a slice (a view) selects them.
        pick = slice(keys[0], keys[-1] + 1) if keys == list(range(keys[0], keys[-1] + 1)) else keys
        self.u = fac.u[pick].permute(1, 0, 2).reshape(d, len(keys) * self.rank)
        self.v = fac.v[pick].permute(1, 0, 2).reshape(d, len(keys) * self.rank)
        self.g = self.v.T @ self.u
        self.eye = torch.eye(self.g.shape[0], dtype=self.g.dtype, device=self.g.device)
        self.slot = {t: k for k, t in enumerate(slots)}

    def apply(self, x: _Span, t: float) -> _Span:
        k = self.slot[t]
        rows = slice(k * self.rank, (k + 1) * self.rank)
        out = torch.zeros_like(self.g)
        torch.addmm(self.eye[rows], self.g[rows], x.r, beta=x.pi, out=out[rows])
        return _Span(0.0, out)
