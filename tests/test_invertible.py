"""Property tests for linearizer.invertible: exact inverses, Jacobians, gradients, state.

Every :class:`InvertibleModule` of the package (the network's blocks, the data-side logit and
flag ActNorm, the latent transport's pieces) and the fixed-flag views users pass to
:class:`~linearizer.algebra.Linearizer` (``Conditioned``, ``LatentView``, ``TransportedSide``)
pass the shipped contract, :class:`linearizer.testing.InvertibleTests`, through one entry of
``CONTRACT`` and its ``Test...`` class; tests check that no class of the package and no entry
is left out.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from helpers import contract_cases, package_classes
from linearizer.errors import LinearizerError
from linearizer.flow.model import TransportedSide
from linearizer.flow.transport import Coupling, LatentTransport, Mixing, VectorFlow, sym_power
from linearizer.invertible import (
    ActNorm,
    AffineCoupling,
    Conditioned,
    CouplingBlock,
    InvConv1x1,
    InvertibleModule,
    InvertibleNetwork,
    InvertibleSequential,
    SharedDropout,
    SmallCNN,
    Squeeze,
    conditioners_in,
    cpu_network,
    set_dropout_seed,
)
from linearizer.invertible.actnorm import FlagActNorm
from linearizer.invertible.factory import NetworkConfig, build_network
from linearizer.invertible.logit import FlagLogit
from linearizer.invertible.network import CoarserLevel
from linearizer.style.latent import LatentView
from linearizer.testing import InvertibleTests
from tolerance import assert_near


@pytest.fixture(autouse=True)
def _float64_and_seed():
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    torch.manual_seed(0)
    yield
    torch.set_default_dtype(default)


def make_cnn(c_in: int, c_out: int) -> nn.Module:
    return SmallCNN(c_in, c_out, hidden=8)


def randomize(module: nn.Module, scale: float = 0.2) -> nn.Module:
    """Move every parameter off its (often identity) start and mark ActNorms initialised.

    Conditioner outputs get a smaller kick, as in a trained network whose couplings scale by
    moderate factors (large random log-scales compound to latents of 1e4 and over).
    """
    with torch.no_grad():
        for name, p in module.named_parameters():
            p.add_((scale / 4 if "conv_out" in name else scale) * torch.randn_like(p))
        for m in module.modules():
            if isinstance(m, ActNorm):
                m.initialized.fill_(1)
    return module


# name -> (factory, input channels, uses cond)
CASES = {
    "actnorm": (lambda: ActNorm(4), 4, False),
    "coupling-first-soft": (lambda: AffineCoupling(make_cnn(2, 4), "first"), 4, True),
    "coupling-second-hard": (
        lambda: AffineCoupling(make_cnn(2, 6), "second", clamp=1.5, clamp_mode="hard"),
        5,
        True,
    ),
    "invconv": (lambda: InvConv1x1(4), 4, False),
    "squeeze": (lambda: Squeeze(), 2, False),
    "sequential": (
        lambda: InvertibleSequential(ActNorm(4), AffineCoupling(make_cnn(2, 4)), InvConv1x1(4)),
        4,
        True,
    ),
    "block": (lambda: CouplingBlock(4, make_cnn), 4, True),
    "cpu-network": (lambda: cpu_network(1, num_blocks=2, hidden=8), 1, True),
    "cpu-network-2-levels": (lambda: cpu_network(1, num_blocks=1, hidden=8, levels=2), 1, True),
    "cpu-network-bounded-shifts": (
        lambda: cpu_network(1, num_blocks=2, hidden=8, shift_bound=1.5),
        1,
        True,
    ),
    "cpu-network-odd-noise": (
        lambda: cpu_network(1, num_blocks=2, hidden=8, flag_norm=True, odd_flag=0.0),
        1,
        True,
    ),
    "network-3ch-hard": (
        lambda: InvertibleNetwork(3, 2, make_cnn, squeeze=False, clamp_mode="hard"),
        3,
        True,
    ),
}


def build(name: str) -> tuple[InvertibleModule, int, bool]:
    factory, channels, conditional = CASES[name]
    return randomize(factory()).eval(), channels, conditional


def images(channels: int, size: int, batch: int = 2, dtype=torch.float64) -> torch.Tensor:
    return torch.randn(batch, channels, size, size, dtype=dtype)


def cond_for(batch: int, value: float, dtype=torch.float64) -> torch.Tensor:
    return torch.full((batch,), value, dtype=dtype)


# ----------------------------------------------------------------------------- the contract


def flags(n: int) -> torch.Tensor:
    """Data and noise flags in one batch (1, 0, 1, ...): each flag's parameters get used."""
    return (torch.arange(n) % 2 == 0).to(torch.float64)


def transport(dim: int, k: int) -> LatentTransport:
    """A latent transport on ``R^dim`` moving a random ``k``-dimensional subspace."""
    basis = torch.linalg.qr(torch.randn(dim, k)).Q
    spd = [(a @ a.T + k * torch.eye(k)) / k for a in (torch.randn(k, k), torch.randn(k, k))]
    stats = {"src_mean": torch.randn(k), "dst_mean": torch.randn(k)}
    for side, c in zip(("src", "dst"), spd):
        c = c.double()
        stats[f"{side}_whiten"], stats[f"{side}_colour"] = sym_power(c, -0.5), sym_power(c, 0.5)
    return LatentTransport(basis, VectorFlow(k, blocks=2, hidden=8), stats)


