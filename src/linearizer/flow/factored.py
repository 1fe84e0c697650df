"""The one-step matrix kept factored, ``B = c I + U V^T``, for large latents.

Every solver step adds at most ``r`` columns per stage time to the low-rank part: a block of steps
maps ``Y0`` to ``pi Y0 + (U_blk R) (V_blk^T Y0)`` (see :class:`linearizer.flow.solvers.Schedule`),
so starting from ``Y0 = c I + U V^T`` it gives ``pi c I + [pi U + U_blk R V_blk^T U, c U_blk R]
[V, V_blk]^T``. After all blocks ``U`` and ``V`` are ``D x K`` with ``K`` = rank x stage times
(792 for T = 100, Euler, r = 8), against ``D x D`` for the dense B (D = 12,288 at CelebA 64x64x3).
The blocks, their factors and their steps are the dense collapse's own, so both forms hold the
same B to rounding.

What the factored form gives without ever forming ``D x D``:

* ``apply`` (``B z``) and ``apply_transpose`` (``B^T z``) in ``2 D K`` operations per vector;
* ``solve`` (``B^-1 z``) by Woodbury, ``(c I + U V^T)^-1 = (I - U S^-1 V^T) / c`` with the
  ``K x K`` core ``S = c I + V^T U`` (float64);
* ``pinv``, ``singular_values`` and the top singular triplets (``svd``) from one orthonormal
  basis ``Q`` of ``[U, V]``: ``B`` maps ``span(Q)`` to itself through the ``2K x 2K`` core
  ``c I + (Q^T U)(Q^T V)^T`` and is ``c I`` on the orthogonal complement.

>>> from linearizer.operators.lora import TimeLoRA
>>> op = TimeLoRA(64, 2, emb_dim=8, hidden=16).double()
>>> fb = collapse_factored(op, steps=6, method="euler", final="skip")
>>> dense = solvers.collapse(op, steps=6, method="euler", final="skip")
>>> bool(torch.allclose(fb.to_dense(), dense, rtol=1e-12, atol=1e-14))
True
>>> fb.shape, fb.width
((64, 64), 10)
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..errors import LinearizerError
from ..operators.base import LinearOperator
from . import solvers

FORMS = ("auto", "dense", "factored")
# Below this latent size the dense B is at most 128 MiB in float64 and its GEMMs are fast; keeping
# it dense there also leaves every MNIST-size result exactly as the dense path computes it.
MIN_FACTORED_DIM = 4096
F64 = torch.float64


class FactoredMatrix:
    """``B = c I + U V^T`` (column convention, ``U, V: [D, K]``); all methods take rows."""

    def __init__(self, c: float, u: Tensor, v: Tensor) -> None:
        if u.shape != v.shape or u.dim() != 2:
            shapes = f"{list(u.shape)}, {list(v.shape)}"
            raise LinearizerError(f"factors must both be [D, K], got {shapes}")
        self.c, self.u, self.v = float(c), u, v
        self._core: tuple | None = None

    @property
    def shape(self) -> tuple[int, int]:
        return (self.u.shape[0], self.u.shape[0])

    @property
    def width(self) -> int:
        """K, the number of columns of U and V (a bound on the rank of ``B - c I``)."""
        return self.u.shape[1]

    @property
    def dtype(self) -> torch.dtype:
        return self.u.dtype

    @property
    def nbytes(self) -> int:
        return self.u.nbytes + self.v.nbytes

    def apply(self, z: Tensor) -> Tensor:
        """``B z`` for every row of ``z [N, D]``, in B's dtype."""
        z = z.to(self.dtype)
        return torch.addmm(z, z @ self.v, self.u.T, beta=self.c)

    def apply_transpose(self, z: Tensor) -> Tensor:
        """``B^T z`` for every row of ``z [N, D]``."""
        z = z.to(self.dtype)
        return torch.addmm(z, z @ self.u, self.v.T, beta=self.c)

    def solve(self, z: Tensor) -> Tensor:
        """``B^-1 z`` for every row of ``z [N, D]`` by Woodbury, in float64."""
        if self.c == 0.0:
            raise LinearizerError(
                "this one-step matrix is singular (final='predict' leaves no identity part); "
                "use pinv() instead of solve()"
            )
        if self._core is None:
            u, v = self.u.to(F64), self.v.to(F64)
            core = v.T @ u
            core.diagonal().add_(self.c)
            lu, piv = torch.linalg.lu_factor(core)
            self._core = (u, v, lu, piv)
        u, v, lu, piv = self._core
        z = z.to(F64)
        w = torch.linalg.lu_solve(lu, piv, (z @ v).T)  # S^-1 V^T z, [K, N]
        return (z - (u @ w).T) / self.c

    def _basis(self) -> tuple[Tensor, Tensor]:
        """``Q`` (orthonormal, spans U and V) and the core ``c I + (Q^T U)(Q^T V)^T``, float64."""
        u, v = self.u.to(F64), self.v.to(F64)
        q = torch.linalg.qr(torch.cat([u, v], dim=1)).Q
        core = (q.T @ u) @ (q.T @ v).T
        core.diagonal().add_(self.c)
        return q, core

    def singular_values(self) -> Tensor:
        """All ``D`` singular values of B (float64, descending) from the small core."""
        q, core = self._basis()
        rest = self.shape[0] - q.shape[1]
        sv = torch.linalg.svdvals(core)
        sv = torch.cat([sv, torch.full((rest,), abs(self.c), dtype=F64, device=sv.device)])
        return sv.sort(descending=True).values

    def svd(self, k: int) -> tuple[Tensor, Tensor, Tensor]:
        """The top-``k`` singular triplets ``(U [D, k], S [k], V [D, k])`` of B (float64), from
        the core; ``B v_i = s_i u_i``. Needs ``s_k > |c|`` (all singular values outside the
        core's space equal ``|c|``, and their vectors are not unique)."""
        q, core = self._basis()
        if not 1 <= k <= q.shape[1]:
            raise LinearizerError(f"k must be in 1..{q.shape[1]}, got {k}")
        uc, s, vch = torch.linalg.svd(core)
        if q.shape[1] < self.shape[0] and float(s[k - 1]) <= abs(self.c):
            raise LinearizerError(
                f"only {int((s > abs(self.c)).sum())} singular values of B exceed |c| = "
                f"{abs(self.c):.3g}; ask for at most that many"
            )
        return q @ uc[:, :k], s[:k], q @ vch[:k].T

    def pinv(self, rcond: float = 1e-15) -> FactoredMatrix:
        """``B^+`` as a factored matrix (float64); singular values below ``rcond`` times the
        largest count as zero, as in ``torch.pinverse``."""
        q, core = self._basis()
        top = max(float(torch.linalg.matrix_norm(core, ord=2)), abs(self.c))
        cut = rcond * top
        c_plus = 1.0 / self.c if abs(self.c) > cut else 0.0
        inner = torch.linalg.pinv(core, atol=cut, rtol=0.0)
        inner.diagonal().sub_(c_plus)
        return FactoredMatrix(c_plus, q @ inner, q)

    def to_dense(self) -> Tensor:
        """The ``D x D`` matrix (for checks at small D)."""
        eye = torch.eye(self.shape[0], dtype=self.dtype, device=self.u.device)
        return torch.addmm(eye, self.u, self.v.T, beta=self.c)

    def to(self, dtype: torch.dtype) -> FactoredMatrix:
        return FactoredMatrix(self.c, self.u.to(dtype), self.v.to(dtype))


