"""Latent transport: an invertible map in the one-step sampler's range, fitted to the training
images, that gives the samples the shape of the data's latent distribution, not only its
covariance.

The one-step sampler's output latents ``z1 = K B g_noise(x0)`` lie in a ``k``-dimensional
subspace (``Q``, the basis of the latent calibration, :mod:`linearizer.flow.calibration`).
Their coordinates ``c = Q^T z1`` come out Gaussian: each is a linear mix of ``D`` coordinates of
``g_noise(x0)``, and such mixes are Gaussian whatever ``g_noise`` does. The training images'
coordinates ``Q^T g_data(x1)`` are not (a mixture, with a mode per kind of digit). The
transport is the bijection of the latent space

    ``tau(z) = z + Q (T(Q^T z) - Q^T z)``,  ``T(c) = m_d + F((c - m_s) S^-1/2) C^1/2``,

with ``m_s, S`` the samples' coordinate mean and covariance, ``m_d, C`` the data's, and ``F`` a
small affine-coupling flow on ``R^k`` (:class:`VectorFlow`, with a learned invertible linear
map after each coupling, :class:`Mixing`) fitted by maximum likelihood to the data's whitened
coordinates. ``tau`` leaves the orthogonal complement of ``Q`` alone and is
exactly invertible, so ``g_data' = tau^-1 o g_data`` is an invertible network like any other and
the sampler ``g_data'^-1(K B g_noise(.))`` is still a Linearizer: the same matrix ``K B``
between two induced spaces, with every exactness claim intact. The fit uses training images
only (never the test images, never the classifier behind FID (LeNet)). Every piece is an
:class:`~linearizer.invertible.base.InvertibleModule` on rows ``[N, dim]``; the flow's pieces
also give ``inverse_logdet``, which its likelihood needs.

>>> import torch
>>> src, dst = torch.randn(512, 4, dtype=torch.float64), torch.rand(512, 4, dtype=torch.float64)
>>> t = fit_transport(torch.eye(6, 4, dtype=torch.float64), src, dst,
...                   TransportOptions(steps=20, hidden=16, blocks=2, holdout=64))
>>> z = torch.randn(3, 6, dtype=torch.float64)
>>> bool(torch.allclose(t.inverse(t(z)), z, atol=1e-10))
True
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..config import Config, option
from ..errors import LinearizerError
from ..invertible.base import InvertibleModule
from ..invertible.conv1x1 import LUFactors

F64 = torch.float64
# the coordinates' statistics a transport holds: means [k], whitening and colouring maps [k, k]
STATS = ("src_mean", "src_whiten", "src_colour", "dst_mean", "dst_whiten", "dst_colour")


@dataclass(frozen=True)
class TransportOptions(Config):
    """The flow ``F`` (``blocks`` affine couplings, MLP conditioners ``hidden`` wide, each
    followed by a learned :class:`Mixing` when ``mixing``) and its fit: ``steps`` Adam steps of
    ``batch`` rows at learning rate ``lr`` (cosine decay), keeping the weights with the best
    likelihood on held-out data rows (``holdout``, at most a fifth of the data)."""

    steps: int = option(3000, "Adam steps of the fit")
    blocks: int = option(12, "affine couplings")
    hidden: int = option(192, "width of the couplings' MLP conditioners")
    mixing: bool = option(True, "a learned invertible mixing after each coupling")
    batch: int = option(512, "rows per Adam step")
    lr: float = option(1e-3, "peak learning rate (cosine decay)")
    holdout: int = option(5000, "held-out data rows that pick the best weights (at most a fifth)")
    seed: int = option(0, "seed of the initialisation, batches and holdout")

    def validate(self) -> None:
        if min(self.steps, self.blocks, self.hidden, self.batch, self.holdout) < 1:
            raise LinearizerError("transport steps, blocks, hidden, batch and holdout must be >= 1")
        if not self.lr > 0:
            raise LinearizerError(f"transport lr must be > 0, got {self.lr}")


class Coupling(InvertibleModule):
    """``y = [a, b exp(s(a)) + t(a)]`` on vectors split in two halves (``flip``: the other way)."""

    def __init__(self, dim: int, hidden: int, flip: bool) -> None:
        super().__init__()
        self.flip, self.cut = flip, dim // 2
        given = dim - self.cut if flip else self.cut
        # one coordinate: nothing to condition on (a learned scale and shift), or nothing to move
        width, moved = (hidden if given else 1), dim - given
        self.net = None
        if moved:
            self.net = nn.Sequential(
                nn.Linear(max(given, 1), width),
                nn.SiLU(),
                nn.Linear(width, width),
                nn.SiLU(),
                nn.Linear(width, 2 * moved),
            )
            nn.init.zeros_(self.net[-1].weight)  # starts as the identity
            nn.init.zeros_(self.net[-1].bias)

    def _split(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """(the half the conditioner reads, the half it moves)."""
        a, b = x[:, : self.cut], x[:, self.cut :]
        return (b, a) if self.flip else (a, b)

    def _join(self, given: Tensor, moved: Tensor) -> Tensor:
        return torch.cat([moved, given] if self.flip else [given, moved], dim=1)

    def _scale_shift(self, a: Tensor) -> tuple[Tensor, Tensor]:
        if self.net is None:
            return a.new_zeros(len(a), 0), a.new_zeros(len(a), 0)
        if a.shape[1] == 0:
            a = a.new_ones(len(a), 1)
        s, t = self.net(a).chunk(2, dim=1)
        return 2 * torch.tanh(s / 2), t  # bounded log-scale: no blow-up early in the fit

    def forward(self, x: Tensor, flag: Tensor | None = None) -> Tensor:
        a, b = self._split(x)
        s, t = self._scale_shift(a)
        return self._join(a, b * s.exp() + t)

    def inverse(self, y: Tensor, flag: Tensor | None = None) -> Tensor:
        return self.inverse_logdet(y)[0]

    def inverse_logdet(self, y: Tensor, flag: Tensor | None = None) -> tuple[Tensor, Tensor]:
        a, b = self._split(y)
        s, t = self._scale_shift(a)
        return self._join(a, (b - t) * (-s).exp()), -s.sum(dim=1)


class Mixing(LUFactors, InvertibleModule):
    """A learned invertible linear map ``y = x W^T`` of ``R^dim``: ``W = P L U`` in the LU form
    of :class:`~linearizer.invertible.conv1x1.LUFactors` (``log |det W| = sum(log_s)``, the
    inverse two triangular solves), ``P`` stored as the index vector ``order``. It starts at a
    random rotation (seeded).

    >>> m = Mixing(5, seed=1).double()
    >>> x = torch.randn(3, 5, dtype=torch.float64)
    >>> y, _ = m.inverse_logdet(m(x))
    >>> bool(torch.allclose(y, x, atol=1e-12))
    True
    """

    order: Tensor  # buffer

    def __init__(self, dim: int, seed: int = 0) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        rotation = torch.linalg.qr(torch.randn(dim, dim, generator=gen, dtype=F64))[0]
        p, lower, upper = torch.linalg.lu(rotation)
        diag = upper.diagonal()
        # P as the index vector of its ones: (v P^T)_i = v_order[i] (k-fold smaller than P)
        self.register_buffer("order", p.argmax(dim=1))
        self._register_lu(dim)
        with torch.no_grad():
            self.sign_s.copy_(diag.sign())
            self.lower.copy_(lower.tril(-1))
            self.upper.copy_(upper.triu(1))
            self.log_s.copy_(diag.abs().log())

    def forward(self, x: Tensor, flag: Tensor | None = None) -> Tensor:
        lower, upper = self._factors()
        return (x @ upper.T @ lower.T)[:, self.order]

    def inverse(self, y: Tensor, flag: Tensor | None = None) -> Tensor:
        return self.inverse_logdet(y)[0]

    def inverse_logdet(self, y: Tensor, flag: Tensor | None = None) -> tuple[Tensor, Tensor]:
        lower, upper = self._factors()
        t = torch.linalg.solve_triangular(
            lower.T, y[:, torch.argsort(self.order)], upper=True, left=False, unitriangular=True
        )
        x = torch.linalg.solve_triangular(upper.T, t, upper=False, left=False)
        return x, (-self.log_abs_det()).expand(len(y))

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:  # noqa: ANN001
        # Transports saved before Mixing shared InvConv1x1's LU code named two entries apart.
        for old, new in (("sign", "sign_s"), ("log_scale", "log_s")):
            if prefix + old in state_dict and prefix + new not in state_dict:
                state_dict[prefix + new] = state_dict.pop(prefix + old)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


class VectorFlow(InvertibleModule):
    """Affine couplings on ``R^dim``, each on its own fixed permutation of the coordinates (and
    back), each followed by a :class:`Mixing` when ``mixing`` (without it the fresh flow is the
    identity); ``forward`` maps the standard normal to the data, :meth:`nll` is the data's
    negative log-likelihood per dimension."""

    def __init__(
        self, dim: int, blocks: int, hidden: int, seed: int = 0, mixing: bool = True
    ) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        with torch.random.fork_rng(devices=[]):  # a seeded fit, and the caller's stream untouched
            torch.manual_seed(seed)
            self.couplings = nn.ModuleList(Coupling(dim, hidden, i % 2 == 1) for i in range(blocks))
        self.register_buffer(
            "perms", torch.stack([torch.randperm(dim, generator=gen) for _ in range(blocks)])
        )
        self.mixes = (
            nn.ModuleList(Mixing(dim, seed + 1 + i) for i in range(blocks)) if mixing else None
        )

    def _mix(self, i: int) -> Mixing | None:
        return None if self.mixes is None else self.mixes[i]

    def forward(self, u: Tensor, flag: Tensor | None = None) -> Tensor:
        for i, (perm, c) in enumerate(zip(self.perms, self.couplings)):
            u = c(u[:, perm])[:, torch.argsort(perm)]
            if (mix := self._mix(i)) is not None:
                u = mix(u)
        return u

    def inverse_logdet(self, y: Tensor, flag: Tensor | None = None) -> tuple[Tensor, Tensor]:
        logdet = torch.zeros(len(y), dtype=y.dtype, device=y.device)
        for i in reversed(range(len(self.couplings))):
            if (mix := self._mix(i)) is not None:
                y, ld = mix.inverse_logdet(y)
                logdet = logdet + ld
            perm = self.perms[i]
            y, ld = self.couplings[i].inverse_logdet(y[:, perm])
            y, logdet = y[:, torch.argsort(perm)], logdet + ld
        return y, logdet

    def inverse(self, y: Tensor, flag: Tensor | None = None) -> Tensor:
        return self.inverse_logdet(y)[0]

    def nll(self, y: Tensor) -> Tensor:
        u, logdet = self.inverse_logdet(y)
        return (0.5 * u.square().sum(dim=1) - logdet).mean() / y.shape[1]


def sym_power(c: Tensor, p: float, floor: float | None = None) -> Tensor:
    """``c^p`` of a symmetric positive semi-definite ``c`` by its eigendecomposition, in ``c``'s
    dtype. Eigenvalues below ``floor`` count as ``floor`` (default: the largest times
    ``D eps``, where rounding starts, so negative powers stay finite).

    >>> sym_power(torch.diag(torch.tensor([4.0, 9.0], dtype=F64)), 0.5).diagonal().tolist()
    [2.0, 3.0]
    """
    w, v = torch.linalg.eigh(c)
    if floor is None:
        floor = float(w[-1]) * c.shape[0] * torch.finfo(c.dtype).eps
    return (v * w.clamp_min(floor) ** p) @ v.T


class LatentTransport(InvertibleModule):
    """``tau(z) = z + Q (T(Q^T z) - Q^T z)`` on latents ``[N, D]`` (see the module docstring);
    :meth:`inverse` is ``tau^-1``. Everything runs in float64 (``F`` is fitted in float32): far
    outside the data, ``F``'s shifts grow large and float32 would lose the exact inverse."""

    def __init__(self, basis: Tensor, flow: VectorFlow, stats: dict[str, Tensor]) -> None:
        super().__init__()
        k = basis.shape[1]
        shapes = {name: (k,) if name.endswith("mean") else (k, k) for name in STATS}
        if basis.dim() != 2 or any(tuple(stats[n].shape) != s for n, s in shapes.items()):
            raise LinearizerError("the latent transport's basis and statistics disagree in shape")
        self.register_buffer("basis", basis.to(F64))
        for name in shapes:
            self.register_buffer(name, stats[name].to(F64))
        if not all(torch.isfinite(b).all() for b in self.buffers()):
            raise LinearizerError("the latent transport holds NaN or infinite values")
        self.flow = flow.double()

    @property
    def dim(self) -> int:
        return self.basis.shape[0]

    def _coords(self, z: Tensor) -> Tensor:
        return z.to(F64) @ self.basis

    def _replace(self, z: Tensor, old: Tensor, new: Tensor) -> Tensor:
        return (z.to(F64) + (new - old) @ self.basis.T).to(z.dtype)

    def forward(self, z: Tensor, flag: Tensor | None = None) -> Tensor:
        c = self._coords(z)
        u = (c - self.src_mean) @ self.src_whiten
        return self._replace(z, c, self.dst_mean + self.flow(u) @ self.dst_colour)

    def inverse(self, w: Tensor, flag: Tensor | None = None) -> Tensor:
        c = self._coords(w)
        u = self.flow.inverse((c - self.dst_mean) @ self.dst_whiten)
        return self._replace(w, c, self.src_mean + u @ self.src_colour)


