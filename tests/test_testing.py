"""``linearizer.testing`` used as a user would: hand-written toy bijections, inherited tests.

Also the library's first-call promise: ``Linearizer(g_x, A, g_y)(x)`` with two distinct networks
works without latent shapes when ``A`` is square, or when a network reports its latent shape.
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

from linearizer.algebra import Linearizer
from linearizer.errors import LinearizerError
from linearizer.invertible import Conditioned, cpu_network
from linearizer.testing import InvertibleTests, LinearizerTests, LinearOperatorTests

F64 = torch.float64


class Sinh(nn.Module):
    """``z = sinh(a x + b)`` per feature: a tiny exact bijection written by hand."""

    def __init__(self, d: int, seed: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.a = nn.Parameter(torch.rand(d, dtype=F64, generator=g) + 0.5)
        self.b = nn.Parameter(torch.randn(d, dtype=F64, generator=g))

    def forward(self, x: Tensor) -> Tensor:
        return torch.sinh(self.a * x + self.b)

    def inverse(self, z: Tensor) -> Tensor:
        return (torch.asinh(z) - self.b) / self.a


class Fold(nn.Module):
    """Vectors ``[B, 6]`` to latents ``[B, 2, 3]`` (cubed): a latent of another shape, which the
    module reports, so a Linearizer can decode into it before seeing any input."""

    latent_shape = (2, 3)

    def forward(self, x: Tensor) -> Tensor:
        return (x**3).view(x.shape[0], 2, 3)

    def inverse(self, z: Tensor) -> Tensor:
        return (z.sign() * z.abs() ** (1 / 3)).reshape(z.shape[0], 6)


class TestUserSinhSame(LinearizerTests):
    def build(self):
        return Sinh(4, seed=1), torch.randn(4, 4, dtype=F64), None

    def sample_x(self, n: int) -> Tensor:
        return torch.randn(n, 4, dtype=F64)


class TestUserSinhTwoNetworksSquare(LinearizerTests):
    """Two different networks, square A, no latent shapes given."""

    def build(self):
        return Sinh(4, seed=1), torch.randn(4, 4, dtype=F64), Sinh(4, seed=2)

    def sample_x(self, n: int) -> Tensor:
        return torch.randn(n, 4, dtype=F64)


class TestUserRectangularReported(LinearizerTests):
    """``R^4 -> R^6`` between a Sinh and a network that reports its ``[2, 3]`` latent."""

    def build(self):
        return Sinh(4, seed=3), torch.randn(6, 4, dtype=F64), Fold()

    def sample_x(self, n: int) -> Tensor:
        return torch.randn(n, 4, dtype=F64)

    def sample_y(self, n: int) -> Tensor:
        return torch.randn(n, 6, dtype=F64)


class TestUserFloat32(LinearizerTests):
    """float32 maps use the float32 default bar."""

    def build(self):
        return Sinh(3, seed=4).float(), torch.randn(3, 3), None

    def sample_x(self, n: int) -> Tensor:
        return torch.randn(n, 3)


def test_first_call_with_two_distinct_networks_and_square_a():
    torch.manual_seed(0)
    for make in (
        lambda: Sinh(16, seed=5),
        lambda: Conditioned(
            cpu_network(in_channels=1, num_blocks=1, hidden=4).double().eval(), 1.0
        ),
    ):
        g_x, g_y = make(), make()
        assert g_x is not g_y
        shape = (16,) if isinstance(g_x, Sinh) else (1, 4, 4)
        x = torch.randn(2, *shape, dtype=F64)
        f = Linearizer(g_x, torch.randn(16, 16, dtype=F64), g_y)
        out = f(x)  # the first call: g_y's latent shape is inferred from the square A
        assert out.shape == x.shape
        with torch.no_grad():
            lat = (g_x(x).reshape(2, -1) @ f.A.matrix().T).reshape(g_x(x).shape)
            assert float((g_y(out) - lat).abs().max() / lat.abs().max()) <= 1e-10


def test_reported_latent_shape_decodes_before_any_input():
    f = Linearizer(Sinh(4, seed=6), torch.randn(6, 4, dtype=F64), Fold())
    out = f(torch.randn(3, 4, dtype=F64))
    assert out.shape == (3, 6)
    svd = Linearizer(Fold(), torch.randn(6, 6, dtype=F64)).svd(k=2)  # nothing encoded yet
    assert svd.V_x.shape == (2, 6) and svd.U_y.shape == (2, 6)


def test_rectangular_a_without_any_shape_is_still_a_clear_error():
    f = Linearizer(Sinh(4, seed=6), torch.randn(6, 4, dtype=F64), Sinh(6, seed=7))
    with pytest.raises(LinearizerError, match="latent shape of g_y is not known"):
        f(torch.randn(3, 4, dtype=F64))


# --------------------------------------------------------------------- the base class bites
class Leaky(Sinh):
    """A broken bijection: its inverse is off by 1e-6 relative."""

    def inverse(self, z: Tensor) -> Tensor:
        return super().inverse(z) * (1 + 1e-6)


class BrokenInverse(TestUserSinhSame):
    def build(self):
        return Leaky(4, seed=1), torch.randn(4, 4, dtype=F64), None


class WrongDense(TestUserSinhSame):
    """``A`` whose ``matrix()`` disagrees with its action (a transposed dense reference)."""

    def build(self):
        from linearizer.operators import Dense

        class Transposed(Dense):
            def matrix(self, t=None, dtype=None):
                return super().matrix(t, dtype).T

        return Sinh(4, seed=1), Transposed(torch.randn(4, 4, dtype=F64)), None


@pytest.mark.parametrize(
    "case, broken",
    [
        (BrokenInverse, ["test_round_trip", "test_superposition_and_homogeneity"]),
        (WrongDense, ["test_forward_matches_dense", "test_svd_against_dense"]),
    ],
)
def test_inherited_tests_fail_on_a_broken_map(case, broken):
    for name in broken:
        with pytest.raises(AssertionError):
            getattr(case(), name)()


def test_check_all_runs_every_property():
    names = TestUserSinhSame().check_all()
    assert len(names) >= 12 and "test_svd_against_dense" in names


# --------------------------------------------------------- the block and operator contracts
class SinhBlock(Sinh):
    """Sinh as a block of the invertible protocol, with its log-determinant:
    ``x = (asinh(z) - b) / a``, so ``log |dx/dz| = -log a - log sqrt(1 + z^2)`` per feature."""

    def inverse_logdet(self, z: Tensor) -> tuple[Tensor, Tensor]:
        logdet = -(self.a.log() + 0.5 * torch.log1p(z.square())).sum(dim=1)
        return self.inverse(z), logdet


class TestUserBlock(InvertibleTests):
    def build(self):
        return SinhBlock(4, seed=1)

    def sample(self, n: int) -> Tensor:
        return torch.randn(n, 4, dtype=F64)


class TestUserBlockWithoutLogdet(TestUserBlock):
    """A plain module (no ``inverse_logdet``): the log-determinant check has nothing to do."""

    def build(self):
        return Sinh(4, seed=1)


class WrongSignLogdet(TestUserBlock):
    def build(self):
        class Flipped(SinhBlock):
            def inverse_logdet(self, z):
                x, logdet = super().inverse_logdet(z)
                return x, -logdet

        return Flipped(4, seed=1)


class LeakyBlock(TestUserBlock):
    def build(self):
        return Leaky(4, seed=1)


class DeadParameter(TestUserBlock):
    """A parameter the map never uses gets no gradient."""

    def build(self):
        block = SinhBlock(4, seed=1)
        block.unused = nn.Parameter(torch.ones(2, dtype=F64))
        return block


class TestUserOperator(LinearOperatorTests):
    def build(self):
        from linearizer.operators import LowRank

        return LowRank(5, 4, rank=2).double()


def _dense_with(**broken):
    """A Dense operator with one of its methods replaced by a wrong one."""
    from linearizer.operators import Dense

    op = Dense(torch.randn(4, 3, dtype=F64))
    for name, method in broken.items():
        setattr(op, name, method.__get__(op))
    return op


class WrongTranspose(LinearOperatorTests):
    def build(self):
        return _dense_with(transpose_apply=lambda self, y, t=None: y @ self.weight[:, :3] * 1.5)


class WrongMatrix(LinearOperatorTests):
    def build(self):
        return _dense_with(matrix=lambda self, t=None, dtype=None: self.weight.to(dtype) * 1.001)


class WrongFactors(LinearOperatorTests):
    def build(self):
        swapped = torch.eye(3, dtype=F64)[:, [1, 0, 2]]  # V with two columns swapped
        return _dense_with(factors=lambda self, t=None: (self.weight, swapped))


@pytest.mark.parametrize(
    "case, broken",
    [
        (WrongSignLogdet, "test_logdet_against_autograd"),
        (LeakyBlock, "test_round_trip"),
        (DeadParameter, "test_gradients_flow"),
        (WrongTranspose, "test_transpose_is_adjoint"),
        (WrongMatrix, "test_matrix_matches_apply_on_a_basis"),
        (WrongFactors, "test_factors_reproduce_matrix"),
    ],
)
def test_the_contracts_fail_on_a_broken_block_or_operator(case, broken):
    with pytest.raises(AssertionError):
        getattr(case(), broken)()


def test_the_contracts_run_without_pytest():
    assert TestUserBlock().check_all() == [
        "test_gradients_flow",
        "test_logdet_against_autograd",
        "test_round_trip",
    ]
    assert len(TestUserOperator().check_all()) == 4


class FlagScale(nn.Module):
    """``x (2 + flag)``: a block that needs its flag, so a contract that drops it fails."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(1, dtype=F64))

    def forward(self, x: Tensor, flag: Tensor) -> Tensor:
        return x * self.w * (2 + flag[:, None])

    def inverse(self, z: Tensor, flag: Tensor) -> Tensor:
        return z / (self.w * (2 + flag[:, None]))


class TestUserFlaggedBlock(InvertibleTests):
    def build(self):
        return FlagScale()

    def sample(self, n: int) -> Tensor:
        return torch.randn(n, 3, dtype=F64)

    def flag(self, n: int) -> Tensor:
        return torch.full((n,), 0.5, dtype=F64)


def test_a_contract_written_with_the_former_cond_hook_still_passes_its_flag_and_warns():
    class FormerHook(InvertibleTests):
        build, sample = TestUserFlaggedBlock.build, TestUserFlaggedBlock.sample

        def cond(self, n: int) -> Tensor:
            return torch.full((n,), 0.5, dtype=F64)

    with pytest.warns(DeprecationWarning, match="override flag"):
        FormerHook().test_round_trip()
