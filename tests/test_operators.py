"""Linear operators: batch action, transpose and factors against their dense matrices (float64).

Every :class:`LinearOperator` of the package (the style bank's weighted operator and the guided
class-conditional view included) passes the shipped contract,
:class:`linearizer.testing.LinearOperatorTests`, through one entry of ``CONTRACT`` and its
``Test...`` class; tests check that no class of the package and no entry is left out.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch
import torch.nn.functional as F

from helpers import contract_cases, package_classes
from linearizer.errors import LinearizerError
from linearizer.operators import (
    ChannelMix,
    Dense,
    DepthwiseConv,
    Identity,
    LowRank,
    ObliqueProjector,
    OrthogonalProjector,
    Product,
    SinusoidalEmbedding,
    TimeLoRA,
    apply_depthwise,
)
from linearizer.operators.base import LinearOperator
from linearizer.operators.lora import AtTime, Guided
from linearizer.style.operators import WeightedStyleOperator
from linearizer.testing import LinearOperatorTests
from tolerance import assert_near, eps, rel_err

F64 = torch.float64
EPS = torch.finfo(F64).eps  # bounds below: rounding of a few small products, not kernels


def perturbed(op: torch.nn.Module, scale: float = 0.1) -> torch.nn.Module:
    op = op.to(F64)
    with torch.no_grad():
        for p in op.parameters():
            p.add_(scale * torch.randn_like(p))
    return op


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach(), b.detach()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-300))


OPERATORS = {
    "dense": lambda: Dense(torch.randn(7, 5)),
    "dense_buffer": lambda: Dense(torch.randn(5, 5), trainable=False),
    "lowrank": lambda: LowRank(7, 5, rank=2),
    "lowrank_identity": lambda: LowRank(6, 6, rank=2, identity_scale=0.5),
    "lowrank_learnable": lambda: LowRank(6, 6, rank=2, identity_scale="learnable"),
    "lora_at": lambda: TimeLoRA(6, rank=2, emb_dim=8, hidden=16).at(0.3),
    "depthwise3": lambda: DepthwiseConv(2, 3, (3, 4), init="random"),
    "depthwise4": lambda: DepthwiseConv(2, 4, (4, 3), init="random"),
    "depthwise2x5": lambda: DepthwiseConv(2, (2, 5), (3, 5), init="random"),
    "channelmix": lambda: ChannelMix(3, 4, (3, 3)),
    "orthogonal": lambda: OrthogonalProjector(8, rank=3),
    "oblique": lambda: ObliqueProjector(8, rank=3),
    "product": lambda: Product(Dense(torch.randn(4, 6)), LowRank(6, 5, rank=2)),
    "identity": lambda: Identity(5),
}


@pytest.fixture(params=sorted(OPERATORS))
def op(request: pytest.FixtureRequest) -> torch.nn.Module:
    torch.manual_seed(0)
    return perturbed(OPERATORS[request.param]())


# ----------------------------------------------------------------------------- the contract


def weighted_style() -> WeightedStyleOperator:
    """Two styles' depthwise kernels, with channel mixes and without, plus 0.3 I."""
    kernels, mixes = torch.randn(2, 3, 3, 3), torch.randn(2, 3, 3)
    return WeightedStyleOperator(kernels, mixes, torch.tensor([0.7, -0.4]), 0.3, (3, 4, 5))


def guided(guidance: float) -> Guided:
    return TimeLoRA(6, rank=2, emb_dim=8, hidden=16, classes=3).given(1, guidance)


# name -> (operator factory, the time it is checked at)
CONTRACT = {
    **{name: (factory, None) for name, factory in OPERATORS.items()},
    "lora": (lambda: TimeLoRA(6, rank=2, emb_dim=8, hidden=16), 0.3),
    "guided": (lambda: guided(2.0), 0.37),
    "guided-unguided": (lambda: guided(0.0), 0.37),
    "guided-at": (lambda: AtTime(guided(2.0), 0.37), None),
    "weighted-style": (weighted_style, None),
    "weighted-style-depthwise": (
        lambda: WeightedStyleOperator(
            torch.randn(2, 3, 3, 3), None, torch.tensor([0.5, 1.5]), 0.0, (3, 4, 4)
        ),
        None,
    ),
}


class OperatorContract(LinearOperatorTests):
    """The shipped contract on the entry ``case`` of ``CONTRACT`` (each ``Test...`` class
    below names one; pytest collects its inherited basis, adjoint, factor and gradient tests)."""

    case: str
    rtol = 1e-12  # a few roundings of small products

    @property
    def t(self) -> float | None:  # type: ignore[override]
        return CONTRACT[self.case][1]

    def build(self) -> LinearOperator:
        return perturbed(CONTRACT[self.case][0]())