def transported_side() -> TransportedSide:
    g = Conditioned(cpu_network(1, num_blocks=1, hidden=8), 1.0)
    return TransportedSide(g, transport(16, 3), (1, 4, 4))


def rows(n: int) -> torch.Tensor:
    return torch.randn(n, 5)


def image_batch(n: int) -> torch.Tensor:
    return images(1, 4, n)


# name -> (module factory, sample(n), cond(n) or None)
Sample = Callable[[int], torch.Tensor]
CONTRACT: dict[str, tuple[Callable[[], nn.Module], Sample, Sample | None]] = {
    **{
        name: (factory, lambda n, c=c: images(c, 4, n), flags)
        for name, (factory, c, _) in CASES.items()
    },
    "coarser-level": (lambda: CoarserLevel(2, 1, make_cnn), lambda n: images(2, 4, n), flags),
    "cpu-network-shift-noise": (  # its shift fixes the image size
        lambda: cpu_network(1, num_blocks=2, hidden=8, img_size=4, shift_flag=0.0),
        image_batch,
        flags,
    ),
    "cpu-network-odd-noise-mean": (  # its mean fixes the image size
        lambda: cpu_network(
            1, num_blocks=2, hidden=8, flag_norm=True, img_size=4, odd_flag=0.0, mean_flag=0.0
        ),
        image_batch,
        flags,
    ),
    "flag-actnorm": (lambda: FlagActNorm(3), lambda n: images(3, 2, n), flags),
    # the logit's data rows take pixels in [0, 1]
    "flag-logit": (lambda: FlagLogit(0.05), lambda n: torch.rand(n, 2, 3, 3), flags),
    "flag-logit-linear-tails": (  # any real pixel: the tails continue the logit linearly
        lambda: FlagLogit(0.05, "linear"),
        lambda n: 2 * torch.randn(n, 2, 3, 3),
        flags,
    ),
    "transport-coupling": (lambda: Coupling(5, 8, flip=False), rows, None),
    "transport-coupling-flip": (lambda: Coupling(5, 8, flip=True), rows, None),
    "transport-mixing": (lambda: Mixing(5, seed=1), rows, None),
    "transport-flow": (lambda: VectorFlow(5, 3, 8), rows, None),
    "latent-transport": (lambda: transport(7, 3), lambda n: torch.randn(n, 7), None),
    "transported-side": (transported_side, lambda n: images(1, 4, n), None),
    # the fixed-flag views users pass to Linearizer as g_x and g_y
    "conditioned": (lambda: Conditioned(cpu_network(1, 1, hidden=8), 1.0), image_batch, None),
    "conditioned-noise-side": (
        lambda: Conditioned(cpu_network(1, 1, hidden=8), 0.0),
        image_batch,
        None,
    ),
    "latent-view": (lambda: LatentView(cpu_network(1, 1, hidden=8), 1.0, False), image_batch, None),
    "latent-view-squeezed": (
        lambda: LatentView(cpu_network(1, 1, hidden=8), 0.0, True),
        image_batch,
        None,
    ),
}


class InvertibleContract(InvertibleTests):
    """The shipped contract on the entry ``case`` of ``CONTRACT`` (each ``Test...`` class
    below names one; pytest collects its inherited round trip, log-det and gradient tests)."""

    case: str
    rtol = 1e-9  # 4.5e6 float64 epsilons: the networks' condition numbers multiply rounding

    def build(self) -> nn.Module:
        return randomize(CONTRACT[self.case][0]()).eval()

    def sample(self, n: int) -> torch.Tensor:
        return CONTRACT[self.case][1](n).double()

    def flag(self, n: int) -> torch.Tensor | None:
        flag = CONTRACT[self.case][2]
        return None if flag is None else flag(n)


class TestActnorm(InvertibleContract):
    case = "actnorm"


class TestCouplingFirstSoft(InvertibleContract):
    case = "coupling-first-soft"


class TestCouplingSecondHard(InvertibleContract):
    case = "coupling-second-hard"


class TestInvconv(InvertibleContract):
    case = "invconv"


class TestSqueeze(InvertibleContract):
    case = "squeeze"


class TestSequential(InvertibleContract):
    case = "sequential"


class TestBlock(InvertibleContract):
    case = "block"


class TestCpuNetwork(InvertibleContract):
    case = "cpu-network"


class TestCpuNetwork2Levels(InvertibleContract):
    case = "cpu-network-2-levels"


class TestCpuNetworkBoundedShifts(InvertibleContract):
    case = "cpu-network-bounded-shifts"


class TestCpuNetworkOddNoise(InvertibleContract):
    case = "cpu-network-odd-noise"


class TestCpuNetworkShiftNoise(InvertibleContract):
    case = "cpu-network-shift-noise"


class TestCpuNetworkOddNoiseMean(InvertibleContract):
    case = "cpu-network-odd-noise-mean"


