"""Exactness of the collapsed one-step matrix against the multi-step solvers (float64)."""

import math

import pytest
import torch

from linearizer.errors import LinearizerError
from linearizer.flow import solvers
from linearizer.operators import lora
from linearizer.operators.base import LinearOperator
from linearizer.operators.lora import TimeLoRA
from tolerance import assert_near, scale_of

D, R = 12, 3


class SmoothLoRA(LinearOperator):
    """A(t) = U(t) V(t)^T with smooth, non-commuting factors: enough to expose ordering bugs."""

    time_dependent = True

    def __init__(self, dim: int = D, rank: int = R, seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.in_features = self.out_features = dim
        self.p = torch.nn.Parameter(torch.randn(4, dim, rank, generator=g, dtype=torch.float64))

    def factors(self, t):
        t = torch.as_tensor(t, dtype=torch.float64)
        tt = t.reshape(-1, 1, 1)
        u = (self.p[0] + torch.sin(3 * tt) * self.p[1]) / math.sqrt(D)
        v = (self.p[2] + torch.cos(2 * tt) * self.p[3]) / math.sqrt(D)
        return (u, v) if t.dim() else (u[0], v[0])

    def forward(self, z, t=None):
        u, v = self.factors(torch.as_tensor(t, dtype=torch.float64).expand(z.shape[0]))
        return torch.einsum("bdr,ber,be->bd", u, v, z)


def dense_a(op, t):
    u, v = op.factors(torch.tensor(t, dtype=torch.float64))
    return u @ v.T


def reference_matrix(op, steps, method):
    """Textbook propagators built from dense matrices: the independent reference."""
    return textbook(op, steps, method, "skip", matrix=dense_a)


@pytest.mark.parametrize("method", solvers.METHODS)
@pytest.mark.parametrize("steps", [2, 7, 40])
def test_collapse_matches_textbook_propagator(method, steps):
    op = SmoothLoRA()
    b = solvers.collapse(op, steps=steps, method=method, final="skip")
    ref = reference_matrix(op, steps, method)
    assert_near(b, ref, eps_factor=1e4)


@pytest.mark.parametrize("method", solvers.METHODS)
@pytest.mark.parametrize("final", solvers.FINALS)
def test_one_step_equals_multi_step(method, final):
    op = SmoothLoRA(seed=1)
    z0 = torch.randn(5, D, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    b = solvers.collapse(op, steps=30, method=method, final=final)
    multi = solvers.integrate(op, z0, steps=30, method=method, final=final)
    assert_near(z0 @ b.T, multi, eps_factor=1e3)


def test_final_predict_is_the_x1_prediction_jump():
    op = SmoothLoRA(seed=3)
    skip = solvers.collapse(op, steps=10, method="euler", final="skip")
    pred = solvers.collapse(op, steps=10, method="euler", final="predict")
    assert_near(pred, dense_a(op, 0.9) @ skip, eps_factor=1e3)


class RegularFlow(SmoothLoRA):
    """A(t) = I + (1 - t) U(t) V(t)^T: the velocity U V^T z has no singularity at t = 1, so the
    solvers' convergence orders show cleanly. It has no low-rank factors (dense path)."""

    def factors(self, t):
        return None

    def matrix(self, t=None, dtype=None):
        u, v = SmoothLoRA.factors(self, torch.tensor(float(t), dtype=torch.float64))
        return torch.eye(D, dtype=torch.float64) + (1 - float(t)) * (u @ v.T)


def test_rk4_is_fourth_order_and_authors_rk_is_first_order():
    op = RegularFlow(seed=4)
    fine = {s: _fine_solution(op, 1 - 1 / s) for s in (10, 20)}

    def err(method, steps):
        return (
            (solvers.collapse(op, steps=steps, method=method, final="skip") - fine[steps])
            .norm()
            .item()
        )

    rk4 = [err("rk4", s) for s in (10, 20)]
    authors = [err("rk4-authors", s) for s in (10, 20)]
    euler = [err("euler", s) for s in (10, 20)]
    assert 12 < rk4[0] / rk4[1] < 20  # 2^4 = 16: fourth order
    assert 1.5 < authors[0] / authors[1] < 2.6  # 2^1: first order, like Euler
    assert 1.5 < euler[0] / euler[1] < 2.6
    assert authors[1] > 1000 * rk4[1]


def _fine_solution(op, t_end, n=2000):
    """Many small RK4 steps on [0, t_end] with the dense generator: an independent reference."""
    h, eye = t_end / n, torch.eye(D, dtype=torch.float64)

    def gen(t):
        return (op.matrix(t) - eye) / (1 - t)

    b = eye.clone()
    for i in range(n):
        t = i * h
        k1 = gen(t) @ b
        k2 = gen(t + h / 2) @ (b + h / 2 * k1)
        k3 = gen(t + h / 2) @ (b + h / 2 * k2)
        k4 = gen(t + h) @ (b + h * k3)
        b = b + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return b


def test_callback_sees_every_step():
    seen = []
    solvers.integrate(
        SmoothLoRA(),
        torch.zeros(1, D, dtype=torch.float64),
        steps=6,
        callback=seen.append,
        final="skip",
        method="euler",
    )
    assert [s["i"] for s in seen] == list(range(5))
    assert seen[-1]["t"] == pytest.approx(5 / 6)


@pytest.mark.parametrize(
    "kwargs", [{"method": "heun"}, {"final": "jump"}, {"steps": 1}, {"steps": 2.5}]
)
def test_bad_schedule_is_a_clear_error(kwargs):
    args = {"steps": 10, "method": "euler", "final": "skip"} | kwargs
    with pytest.raises(LinearizerError):
        solvers.integrate(SmoothLoRA(), torch.zeros(1, D, dtype=torch.float64), **args)


@pytest.mark.parametrize("method", solvers.METHODS)
@pytest.mark.parametrize("final", solvers.FINALS)
def test_blocked_collapse_equals_stepping_the_identity(method, final):
    """The blocked collapse is the identity basis pushed through ``integrate``, for any block."""
    op = SmoothLoRA(seed=5)
    eye = torch.eye(D, dtype=torch.float64)
    want = solvers.integrate(op, eye, steps=9, method=method, final=final).T
    seen = []
    for block in (None, 1, 3, 8, 100):
        got = solvers.collapse(
            op, steps=9, method=method, final=final, block=block, callback=seen.append
        )
        assert_near(got, want, eps_factor=1e3)
    assert seen[-1]["i"] == 7 and seen[-1]["steps"] == 8


def test_collapse_float32_accumulation_is_close():
    op = SmoothLoRA(seed=6)
    b64 = solvers.collapse(op, steps=50, method="rk4", final="skip")
    b32 = solvers.collapse(op, steps=50, method="rk4", dtype=torch.float32, final="skip")
    assert b32.dtype == torch.float32
    assert_near(b32.double(), b64, eps_factor=100, dtype=torch.float32)


@pytest.mark.parametrize("block", [0, -2, 1.5])
def test_collapse_rejects_bad_block(block):
    with pytest.raises(LinearizerError, match="block"):
        solvers.collapse(SmoothLoRA(), steps=5, block=block, method="euler", final="skip")


# ----------------------------------------------------------------------------- T = 1000
# The collapse evaluates A(t) once for all distinct times, in chunks of 16 (flow.solvers), so the
# paper's T = 1000 must be checked against a reference that evaluates A one time at a time;
# 257 distinct times (Euler at T = 258, RK4 at T = 129) leave a last chunk of one time.
TINY = 4


def textbook(op, steps: int, method: str, final: str, matrix=None) -> torch.Tensor:
    """B from dense A(t) evaluated one time at a time (no chunks, no blocks): the reference.
    ``matrix(op, t)`` gives the dense A(t) (default: the operator's own ``matrix``)."""
    d, h = op.in_features, 1.0 / steps
    eye = torch.eye(d, dtype=torch.float64)

    def a(t):
        return matrix(op, t) if matrix else op.matrix(t, dtype=torch.float64)

    def gen(t):
        return (a(t) - eye) / (1 - t)

    b = eye.clone()
    for i in range(steps - 1):
        t = i * h
        l1, l2, l4 = gen(t), gen(t + h / 2), gen(t + h)
        if method == "euler":
            m = eye + h * l1
        elif method == "rk4-authors":  # its own definition: I + h/6 [L(t) + 4 L(t+h/2) + L(t+h)]
            m = eye + h / 6 * (l1 + 4 * l2 + l4)
        else:
            k1 = l1
            k2 = l2 @ (eye + h / 2 * k1)
            k3 = l2 @ (eye + h / 2 * k2)
            k4 = l4 @ (eye + h * k3)
            m = eye + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        b = m @ b
    if final == "predict":  # the jump to the x1 prediction at exactly t = 1 - 1/T
        b = a(1.0 - h) @ b
    return b


class TinyLoRA(SmoothLoRA):
    def matrix(self, t=None, dtype=None):
        u, v = self.factors(torch.tensor(float(t), dtype=torch.float64))
        return u @ v.T


@pytest.mark.parametrize("final", solvers.FINALS)
@pytest.mark.parametrize(
    "method, steps",
    [
        ("euler", 1000),
        ("rk4", 1000),
        ("rk4-authors", 1000),
        ("euler", 258),  # 257 distinct times: a last chunk of one time
        ("rk4", 129),
    ],  # 257 distinct times with two per step
)
def test_collapse_equals_multi_step_and_textbook_at_many_steps(method, steps, final):
    op = TinyLoRA(dim=TINY, rank=2, seed=7)
    ref = textbook(op, steps, method, final)
    z0 = torch.randn(3, TINY, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    b = solvers.collapse(op, steps=steps, method=method, final=final)
    # rounding grows with the number of steps: ~T eps of B's scale
    assert_near(b, ref, eps_factor=50 * steps)
    multi = solvers.integrate(op, z0, steps=steps, method=method, final=final)
    assert_near(multi, z0 @ ref.T, eps_factor=50 * steps)
    assert_near(z0 @ b.T, multi, eps_factor=50 * steps)


@pytest.mark.parametrize("method", solvers.METHODS)
def test_dense_operator_path_at_many_steps(method):
    """Operators without low-rank factors: A(t) evaluated per time, stepped on the identity."""
    op = RegularFlow(seed=8)
    steps = 300
    got = solvers.collapse(op, steps=steps, method=method, final="predict")
    assert_near(got, textbook(op, steps, method, "predict"), eps_factor=50 * steps)


def test_final_predict_jumps_at_exactly_one_minus_h():
    """The jump's time: the reference at 1 - 1/T, and a recording operator's times."""
    asked: list[float] = []

    class Recording(TinyLoRA):
        def factors(self, t):
            asked.extend(torch.as_tensor(t, dtype=torch.float64).reshape(-1).tolist())
            return super().factors(t)

    op = Recording(dim=TINY, rank=2, seed=9)
    steps = 1000
    skip = solvers.collapse(op, steps=steps, method="euler", final="skip")
    asked.clear()
    pred = solvers.collapse(op, steps=steps, method="euler", final="predict")
    assert 1.0 - 1.0 / steps in asked and max(asked) == 1.0 - 1.0 / steps
    assert_near(pred, op.matrix(1.0 - 1.0 / steps) @ skip, eps_factor=1e3)


# ----------------------------------------------------------------------------- lazy factors


@pytest.mark.parametrize("op", [SmoothLoRA(seed=3), RegularFlow(seed=3)], ids=["lora", "dense"])
@pytest.mark.parametrize("method", solvers.METHODS)
@pytest.mark.parametrize("final", solvers.FINALS)
def test_the_solver_reads_the_collapse_factors_chunk_by_chunk(op, method, final):
    """integrate evaluates A as its steps reach it, holding two chunks: bit for bit the steps
    over the whole table a collapse reads (T = 40: 39 to 80 times, chunk edges inside steps)."""
    z0 = torch.randn(5, D, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    lazy = solvers.Schedule(op, 40, method, final, torch.float64, lazy=True)
    eager = solvers.Schedule(op, 40, method, final, torch.float64)
    assert torch.equal(lazy.propagate(z0, None), eager.propagate(z0, None))
    assert lazy.fac.u is None and not lazy.fac.mats and len(lazy.fac._held) <= 2


@pytest.mark.parametrize("method", solvers.METHODS)
@pytest.mark.parametrize(
    "ops",
    [
        [SmoothLoRA(seed=s) for s in (0, 1, 2)],
        [TinyLoRA(dim=D, rank=2, seed=5), TinyLoRA(dim=D, rank=3, seed=6)],  # dense stack
        [RegularFlow(seed=1), RegularFlow(seed=2)],
    ],
    ids=["lora", "ranks", "dense"],
)
def test_integrate_each_is_integrate_per_operator(ops, method):
    gen = torch.Generator().manual_seed(4)
    zs = [torch.randn(n, D, dtype=torch.float64, generator=gen) for n in (1, 4, 2)[: len(ops)]]
    got = solvers.integrate_each(ops, zs, steps=30, method=method, final="predict")
    for op, z, g in zip(ops, zs, got, strict=True):
        want = solvers.integrate(op, z, steps=30, method=method, final="predict")
        assert g.shape == z.shape
        assert_near(g, want, eps_factor=100)


def test_integrate_each_needs_one_batch_per_operator():
    with pytest.raises(LinearizerError, match="one batch per operator"):
        solvers.integrate_each([SmoothLoRA()], [], steps=4, method="euler", final="skip")


# ----------------------------------------------------------------------------- rows route


def _classes_lora(basis: int) -> TimeLoRA:
    """A class-conditional operator moved off its zero start, in float64."""
    with torch.random.fork_rng():
        torch.manual_seed(11)
        op = TimeLoRA(D, rank=2, emb_dim=8, hidden=16, basis=basis, classes=3, v_scale=0.5)
        op = op.double()
    gen = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for p in op.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    return op


@pytest.mark.parametrize("method", solvers.METHODS)
@pytest.mark.parametrize("guidance", [0.0, 1.5])
@pytest.mark.parametrize("counts", [(1, 3, 2), (7, 5, 6)])
def test_few_rows_per_class_take_the_rows_route_and_match_the_factors(method, guidance, counts):
    """Classes of one operator with under twelve rows each: integrate_each steps every row's
    coordinates in the operator's basis (no class's factors formed), equal to integrating each
    class alone up to float64 rounding, guidance included."""
    op = _classes_lora(basis=4)
    ops = [op.given(k, guidance) for k in (2, 0, 1)]
    gen = torch.Generator().manual_seed(12)
    zs = [torch.randn(n, D, dtype=torch.float64, generator=gen) for n in counts]
    assert lora.rows_apply(ops, list(counts), torch.float64) is not None
    formed: list[int] = []
    stacked = op._stacked_factors
    op._stacked_factors = lambda tt, cc=None: formed.append(len(tt)) or stacked(tt, cc)
    got = solvers.integrate_each(ops, zs, steps=30, method=method, final="predict")
    assert not [n for n in formed if n > 1]  # only the null class of guidance, one time a call
    del op._stacked_factors
    for g_op, z, g in zip(ops, zs, got, strict=True):
        want = solvers.integrate(g_op, z, steps=30, method=method, final="predict")
        # the routes round differently at every step, by a few eps of the path's largest size
        assert_near(g, want, eps_factor=1000, scale=max(scale_of(z), scale_of(want)))


def test_the_rows_route_needs_a_basis_few_rows_one_operator_and_its_dtype():
    with_basis, without = _classes_lora(basis=4), _classes_lora(basis=0)
    three = [with_basis.given(k) for k in range(3)]
    assert lora.rows_apply(three, [1, 2, 3], torch.float64) is not None
    assert lora.rows_apply(three, [11, 12, 12], torch.float64) is not None  # under twelve each
    assert lora.rows_apply(three, [12, 12, 12], torch.float64) is None  # twelve rows a class
    assert lora.rows_apply(three, [1, 2, 3], torch.float32) is None  # another working dtype
    assert lora.rows_apply([without.given(k) for k in range(3)], [1, 1, 1], torch.float64) is None
    mixed = [with_basis.given(0), with_basis.given(1, 2.0)]  # two guidances
    assert lora.rows_apply(mixed, [1, 1], torch.float64) is None
    assert lora.rows_apply([SmoothLoRA(), SmoothLoRA()], [1, 1], torch.float64) is None
