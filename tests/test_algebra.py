"""InducedSpace and Linearizer: API behaviour, caching, shapes and bad input."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

from linearizer import InducedSpace, Linearizer, LinearizerError
from linearizer.invertible import Conditioned, cpu_network
from linearizer.operators import DepthwiseConv, LowRank, OrthogonalProjector, TimeLoRA
from tolerance import assert_near, scale_of

F64 = torch.float64


class Sinh(nn.Module):
    """``x -> sinh(a x + b)`` elementwise on ``[B, D]``, with an optional flag scaling ``a``."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.a = nn.Parameter(torch.rand(d, dtype=F64) + 0.5)
        self.b = nn.Parameter(0.3 * torch.randn(d, dtype=F64))

    def _a(self, cond: Tensor | None) -> Tensor:
        return self.a if cond is None else self.a * (1 + cond.view(-1, 1))

    def forward(self, x: Tensor, cond: Tensor | None = None) -> Tensor:
        return torch.sinh(self._a(cond) * x + self.b)

    def inverse(self, z: Tensor, cond: Tensor | None = None) -> Tensor:
        return (torch.asinh(z) - self.b) / self._a(cond)


def rel(a: Tensor, b: Tensor) -> float:
    return float((a - b).detach().abs().max() / b.detach().abs().max())


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


# --------------------------------------------------------------------------- InducedSpace
def test_space_operations_follow_latent_arithmetic() -> None:
    g = Sinh(4)
    s = InducedSpace(g)
    u, v = torch.randn(3, 4, dtype=F64), torch.randn(3, 4, dtype=F64)
    a = torch.tensor([1.0, -2.0, 0.5], dtype=F64)
    assert rel(g(s.scale(a, u)), a[:, None] * g(u)) < 1e-12
    assert rel(g(s.add(u, v)), g(u) + g(v)) < 1e-12
    assert rel(g(s.sub(u, v)), g(u) - g(v)) < 1e-12
    assert rel(g(s.neg(u)), -g(u)) < 1e-12
    assert_near(g(s.zero(u)), torch.zeros(3, 4, dtype=F64), eps_factor=100, scale=scale_of(g(u)))
    assert s.inner(u, v).shape == (3,) and s.norm(u).shape == (3,) and s.dist(u, v).shape == (3,)
    assert rel(s.interpolate(u, v, 1.0), v) < 1e-12
    mid = s.interpolate(u, v, torch.tensor([0.0, 0.5, 1.0], dtype=F64))
    assert rel(mid[0], u[0]) < 1e-12 and rel(mid[2], v[2]) < 1e-12
    assert rel(s.decode(s.encode(u)), u) < 1e-12


def test_space_rejects_bad_input() -> None:
    s = InducedSpace(Sinh(4))
    u = torch.randn(3, 4, dtype=F64)
    with pytest.raises(LinearizerError, match=r"\[B\] tensor with B=3"):
        s.scale(torch.ones(2, dtype=F64), u)
    with pytest.raises(LinearizerError, match="as many coefficients"):
        s.lincomb([1.0, 2.0], [u])
    with pytest.raises(LinearizerError, match="torch.Tensor"):
        s.add([1.0], u)
    with pytest.raises(LinearizerError, match="forward"):
        InducedSpace(nn.Linear(2, 2))


# --------------------------------------------------------------------------- construction
def test_tensor_A_is_wrapped() -> None:
    g = Sinh(3)
    frozen = Linearizer(g, torch.randn(3, 3, dtype=F64))
    assert [n for n, _ in frozen.A.named_parameters()] == []
    trained = Linearizer(g, nn.Parameter(torch.randn(3, 3, dtype=F64)))
    assert [n for n, _ in trained.A.named_parameters()] == ["weight"]
    assert trained.g_y is trained.g_x and trained.same_space


def test_construction_errors() -> None:
    with pytest.raises(LinearizerError, match="LinearOperator or a 2-D tensor"):
        Linearizer(Sinh(3), [[1.0]])
    with pytest.raises(LinearizerError, match="inverse"):
        Linearizer(nn.Linear(3, 3), torch.eye(3))
    with pytest.raises(LinearizerError, match="x_latent_shape"):
        Linearizer(Sinh(3), torch.eye(3), x_latent_shape=(2, 2))


# --------------------------------------------------------------------------- bad input
def test_input_errors_are_clear() -> None:
    f = Linearizer(Sinh(4), torch.randn(4, 4, dtype=F64))
    with pytest.raises(LinearizerError, match="NaN or infinite"):
        f(torch.full((2, 4), float("nan"), dtype=F64))
    with pytest.raises(LinearizerError, match="at least 2 dimensions"):
        f(torch.randn(4, dtype=F64))
    with pytest.raises(LinearizerError, match="cannot encode"):
        f(torch.randn(2, 5, dtype=F64))  # the network itself rejects the width
    with pytest.raises(LinearizerError, match="t was given"):
        f(torch.randn(2, 4, dtype=F64), t=0.5)
    with pytest.raises(LinearizerError, match="torch.Tensor"):
        f.pinv([[1.0] * 4])