class TestNetwork3chHard(InvertibleContract):
    case = "network-3ch-hard"


class TestCoarserLevel(InvertibleContract):
    case = "coarser-level"


class TestFlagActnorm(InvertibleContract):
    case = "flag-actnorm"


class TestFlagLogit(InvertibleContract):
    case = "flag-logit"


class TestFlagLogitLinearTails(InvertibleContract):
    case = "flag-logit-linear-tails"


class TestTransportCoupling(InvertibleContract):
    case = "transport-coupling"


class TestTransportCouplingFlip(InvertibleContract):
    case = "transport-coupling-flip"


class TestTransportMixing(InvertibleContract):
    case = "transport-mixing"


class TestTransportFlow(InvertibleContract):
    case = "transport-flow"


class TestLatentTransport(InvertibleContract):
    case = "latent-transport"


class TestTransportedSide(InvertibleContract):
    case = "transported-side"


class TestConditioned(InvertibleContract):
    case = "conditioned"


class TestConditionedNoiseSide(InvertibleContract):
    case = "conditioned-noise-side"


class TestLatentView(InvertibleContract):
    case = "latent-view"


class TestLatentViewSqueezed(InvertibleContract):
    case = "latent-view-squeezed"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_odd_noise_side_is_odd_and_the_data_side_is_free(dtype):
    g = cpu_network(1, 1, hidden=8, flag_norm=True, dense_blocks=1, img_size=4, odd_flag=0.0)
    g = randomize(g).eval().to(dtype)  # a dense tail too: eval runs it in float64
    x = torch.randn(4, 1, 4, 4, dtype=dtype)
    with torch.no_grad():
        noise, data = cond_for(4, 0.0, dtype), cond_for(4, 1.0, dtype)
        # the mirrored rows run the same arithmetic negated: equal to the bit
        assert torch.equal(g(-x, noise), -g(x, noise))
        assert torch.equal(g.inverse(-g(x, noise), noise), -g.inverse(g(x, noise), noise))
        assert not torch.allclose(g(-x, data), -g(x, data))
        assert torch.equal(g(-x), -g(x))  # no flag is the noise flag, as for FlagActNorm
        g.train()  # training runs the float32 tail in float32, odd all the same
        assert torch.equal(g(-x, noise), -g(x, noise))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_an_odd_data_side_decodes_a_negated_latent_to_the_image_mirrored_about_the_centre(dtype):
    options = dict(dense_blocks=1, img_size=4, logit=0.05, logit_tails="linear", odd_flag=0.0)
    g = cpu_network(1, 1, hidden=8, flag_norm=True, odd_data=True, **options)
    g = randomize(g).eval().to(dtype)
    g.logit.centre.normal_()  # any centre: the mirror is about it, not about pixel 1/2
    x = torch.rand(4, 1, 4, 4, dtype=dtype)
    with torch.no_grad():
        data, noise = cond_for(4, 1.0, dtype), cond_for(4, 0.0, dtype)
        z = g(x, data)
        mirrored = g.logit.inverse(-g.logit(x, data), data)  # logit 2c - logit(x)
        # the mirror errs by the blocks' own round trip, mirrored, plus the logit's rounding
        round_trip = float((g.inverse(z, data) - x).abs().max())
        atol = 8 * torch.finfo(dtype).eps + 4 * round_trip
        torch.testing.assert_close(g.inverse(-z, data), mirrored, rtol=0, atol=atol)
        assert torch.equal(g(-x, noise), -g(x, noise))  # the noise side stays odd
    free = cpu_network(1, 1, hidden=8, flag_norm=True, logit=0.05, odd_flag=0.0)
    free = randomize(free).eval().to(dtype)
    with torch.no_grad():
        z = free(x, data)
        assert (free.inverse(-z, data) - (1 - free.inverse(z, data))).abs().max() > 1e-3


def test_an_odd_data_side_starts_its_centre_from_the_first_batch_mean_logit():
    options = dict(img_size=4, logit=0.05, odd_flag=0.0, odd_data=True)
    g = cpu_network(1, 1, hidden=8, flag_norm=True, **options).train()
    x = torch.rand(6, 1, 4, 4, dtype=torch.float64)
    flags = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 1.0], dtype=torch.float64)
    g.double()(x, flags)
    expected = torch.logit(0.05 + 0.9 * x[flags == 1]).mean(dim=0)
    torch.testing.assert_close(g.logit.centre, expected, rtol=0, atol=1e-14)
    assert "logit.centre" in g.state_dict()
    before = g.logit.centre.clone()
    g(torch.rand(6, 1, 4, 4, dtype=torch.float64), flags)
    assert torch.equal(g.logit.centre, before)  # set once, then fixed


def test_an_odd_data_side_needs_the_odd_noise_side_and_a_logit():
    with pytest.raises(LinearizerError, match="odd_data"):
        cpu_network(1, 1, hidden=8, flag_norm=True, logit=0.05, odd_data=True)
    with pytest.raises(LinearizerError, match="odd_data"):
        cpu_network(1, 1, hidden=8, flag_norm=True, odd_flag=0.0, odd_data=True)
    with pytest.raises(LinearizerError, match="odd_data"):
        cpu_network(1, 1, hidden=8, flag_norm=True, logit=0.05, odd_flag=0.0, odd_data=True)
    with pytest.raises(LinearizerError, match="network.odd_data"):
        NetworkConfig(odd_data=True, flag_actnorm=True, logit=0.05).validate()
    with pytest.raises(LinearizerError, match="network.odd_data"):
        NetworkConfig(odd_data=True, odd_noise=True, flag_actnorm=True).validate()


