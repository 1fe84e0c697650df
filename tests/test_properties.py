"""The float64 property suite: every identity the Linearizer inherits from linear algebra.

The properties live in :class:`linearizer.testing.LinearizerTests`, the class users inherit for
their own maps; :class:`Case` builds our networks and operators, and each ``Test*`` subclass
names one (g_x, A, g_y) combination we ship and inherits all of them. Networks are random
(all parameters perturbed, so the zero-initialised couplings are far from the identity), in
eval mode, in float64. The bar (issue 2): superposition, round trip, pinv and SVD identities
to <= 1e-10 relative error.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from linearizer.invertible import Conditioned, InvertibleModule, cpu_network
from linearizer.invertible.unet import paper_network
from linearizer.operators import (
    ChannelMix,
    Dense,
    DepthwiseConv,
    LowRank,
    ObliqueProjector,
    OrthogonalProjector,
    TimeLoRA,
)
from linearizer.testing import LinearizerTests, rel

F64 = torch.float64
RTOL = 1e-10
BATCH = 3


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
        self.latent_shape = (4 * c, h // 2, w // 2)  # reported: Linearizer reads it
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
        return torch.sinh(a * u + b).view(x.shape[0], *self.latent_shape)

    def inverse(self, z: Tensor, cond: Tensor | None = None) -> Tensor:
        a, b = self._ab(cond, z)
        u = ((torch.asinh(flat(z)) - b) / a) @ self.q
        return F.pixel_shuffle(u.view(z.shape[0], *self.latent_shape), 2)


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
        in_channels=shape[0],
        img_size=shape[1],
        num_blocks=1,
        model_channels=8,
        dropout=0.0,
        unet_blocks=1,
    )
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
class Case(LinearizerTests):
    """One shipped (g_x, A, g_y) combination; every property comes from
    :class:`linearizer.testing.LinearizerTests`, the one registry users inherit too.

    ``views``: ``"same"`` (g_x is g_y), ``"flags"`` (one network seen at flags 1 and 0, the
    paper's form), ``"pair"`` (two different networks, of data shapes ``shape`` and ``shape_y``).
    """

    network = "toy"
    operator = "dense"
    views = "same"
    shape: tuple[int, int, int] = (1, 4, 4)
    shape_y: tuple[int, int, int] | None = None
    rtol = RTOL

    def build(self):
        make = NETWORKS[self.network]
        if self.views == "pair":
            g_x, g_y = make(self.shape), make(self.shape_y or self.shape)
        else:
            net = make(self.shape)
            g_x = Conditioned(net, 1.0)
            g_y = g_x if self.views == "same" else Conditioned(net, 0.0)
        with torch.no_grad():
            lat_x = g_x(torch.zeros(1, *self.shape, dtype=F64)).shape[1:]
            lat_y = g_y(torch.zeros(1, *(self.shape_y or self.shape), dtype=F64)).shape[1:]
        op = OPERATORS[self.operator](math.prod(lat_y), math.prod(lat_x), tuple(lat_x)).to(F64)
        with torch.no_grad():
            for p in op.parameters():
                p.add_(0.05 * torch.randn_like(p))
        return g_x, op, g_y

    def sample_x(self, n: int) -> Tensor:
        return torch.randn(n, *self.shape, dtype=F64)

    def sample_y(self, n: int) -> Tensor:
        return torch.randn(n, *(self.shape_y or self.shape), dtype=F64)

    def test_networks_are_far_from_identity(self) -> None:
        """Guards the suite itself: near-identity networks would make every identity trivial."""
        x = self.xs()
        assert rel(flat(self.f.g_x(x)), flat(x)) > 0.3
        if self.views == "flags":
            assert rel(self.f.g_y(x), self.f.g_x(x)) > 0.01


# --------------------------------------------------------------------------- the combinations
class TestToyDense(Case):
    operator = "dense"


class TestToyLowRank(Case):
    operator = "lowrank"


class TestToyLowRankIdentity(Case):
    operator = "lowrank_identity"


class TestToyLoRA(Case):
    operator = "lora"


class TestToyDepthwise(Case):
    operator = "depthwise"


class TestToyChannelMix(Case):
    operator = "channel_mix"


class TestToyOrthogonal(Case):
    operator = "orthogonal"


class TestToyOblique(Case):
    operator = "oblique"


class TestToyFlagsDense(Case):
    views, operator = "flags", "dense"


class TestToyPairRectangular(Case):
    """Different networks, different sizes: a 16 -> 36 dense A between them."""

    views, operator, shape, shape_y = "pair", "dense", (1, 4, 4), (1, 6, 6)


class TestToyPairLowRank(Case):
    views, operator, shape, shape_y = "pair", "lowrank", (1, 6, 6), (1, 4, 4)


class TestCpuFlagsDense(Case):
    network, views, operator = "cpu", "flags", "dense"


class TestCpuFlagsLowRankIdentity(Case):
    network, views, operator = "cpu", "flags", "lowrank_identity"


class TestCpuFlagsLoRA(Case):
    network, views, operator = "cpu", "flags", "lora"


class TestCpuFlagsDepthwise(Case):
    network, views, operator = "cpu", "flags", "depthwise"


class TestCpuSameDense(Case):
    network, operator = "cpu", "dense"


class TestCpuSameLowRank(Case):
    network, operator = "cpu", "lowrank"


class TestCpuSameOrthogonal(Case):
    network, operator = "cpu", "orthogonal"


class TestCpuSameOblique(Case):
    network, operator = "cpu", "oblique"


class TestCpuRgbDepthwise(Case):
    """Three channels (no squeeze): the style-transfer shape, with a 4x4 depthwise kernel."""

    network, operator, shape = "cpu", "depthwise", (3, 4, 4)


class TestPaperFlagsLoRA(Case):
    network, views, operator, shape = "paper", "flags", "lora", (1, 8, 8)


class TestPaperSameOrthogonal(Case):
    network, operator, shape = "paper", "orthogonal", (1, 8, 8)