def fit_transport(
    basis: Tensor, source: Tensor, data: Tensor, opts: TransportOptions | None = None
) -> LatentTransport:
    """Fit ``tau`` from the samples' coordinates ``source [n, k]`` (``Q^T z1``) to the training
    images' ``data [m, k]`` (``Q^T g_data(x1)``); ``basis`` is ``Q [D, k]``."""
    opts = opts or TransportOptions()
    k = basis.shape[1]
    if source.shape[1:] != (k,) or data.shape[1:] != (k,):
        raise LinearizerError(f"transport coordinates must be [n, {k}]")
    if len(source) < 2 or len(data) < 10:
        raise LinearizerError(
            f"the transport needs >= 2 samples and >= 10 data rows, got {len(source)} and "
            f"{len(data)}"
        )
    source, data = source.to(F64), data.to(F64)
    stats: dict[str, Tensor] = {}
    for side, x in (("src", source), ("dst", data)):
        cov = torch.cov(x.T).reshape(k, k)
        stats[f"{side}_mean"] = x.mean(0)
        stats[f"{side}_whiten"] = sym_power(cov, -0.5)
        stats[f"{side}_colour"] = sym_power(cov, 0.5)
    white = ((data - stats["dst_mean"]) @ stats["dst_whiten"]).float()
    flow = _fit_flow(white, opts)
    return LatentTransport(basis, flow, stats)