def test_an_odd_noise_side_needs_flag_norm_and_no_dropout():
    with pytest.raises(LinearizerError, match="odd_flag"):
        cpu_network(1, num_blocks=1, hidden=8, odd_flag=0.0)
    with pytest.raises(LinearizerError, match="odd_flag"):
        cpu_network(1, num_blocks=1, hidden=8, flag_norm=True, dropout=0.1, odd_flag=0.0)
    with pytest.raises(LinearizerError, match="network.odd_noise"):
        NetworkConfig(odd_noise=True).validate()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_shift_noise_side_is_x_plus_mu_and_the_data_side_the_blocks(dtype):
    g = cpu_network(1, 1, hidden=8, dense_blocks=1, img_size=4, logit=0.05, shift_flag=0.0)
    g = randomize(g).eval().to(dtype)  # a dense tail too: eval returns float64 latents
    x, mixed = torch.rand(6, 1, 4, 4, dtype=dtype), flags(6)
    with torch.no_grad():
        z, z0 = g(x, mixed), g(x, 0.0)
        assert z.dtype == z0.dtype == torch.float64
        assert torch.equal(z0, x.double() + g.shift.double())  # one rounding, no blocks
        assert torch.equal(z[mixed == 0], z0[mixed == 0])
        assert torch.equal(z[mixed == 1], g(x[mixed == 1], 1.0))
        assert not torch.allclose(z[mixed == 1], z0[mixed == 1])
        back = g.inverse(z, mixed)
        assert back.dtype == dtype
        noise = mixed == 0  # the data rows' round trip is the contract's
        assert torch.allclose(back[noise], x[noise], rtol=0, atol=4 * torch.finfo(dtype).eps)
        # a negative scalar of the induced space: as exact as a positive one (condition 1)
        for a in (-2.0, -0.5, 1.5):
            xa = g.inverse(a * z0, 0.0)
            err = (g(xa, 0.0) - a * z0).abs().max() / z0.abs().max()
            assert err <= 8 * torch.finfo(dtype).eps
    g.train()
    z = g(x, mixed)
    assert z.dtype == dtype
    z.sum().backward()
    assert torch.equal(g.shift.grad, torch.full_like(g.shift, 3.0))  # three noise rows


def test_a_shift_noise_side_needs_img_size_and_leaves_other_networks_alone():
    with pytest.raises(LinearizerError, match="shift_flag"):
        cpu_network(1, num_blocks=1, hidden=8, shift_flag=0.0)
    with pytest.raises(LinearizerError, match="shift_flag"):
        cpu_network(1, 1, hidden=8, img_size=4, flag_norm=True, odd_flag=0.0, shift_flag=0.0)
    with pytest.raises(LinearizerError, match="shift_flag=1"):
        cpu_network(1, 1, hidden=8, img_size=4, logit=0.05, shift_flag=1.0)
    with pytest.raises(LinearizerError, match="network.noise_side"):
        NetworkConfig(noise_side="shift", odd_noise=True, flag_actnorm=True).validate()
    with pytest.raises(LinearizerError, match="network.noise_side"):
        build_network(NetworkConfig(noise_side="shift", img_size=4), 1, conditioned=False)
    assert "shift" not in cpu_network(1, 1, hidden=8, img_size=4).state_dict()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_an_odd_noise_side_with_a_mean_is_odd_about_it(dtype):
    torch.manual_seed(0)
    g = cpu_network(
        1, 1, hidden=8, flag_norm=True, dense_blocks=1, img_size=4, odd_flag=0.0, mean_flag=0.0
    )
    g = randomize(g).eval().to(dtype)  # randomize moves the mean off zero too
    mu = g.latent_mean.detach()
    assert float(mu.abs().min()) > 0
    x, mixed = torch.randn(6, 1, 4, 4, dtype=dtype), flags(6)
    with torch.no_grad():
        noise = cond_for(6, 0.0, dtype)
        z = g(x, noise)
        # g(x) - mu is odd in x, to the bit but for the roundings of adding and removing mu
        h, h_neg = z - mu.to(z.dtype), g(-x, noise) - mu.to(z.dtype)
        ulp = torch.finfo(z.dtype).eps * float(z.abs().max())  # adding and removing mu round
        torch.testing.assert_close(h_neg, -h, rtol=0, atol=4 * ulp)
        blocks = g._by_side(x, mixed, g._forward, 1.0)  # the same batch without the mean
        assert torch.equal(g(x, mixed)[mixed == 1], blocks[mixed == 1])  # data side: no mean
        back = g.inverse(z, noise)
        # the inverse starts from latents of size |z| (up to 1e2 here): its rounding scales with
        # them (at most 30 eps |z| over 40 seeds in float64)
        scale = torch.finfo(dtype).eps * float(z.abs().max())
        torch.testing.assert_close(back, x, rtol=0, atol=200 * scale)
    g.train()
    g(x, mixed).sum().backward()
    assert torch.equal(g.latent_mean.grad, torch.full_like(mu, float((mixed == 0).sum())))