def test_dimension_mismatch_between_g_and_A() -> None:
    g = cpu_network(in_channels=1, num_blocks=1, hidden=4).double().eval()
    f = Linearizer(Conditioned(g, 1.0), torch.randn(10, 10, dtype=F64))
    with pytest.raises(LinearizerError, match=r"latent of shape \[1, 4, 4\] \(16 values\), but A"):
        f(torch.randn(2, 1, 4, 4, dtype=F64))
    f2 = Linearizer(Conditioned(g, 1.0), torch.randn(10, 16, dtype=F64), Conditioned(g, 0.0))
    with pytest.raises(LinearizerError, match="gives D_out=10"):
        f2.pinv(torch.randn(2, 1, 4, 4, dtype=F64))


def test_check_finite_can_be_switched_off() -> None:
    f = Linearizer(Sinh(2), torch.eye(2, dtype=F64), check_finite=False)
    assert torch.isnan(f(torch.tensor([[float("nan"), 1.0]], dtype=F64))).any()


def test_unknown_latent_shapes() -> None:
    g_x, g_y = Sinh(3), Sinh(5)
    f = Linearizer(g_x, torch.randn(5, 3, dtype=F64), g_y)
    with pytest.raises(LinearizerError, match="latent shape of g_x is not known"):
        f.svd()
    with pytest.raises(LinearizerError, match="y_latent_shape"):
        f(torch.randn(2, 3, dtype=F64))  # distinct networks: g_y's shape is not guessed
    f.transpose(torch.randn(2, 5, dtype=F64))  # encoding a y teaches it
    assert f(torch.randn(2, 3, dtype=F64)).shape == (2, 5)
    ready = Linearizer(g_x, torch.randn(5, 3, dtype=F64), g_y, (5,), x_latent_shape=(3,))
    assert ready.svd().V_x.shape == (3, 3)


# --------------------------------------------------------------------------- time-dependent A
def test_time_dependent_operator() -> None:
    g = Sinh(6)
    op = TimeLoRA(6, rank=2, emb_dim=8, hidden=16).double()
    f = Linearizer(g, op)
    x = torch.randn(3, 6, dtype=F64)
    t = torch.tensor([0.1, 0.5, 0.9], dtype=F64)
    out = f(x, t)
    for b in range(3):
        assert rel(out[b : b + 1], f(x[b : b + 1], float(t[b]))) < 1e-12
    y = f(x, 0.5)
    assert rel(f(f.pinv(y, t=0.5), 0.5), y) < 1e-10
    with pytest.raises(LinearizerError, match="pass t"):
        f(x)
    with pytest.raises(LinearizerError, match="one time t"):
        f.pinv(y, t=t)
    assert f.svd(t=0.5).S.shape == (2,)


# --------------------------------------------------------------------------- caching
def test_pinv_cache_follows_weight_changes() -> None:
    g = Sinh(5)
    f = Linearizer(g, nn.Parameter(torch.randn(5, 5, dtype=F64)))
    y = torch.randn(2, 5, dtype=F64)
    first = f.pinv(y)
    assert f._pinv_parts(None) is f._pinv_parts(None)  # unchanged weights: cached
    opt = torch.optim.SGD(f.A.parameters(), lr=0.1)
    f.A.weight.grad = torch.randn_like(f.A.weight)
    opt.step()
    second = f.pinv(y)
    ref = g.inverse(g(y) @ torch.linalg.pinv(f.A.weight.detach()).T)
    assert rel(second, ref) < 1e-10 and rel(second, first) > 1e-3
    f.A.load_state_dict({"weight": torch.eye(5, dtype=F64)})
    assert rel(f.pinv(y), y) < 1e-12


def test_pinv_keeps_float32_and_is_exact_in_float64_inside() -> None:
    g = Sinh(4).float()
    a = torch.randn(4, 4) * torch.tensor([1.0, 1.0, 1.0, 1e-4])  # ill-conditioned
    f = Linearizer(g, a)
    y = torch.randn(2, 4)
    out = f.pinv(y)
    assert out.dtype == torch.float32
    assert f._pinv_parts(None)[1].dtype == F64


def test_low_rank_pinv_stays_factored() -> None:
    d = 50_000  # the dense pseudo-inverse would need 20 GB
    op = LowRank(d, d, rank=2).double()

    class Id(nn.Module):
        def forward(self, x: Tensor) -> Tensor:
            return x

        def inverse(self, z: Tensor) -> Tensor:
            return z

    f = Linearizer(Id(), op)
    x = torch.randn(2, d, dtype=F64)
    fx = f(x)
    assert rel(f(f.pinv(fx)), fx) < 1e-10
    assert f.svd().S.shape == (2,)
    big = Linearizer(Id(), DepthwiseConv(3, 4, (128, 128)))
    with pytest.raises(LinearizerError, match="dense"):
        big.pinv(torch.randn(1, 3 * 128 * 128))