def collapse_factored(
    op: LinearOperator,
    *,
    steps: int,
    method: str,
    final: str,
    dtype: torch.dtype = F64,
    callback: solvers.Callback | None = None,
    block: int | None = None,
) -> FactoredMatrix:
    """B of :func:`linearizer.flow.solvers.collapse` as ``c I + U V^T`` (same arguments)."""
    return _factored(solvers.Schedule(op, steps, method, final, dtype, block), callback)


def _factored(sched: solvers.Schedule, callback: solvers.Callback | None) -> FactoredMatrix:
    width = sched.width()
    if width is None:
        raise LinearizerError(
            "the factored one-step matrix needs an operator with low-rank factors A(t) = U V^T"
        )
    kw = {"dtype": sched.dtype, "device": sched.device}
    u, v = torch.empty(sched.dim, width, **kw), torch.empty(sched.dim, width, **kw)
    c, k = 1.0, 0
    for _, bf, x in sched.blocks(callback):
        w = bf.u @ x.r  # U_blk R: the block's new columns
        kb = w.shape[1]
        if k:  # pi U + U_blk R (V_blk^T U), in place
            u[:, :k].addmm_(w, bf.v.T @ u[:, :k], beta=x.pi)
        torch.mul(w, c, out=u[:, k : k + kb])
        v[:, k : k + kb].copy_(bf.v)
        c, k = c * x.pi, k + kb
    return FactoredMatrix(c, u, v)


def worth_factoring(dim: int, width: int | None) -> bool:
    """The automatic choice: factored when D is large and U, V take at most half of ``D x D``."""
    return width is not None and dim >= MIN_FACTORED_DIM and 4 * width <= dim


def one_step(
    op: LinearOperator,
    *,
    steps: int,
    method: str,
    final: str,
    dtype: torch.dtype = F64,
    form: str = "auto",
    callback: solvers.Callback | None = None,
) -> Tensor | FactoredMatrix:
    """The one-step matrix in ``form`` (``auto``: factored when :func:`worth_factoring`)."""
    if form not in FORMS:
        raise LinearizerError(f"unknown one-step form {form!r}; choose one of {FORMS}")
    sched = solvers.Schedule(op, steps, method, final, dtype)
    if form == "auto":
        form = "factored" if worth_factoring(sched.dim, sched.width()) else "dense"
    if form == "dense":
        return solvers.collapse_dense(sched, callback)
    return _factored(sched, callback)


def apply_rows(b: Tensor | FactoredMatrix, z: Tensor) -> Tensor:
    """``B z`` for every row of ``z``, whichever form B is in (B's dtype)."""
    if isinstance(b, FactoredMatrix):
        return b.apply(z)
    return z.to(b.dtype) @ b.T


def solve_rows(b: Tensor | FactoredMatrix, z: Tensor) -> Tensor:
    """``B^-1 z`` for every row of ``z``: Woodbury (float64) or an LU solve in B's dtype."""
    if isinstance(b, FactoredMatrix):
        return b.solve(z)
    return torch.linalg.solve(b, z.to(b.dtype).T).T