def test_a_noise_mean_needs_img_size_no_shift_and_a_flagged_cpu_network():
    with pytest.raises(LinearizerError, match="mean_flag"):
        cpu_network(1, num_blocks=1, hidden=8, mean_flag=0.0)
    with pytest.raises(LinearizerError, match="mean_flag"):
        cpu_network(1, 1, hidden=8, img_size=4, shift_flag=0.0, mean_flag=0.0)
    with pytest.raises(LinearizerError, match="network.noise_mean"):
        NetworkConfig(noise_mean=True, noise_side="shift").validate()
    with pytest.raises(LinearizerError, match="network.noise_mean"):
        build_network(NetworkConfig(noise_mean=True, img_size=4), 1, conditioned=False)
    assert "latent_mean" not in cpu_network(1, 1, hidden=8, img_size=4).state_dict()


def test_every_contract_entry_has_its_class():
    assert contract_cases(globals(), InvertibleContract) == set(CONTRACT)


def test_every_invertible_module_of_the_package_passes_the_contract():
    covered = {type(factory()) for factory, _, _ in CONTRACT.values()}
    missing = sorted(c.__qualname__ for c in package_classes(InvertibleModule) - covered)
    assert not missing, f"no InvertibleTests case for {missing}"
    wrappers = {Conditioned, LatentView, TransportedSide}  # what users pass to Linearizer
    assert {Coupling, Mixing, VectorFlow, FlagActNorm, FlagLogit} | wrappers <= covered


@pytest.mark.parametrize("name", CASES)
def test_round_trip_float32_32x32(name):
    g, c, _ = build(name)
    g = g.float()
    x, cond = images(c, 32, dtype=torch.float32), cond_for(2, 0.0, torch.float32)
    z = g(x, cond)
    assert z.dtype == torch.float32
    assert_near(g.inverse(z, cond), x, eps_factor=200)


@pytest.mark.parametrize("name", CASES)
def test_conditioning(name):
    g, c, conditional = build(name)
    x = images(c, 4)
    y1, y0 = g(x, cond_for(2, 1.0)), g(x, cond_for(2, 0.0))
    assert torch.equal(y1, g(x, cond_for(2, 1.0)))
    assert (y1 - y0).abs().max() > 1e-6 if conditional else torch.equal(y1, y0)
    z = y1.detach()
    assert (g.inverse(z, cond_for(2, 0.0)) - x).abs().max() > 1e-6 or not conditional


@pytest.mark.parametrize("name", CASES)
def test_inverse_jacobian_is_inverse_of_forward_jacobian(name):
    g, c, _ = build(name)
    size = 4 if name in ("cpu-network", "cpu-network-2-levels", "squeeze") else 2
    x, cond = images(c, size, batch=1), cond_for(1, 1.0)
    z = g(x, cond).detach()
    jf = torch.autograd.functional.jacobian(lambda v: g(v, cond), x).reshape(z.numel(), x.numel())
    ji = torch.autograd.functional.jacobian(lambda v: g.inverse(v, cond), z)
    ji = ji.reshape(x.numel(), z.numel())
    eye = torch.eye(x.numel())
    assert_near(ji @ jf, eye, eps_factor=1e6)
    assert torch.linalg.det(jf).abs() > 0


@pytest.mark.parametrize("name", CASES)
def test_gradcheck_forward_and_inverse(name):
    g, c, _ = build(name)
    size = 4 if name in ("cpu-network", "cpu-network-2-levels", "squeeze") else 2
    x = images(c, size, batch=1).requires_grad_()
    cond = cond_for(1, 1.0)
    assert torch.autograd.gradcheck(lambda v: g(v, cond), (x,))
    z = g(x, cond).detach().requires_grad_()
    assert torch.autograd.gradcheck(lambda v: g.inverse(v, cond), (z,))


# ----------------------------------------------------------------------------- ActNorm


def test_actnorm_data_init_standardises_and_matches_formula():
    norm = ActNorm(3).train()
    x = torch.randn(16, 3, 5, 5) * torch.tensor([1.0, 3.0, 0.5]).view(1, 3, 1, 1) + 2.0
    y = norm(x)
    assert bool(norm.initialized)
    per_channel = y.transpose(0, 1).reshape(3, -1)
    assert_near(per_channel.mean(1), torch.zeros(3), eps_factor=1e3, scale=1.0)
    sx = x.transpose(0, 1).reshape(3, -1).std(1)
    assert_near(per_channel.std(1), sx / (sx + 1e-6), eps_factor=1e3)  # log_scale = -log(std+1e-6)
    assert_near(y, (x + norm.bias) * norm.log_scale.exp(), eps_factor=10)  # bias before scale


