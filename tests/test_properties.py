"""The float64 property suite: every identity the Linearizer inherits from linear algebra.

One base class, :class:`LinearizerProperties`, holds every property. Each ``Test*`` subclass
names one (g_x, A, g_y) combination we ship and inherits all of them. Networks are random
(all parameters perturbed, so the zero-initialised couplings are far from the identity), in
eval mode, in float64. The bar (issue 2): superposition, round trip, pinv and SVD identities
to <= 1e-10 relative error.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from linearizer.algebra import Linearizer
from linearizer.errors import LinearizerError
from linearizer.invertible import Conditioned, InvertibleModule, cpu_network
from linearizer.operators import (
    ChannelMix,
    Dense,
    DepthwiseConv,
    LowRank,
    ObliqueProjector,
    OrthogonalProjector,
    TimeLoRA,
)

try:  # the paper's U-Net conditioners (another engineer's module)
    from linearizer.invertible.unet import paper_network
except ImportError:  # pragma: no cover
    paper_network = None


F64 = torch.float64
RTOL = 1e-10
BATCH = 3


def rel(a: Tensor, b: Tensor) -> float:
    """Max-abs error relative to the max-abs of the reference."""
    a, b = a.detach(), b.detach()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-300))


def flat(z: Tensor) -> Tensor:
    return z.reshape(z.shape[0], -1)


# --------------------------------------------------------------------------- test networks
class ToyNet(InvertibleModule):
    """A small exact bijection on images ``[B, C, H, W]`` with a flag: squeeze 2x2, mix all
    values with a fixed orthogonal matrix, then ``sinh(a(c) u + b(c))`` elementwise.

    The latent ``[B, 4C, H/2, W/2]`` has a different shape from the data, which exercises the
    latent-shape handling.
    """

    def __init__(self, shape: tuple[int, int, int]) -> None:
        super().__init__()
        c, h, w = shape
        self.latent = (4 * c, h // 2, w // 2)
        d = c * h * w
        self.register_buffer("q", torch.linalg.qr(torch.randn(d, d, dtype=F64)).Q)
        self.a0 = nn.Parameter(0.3 * torch.randn(d, dtype=F64))
        self.a1 = nn.Parameter(0.3 * torch.randn(d, dtype=F64))
        self.b0 = nn.Parameter(0.3 * torch.randn(d, dtype=F64))
        self.b1 = nn.Parameter(0.3 * torch.randn(d, dtype=F64))

    def _ab(self, cond: Tensor | None, x: Tensor) -> tuple[Tensor, Tensor]:
        c = torch.zeros(x.shape[0], 1, dtype=x.dtype) if cond is None else cond.view(-1, 1)
        return torch.exp(self.a0 + c * self.a1), self.b0 + c * self.b1

    def forward(self, x: Tensor, cond: Tensor | None = None) -> Tensor:
        a, b = self._ab(cond, x)
        u = flat(F.pixel_unshuffle(x, 2)) @ self.q.T
        return torch.sinh(a * u + b).view(x.shape[0], *self.latent)

    def inverse(self, z: Tensor, cond: Tensor | None = None) -> Tensor:
        a, b = self._ab(cond, z)
        u = ((torch.asinh(flat(z)) - b) / a) @ self.q
        return F.pixel_shuffle(u.view(z.shape[0], *self.latent), 2)


def randomize(net: nn.Module, scale: float) -> nn.Module:
    """Float64, eval mode, every parameter perturbed; ActNorms marked as initialised."""
    net = net.to(F64).eval()
    with torch.no_grad():
        for p in net.parameters():
            p.add_(scale * torch.randn_like(p))
        for buf_name, buf in net.named_buffers():
            if buf_name.endswith("initialized"):
                buf.fill_(1)
    return net


def toy(shape: tuple[int, int, int]) -> nn.Module:
    return ToyNet(shape)


def cpu(shape: tuple[int, int, int]) -> nn.Module:
    # 0.1 moves g(x) by more than |x| while keeping the Jacobian's condition number ~3-20
    return randomize(cpu_network(in_channels=shape[0], num_blocks=2, hidden=8), 0.1)


def paper(shape: tuple[int, int, int]) -> nn.Module:
    net = paper_network(
        in_channels=shape[0], img_size=shape[1], num_blocks=1, model_channels=8, dropout=0.0,
        unet_blocks=1,
    )  # fmt: skip
    return randomize(net, 0.05)


NETWORKS = {"toy": toy, "cpu": cpu, "paper": paper}


# --------------------------------------------------------------------------- operators
def _dense(d_out: int, d_in: int, latent) -> nn.Module:
    return Dense(torch.randn(d_out, d_in) / math.sqrt(d_in))


def _lora(d_out: int, d_in: int, latent) -> nn.Module:
    return TimeLoRA(d_in, rank=3, emb_dim=8, hidden=16, v_scale=d_in**-0.5).at(0.37)


def _depthwise(d_out: int, d_in: int, latent) -> nn.Module:
    return DepthwiseConv(latent[0], 4, latent[1:], init="random")


def _channel_mix(d_out: int, d_in: int, latent) -> nn.Module:
    return ChannelMix(latent[0], 3, latent[1:])


OPERATORS = {
    "dense": _dense,
    "lowrank": lambda o, i, latent: LowRank(o, i, rank=3),
    "lowrank_identity": lambda o, i, latent: LowRank(o, i, rank=3, identity_scale="learnable"),
    "lora": _lora,
    "depthwise": _depthwise,
    "channel_mix": _channel_mix,
    "orthogonal": lambda o, i, latent: OrthogonalProjector(i, rank=5),
    "oblique": lambda o, i, latent: ObliqueProjector(i, rank=5),
}


# --------------------------------------------------------------------------- the suite
class LinearizerProperties:
    """Every property; subclasses set ``network``, ``operator``, ``views`` and ``shape``.

    ``views``: ``"same"`` (g_x is g_y), ``"flags"`` (one network seen at flags 1 and 0, the
    paper's form), ``"pair"`` (two different networks, of data shapes ``shape`` and ``shape_y``).
    """

    network = "toy"
    operator = "dense"
    views = "same"
    shape: tuple[int, int, int] = (1, 4, 4)
    shape_y: tuple[int, int, int] | None = None
    seed = 0

    @classmethod
    def setup_class(cls) -> None:
        torch.manual_seed(cls.seed)
        make = NETWORKS[cls.network]
        if cls.views == "pair":
            g_x, g_y = make(cls.shape), make(cls.shape_y or cls.shape)
        else:
            net = make(cls.shape)
            g_x = Conditioned(net, 1.0)
            g_y = g_x if cls.views == "same" else Conditioned(net, 0.0)
        with torch.no_grad():
            lat_x = g_x(torch.zeros(1, *cls.shape, dtype=F64)).shape[1:]
            lat_y = g_y(torch.zeros(1, *(cls.shape_y or cls.shape), dtype=F64)).shape[1:]
        op = OPERATORS[cls.operator](math.prod(lat_y), math.prod(lat_x), tuple(lat_x)).to(F64)
        with torch.no_grad():
            for p in op.parameters():
                p.add_(0.05 * torch.randn_like(p))
        # distinct networks: g_y's latent shape cannot be guessed from g_x's
        y_shape = tuple(lat_y) if cls.views == "pair" else None
        cls.f = Linearizer(g_x, op, g_y, y_latent_shape=y_shape)

    # ------------------------------------------------------------ helpers
    def xs(self, n: int = BATCH) -> Tensor:
        return torch.randn(n, *self.shape, dtype=F64)

    def ys(self, n: int = BATCH) -> Tensor:
        return torch.randn(n, *(self.shape_y or self.shape), dtype=F64)

    def dense(self) -> Tensor:
        return self.f.A.matrix(dtype=F64).detach()

    def needs_same_space(self) -> None:
        if not self.f.same_space:
            pytest.skip("needs g_x = g_y")

    # ------------------------------------------------------------ the identities
    def test_networks_are_far_from_identity(self) -> None:
        """Guards the suite itself: near-identity networks would make every identity trivial."""
        x = self.xs()
        assert rel(flat(self.f.g_x(x)), flat(x)) > 0.3
        if self.views == "flags":
            assert rel(self.f.g_y(x), self.f.g_x(x)) > 0.01

    def test_round_trip(self) -> None:
        x, y = self.xs(), self.ys()
        assert rel(self.f.g_x.inverse(self.f.g_x(x)), x) <= RTOL
        assert rel(self.f.g_y.inverse(self.f.g_y(y)), y) <= RTOL

    def test_forward_matches_dense(self) -> None:
        x = self.xs()
        out = flat(self.f.g_y(self.f(x)))
        assert rel(out, flat(self.f.g_x(x)) @ self.dense().T) <= RTOL

    def test_superposition(self) -> None:
        x1, x2 = self.xs(), self.xs()
        a = torch.tensor([0.7, -1.3, 2.0], dtype=F64)
        b = -0.4
        sx, sy = self.f.space_x, self.f.space_y
        lhs = self.f(sx.add(sx.scale(a, x1), sx.scale(b, x2)))
        rhs = sy.add(sy.scale(a, self.f(x1)), sy.scale(b, self.f(x2)))
        assert rel(lhs, rhs) <= RTOL
        lhs = self.f(sx.lincomb([a, b], [x1, x2]))
        rhs = sy.lincomb([a, b], [self.f(x1), self.f(x2)])
        assert rel(lhs, rhs) <= RTOL

    def test_zero_maps_to_zero(self) -> None:
        x = self.xs()
        zero_y = self.f.space_y.zero(self.ys())
        assert rel(self.f(self.f.space_x.zero(x)), zero_y) <= RTOL

    def test_pinv_identities(self) -> None:
        f, x, y = self.f, self.xs(), self.ys()
        fx = f(x)
        assert rel(f(f.pinv(fx)), fx) <= RTOL  # f f+ f = f
        py = f.pinv(y)
        assert rel(f.pinv(f(py)), py) <= RTOL  # f+ f f+ = f+
        ref = flat(f.g_y(y)) @ torch.linalg.pinv(self.dense()).T
        assert rel(flat(f.g_x(py)), ref) <= RTOL

    def test_transpose_is_adjoint(self) -> None:
        f, x, y = self.f, self.xs(), self.ys()
        lhs = f.space_y.inner(f(x), y)
        rhs = f.space_x.inner(x, f.transpose(y))
        assert rel(lhs, rhs) <= RTOL
        assert rel(flat(f.g_x(f.transpose(y))), flat(f.g_y(y)) @ self.dense()) <= RTOL

    def test_svd_identities(self) -> None:
        f = self.f
        f(self.xs(1))  # learn the latent shapes
        svd = f.svd()
        k = svd.S.shape[0]
        ref = torch.linalg.svdvals(self.dense())
        assert rel(svd.S, ref[:k]) <= RTOL
        if k < ref.shape[0]:  # a low-rank A: the rest of the spectrum is zero
            assert float(ref[k:].max()) <= RTOL * float(ref[0])
        # f(g_x^-1(v_i)) = s_i (.) g_y^-1(u_i)
        assert rel(f(svd.V_x), f.space_y.scale(svd.S, svd.U_y)) <= RTOL
        assert rel(flat(f.g_x(svd.V_x)), svd.V_lat.T) <= RTOL
        eye = torch.eye(k, dtype=F64)
        assert rel(svd.U_lat.T @ svd.U_lat, eye) <= RTOL
        assert rel(svd.V_lat.T @ svd.V_lat, eye) <= RTOL
        top = f.svd(k=1)
        assert top.S.shape == (1,) and rel(top.S, svd.S[:1]) <= RTOL

    def test_eig_identities(self) -> None:
        self.needs_same_space()
        f = self.f
        f(self.xs(1))
        eig = f.eig()
        ref = torch.linalg.eigvals(self.dense())
        n = eig.L.shape[0]
        ref_mags = ref.abs().sort(descending=True).values
        assert rel(eig.L.abs(), ref_mags[:n]) <= RTOL
        if eig.V_x.shape[0]:
            lam = eig.L_real
            assert rel(f(eig.V_x), f.space_x.scale(lam, eig.V_x)) <= RTOL
            assert rel(self.dense() @ flat(f.g_x(eig.V_x)).T, flat(f.g_x(eig.V_x)).T * lam) <= RTOL

    def test_power(self) -> None:
        self.needs_same_space()
        f, x = self.f, self.xs()
        assert rel(f.power(3)(x), f(f(f(x)))) <= RTOL
        ref = flat(f.g_x(x)) @ torch.linalg.matrix_power(self.dense(), 3).T
        assert rel(flat(f.g_x(f.power(3)(x))), ref) <= RTOL
        assert rel(f.power(0)(x), x) <= RTOL
        assert rel(f.power(1)(x), f(x)) <= RTOL

    def test_compose(self) -> None:
        f, x = self.f, self.xs()
        d_y = f.A.out_features
        torch.manual_seed(1)
        f(x)
        m = torch.randn(f.A.in_features, d_y, dtype=F64) / d_y**0.5
        back = Linearizer(f.g_y, m, f.g_x, y_latent_shape=f.latent_shape("x"))
        h = back.compose(f)  # back o f : X -> X
        assert rel(h(x), back(f(x))) <= RTOL
        ref = flat(f.g_x(x)) @ (back.A.matrix() @ self.dense()).T
        assert rel(flat(f.g_x(h(x))), ref) <= RTOL
        if not f.same_space:
            with pytest.raises(LinearizerError, match="cannot compose"):
                f.compose(f)

    def test_projector_idempotent(self) -> None:
        if not getattr(self.f.A, "idempotent", False):
            pytest.skip("A is not a projector")
        self.needs_same_space()
        f, x = self.f, self.xs()
        fx = f(x)
        assert rel(f(fx), fx) <= RTOL
        assert rel(f.project(x), fx) <= RTOL
        m = self.dense()
        assert rel(m @ m, m) <= 1e-12

    def test_space_algebra(self) -> None:
        s, u, v = self.f.space_x, self.xs(), self.xs()
        zero = s.zero(u)
        assert rel(s.add(u, s.neg(u)), zero) <= RTOL
        assert rel(s.sub(s.add(u, v), v), u) <= RTOL
        assert rel(s.interpolate(u, v, 0.25), s.lincomb([0.75, 0.25], [u, v])) <= RTOL
        assert rel(s.interpolate(u, v, torch.zeros(BATCH, dtype=F64)), u) <= RTOL
        assert rel(s.norm(u) ** 2, s.inner(u, u)) <= RTOL
        assert rel(s.dist(u, v), s.norm(s.sub(u, v))) <= RTOL

    def test_gradients_flow(self) -> None:
        x = self.xs().requires_grad_(True)
        self.f.zero_grad()
        self.f(x).square().sum().backward()
        assert x.grad is not None and torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
        grads = [p.grad for p in self.f.A.parameters()]
        assert all(g is not None and torch.isfinite(g).all() for g in grads)
        self.f.zero_grad()


# --------------------------------------------------------------------------- the combinations
class TestToyDense(LinearizerProperties):
    operator = "dense"


class TestToyLowRank(LinearizerProperties):
    operator = "lowrank"


class TestToyLowRankIdentity(LinearizerProperties):
    operator = "lowrank_identity"


class TestToyLoRA(LinearizerProperties):
    operator = "lora"


class TestToyDepthwise(LinearizerProperties):
    operator = "depthwise"


class TestToyChannelMix(LinearizerProperties):
    operator = "channel_mix"


class TestToyOrthogonal(LinearizerProperties):
    operator = "orthogonal"


class TestToyOblique(LinearizerProperties):
    operator = "oblique"


class TestToyFlagsDense(LinearizerProperties):
    views, operator = "flags", "dense"


class TestToyPairRectangular(LinearizerProperties):
    """Different networks, different sizes: a 16 -> 36 dense A between them."""

    views, operator, shape, shape_y = "pair", "dense", (1, 4, 4), (1, 6, 6)


class TestToyPairLowRank(LinearizerProperties):
    views, operator, shape, shape_y = "pair", "lowrank", (1, 6, 6), (1, 4, 4)


class TestCpuFlagsDense(LinearizerProperties):
    network, views, operator = "cpu", "flags", "dense"


class TestCpuFlagsLowRankIdentity(LinearizerProperties):
    network, views, operator = "cpu", "flags", "lowrank_identity"


class TestCpuFlagsLoRA(LinearizerProperties):
    network, views, operator = "cpu", "flags", "lora"


class TestCpuFlagsDepthwise(LinearizerProperties):
    network, views, operator = "cpu", "flags", "depthwise"


class TestCpuSameDense(LinearizerProperties):
    network, operator = "cpu", "dense"


class TestCpuSameLowRank(LinearizerProperties):
    network, operator = "cpu", "lowrank"


class TestCpuSameOrthogonal(LinearizerProperties):
    network, operator = "cpu", "orthogonal"


class TestCpuSameOblique(LinearizerProperties):
    network, operator = "cpu", "oblique"


class TestCpuRgbDepthwise(LinearizerProperties):
    """Three channels (no squeeze): the style-transfer shape, with a 4x4 depthwise kernel."""

    network, operator, shape = "cpu", "depthwise", (3, 4, 4)


@pytest.mark.skipif(paper_network is None, reason="paper_network not available")
class TestPaperFlagsLoRA(LinearizerProperties):
    network, views, operator, shape = "paper", "flags", "lora", (1, 8, 8)


@pytest.mark.skipif(paper_network is None, reason="paper_network not available")
class TestPaperSameOrthogonal(LinearizerProperties):
    network, operator, shape = "paper", "orthogonal", (1, 8, 8)
