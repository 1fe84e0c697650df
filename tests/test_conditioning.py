"""The condition numbers the linearity claim reports (repro/conditioning.py)."""

from __future__ import annotations

import torch

from linearizer.repro.conditioning import inverse_condition, top_singular_value

F64 = torch.float64


def _map(seed: int = 0) -> tuple:
    """An invertible nonlinear map ``z = M sinh(x)`` with spread singular values, and inverse."""
    gen = torch.Generator().manual_seed(seed)
    q1, _ = torch.linalg.qr(torch.randn(6, 6, generator=gen, dtype=F64))
    q2, _ = torch.linalg.qr(torch.randn(6, 6, generator=gen, dtype=F64))
    m = q1 @ torch.diag(torch.tensor([8.0, 4, 2, 1, 0.5, 0.25], dtype=F64)) @ q2.T
    g = lambda x: torch.sinh(x) @ m.T  # noqa: E731
    g_inv = lambda z: torch.asinh(z @ torch.linalg.inv(m).T)  # noqa: E731
    return g, g_inv


def _exact_cond(g_inv, z: torch.Tensor) -> torch.Tensor:
    jac = torch.func.vmap(torch.func.jacrev(lambda w: g_inv(w[None])[0]))(z)
    sv = torch.linalg.svdvals(jac)
    return sv[:, 0] / sv[:, -1]


def test_power_iteration_matches_the_jacobians_singular_values():
    g, g_inv = _map()
    z = torch.randn(5, 6, generator=torch.Generator().manual_seed(1), dtype=F64) * 3
    jac = torch.func.vmap(torch.func.jacrev(lambda w: g_inv(w[None])[0]))(z)
    top = top_singular_value(g_inv, z, iters=200)
    torch.testing.assert_close(top, torch.linalg.svdvals(jac)[:, 0], rtol=1e-8, atol=0)
    cond = inverse_condition(g, g_inv, z, iters=200)
    torch.testing.assert_close(cond, _exact_cond(g_inv, z), rtol=1e-8, atol=0)


def test_few_steps_give_a_lower_estimate_and_rows_stay_apart():
    g, g_inv = _map(seed=2)
    z = torch.randn(4, 6, generator=torch.Generator().manual_seed(3), dtype=F64)
    exact = _exact_cond(g_inv, z)
    rough = inverse_condition(g, g_inv, z, iters=2)
    assert (rough <= exact * (1 + 1e-12)).all()
    # each row is its own point: the rows' conditions differ and each matches its own Jacobian
    one = inverse_condition(g, g_inv, z[2:3], iters=200)
    torch.testing.assert_close(one[0], exact[2], rtol=1e-8, atol=0)
