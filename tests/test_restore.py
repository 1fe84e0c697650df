"""Restoration: exact operators against dense matrices (float64), exact data consistency of the
solvers that claim it (float32), the induced-space solver, noise optimisation, the CLI."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from linearizer.errors import LinearizerError
from linearizer.restore.algorithms import (
    alternating,
    consistency,
    fit_induced_operator,
    noise_optimisation,
    observed_rank,
    range_null_induced,
    rel_norm,
)
from linearizer.restore.degradations import TASKS, make_degradation, signed_power

SHAPE = (1, 8, 8)
D = 64
EPS64 = torch.finfo(torch.float64).eps
EPS32 = torch.finfo(torch.float32).eps


def dense(fn, n_in: int, in_shape: tuple[int, ...]) -> torch.Tensor:
    """The matrix of a linear batch map: column i = fn(e_i) flattened."""
    eye = torch.eye(n_in, dtype=torch.float64).view(n_in, *in_shape)
    return fn(eye).reshape(n_in, -1).T


def degradation(task: str):
    deg = make_degradation(task, SHAPE, seed=3)
    deg.fit_shape(1)  # one mask for every probe image (inpaint-random)
    return deg


LINEAR = [t for t in TASKS if make_degradation(t, SHAPE).linear]


@pytest.mark.parametrize("task", LINEAR)
def test_operators_match_dense(task):
    deg = degradation(task)
    obs = deg.obs_shape()
    m = int(np.prod(obs))
    H = dense(deg.H, D, SHAPE)
    Ht = dense(deg.Ht, m, obs)
    Hp = dense(deg.pinv, m, obs)
    tol = 1e3 * EPS64
    assert torch.allclose(Ht, H.T, rtol=tol, atol=tol)
    if task == "deblur":
        # H^+ is the exact pseudo-inverse of H_tau (eigenvalues <= tau * max dropped).
        want = torch.linalg.pinv(H, rtol=deg.tau, hermitian=True)
    else:
        want = torch.linalg.pinv(H)
    assert torch.allclose(Hp, want, rtol=tol, atol=tol * float(want.abs().max()))


def test_known_closed_forms():
    sr = degradation("sr2")
    H, Ht = dense(sr.H, D, SHAPE), dense(sr.Ht, 16, sr.obs_shape())
    assert torch.allclose(H @ Ht, torch.eye(16, dtype=torch.float64) / 4, rtol=0, atol=1e2 * EPS64)
    box = degradation("inpaint-box")
    Hb = dense(box.H, D, SHAPE)
    assert torch.equal(Hb @ Hb, Hb) and int(Hb.trace()) == D - round(7 / 16 * 8) ** 2
    rnd = make_degradation("inpaint-random", (1, 32, 32), seed=0)
    rnd.fit_shape(50)
    missing = 1 - float(rnd.mask.mean())
    assert abs(missing - 0.7) < 0.01  # 51,200 Bernoulli(0.7) draws
    assert not torch.equal(rnd.mask[0], rnd.mask[1])  # a fresh mask per image


def test_blur_gamma_inverse_and_jacobian():
    deg = degradation("blur-gamma")
    x = torch.rand(3, *SHAPE, dtype=torch.float64)
    blur = degradation("deblur")
    # H^+ undoes the gamma curve exactly, then the truncated blur inverse.
    assert torch.allclose(deg.pinv(deg.H(x)), blur.pinv(blur.H(x)), rtol=1e3 * EPS64, atol=0)
    v = torch.randn(3, *SHAPE, dtype=torch.float64)
    xg = x.clone().requires_grad_(True)
    (deg.H(xg) * v).sum().backward()
    assert torch.allclose(deg.vjp(x, v), xg.grad, rtol=1e3 * EPS64, atol=1e3 * EPS64)
    u = torch.linspace(-2, 2, 9, dtype=torch.float64)
    assert torch.allclose(signed_power(signed_power(u, 2.0), 0.5), u, rtol=1e3 * EPS64, atol=0)


def test_unknown_task_is_one_line_error():
    with pytest.raises(LinearizerError, match="unknown task"):
        make_degradation("sr3", SHAPE)
    with pytest.raises(LinearizerError, match="not divisible"):
        make_degradation("sr4", (1, 6, 6))


def _projective(dtype):
    from linearizer.invertible.network import cpu_network
    from linearizer.operators import OrthogonalProjector
    from linearizer.projective.model import ProjectiveModel

    torch.manual_seed(0)
    m = ProjectiveModel(cpu_network(1, 2, 8, cond_dim=0), OrthogonalProjector(D, 4), SHAPE)
    return m.to(dtype).eval()


def _digits(n, dtype):
    gen = torch.Generator().manual_seed(1)
    x = torch.zeros(n, *SHAPE, dtype=dtype)
    x[..., 1:7, 2:6] = torch.rand(n, 1, 6, 4, generator=gen, dtype=dtype)
    return x


@pytest.mark.parametrize("task", ["inpaint-box", "inpaint-random", "sr2", "sr4"])
def test_exact_methods_are_consistent_in_float32(task):
    model = _projective(torch.float32)
    deg = make_degradation(task, SHAPE, seed=0)
    x = _digits(6, torch.float32)
    deg.fit_shape(len(x))
    y = deg.measure(x)
    with torch.no_grad():
        out, p, hist = alternating(model, deg, y, iters=3)
    # The requirement (1e-5 relative, ~84 float32 epsilons).
    assert float(consistency(deg, out, y).max()) <= 1e-5
    assert max(hist.out_consistency_max) <= 1e-5
    # P's iterate itself is not consistent (the prior does not see y) ...
    assert hist.consistency[0] > 1e3 * EPS32
    # ... but lies on the fixed-point set: P is idempotent to rounding.
    assert max(hist.idempotence_max) < 1e2 * EPS32 * 10
    assert len(hist.distance) == 3 and len(hist.consistency) == 3


def test_deblur_consistency_in_the_truncated_operator():
    model = _projective(torch.float64)
    deg = make_degradation("deblur", SHAPE)
    x = _digits(4, torch.float64)
    y = deg.measure(x)
    with torch.no_grad():
        out, _, _ = alternating(model, deg, y, iters=2)
    r, ref = deg.model_residual(out, y)
    assert float(rel_norm(r, ref).max()) < 1e4 * EPS64


def test_noisy_step_is_a_convex_combination():
    model = _projective(torch.float64)
    deg = make_degradation("denoise-0.2", SHAPE)
    x = _digits(3, torch.float64)
    y = deg.measure(x, torch.Generator().manual_seed(0))
    with torch.no_grad():
        out, p, _ = alternating(model, deg, y, iters=1, weight=0.25)
    assert torch.allclose(out, 0.75 * p + 0.25 * y, rtol=1e3 * EPS64, atol=1e3 * EPS64)


class _Identity(torch.nn.Module):
    def forward(self, x):
        return x.flatten(1)


def test_induced_solver_with_identity_network_is_ddnm():
    """With g = identity, the least-squares A_H is exactly H^+ H, and the induced range/null
    decomposition is the pixel-space one: H^+ y + (I - H^+ H) x_prior."""
    deg = make_degradation("sr2", SHAPE)
    encode = _Identity()

    def decode(w):
        return w.reshape(-1, *SHAPE)

    train = torch.rand(200, *SHAPE, dtype=torch.float64)
    rank = observed_rank(deg, D)
    assert rank == 16
    op = fit_induced_operator(encode, deg, train, rank)
    assert op.rank == 16 and op.fit_error < 1e6 * EPS64
    x = torch.rand(5, *SHAPE, dtype=torch.float64)
    prior = torch.rand(5, *SHAPE, dtype=torch.float64)
    y = deg.H(x)
    got = range_null_induced(encode, decode, deg, y, prior, op)
    want = deg.pinv(y) + deg.null_project(prior)
    assert torch.allclose(got, want, rtol=1e6 * EPS64, atol=1e6 * EPS64)
    with pytest.raises(LinearizerError, match="more than D"):
        fit_induced_operator(encode, deg, train[:10], rank)


def test_noise_optimisation_reaches_the_ridge_solution():
    """With f = identity and a mask, the minimiser of |M z - y|^2 + lam |z|^2 is M y / (1 + lam)."""
    deg = make_degradation("inpaint-box", SHAPE)
    x = torch.rand(2, *SHAPE, dtype=torch.float64)
    y = deg.H(x)
    lam = 0.5
    out, trace = noise_optimisation(lambda z: z, deg, y, steps=400, lam=lam, lr=0.05)
    best = deg.H(y) / (1 + lam)
    obj = float(((deg.H(best) - y).square().sum() + lam * best.square().sum()) / 2)
    assert trace[-1] < trace[0]
    assert abs(trace[-1] - obj) <= 1e-3 * obj


def test_restore_command_end_to_end(tmp_path):
    """Train a seconds-long smoke model, restore its test digits, check the outputs."""
    from linearizer.cli.main import main

    run, out, bad = tmp_path / "run", tmp_path / "out", tmp_path / "bad.npy"
    train = f"train projective --preset smoke --out {run} --set progress=false"
    assert main(train.split()) == 0
    restore = f"restore {run} --task sr2 --input test --n 4 --out {out} --noise-steps 2 --iters 2"
    assert main(restore.split()) == 0
    data = np.load(out / "restore_sr2.npz", allow_pickle=False)
    assert data["truth"].shape == (4, 1, 16, 16) and data["observation"].shape == (4, 1, 8, 8)
    assert float(np.max(data["consistency_alternating"])) <= 1e-5
    assert (out / "strip_sr2.png").is_file()
    assert main(f"restore {run} --task nope --out {out}".split()) == 2
    np.save(bad, np.zeros((2, 5, 5), dtype=np.float32))
    assert main(f"restore {run} --task sr2 --input {bad} --out {out}".split()) == 2


def test_range_map_reaches_the_gaussian_map():
    """With a linear decoder c -> B c and H = I, the MAP of ``|B c - y|^2 / (2v) + |u|^2 / 2``
    (c = mean + L u) solves a linear system; Adam gets there."""
    from linearizer.restore.algorithms import CoordPrior, range_map

    gen = torch.Generator().manual_seed(0)
    B = torch.randn(D, 3, generator=gen, dtype=torch.float64)
    prior = CoordPrior(
        torch.tensor([0.5, -0.2, 0.1], dtype=torch.float64),
        torch.diag(torch.tensor([0.3, 0.2, 0.1], dtype=torch.float64)),
    )
    deg = make_degradation("denoise-0.2", SHAPE)
    y = torch.randn(2, *SHAPE, generator=gen, dtype=torch.float64)
    v = 0.5

    def decode(c):
        return (c @ B.T).reshape(-1, *SHAPE)

    x, trace = range_map(decode, deg, y, prior.mean.expand(2, 3), prior, noise_var=v, steps=600)
    # Normal equations in u: (L^T B^T B L / v + I) u = L^T B^T (y - B mean) / v
    BL = B @ prior.chol
    lhs = BL.T @ BL / v + torch.eye(3, dtype=torch.float64)
    rhs = (y.flatten(1) - prior.mean @ B.T) @ BL / v
    u = torch.linalg.solve(lhs, rhs.T).T
    best = decode(prior.mean + u @ prior.chol.T)
    assert trace[-1] < trace[0]
    assert float(rel_norm(x - best, best).max()) < 1e-3