def test_actnorm_before_init_inverse_is_identity_and_eval_does_not_init():
    norm = ActNorm(2)
    x = torch.randn(3, 2, 4, 4)
    assert torch.equal(norm.train().inverse(x), x) and not bool(norm.initialized)
    assert torch.equal(norm.eval()(x), x) and not bool(norm.initialized)
    norm.initialize_(x)
    assert bool(norm.initialized) and norm.bias.abs().max() > 0


def test_actnorm_init_state_survives_state_dict_round_trip():
    norm = ActNorm(2).train()
    norm(torch.randn(8, 2, 4, 4) + 3.0)
    state = norm.state_dict()
    assert "initialized" in state and int(state["initialized"]) == 1
    fresh = ActNorm(2).train()
    fresh.load_state_dict(state)
    before = fresh.bias.detach().clone(), fresh.log_scale.detach().clone()
    fresh(torch.randn(8, 2, 4, 4) * 7.0 - 1.0)  # must not re-initialise on new data
    assert torch.equal(fresh.bias, before[0]) and torch.equal(fresh.log_scale, before[1])


def test_actnorm_flagless_state_dict_loads_as_initialised():
    state = {"bias": torch.ones(1, 2, 1, 1), "log_scale": torch.zeros(1, 2, 1, 1)}
    norm = ActNorm(2).train()
    norm.load_state_dict(state)  # strict: the flag is filled in, not reported missing
    assert bool(norm.initialized)
    x = torch.randn(4, 2, 3, 3)
    assert torch.equal(norm(x), x + 1.0)


def test_actnorm_bad_input():
    with pytest.raises(LinearizerError):
        ActNorm(2)(torch.randn(3, 3, 4, 4))
    with pytest.raises(LinearizerError):
        ActNorm(2).initialize_(torch.randn(1, 2, 1, 1))


# ----------------------------------------------------------------------------- coupling


class _Fixed(nn.Module):
    """Conditioner with known output: shift = 2u, log-scale = u (then clamped)."""

    def forward(self, u, cond=None):
        return torch.cat([2 * u, u], dim=1)


@pytest.mark.parametrize("mode", ["soft", "hard"])
def test_coupling_formula(mode):
    x = torch.randn(2, 4, 3, 3) * 4
    a, b = x[:, :2], x[:, 2:]

    def clamp(v):
        return 1.5 * torch.tanh(v / 1.5) if mode == "soft" else v.clamp(-1.5, 1.5)

    first = AffineCoupling(_Fixed(), "first", clamp=1.5, clamp_mode=mode)(x)
    assert torch.equal(first[:, 2:], b)
    assert_near(first[:, :2], (a + 2 * b) * torch.exp(clamp(b)), eps_factor=10)
    second = AffineCoupling(_Fixed(), "second", clamp=1.5, clamp_mode=mode)(x)
    assert torch.equal(second[:, :2], a)
    assert_near(second[:, 2:], (b + 2 * a) * torch.exp(clamp(a)), eps_factor=10)


def test_bounded_shift_formula_and_its_exact_inverse_far_off_the_data():
    x = torch.randn(2, 4, 3, 3) * 1e4  # conditioner inputs far outside any training range
    a, b = x[:, :2], x[:, 2:]
    y = AffineCoupling(_Fixed(), "first", clamp=1.5, shift_bound=3.0)(x)
    shift, log_scale = 3.0 * torch.tanh(2 * b / 3.0), 1.5 * torch.tanh(b / 1.5)
    assert_near(y[:, :2], (a + shift) * torch.exp(log_scale), eps_factor=10)
    unbounded = AffineCoupling(_Fixed(), "first", clamp=1.5)(x)
    assert float(unbounded[:, :2].abs().max()) > 1e4  # shifts of 2e4 pass straight through
    coupling = AffineCoupling(_Fixed(), "first", clamp=1.5, shift_bound=3.0)
    assert_near(coupling.inverse(y), x, eps_factor=100)
    assert "shift_bound=3" in repr(coupling)


def test_shift_bound_reaches_every_coupling_and_refuses_negatives():
    g = cpu_network(1, num_blocks=1, hidden=4, dense_blocks=1, img_size=8, shift_bound=2.0)
    bounds = {m.shift_bound for m in g.modules() if isinstance(m, AffineCoupling)}
    assert bounds == {2.0}
    with pytest.raises(LinearizerError, match="shift_bound"):
        AffineCoupling(_Fixed(), shift_bound=-1.0)
    with pytest.raises(LinearizerError, match="shift_bound"):
        cpu_network(1, num_blocks=1, hidden=4, shift_bound=-1.0)


def test_coupling_bad_arguments_and_conditioner_output():
    with pytest.raises(LinearizerError):
        AffineCoupling(_Fixed(), update="middle")
    with pytest.raises(LinearizerError):
        AffineCoupling(_Fixed(), clamp_mode="tanh")
    with pytest.raises(LinearizerError):
        AffineCoupling(SmallCNN(2, 3))(torch.randn(1, 4, 2, 2))  # 3 != 2 * 2 channels
    with pytest.raises(LinearizerError):
        AffineCoupling(_Fixed())(torch.randn(1, 1, 2, 2))


# ----------------------------------------------------------------------------- 1x1 mix


