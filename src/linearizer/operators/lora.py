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

import torch
from torch import Tensor, nn

from ..errors import LinearizerError
from .base import LinearOperator
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
    ) -> None:
        super().__init__()
        if features < 1 or rank < 1 or basis < 0:
            raise LinearizerError(
                f"TimeLoRA needs features, rank >= 1 and basis >= 0, got {features}, {rank}, "
                f"{basis}"
            )
        self.in_features = self.out_features = features
        self.rank = rank
        self.v_scale = float(v_scale)
        out = features * rank
        self.u_net = hypernetwork(emb_dim, hidden, depth, out, activation, emb, basis)
        self.v_net = hypernetwork(emb_dim, hidden, depth, out, activation, emb, basis)

    def _times(self, t: float | Tensor | None) -> tuple[Tensor, bool]:
        """``t`` as a 1-D tensor in the hypernetwork's dtype, and whether it is per-sample."""
        if t is None:
            raise LinearizerError("TimeLoRA is time-dependent: pass t (a float or a [B] tensor)")
        ref = self.u_net[1].weight
        if isinstance(t, Tensor):
            if t.dim() > 1:
                raise LinearizerError(f"t must be a float or a [B] tensor, got {list(t.shape)}")
            tt = t.detach().to(device=ref.device, dtype=ref.dtype).reshape(-1)
            return tt, t.dim() == 1 and tt.numel() > 1
        return torch.tensor([float(t)], device=ref.device, dtype=ref.dtype), False

    def factors(self, t: float | Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``(U, V)``: ``[D, r]`` each for one time, ``[B, D, r]`` each for a ``[B]`` tensor."""
        tt, batched = self._times(t)
        u, v = self._stacked_factors(tt)
        return (u, v) if batched else (u[0], v[0])

    def _stacked_factors(self, tt: Tensor) -> tuple[Tensor, Tensor]:
        u = self.u_net(tt).view(-1, self.out_features, self.rank)
        v = self.v_net(tt).view(-1, self.in_features, self.rank)
        return u, (v * self.v_scale if self.v_scale != 1.0 else v)

    def _act(self, z: Tensor, t: float | Tensor | None, left: int) -> Tensor:
        tt, batched = self._times(t)
        if batched and tt.shape[0] != z.shape[0]:
            raise LinearizerError(f"t has {tt.shape[0]} times for a batch of {z.shape[0]}")
        # Rows that share a time in a consecutive run share its factors, so the hypernetworks'
        # big last layer runs once per run instead of once per row.
        times, counts = torch.unique_consecutive(tt, return_counts=True)
        u, v = self._stacked_factors(times)
        a, b = (u, v) if left == 0 else (v, u)  # transpose swaps the factors
        if not batched or len(times) == 1:
            return (z @ b[0]) @ a[0].T
        if len(times) < len(tt):
            runs = z.split(counts.tolist())
            return torch.cat([(zr @ b[i]) @ a[i].T for i, zr in enumerate(runs)])
        coeff = torch.bmm(z.unsqueeze(1), b)  # [B, 1, r]
        return torch.bmm(coeff, a.transpose(1, 2)).squeeze(1)

    def forward(self, z: Tensor, t: float | Tensor | None = None) -> Tensor:
        check_rows(z, self.in_features)
        return self._act(z, t, left=0)

    def transpose_apply(self, y: Tensor, t: float | Tensor | None = None) -> Tensor:
        check_rows(y, self.out_features)
        return self._act(y, t, left=1)

    def matrix(self, t: float | Tensor | None = None, dtype: torch.dtype | None = None) -> Tensor:
        """The dense ``A(t)`` at one time ``t``."""
        if isinstance(t, Tensor) and t.numel() != 1:
            raise LinearizerError("matrix(t) needs one time, got a tensor of several")
        u, v = self.factors(t)
        if dtype is not None:
            u, v = u.to(dtype), v.to(dtype)
        return u @ v.T

    def at(self, t: float) -> AtTime:
        """This operator frozen at time ``t`` (a view sharing the weights)."""
        return AtTime(self, t)

    def extra_repr(self) -> str:
        return f"features={self.in_features}, rank={self.rank}, v_scale={self.v_scale}"


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
