"""The quality options of the one-step flow: per-flag ActNorm, the basis form of A(t), the
stand-in distances of the x1 terms and the t-sampling, each on tiny float64 inputs."""

import pytest
import torch

from linearizer.errors import LinearizerError
from linearizer.flow.build import build_flow
from linearizer.flow.objective import (
    draw_times,
    gradient_loss,
    group_times,
    make_distance,
    ssim_value,
)
from linearizer.invertible.actnorm import FlagActNorm
from linearizer.metrics import ssim
from linearizer.operators.lora import TimeLoRA
from linearizer.training.config import resolve

EPS = torch.finfo(torch.float64).eps


def test_flag_actnorm_standardises_each_flag_and_inverts():
    gen = torch.Generator().manual_seed(0)
    noise = torch.randn(32, 4, 3, 3, generator=gen, dtype=torch.float64)
    data = 0.2 * torch.randn(32, 4, 3, 3, generator=gen, dtype=torch.float64) + 1.5
    x = torch.cat([noise, data])
    flags = torch.cat([torch.zeros(32), torch.ones(32)]).double()
    norm = FlagActNorm(4).double()
    y = norm(x, flags)
    for part in (y[:32], y[32:]):
        values = part.transpose(0, 1).reshape(4, -1)
        torch.testing.assert_close(values.mean(1), torch.zeros(4, dtype=torch.float64),
                                   rtol=0, atol=1e3 * EPS)  # fmt: skip
        torch.testing.assert_close(values.std(1), torch.ones(4, dtype=torch.float64),
                                   rtol=1e-5, atol=0)  # fmt: skip
    torch.testing.assert_close(norm.inverse(y, flags), x, rtol=1e3 * EPS, atol=1e3 * EPS * 2)
    # one flag at a time gives the same as the mixed batch
    torch.testing.assert_close(norm(data, torch.ones(32).double()), y[32:], rtol=0, atol=0)


def test_flag_actnorm_network_round_trip_and_state_dict():
    cfg = resolve("flow", "smoke", ["network.flag_actnorm=true", "lora_basis=3"])
    model = build_flow(cfg).double()
    keys = model.state_dict()
    assert keys["net.blocks.0.actnorm.bias"].shape[0] == 2
    assert "op.u_net.6.weight" in keys  # the basis layer after the hidden layers
    x = torch.rand(4, 1, 8, 8, dtype=torch.float64)
    for flag in (0.0, 1.0):
        torch.testing.assert_close(model.decode(model.encode(x, flag), flag), x,
                                   rtol=1e3 * EPS, atol=1e3 * EPS)  # fmt: skip


def test_basis_operator_matches_its_dense_matrix():
    op = TimeLoRA(12, 3, emb_dim=8, hidden=16, basis=4).double()
    z, t = torch.randn(5, 12, dtype=torch.float64), torch.rand(5, dtype=torch.float64)
    out = op(z, t)
    for i in range(5):
        dense = op.matrix(float(t[i]))
        torch.testing.assert_close(out[i], dense @ z[i], rtol=1e3 * EPS, atol=1e3 * EPS)
    with pytest.raises(LinearizerError, match="basis"):
        TimeLoRA(12, 3, basis=-1)


@pytest.mark.parametrize("basis", [0, 4])
def test_rows_that_share_a_time_share_its_factors(basis):
    op = TimeLoRA(12, 3, emb_dim=8, hidden=16, basis=basis).double()
    gen = torch.Generator().manual_seed(1)
    z = torch.randn(7, 12, generator=gen, dtype=torch.float64)
    t = group_times(torch.rand(7, generator=gen, dtype=torch.float64), 3)
    assert torch.unique_consecutive(t).numel() == 3
    for apply in (op, op.transpose_apply):
        out = apply(z, t)
        for i in range(7):
            row = apply(z[i : i + 1], float(t[i]))[0]
            torch.testing.assert_close(out[i], row, rtol=1e3 * EPS, atol=1e3 * EPS)
    grad = torch.autograd.grad(op(z, t).square().sum(), list(op.parameters()), allow_unused=True)
    assert any(g is not None and g.abs().sum() > 0 for g in grad)


def test_group_times_keeps_rows_and_draws():
    t = torch.arange(10.0)
    assert group_times(t, 0) is t and group_times(t, 10) is t
    assert group_times(t, 4).tolist() == [0, 0, 0, 3, 3, 3, 6, 6, 6, 9]
    cfg = resolve("flow", "smoke", ["time_groups=2"])
    assert cfg.time_groups == 2
    with pytest.raises(LinearizerError, match="time_groups"):
        resolve("flow", "smoke", ["time_groups=-1"])


def test_ssim_loss_agrees_with_the_metric_and_gradient_loss_sees_edges():
    gen = torch.Generator().manual_seed(1)
    a = torch.rand(3, 1, 16, 16, generator=gen, dtype=torch.float64)
    b = (a + 0.1 * torch.randn(3, 1, 16, 16, generator=gen, dtype=torch.float64)).clamp(0, 1)
    assert float(ssim_value(a, b)) == pytest.approx(ssim(a, b), rel=1e3 * EPS)
    assert float(make_distance("ssim")(a, a)) == 0.0
    flat = torch.zeros(1, 1, 8, 8, dtype=torch.float64)
    speckle = flat.clone()
    speckle[..., ::2, ::2] = 0.5
    mse = float((speckle - flat).square().mean())
    # same pixel error as a constant offset, but only the speckle has edges
    offset = flat + mse**0.5
    assert float(gradient_loss(offset, flat)) == pytest.approx(mse, rel=1e3 * EPS)
    assert float(gradient_loss(speckle, flat)) > 2 * mse


def test_time_sampling():
    u = torch.full((4,), 0.25)
    z = torch.zeros(4)
    assert torch.equal(draw_times("uniform", lambda: u, lambda: z), u)
    assert torch.equal(draw_times("logit-normal", lambda: u, lambda: z), torch.full((4,), 0.5))
    with pytest.raises(LinearizerError, match="time sampling"):
        draw_times("beta", lambda: u, lambda: z)


def test_time_clock_decays_with_the_budget_or_the_steps_whichever_is_further():
    from linearizer.training.config import TrainConfig
    from linearizer.training.trainer import lr_at

    cfg = TrainConfig(lr=1.0, schedule="linear", min_lr_ratio=0.0, warmup_steps=10,
                      max_steps=1000, max_minutes=2.0, lr_clock="time")  # fmt: skip
    assert lr_at(cfg, 5, elapsed_s=100.0) == pytest.approx(0.6)  # warm-up ignores the clock
    assert lr_at(cfg, 10, elapsed_s=30.0) == pytest.approx(0.75)  # a quarter of 120 s
    assert lr_at(cfg, 10, elapsed_s=500.0) == 0.0
    assert lr_at(cfg, 505, elapsed_s=0.0) == pytest.approx(0.5)  # steps further along
    steps = TrainConfig(lr=1.0, schedule="linear", warmup_steps=10, max_steps=1000,
                        max_minutes=2.0)  # fmt: skip
    assert lr_at(steps, 10, elapsed_s=500.0) == 1.0
    with pytest.raises(LinearizerError, match="max_minutes"):
        TrainConfig(lr_clock="time")