class TestDense(OperatorContract):
    case = "dense"


class TestDenseBuffer(OperatorContract):
    case = "dense_buffer"


class TestLowrank(OperatorContract):
    case = "lowrank"


class TestLowrankIdentity(OperatorContract):
    case = "lowrank_identity"


class TestLowrankLearnable(OperatorContract):
    case = "lowrank_learnable"


class TestLoraAt(OperatorContract):
    case = "lora_at"


class TestDepthwise3(OperatorContract):
    case = "depthwise3"


class TestDepthwise4(OperatorContract):
    case = "depthwise4"


class TestDepthwise2x5(OperatorContract):
    case = "depthwise2x5"


class TestChannelmix(OperatorContract):
    case = "channelmix"


class TestOrthogonal(OperatorContract):
    case = "orthogonal"


class TestOblique(OperatorContract):
    case = "oblique"


class TestProduct(OperatorContract):
    case = "product"


class TestIdentity(OperatorContract):
    case = "identity"


class TestLora(OperatorContract):
    case = "lora"


class TestGuided(OperatorContract):
    case = "guided"


class TestGuidedUnguided(OperatorContract):
    case = "guided-unguided"


class TestGuidedAt(OperatorContract):
    case = "guided-at"


class TestWeightedStyle(OperatorContract):
    case = "weighted-style"


class TestWeightedStyleDepthwise(OperatorContract):
    case = "weighted-style-depthwise"


def test_every_contract_entry_has_its_class():
    assert contract_cases(globals(), OperatorContract) == set(CONTRACT)


def test_every_operator_of_the_package_passes_the_contract():
    covered = {type(factory()) for factory, _ in CONTRACT.values()}
    missing = sorted(c.__qualname__ for c in package_classes(LinearOperator) - covered)
    assert not missing, f"no LinearOperatorTests case for {missing}"
    assert {WeightedStyleOperator, Guided} <= covered


def test_a_time_dependent_operator_needs_its_time() -> None:
    with pytest.raises(LinearizerError, match="pass t"):
        guided(1.0).matrix()


def test_rejects_wrong_width(op) -> None:
    with pytest.raises(LinearizerError, match=r"\[B, \d+\]"):
        op(torch.randn(2, op.in_features + 1, dtype=F64))


# --------------------------------------------------------------------------- Dense / products
def test_dense_parameter_or_buffer() -> None:
    m = torch.randn(3, 2)
    assert [n for n, _ in Dense(m).named_parameters()] == ["weight"]
    frozen = Dense(m, trainable=False)
    assert list(frozen.parameters()) == [] and "weight" in frozen.state_dict()


def test_dense_rejects_non_matrix() -> None:
    with pytest.raises(LinearizerError, match="2-D"):
        Dense(torch.randn(3))


def test_product_rejects_mismatched_factors() -> None:
    with pytest.raises(LinearizerError, match="cannot multiply"):
        Product(Dense(torch.randn(3, 4)), Dense(torch.randn(5, 2)))


# --------------------------------------------------------------------------- LowRank
def test_lowrank_parts_and_factors() -> None:
    op = perturbed(LowRank(5, 5, rank=2, identity_scale=2.0))
    assert op.factors() is None  # U V^T alone is not A
    u, v, s = op.parts()
    assert float(s) == 2.0 and "identity_scale" in dict(op.named_buffers())
    assert rel(u @ v.T + s * torch.eye(5, dtype=F64), op.matrix()) <= 1e3 * EPS
    learn = LowRank(5, 5, rank=2, identity_scale="learnable")
    assert "identity_scale" in dict(learn.named_parameters())


def test_lowrank_identity_needs_square() -> None:
    with pytest.raises(LinearizerError, match="square"):
        LowRank(4, 5, rank=2, identity_scale=1.0)
    with pytest.raises(LinearizerError, match="identity_scale"):
        LowRank(4, 4, rank=2, identity_scale="big")


def test_lowrank_never_materialises_dense() -> None:
    d = 200_000  # a dense D x D float32 matrix would need 160 GB
    op = LowRank(d, d, rank=2, identity_scale=1.0)
    z = torch.randn(2, d)
    out = op(z)
    expected = (z @ op.V) @ op.U.T + z
    assert out.shape == (2, d) and rel_err(out, expected) <= 1e3 * eps(out.dtype)