def test_singular_values_are_the_whole_spectrum_of_the_svd() -> None:
    d = 6
    w = torch.randn(d, d, dtype=F64)
    f = Linearizer(Sinh(d), w, Sinh(d))
    s = f.singular_values()  # nothing to decode: no latent shape needed
    f(torch.randn(2, d, dtype=F64))  # svd decodes its directions: it needs the latent shape
    assert_near(s, torch.linalg.svdvals(w), eps_factor=100)
    assert torch.equal(f.svd(2).S, s[:2])
    low = Linearizer(Sinh(d), LowRank(d, d, rank=2).double(), Sinh(d))
    assert low.singular_values().shape == (2,)  # the non-zero ones of a low-rank A


# --------------------------------------------------------------------------- algebra guards
def test_same_space_is_required() -> None:
    net = Sinh(3)
    f = Linearizer(Conditioned(net, 1.0), torch.randn(3, 3, dtype=F64), Conditioned(net, 0.0))
    for call in (lambda: f.power(2), lambda: f.eig(), lambda: f.project(torch.randn(1, 3))):
        with pytest.raises(LinearizerError, match="same network"):
            call()
    same = Linearizer(Conditioned(net, 1.0), torch.eye(3, dtype=F64), Conditioned(net, 1.0))
    assert same.same_space  # two views at the same flag are one induced space


def test_compose_order_and_errors() -> None:
    gx, gy, gz = Sinh(2), Sinh(3), Sinh(4)
    f1 = Linearizer(gx, torch.randn(3, 2, dtype=F64), gy, (3,))
    f2 = Linearizer(gy, torch.randn(4, 3, dtype=F64), gz, (4,))
    h = f2.compose(f1)  # f2 o f1
    x = torch.randn(5, 2, dtype=F64)
    assert h.g_x is gx and h.g_y is gz and rel(h(x), f2(f1(x))) < 1e-12
    with pytest.raises(LinearizerError, match="cannot compose"):
        f1.compose(f2)
    with pytest.raises(LinearizerError, match="needs a Linearizer"):
        f1.compose(torch.eye(2))


def test_power_and_project_errors() -> None:
    f = Linearizer(Sinh(3), torch.randn(3, 3, dtype=F64))
    for n in (-1, 1.5, True):
        with pytest.raises(LinearizerError, match="integer n >= 0"):
            f.power(n)
    with pytest.raises(LinearizerError, match="idempotent"):
        f.project(torch.randn(2, 3, dtype=F64))
    p = OrthogonalProjector(3, rank=1).double()
    dense_projector = Linearizer(Sinh(3), p.matrix().detach())  # idempotent by value
    x = torch.randn(2, 3, dtype=F64)
    assert rel(dense_projector.project(dense_projector.project(x)), dense_projector(x)) < 1e-12
    with pytest.raises(LinearizerError, match="k must be"):
        f.svd(k=4)


def test_eig_keeps_real_pairs_only() -> None:
    rotation = torch.tensor([[0.0, -2.0, 0.0], [2.0, 0.0, 0.0], [0.0, 0.0, 0.5]], dtype=F64)
    g = Sinh(3)
    f = Linearizer(g, rotation)
    f(torch.randn(1, 3, dtype=F64))
    eig = f.eig()
    assert eig.real.tolist() == [False, False, True]
    assert eig.V_x.shape == (1, 3) and float(eig.L_real[0]) == pytest.approx(0.5)
    assert rel(f(eig.V_x), f.space_x.scale(eig.L_real, eig.V_x)) < 1e-12


def test_low_rank_eig_matches_dense() -> None:
    op = LowRank(8, 8, rank=3).double()
    f = Linearizer(Sinh(8), op)
    f(torch.randn(1, 8, dtype=F64))
    lam = f.eig().L
    ref = torch.linalg.eigvals(op.matrix().detach())
    ref = ref[ref.abs().argsort(descending=True)][:3]
    assert rel(lam.abs(), ref.abs()) < 1e-10 and lam.shape == (3,)
    assert f.eig(k=2).L.shape == (2,)


def test_state_dict_round_trip_of_shared_network() -> None:
    net = cpu_network(in_channels=1, num_blocks=1, hidden=4)
    f = Linearizer(Conditioned(net, 1.0), LowRank(16, 16, rank=2), Conditioned(net, 0.0))
    keys = f.state_dict().keys()
    assert any(k.startswith("g_x.net.") for k in keys) and "A.U" in keys
    g = Linearizer(Conditioned(net, 1.0), LowRank(16, 16, rank=2), Conditioned(net, 0.0))
    g.load_state_dict(f.state_dict())
    assert torch.equal(g.A.U, f.A.U)


def test_demo_command_measures_every_identity(capsys) -> None:
    from linearizer.cli.main import main

    assert main(["demo", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    for name in ("superposition", "pinv", "SVD", "compose", "power", "idempotence", "eig"):
        assert name in out
    assert "all within 1e-10" in out
    assert main(["demo", "--dry-run"]) == 0