@torch.enable_grad()  # callers sample under no_grad
def _fit_flow(white: Tensor, opts: TransportOptions) -> VectorFlow:
    gen = torch.Generator().manual_seed(opts.seed)
    order = torch.randperm(len(white), generator=gen)
    cut = min(opts.holdout, len(white) // 5)
    held, train = white[order[:cut]], white[order[cut:]]
    flow = VectorFlow(white.shape[1], opts.blocks, opts.hidden, opts.seed, opts.mixing)
    optim = torch.optim.Adam(flow.parameters(), lr=opts.lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(optim, opts.steps)
    best, best_state = float("inf"), copy.deepcopy(flow.state_dict())
    check_every = max(1, min(250, opts.steps // 4))
    for step in range(1, opts.steps + 1):
        rows = train[torch.randint(len(train), (opts.batch,), generator=gen)]
        loss = flow.nll(rows)
        optim.zero_grad()
        loss.backward()
        optim.step()
        sched.step()
        if step % check_every == 0 or step == opts.steps:
            with torch.no_grad():
                held_nll = float(flow.nll(held))
            # the flow can memorise training rows; the held-out likelihood picks the weights
            if held_nll < best:
                best, best_state = held_nll, copy.deepcopy(flow.state_dict())
    flow.load_state_dict(best_state)
    return flow.eval().requires_grad_(False)