# --------------------------------------------------------------------------- TimeLoRA
def test_lora_per_sample_times_match_single_times() -> None:
    torch.manual_seed(1)
    op = TimeLoRA(6, rank=2, emb_dim=8, hidden=16).to(F64)
    z = torch.randn(4, 6, dtype=F64)
    t = torch.tensor([0.0, 0.25, 0.5, 0.9], dtype=F64)
    out, back = op(z, t), op.transpose_apply(z, t)
    for b in range(4):
        m = op.matrix(float(t[b]))
        assert rel(out[b], m @ z[b]) < 1e-12
        assert rel(back[b], m.T @ z[b]) < 1e-12
    u, v = op.factors(t)
    assert u.shape == v.shape == (4, 6, 2)
    u0, v0 = op.factors(0.25)
    assert u0.shape == (6, 2) and rel(u[1], u0) <= 1e3 * EPS and rel(v[1], v0) <= 1e3 * EPS
    # a single float broadcasts over the batch
    assert rel(op(z, 0.5), z @ op.matrix(0.5).T) < 1e-12


def test_lora_state_dict_layout_and_paper_size() -> None:
    op = TimeLoRA(1024, rank=8)  # the authors' configuration
    keys = sorted(op.state_dict())
    expected = sorted(
        f"{net}.{i}.{kind}"
        for net in ("u_net", "v_net")
        for i in (1, 3, 5)
        for kind in ("weight", "bias")
    )
    assert keys == expected
    assert sum(p.numel() for p in op.parameters()) == 9_062_400
    assert op.u_net[5].weight.shape == (8192, 512)
    assert isinstance(op.u_net[2], torch.nn.GELU) and op.u_net[2].approximate == "none"


def test_lora_factor_is_row_major_reshape_of_last_layer() -> None:
    torch.manual_seed(2)
    op = TimeLoRA(5, rank=3, emb_dim=8, hidden=16, v_scale=0.5).to(F64)
    t = torch.tensor([0.7], dtype=F64)
    raw_u = op.u_net(t)[0]
    raw_v = op.v_net(t)[0]
    u, v = op.factors(0.7)
    for d in range(5):
        for r in range(3):
            assert u[d, r] == raw_u[3 * d + r]
            assert v[d, r] == 0.5 * raw_v[3 * d + r]


def test_sinusoidal_embedding_formula() -> None:
    t = torch.tensor([0.0, 0.3, 2.0], dtype=F64)
    emb = SinusoidalEmbedding(8)(t)
    half = 4
    w = torch.tensor([math.exp(-k * math.log(10000) / (half - 1)) for k in range(half)], dtype=F64)
    expected = torch.cat([torch.sin(t[:, None] * w), torch.cos(t[:, None] * w)], dim=1)
    assert emb.shape == (3, 8) and rel(emb, expected) <= 1e3 * EPS


def test_lora_depth_and_activation() -> None:
    op = TimeLoRA(4, rank=1, emb_dim=8, hidden=8, depth=3, activation="silu")
    assert [type(m).__name__ for m in op.v_net] == [
        "SinusoidalEmbedding",
        "Linear",
        "SiLU",
        "Linear",
        "SiLU",
        "Linear",
        "SiLU",
        "Linear",
    ]
    with pytest.raises(LinearizerError, match="activation"):
        TimeLoRA(4, rank=1, activation="swish")
    with pytest.raises(LinearizerError, match="embedding"):
        TimeLoRA(4, rank=1, emb="fourier")


def test_lora_time_errors() -> None:
    op = TimeLoRA(4, rank=1, emb_dim=8, hidden=8)
    z = torch.randn(3, 4)
    with pytest.raises(LinearizerError, match="pass t"):
        op(z)
    with pytest.raises(LinearizerError, match="2 times for a batch of 3"):
        op(z, torch.rand(2))
    with pytest.raises(LinearizerError, match="one time"):
        op.matrix(torch.rand(3))


def test_lora_large_features_stay_factored() -> None:
    d = 100_000
    op = TimeLoRA(d, rank=2, emb_dim=8, hidden=4).to(F64)
    z, t = torch.randn(3, d, dtype=F64), torch.rand(3, dtype=F64)
    out = op(z, t)
    u, v = op.factors(t)
    assert out.shape == (3, d)
    assert_near(out, torch.einsum("bdr,bd->br", v, z).unsqueeze(1).mul(u).sum(-1), eps_factor=1e3)


def test_lora_gradients_reach_both_hypernetworks() -> None:
    op = TimeLoRA(6, rank=2, emb_dim=8, hidden=16)
    op(torch.randn(3, 6), torch.rand(3)).square().sum().backward()
    for name, p in op.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