def test_invconv_from_weight_reproduces_matrix():
    w = torch.randn(5, 5)
    mix = InvConv1x1.from_weight(w)
    assert mix.lower.dtype == torch.float64
    assert_near(mix.weight(), w, eps_factor=1e3, dtype=torch.float64)
    assert_near(mix.inverse_weight() @ w.double(), torch.eye(5), eps_factor=1e4)
    w32 = w.float()
    mix32 = InvConv1x1.from_weight(w32)
    assert_near(mix32.weight(), w32, eps_factor=100)


def test_invconv_applies_weight_per_pixel_and_starts_orthogonal():
    mix = InvConv1x1(4)
    w = mix.weight().detach()
    assert_near(w @ w.T, torch.eye(4), eps_factor=1e3, dtype=torch.float64)
    y = torch.randn(2, 4, 3, 3)
    assert_near(mix(y), torch.einsum("oc,bcij->boij", w, y), eps_factor=100)


def test_invconv_rejects_bad_weights():
    with pytest.raises(LinearizerError):
        InvConv1x1.from_weight(torch.zeros(3, 3))
    with pytest.raises(LinearizerError):
        InvConv1x1(3).set_weight_(torch.eye(4))
    with pytest.raises(LinearizerError):
        InvConv1x1(3)(torch.randn(1, 4, 2, 2))


# ----------------------------------------------------------------------------- squeeze


def test_squeeze_channel_order():
    x = torch.randn(2, 3, 4, 6)
    s = Squeeze()(x)
    assert s.shape == (2, 12, 2, 3)
    for c in range(3):
        for p in range(2):
            for q in range(2):
                assert torch.equal(s[:, 4 * c + 2 * p + q], x[:, c, p::2, q::2])


def test_squeeze_bad_shapes():
    with pytest.raises(LinearizerError):
        Squeeze()(torch.randn(1, 1, 3, 4))
    with pytest.raises(LinearizerError):
        Squeeze().inverse(torch.randn(1, 3, 2, 2))
    with pytest.raises(LinearizerError):
        Squeeze()(torch.randn(4, 4))


# ----------------------------------------------------------------------------- dropout


def _dropout_network() -> InvertibleNetwork:
    return randomize(cpu_network(1, num_blocks=2, hidden=8, dropout=0.3)).train()


def test_shared_dropout_inverse_is_exact_in_train_mode():
    g = _dropout_network()
    assert set_dropout_seed(g, 11) == 4
    x, cond = images(1, 8, batch=3), cond_for(3, 1.0)
    z = g(x, cond)
    assert_near(g.inverse(z, cond), x, eps_factor=1e6)
    # one mask over the batch: inverting part of the batch still agrees
    assert_near(g.inverse(z[1:], cond[1:]), x[1:], eps_factor=1e6)
    set_dropout_seed(g, 12)
    assert (g(x, cond) - z).abs().max() > 1e-6
    assert torch.equal(g.eval()(x, cond), g(x, cond))  # eval: dropout off, deterministic


def test_shared_dropout_masks():
    drop = SharedDropout(0.3).train()
    x = torch.ones(4, 8, 6, 6)
    y = drop(x)
    assert torch.equal(y, drop(x)) and torch.equal(y[0], y[3])
    assert set(y.unique().tolist()) == {0.0, 1 / 0.7}
    assert torch.equal(drop(x.float()) != 0, y != 0)  # same mask in both dtypes
    other = SharedDropout(0.3).train()
    set_dropout_seed(nn.Sequential(drop, other), 5)
    assert not torch.equal(drop(x), other(x))  # distinct layers draw distinct masks
    assert torch.equal(drop.eval()(x), x)
    with pytest.raises(LinearizerError):
        SharedDropout(1.0)
    with pytest.raises(LinearizerError):
        set_dropout_seed(drop, -1)


# ----------------------------------------------------------------------------- networks


def test_cpu_network_starts_as_actnorm_and_mix_only():
    g = cpu_network().eval()
    x = images(1, 8)
    assert torch.equal(g(x, 1.0), g(x, 0.0))  # zero-initialised couplings ignore the flag


def test_network_state_dict_names_match_authors_layout():
    keys = cpu_network(num_blocks=2).state_dict().keys()
    for k in range(2):
        assert f"blocks.{k}.actnorm.bias" in keys and f"blocks.{k}.actnorm.log_scale" in keys
        assert f"blocks.{k}.actnorm.initialized" in keys
        assert any(key.startswith(f"blocks.{k}.F.cond.") for key in keys)
        assert any(key.startswith(f"blocks.{k}.G.cond.") for key in keys)
        assert any(key.startswith(f"blocks.{k}.mix.") for key in keys)


def test_network_accepts_scalar_cond_and_conditioned_view():
    g, _, _ = build("cpu-network")
    x = images(1, 8)
    assert torch.equal(g(x, 1.0), g(x, cond_for(2, 1.0)))
    assert torch.equal(g(x, torch.tensor(1.0)), g(x, cond_for(2, 1.0)))
    gx = Conditioned(g, 1.0)
    assert_near(gx.inverse(gx(x)), x, eps_factor=1e6)


