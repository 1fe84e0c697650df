"""Time-dependent low-rank operator ``A(t) = U(t) V(t)^T`` whose factors come from hypernetworks.

This is the paper's one-step-generation operator (the authors' ``TimeDependentLoRALinearLayer``,
translated to column vectors: their ``lin2`` gives our ``U``, their ``lin1`` our ``V``). Each
factor comes from its own MLP of ``t``: a sinusoidal embedding, Linear layers with an activation
between them, and a last Linear to ``features * rank`` numbers read row-major as ``[features,
rank]``. Applying ``A(t)`` to a batch costs two batched ``[D, r]`` products per sample; no ``D x D``
matrix is ever built except by :meth:`TimeLoRA.matrix`.

>>> import torch
>>> op = TimeLoRA(features=16, rank=2, emb_dim=8, hidden=32)
>>> z, t = torch.randn(4, 16), torch.rand(4)
>>> out = op(z, t)
>>> bool(torch.allclose(out[1], op.matrix(float(t[1])) @ z[1], rtol=1e-5, atol=1e-5))
True
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import cast

import torch
from torch import Tensor, nn

from ..errors import LinearizerError
from .base import LinearOperator, factor_product
from .dense import check_rows

_ACTIVATIONS = {"gelu": nn.GELU, "silu": nn.SiLU, "relu": nn.ReLU, "tanh": nn.Tanh}


class SinusoidalEmbedding(nn.Module):
    """``t -> [sin(t w_0..w_{h-1}), cos(t w_0..w_{h-1})]`` with ``w_k = exp(-k ln(10000)/(h-1))``.

    ``h = dim / 2``; ``t`` is used unscaled. Stateless (no buffers), so it adds nothing to the
    state dict; the frequencies are computed in ``t``'s dtype the same way the authors do.
    """

    def __init__(self, dim: int) -> None:
        super().__init__()
        if dim < 4 or dim % 2:
            raise LinearizerError(f"sinusoidal embedding width must be even and >= 4, got {dim}")
        self.dim = dim

    def forward(self, t: Tensor) -> Tensor:
        half = self.dim // 2
        step = math.log(10000) / (half - 1)
        freqs = torch.exp(torch.arange(half, device=t.device, dtype=t.dtype) * -step)
        angles = t[:, None] * freqs[None, :]
        return torch.cat([angles.sin(), angles.cos()], dim=-1)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


def hypernetwork(
    emb_dim: int, hidden: int, depth: int, out: int, activation: str, emb: str, basis: int = 0
) -> nn.Sequential:
    """Embedding at index 0, then Linear/activation pairs; the Linear layers sit at odd indices.

    ``basis > 0`` ends with ``Linear(hidden, basis)`` and ``Linear(basis, out)``: the output is a
    learned mix of ``basis`` fixed matrices (plus a bias matrix) with weights that depend on t,
    so the big last layer has ``basis`` instead of ``hidden`` inputs (cheaper, affords larger r).
    """
    if emb != "sinusoidal":
        raise LinearizerError(f"unknown time embedding {emb!r}; available: 'sinusoidal'")
    if activation not in _ACTIVATIONS:
        raise LinearizerError(f"unknown activation {activation!r}; available: {list(_ACTIVATIONS)}")
    if depth < 1:
        raise LinearizerError(f"hypernetwork depth must be >= 1, got {depth}")
    act = _ACTIVATIONS[activation]
    layers: list[nn.Module] = [SinusoidalEmbedding(emb_dim), nn.Linear(emb_dim, hidden), act()]
    for _ in range(depth - 1):
        layers += [nn.Linear(hidden, hidden), act()]
    if basis > 0:
        layers += [nn.Linear(hidden, basis), nn.Linear(basis, out)]
    else:
        layers.append(nn.Linear(hidden, out))
    return nn.Sequential(*layers)


class TimeLoRA(LinearOperator):
    """``A(t) = U(t) V(t)^T`` of rank ``<= rank`` on ``features``-dimensional latents.

    ``u_net`` and ``v_net`` are the two hypernetworks (``nn.Sequential``; embedding at index 0,
    Linear layers at 1, 3, 5 for ``depth=2``). ``v_scale`` multiplies ``V`` (``1/sqrt(D)`` keeps a
    freshly initialised operator near unit gain; the authors use 1.0).
    ``t`` is a float (one time for the batch) or a ``[B]`` tensor (one time per sample); rows
    whose times repeat in consecutive runs share one ``(U, V)`` per run, which makes the factors
    ``runs`` times instead of ``B`` times cheaper to build (what ``time_groups`` in training uses).
    """

    time_dependent = True
    u_net: nn.Sequential
    v_net: nn.Sequential

    def __init__(
        self,
        features: int,
        rank: int,
        emb_dim: int = 128,
        hidden: int = 512,
        depth: int = 2,
        activation: str = "gelu",
        emb: str = "sinusoidal",
        v_scale: float = 1.0,
        basis: int = 0,
        classes: int = 0,
    ) -> None:
        super().__init__()
        if features < 1 or rank < 1 or basis < 0 or classes < 0:
            raise LinearizerError(
                f"TimeLoRA needs features, rank >= 1 and basis, classes >= 0, got {features}, "
                f"{rank}, {basis}, {classes}"
            )
        self.in_features = self.out_features = features
        self.rank = rank
        self.v_scale = float(v_scale)
        out = features * rank
        self.u_net = hypernetwork(emb_dim, hidden, depth, out, activation, emb, basis)
        self.v_net = hypernetwork(emb_dim, hidden, depth, out, activation, emb, basis)
        self.classes = classes
        if classes:
            # Added to the time embedding; row `classes` is the null class of classifier-free
            # guidance. Zero at init: every class starts as the unconditional operator.
            self.u_class = nn.Embedding(classes + 1, emb_dim)
            self.v_class = nn.Embedding(classes + 1, emb_dim)
            nn.init.zeros_(self.u_class.weight)
            nn.init.zeros_(self.v_class.weight)

    @property
    def null(self) -> int:
        """The label of the null class (``classes``): the unconditional operator."""
        return self.classes

    def _labels(self, c: int | Tensor | None, n: int) -> Tensor | None:
        """``c`` as ``n`` int64 labels on the weights' device (None for an unconditional op)."""
        if c is None:
            if self.classes:
                raise LinearizerError(
                    "this operator is class-conditional: pass c (a label in "
                    f"0..{self.classes - 1}, or {self.null} for none)"
                )
            return None
        if not self.classes:
            raise LinearizerError("this operator is not class-conditional: it takes no class")
        cc = torch.as_tensor(c, device=self.u_class.weight.device).reshape(-1).long()
        if len(cc) == 1:
            cc = cc.expand(n)
        if len(cc) != n:
            raise LinearizerError(f"c has {len(cc)} labels for {n} times")
        if bool(((cc < 0) | (cc > self.null)).any()):
            raise LinearizerError(
                f"class labels must lie in 0..{self.null}, got {sorted(set(cc.tolist()))}"
            )
        return cc

    def _times(self, t: float | Tensor | None) -> tuple[Tensor, bool]:
        """``t`` as a 1-D tensor in the hypernetwork's dtype, and whether it is per-sample."""
        if t is None:
            raise LinearizerError("TimeLoRA is time-dependent: pass t (a float or a [B] tensor)")
        ref = cast(nn.Linear, self.u_net[1]).weight
        if isinstance(t, Tensor):
            if t.dim() > 1:
                raise LinearizerError(f"t must be a float or a [B] tensor, got {list(t.shape)}")
            tt = t.detach().to(device=ref.device, dtype=ref.dtype).reshape(-1)
            return tt, t.dim() == 1 and tt.numel() > 1
        return torch.tensor([float(t)], device=ref.device, dtype=ref.dtype), False

    def factors(
        self, t: float | Tensor | None = None, c: int | Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """``(U, V)``: ``[D, r]`` each for one time, ``[B, D, r]`` each for a ``[B]`` tensor;
        ``c``: the class (one label, or one per time) of a class-conditional operator."""
        tt, batched = self._times(t)
        u, v = self._stacked_factors(tt, self._labels(c, len(tt)))
        return (u, v) if batched else (u[0], v[0])

    def _stacked_factors(self, tt: Tensor, cc: Tensor | None = None) -> tuple[Tensor, Tensor]:
        u = _run(self.u_net, tt, None if cc is None else self.u_class(cc))
        v = _run(self.v_net, tt, None if cc is None else self.v_class(cc))
        u = u.view(-1, self.out_features, self.rank)
        v = v.view(-1, self.in_features, self.rank)
        return u, (v * self.v_scale if self.v_scale != 1.0 else v)

    def _act(
        self, z: Tensor, t: float | Tensor | None, left: int, c: int | Tensor | None = None
    ) -> Tensor:
        tt, batched = self._times(t)
        if batched and tt.shape[0] != z.shape[0]:
            raise LinearizerError(f"t has {tt.shape[0]} times for a batch of {z.shape[0]}")
        if isinstance(c, Tensor) and c.numel() > 1 and not batched:  # one time, a label per row
            tt, batched = tt.expand(z.shape[0]), True
        cc = self._labels(c, len(tt))
        # Rows that share a time (and class) in a consecutive run share its factors, so the
        # hypernetworks' big last layer runs once per run instead of once per row.
        if cc is None:
            times, counts = torch.unique_consecutive(tt, return_counts=True)
            u, v = self._stacked_factors(times)
        else:
            keys, counts = torch.unique_consecutive(
                torch.stack([tt, cc.to(tt.dtype)], 1), dim=0, return_counts=True
            )
            if batched and self.rows_at_once(len(tt), len(keys)):
                return self._act_rows(z, tt, cc, left)
            times = keys[:, 0]
            u, v = self._stacked_factors(times, keys[:, 1].long())
        a, b = (u, v) if left == 0 else (v, u)  # transpose swaps the factors
        if not batched or len(times) == 1:
            return (z @ b[0]) @ a[0].T
        if len(times) < len(tt) and (cc is None or 4 * len(times) <= len(tt)):
            runs = z.split(counts.tolist())
            return torch.cat([(zr @ b[i]) @ a[i].T for i, zr in enumerate(runs)])
        if len(times) < len(tt):  # mostly single rows (classes): one batched product is faster
            a, b = a.repeat_interleave(counts, 0), b.repeat_interleave(counts, 0)
        coeff = torch.bmm(z.unsqueeze(1), b)  # [B, 1, r]
        return torch.bmm(coeff, a.transpose(1, 2)).squeeze(1)

    def rows_at_once(self, rows: int, keys: int) -> bool:
        """Whether ``rows`` rows over ``keys`` distinct (time, class) pairs are cheaper applied
        row by row from the basis (:meth:`_act_rows`) than through each pair's factors: with a
        basis and under four rows per pair, where forming ``keys`` factor pairs of ``D x r``
        costs more than two GEMMs over the rows."""
        return isinstance(self.u_net[-2], nn.Linear) and 4 * keys > rows

    def _act_rows(self, z: Tensor, tt: Tensor, cc: Tensor, left: int) -> Tensor:
        """``A(t_b, c_b) z_b`` row by row without building any row's factors: with a basis,
        ``U(t, c) = sum_k h_k(t, c) W_k + W_0``, so ``z^T V`` and ``U coeff`` are two GEMMs
        against the basis matrices (a conditional batch has nearly one (t, c) per row)."""
        body_u, body_v = (cast(nn.Sequential, net[:-1]) for net in (self.u_net, self.v_net))
        hu = _run(body_u, tt, self.u_class(cc))
        hv = _run(body_v, tt, self.v_class(cc))
        u_last, v_last = cast(nn.Linear, self.u_net[-1]), cast(nn.Linear, self.v_net[-1])
        (h_in, last_in), (h_out, last_out) = ((hv, v_last), (hu, u_last))[:: 1 if left == 0 else -1]
        coeff = _contract(z, h_in, last_in, self.rank)
        return _expand(
            coeff * self.v_scale if self.v_scale != 1.0 else coeff, h_out, last_out, self.rank
        )

    def forward(
        self, z: Tensor, t: float | Tensor | None = None, c: int | Tensor | None = None
    ) -> Tensor:
        check_rows(z, self.in_features)
        return self._act(z, t, 0, c)

    def transpose_apply(
        self, y: Tensor, t: float | Tensor | None = None, c: int | Tensor | None = None
    ) -> Tensor:
        check_rows(y, self.out_features)
        return self._act(y, t, 1, c)

    def matrix(
        self,
        t: float | Tensor | None = None,
        dtype: torch.dtype | None = None,
        c: int | Tensor | None = None,
    ) -> Tensor:
        """The dense ``A(t)`` (of class ``c``) at one time ``t``."""
        if isinstance(t, Tensor) and t.numel() != 1:
            raise LinearizerError("matrix(t) needs one time, got a tensor of several")
        return factor_product(*self.factors(t, c), dtype)

    def at(self, t: float) -> AtTime:
        """This operator frozen at time ``t`` (a view sharing the weights)."""
        return AtTime(self, t)

    def given(self, label: int, guidance: float = 0.0) -> Guided:
        """``A_{c,w}(t) = (1 + w) A(t, c) - w A(t, null)``: class ``label`` with classifier-free
        guidance ``w``, as a time-dependent operator of rank ``<= 2 rank`` (a view sharing the
        weights). The guided velocity ``(1 + w) v_c - w v_null`` is ``(A_{c,w} z - z)/(1 - t)``,
        still linear in z, so a solver over this view collapses into one exact matrix."""
        return Guided(self, label, guidance)

    def extra_repr(self) -> str:
        extra = f", classes={self.classes}" if self.classes else ""
        return f"features={self.in_features}, rank={self.rank}, v_scale={self.v_scale}{extra}"


def _run(net: nn.Sequential, tt: Tensor, class_emb: Tensor | None) -> Tensor:
    """A hypernetwork on times ``tt``, its time embedding shifted by a class embedding."""
    if class_emb is None:
        return net(tt)
    h = net[0](tt) + class_emb.to(tt.dtype)
    for layer in list(net)[1:]:
        h = layer(h)
    return h


def _contract(z: Tensor, h: Tensor, last: nn.Linear, rank: int) -> Tensor:
    """``z_b^T F_b`` ``[B, r]`` for the per-row factor ``F_b = reshape(last(h_b), [D, r])``."""
    basis = h.shape[1]
    w = last.weight.view(-1, rank * basis)  # [D, r * basis]: out index d * r + j
    p = (z @ w).view(len(z), rank, basis)
    return (p * h[:, None, :]).sum(-1) + z @ last.bias.view(-1, rank)


def _expand(coeff: Tensor, h: Tensor, last: nn.Linear, rank: int) -> Tensor:
    """``F_b coeff_b`` ``[B, D]`` for the per-row factor ``F_b = reshape(last(h_b), [D, r])``."""
    basis = h.shape[1]
    w = last.weight.view(-1, rank * basis)
    outer = (coeff[:, :, None] * h[:, None, :]).reshape(len(coeff), rank * basis)
    return outer @ w.T + coeff @ last.bias.view(-1, rank).T


class Guided(LinearOperator):
    """``(1 + w) A(t, c) - w A(t, null)`` of a class-conditional :class:`TimeLoRA`, as a
    time-dependent operator whose factors are the two classes' side by side (rank ``2 r``;
    ``r`` when ``w = 0``). See :meth:`TimeLoRA.given`.

    >>> op = TimeLoRA(features=6, rank=2, emb_dim=8, hidden=16, classes=3)
    >>> g = op.given(1, guidance=2.0)
    >>> a = 3 * op.matrix(0.5, c=1) - 2 * op.matrix(0.5, c=op.null)
    >>> bool(torch.allclose(g.matrix(0.5), a, atol=1e-6))
    True
    """

    time_dependent = True

    def __init__(self, op: TimeLoRA, label: int, guidance: float = 0.0) -> None:
        super().__init__()
        if not op.classes:
            raise LinearizerError("guidance needs a class-conditional operator")
        if isinstance(label, bool) or int(label) != label or not 0 <= label <= op.null:
            raise LinearizerError(f"class label must be an integer in 0..{op.null}, got {label!r}")
        if not math.isfinite(guidance):
            raise LinearizerError(f"guidance must be a finite number, got {guidance!r}")
        self.op, self.label, self.guidance = op, int(label), float(guidance)
        self.in_features, self.out_features = op.in_features, op.out_features

    def factors(self, t: float | Tensor | None = None) -> tuple[Tensor, Tensor]:
        u, v = self.op.factors(t, self.label)
        w = self.guidance
        if w == 0.0:
            return u, v
        un, vn = self.op.factors(t, self.op.null)
        return torch.cat([(1 + w) * u, -w * un], -1), torch.cat([v, vn], -1)

    def _guided(self, apply: Callable[..., Tensor], x: Tensor, t: float | Tensor | None) -> Tensor:
        out, w = apply(x, t, self.label), self.guidance
        return out if w == 0.0 else (1 + w) * out - w * apply(x, t, self.op.null)

    def forward(self, z: Tensor, t: float | Tensor | None = None) -> Tensor:
        return self._guided(self.op, z, t)

    def transpose_apply(self, y: Tensor, t: float | Tensor | None = None) -> Tensor:
        return self._guided(self.op.transpose_apply, y, t)

    def matrix(self, t: float | Tensor | None = None, dtype: torch.dtype | None = None) -> Tensor:
        return factor_product(*self.factors(t), dtype)

    def extra_repr(self) -> str:
        return f"label={self.label}, guidance={self.guidance}"


def rows_apply(
    ops: Sequence[LinearOperator], counts: list[int], dtype: torch.dtype
) -> BasisRows | None:
    """The rows route for rows grouped by operator (``counts[k]`` rows for ``ops[k]``): a
    :class:`BasisRows` of their class-conditional :class:`TimeLoRA`, when ``ops`` are its
    :class:`Guided` views at one guidance and in ``dtype``, and that is cheaper
    (:meth:`BasisRows.pays`); None otherwise."""
    if not ops or not all(isinstance(g, Guided) for g in ops):
        return None
    views = cast(Sequence[Guided], ops)
    base, w = views[0].op, views[0].guidance
    same = all(g.op is base and g.guidance == w for g in views)
    if not same or next(base.parameters()).dtype != dtype:
        return None
    if not BasisRows.pays(base, sum(counts), len(views)):
        return None
    labels = torch.repeat_interleave(torch.tensor([g.label for g in views]), torch.tensor(counts))
    return BasisRows(base, labels, w)


class BasisRows:
    """``A_{c_b, w}(t)`` on rows whose class ``c_b`` differs row by row, each row kept in the
    coordinates of the operator's basis, so a solver step costs one GEMM over the rows.

    With a basis, ``U(t, c) = sum_l hu_l(t, c) Wu_l`` (the last Linear's bias is one more basis
    matrix, with weight 1), and likewise ``V``. Every ``A(t, c) z`` lies in the span of the
    ``Wu_l``, so a row the solver has stepped is ``z = pi z0 + Wu y`` (``Wu`` the basis side by
    side, ``[D, R]``), and ``V(t, c)^T z = pi V^T z0 + V^T Wu y`` needs only ``Wv^T z0`` (once)
    and the ``R x R`` Gram matrix ``Wu^T Wv``: one ``[n, R] x [R, R]`` product a step instead of
    two ``[n, D] x [D, R]``. The solver steps the state ``[y, pi]`` (one row per row, ``pi`` in
    the last column) as it would step the rows: every step is linear in it.
    """

    def __init__(self, base: TimeLoRA, labels: Tensor, guidance: float = 0.0) -> None:
        self.base, self.guidance = base, guidance
        keys = labels.tolist() + ([base.null] if guidance != 0.0 else [])
        self.keys = torch.tensor(sorted(set(keys)), device=base.u_class.weight.device)
        self.rows_of = {int(k): i for i, k in enumerate(self.keys.tolist())}
        self.row_keys = torch.tensor(
            [self.rows_of[int(k)] for k in labels.tolist()], device=self.keys.device
        )
        self.wu, self.wv = (_basis_side_by_side(base, net) for net in (base.u_net, base.v_net))
        self.gram = self.wu.T @ self.wv
        self.p0: Tensor | None = None
        self.z0: Tensor | None = None
        self.h: dict[float, tuple[Tensor, Tensor]] = {}

    @staticmethod
    def pays(base: TimeLoRA, rows: int, keys: int) -> bool:
        """Whether ``rows`` rows over ``keys`` classes are cheaper stepped in the basis than
        through each class's factors: with a basis, under twelve rows a class, where the basis
        measured faster on both shipped mixtures at T = 1000 in float64
        (``benchmarks/rows_route.py``)."""
        return isinstance(base.u_net[-2], nn.Linear) and rows < 12 * keys

    def start(self, z0: Tensor, times: Sequence[float]) -> Tensor:
        """The state of rows ``z0`` (``y = 0``, ``pi = 1``), to be stepped through ``times``:
        the basis weights of every class at every time come from a few hypernetwork passes."""
        self.z0, self.p0 = z0, z0 @ self.wv
        self.h = {}
        for first in range(0, len(times), 64):  # 64 times a pass keeps its activations small
            self.h.update(self._weights(times[first : first + 64], z0.dtype))
        state = z0.new_zeros(len(z0), self.gram.shape[0] + 1)
        state[:, -1] = 1.0
        return state

    def _weights(self, times: Sequence[float], dtype: torch.dtype) -> dict:
        """Every class's basis weights ``(hu, hv)`` (``[classes, L + 1]`` each) at each time."""
        base, k = self.base, len(self.keys)
        tt = torch.tensor(list(times), dtype=dtype, device=self.keys.device).repeat_interleave(k)
        cc = self.keys.repeat(len(times))
        hu, hv = (
            _with_one(_run(cast(nn.Sequential, net[:-1]), tt, emb(cc))).view(len(times), k, -1)
            for net, emb in ((base.u_net, base.u_class), (base.v_net, base.v_class))
        )
        return {t: (hu[i], hv[i]) for i, t in enumerate(times)}

    def rows(self, state: Tensor) -> Tensor:
        """The rows ``pi z0 + Wu y`` of a state."""
        assert self.z0 is not None
        return torch.addmm(state[:, -1:] * self.z0, state[:, :-1], self.wu.T)

    def __call__(self, state: Tensor, t: float) -> Tensor:
        """The state of ``A(t, c_b) z_b`` for every row's state ``[y, pi]``."""
        assert self.p0 is not None
        n, (hu, hv), w = len(state), self.h[t], self.guidance
        p = torch.addmm(state[:, -1:] * self.p0, state[:, :-1], self.gram)
        p = p.view(n, self.base.rank, -1)
        y = self._expand(p, hu[self.row_keys], hv[self.row_keys])
        if w != 0.0:
            null = self.rows_of[self.base.null]
            y = (1 + w) * y - w * self._expand(p, hu[null].expand(n, -1), hv[null].expand(n, -1))
        return torch.cat([y.reshape(n, -1), y.new_zeros(n, 1)], 1)

    def _expand(self, p: Tensor, hu: Tensor, hv: Tensor) -> Tensor:
        """``y`` of ``U (V^T z)`` from ``p = Wv^T z`` (``[n, r, L + 1]``) and each row's basis
        weights ``hu``, ``hv`` (``[n, L + 1]``)."""
        coeff = (p * hv[:, None, :]).sum(-1)
        if self.base.v_scale != 1.0:
            coeff = coeff * self.base.v_scale
        return coeff[:, :, None] * hu[:, None, :]


def _basis_side_by_side(base: TimeLoRA, net: nn.Sequential) -> Tensor:
    """A hypernetwork's basis matrices and bias matrix side by side, ``[D, r (L + 1)]``, column
    ``j (L + 1) + l`` the ``j``-th factor column of basis matrix ``l`` (the bias last)."""
    last = cast(nn.Linear, net[-1])
    d, r = base.out_features, base.rank
    weight = last.weight.view(d, r, -1)
    return torch.cat([weight, last.bias.view(d, r, 1)], 2).reshape(d, -1)


def _with_one(h: Tensor) -> Tensor:
    """Basis weights ``h`` and the bias matrix's weight 1."""
    return torch.cat([h, h.new_ones(len(h), 1)], 1)


class AtTime(LinearOperator):
    """A time-dependent operator seen at one fixed time: an ordinary (time-free) operator."""

    def __init__(self, op: LinearOperator, t: float) -> None:
        super().__init__()
        self.op = op
        self.t = float(t)
        self.in_features, self.out_features = op.in_features, op.out_features

    def forward(self, z: Tensor, t: float | Tensor | None = None) -> Tensor:
        return self.op(z, self.t)

    def transpose_apply(self, y: Tensor, t: float | Tensor | None = None) -> Tensor:
        return self.op.transpose_apply(y, self.t)

    def matrix(self, t: float | Tensor | None = None, dtype: torch.dtype | None = None) -> Tensor:
        return self.op.matrix(self.t, dtype=dtype)

    def factors(self, t: float | Tensor | None = None) -> tuple[Tensor, Tensor] | None:
        return self.op.factors(self.t)

    def extra_repr(self) -> str:
        return f"t={self.t}"