# --------------------------------------------------------------------------- depthwise conv
@pytest.mark.parametrize("kernel_size", [1, 3, 4, (2, 5)])
def test_depthwise_matches_pytorch_same_padding(kernel_size) -> None:
    torch.manual_seed(3)
    op = DepthwiseConv(3, kernel_size, (5, 6), init="random").to(F64)
    x = torch.randn(2, 3, 5, 6, dtype=F64)
    with warnings.catch_warnings():  # even kernels: PyTorch warns that it pads a copy
        warnings.simplefilter("ignore")
        ref = F.conv2d(x, op.kernel.unsqueeze(1), padding="same", groups=3)
    assert rel(op(x.flatten(1)).view_as(x), ref) <= 1e3 * EPS
    y = torch.randn(2, 90, dtype=F64)
    z = torch.randn(2, 90, dtype=F64)
    lhs = (op(z) * y).sum().detach()
    rhs = (z * op.transpose_apply(y)).sum().detach()
    assert abs(float(lhs - rhs)) < 1e-12 * (abs(float(lhs)) + 1)


def test_depthwise_identity_init() -> None:
    z = torch.randn(2, 3 * 4 * 4)
    assert torch.equal(DepthwiseConv(3, 4, (4, 4))(z), z)


def test_depthwise_per_sample_kernels() -> None:
    torch.manual_seed(4)
    kernels = torch.randn(3, 2, 4, 4, dtype=F64)
    z = torch.randn(3, 2 * 5 * 5, dtype=F64)
    for transpose in (False, True):
        out = apply_depthwise(z, kernels, (2, 5, 5), transpose=transpose)
        for b in range(3):
            one = apply_depthwise(z[b : b + 1], kernels[b], (2, 5, 5), transpose=transpose)
            assert rel(out[b : b + 1], one) <= 1e3 * EPS
    images = z.view(3, 2, 5, 5)
    assert apply_depthwise(images, kernels, (2, 5, 5)).shape == images.shape


def test_depthwise_from_kernel() -> None:
    k = torch.randn(2, 4, 4, dtype=F64)
    op = DepthwiseConv.from_kernel(k, (3, 3))
    assert op.image_shape == (2, 3, 3) and torch.equal(op.kernel, k)
    frozen = DepthwiseConv.from_kernel(k, (2, 3, 3), trainable=False)
    assert list(frozen.parameters()) == [] and "kernel" in frozen.state_dict()


def test_depthwise_bad_shapes() -> None:
    with pytest.raises(LinearizerError, match="image_shape"):
        DepthwiseConv(3, 3, (2, 4, 4))
    with pytest.raises(LinearizerError, match="kernel must be"):
        apply_depthwise(torch.randn(2, 18), torch.randn(3, 3, 3), (2, 3, 3))
    with pytest.raises(LinearizerError, match="expected latents"):
        apply_depthwise(torch.randn(2, 17), torch.randn(2, 3, 3), (2, 3, 3))


# --------------------------------------------------------------------------- projectors
@pytest.mark.parametrize("cls", [OrthogonalProjector, ObliqueProjector])
def test_projectors_are_exactly_idempotent(cls) -> None:
    torch.manual_seed(5)
    for _ in range(3):
        op = perturbed(cls(16, rank=4), scale=0.3)
        a = op.matrix().detach()
        assert float((a @ a - a).abs().max()) <= 1e-12 * max(1.0, float(a.abs().max()))
        z = torch.randn(3, 16, dtype=F64)
        assert rel(op(op(z)), op(z)) < 1e-12
        assert torch.linalg.matrix_rank(a) == 4 and op.rank == 4


def test_orthogonal_projector_basis() -> None:
    torch.manual_seed(6)
    op = perturbed(OrthogonalProjector(10, rank=3)).requires_grad_(False)
    q = op.basis()
    assert rel(q.T @ q, torch.eye(3, dtype=F64)) <= 1e3 * EPS
    assert rel(op.matrix(), op.matrix().T) <= 1e3 * EPS
    r = q.T @ op.W  # W = Q R: R upper triangular with a positive diagonal (signs fixed)
    assert rel(q @ r, op.W) <= 1e3 * EPS and float(r.tril(-1).abs().max()) <= 1e3 * EPS
    assert torch.all(r.diagonal() > 0)


def test_oblique_projector_range_and_null_space() -> None:
    torch.manual_seed(7)
    op = perturbed(ObliqueProjector(9, rank=2)).requires_grad_(False)
    u = op.basis()
    assert rel(op(u.T), u.T) < 1e-12  # the range is span(U), kept fixed
    null = torch.linalg.svd(op.V.T).Vh[2:]  # vectors orthogonal to span(V)
    assert float(op(null).abs().max()) < 1e-12


def test_projector_gradients_flow() -> None:
    for op in (OrthogonalProjector(6, rank=2), ObliqueProjector(6, rank=2)):
        op(torch.randn(4, 6)).square().sum().backward()
        assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in op.parameters())


def test_projector_rank_checked() -> None:
    with pytest.raises(LinearizerError, match="rank"):
        OrthogonalProjector(4, rank=5)