@pytest.mark.parametrize(
    "shape, cond",
    [((2, 1, 8), None), ((2, 2, 8, 8), None), ((2, 1, 7, 8), None), ((2, 1, 8, 8), "bad")],
)
def test_network_bad_shapes(shape, cond):
    g = cpu_network(hidden=4)
    x = torch.randn(*shape)
    c = torch.ones(3) if cond == "bad" else None
    with pytest.raises(LinearizerError):
        g(x, c)
    with pytest.raises(LinearizerError):
        g.inverse(x, c)


def test_levels_nest_at_halving_resolutions():
    g = cpu_network(1, num_blocks=1, hidden=4, levels=3)
    seen = []
    for m in g.modules():
        if isinstance(m, CouplingBlock):
            m.register_forward_hook(lambda mod, args, out: seen.append(tuple(out.shape[1:])))
    randomize(g).eval()
    x = images(1, 16)
    assert_near(g.inverse(g(x, 1.0), 1.0), x, eps_factor=1e6)
    assert seen == [(4, 8, 8), (16, 4, 4), (64, 2, 2)]
    with pytest.raises(LinearizerError, match="divisible by 8"):
        g(images(1, 12), 1.0)


def test_levels_config_checks():
    from linearizer.invertible.factory import NetworkConfig, build_network

    assert build_network(NetworkConfig(levels=2, img_size=8, hidden=4), 1).levels == 2
    with pytest.raises(LinearizerError, match="divisible by 8"):
        NetworkConfig(levels=3, img_size=12).validate()
    with pytest.raises(LinearizerError, match="cpu network only"):
        NetworkConfig(kind="paper", levels=2).validate()
    with pytest.raises(LinearizerError):
        NetworkConfig(levels=0).validate()


def test_network_bad_construction():
    with pytest.raises(LinearizerError):
        InvertibleNetwork(1, 2, make_cnn, squeeze=False)
    with pytest.raises(LinearizerError):
        InvertibleNetwork(2, 0, make_cnn)


def test_small_cnn_cond_none_is_flag_zero_and_checks_cond():
    net = randomize(SmallCNN(2, 4, hidden=8))
    u = torch.randn(3, 2, 4, 4)
    assert torch.equal(net(u, None), net(u, torch.zeros(3)))
    assert not torch.equal(net(u, None), net(u, torch.ones(3)))
    with pytest.raises(LinearizerError):
        net(u, torch.zeros(2))


def test_bfloat16_conditioners_round_only_the_conditioners():
    """Inside ``conditioners_in("bfloat16")`` a float32 coupling changes (its conditioner ran
    in bfloat16) yet inverts to float32 rounding, since the kept half passes through; a float64
    pass is left alone. A stack of couplings does not invert that well: float32 rounding in one
    coupling's inverse can move a kept value across a bfloat16 rounding boundary of the next
    conditioner, which is why only training lowers the conditioners."""
    coupling = randomize(AffineCoupling(make_cnn(2, 4), "first")).eval().float()
    x = torch.randn(4, 4, 6, 6, dtype=torch.float32)
    with torch.no_grad():
        full = coupling(x)
        with conditioners_in("bfloat16"):
            low = coupling(x)
            back = coupling.inverse(low)
        assert low.dtype == torch.float32
        assert float((low - full).abs().max()) > 1e3 * torch.finfo(torch.float32).eps
        assert_near(back, x, eps_factor=64, what="bfloat16-conditioner round trip")
        coupling.double()
        with conditioners_in("bfloat16"):
            y64 = coupling(x.double())
        assert torch.equal(y64, coupling(x.double()))


def test_conditioner_precision_is_checked_and_auto_follows_the_hardware(monkeypatch):
    from linearizer.invertible import precision

    with pytest.raises(LinearizerError, match="conditioner precision"):
        with conditioners_in("float16"):
            pass
    with pytest.raises(LinearizerError, match="conditioner precision"):
        precision.resolve_precision("half", torch.device("cpu"))
    cpu = torch.device("cpu")
    assert precision.resolve_precision("float32", cpu) == "float32"
    assert precision.resolve_precision("bfloat16", cpu) == "bfloat16"
    for native, expected in ((True, "bfloat16"), (False, "float32")):
        monkeypatch.setattr(precision, "native_bfloat16", lambda device, n=native: n)
        assert precision.resolve_precision("auto", cpu) == expected


def test_the_float64_logit_accepts_what_a_float32_decode_produced():
    """A float32 sigmoid that saturates rounds a pixel onto (or a few ulps past) the edge of
    the logit's interval; the same pixel must encode in float64 too, and a real overshoot is
    still refused with the range in enough digits to see by how much."""
    from linearizer.invertible.logit import FlagLogit

    block = FlagLogit(0.05).double()
    edge = (1 - 0.05) / 0.9  # the top of the interval, in pixels
    just_past = torch.tensor(edge + 8 * torch.finfo(torch.float32).eps, dtype=torch.float64)
    assert torch.isfinite(block(just_past.reshape(1, 1, 1, 1), torch.ones(1))).all()
    with pytest.raises(LinearizerError, match=r"got values in \[1.06, 1.06\]"):
        block(torch.full((1, 1, 1, 1), 1.06, dtype=torch.float64), torch.ones(1))
