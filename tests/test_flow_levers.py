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
        torch.testing.assert_close(
            values.mean(1), torch.zeros(4, dtype=torch.float64), rtol=0, atol=1e3 * EPS
        )
        torch.testing.assert_close(
            values.std(1), torch.ones(4, dtype=torch.float64), rtol=1e-5, atol=0
        )
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
        torch.testing.assert_close(
            model.decode(model.encode(x, flag), flag), x, rtol=1e3 * EPS, atol=1e3 * EPS
        )


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
    from linearizer.training.schedule import lr_at

    cfg = TrainConfig(
        lr=1.0,
        schedule="linear",
        min_lr_ratio=0.0,
        warmup_steps=10,
        max_steps=1000,
        max_minutes=2.0,
        lr_clock="time",
    )
    assert lr_at(cfg, 5, elapsed_s=100.0) == pytest.approx(0.6)  # warm-up ignores the clock
    assert lr_at(cfg, 10, elapsed_s=30.0) == pytest.approx(0.75)  # a quarter of 120 s
    assert lr_at(cfg, 10, elapsed_s=500.0) == 0.0
    assert lr_at(cfg, 505, elapsed_s=0.0) == pytest.approx(0.5)  # steps further along
    steps = TrainConfig(lr=1.0, schedule="linear", warmup_steps=10, max_steps=1000, max_minutes=2.0)
    assert lr_at(steps, 10, elapsed_s=500.0) == 1.0
    with pytest.raises(LinearizerError, match="max_minutes"):
        TrainConfig(lr_clock="time")
    # finish_minutes comes out of the steps' budget: the decay ends that much earlier
    kept = TrainConfig(
        lr=1.0,
        schedule="linear",
        min_lr_ratio=0.0,
        warmup_steps=10,
        max_steps=1000,
        max_minutes=2.0,
        finish_minutes=1.5,
        lr_clock="time",
    )
    assert kept.step_seconds() == 30.0
    assert lr_at(kept, 10, elapsed_s=15.0) == pytest.approx(0.5)
    for bad in (2.0, 3.0, -1.0):
        with pytest.raises(LinearizerError, match="finish_minutes"):
            TrainConfig(max_minutes=2.0, finish_minutes=bad)
    with pytest.raises(LinearizerError, match="finish_minutes"):
        TrainConfig(finish_minutes=1.0)  # no budget to keep it from


def _in_domain(shape, gen):
    return torch.rand(shape, generator=gen, dtype=torch.float64)


def test_flag_logit_formula_identity_on_noise_and_exact_inverse():
    from linearizer.invertible.logit import FlagLogit

    gen = torch.Generator().manual_seed(0)
    block, a = FlagLogit(0.05), 0.05
    x = _in_domain((6, 1, 4, 4), gen)
    flags = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0, 1.0], dtype=torch.float64)
    x[flags == 0] = 3 * torch.randn(3, 1, 4, 4, generator=gen, dtype=torch.float64)
    y = block(x, flags)
    data = flags == 1
    torch.testing.assert_close(y[data], torch.logit(a + (1 - 2 * a) * x[data]), rtol=0, atol=0)
    assert torch.equal(y[~data], x[~data])
    torch.testing.assert_close(block.inverse(y, flags), x, rtol=0, atol=1e2 * EPS)
    assert torch.equal(block(x, None), x)  # cond=None is the noise flag
    # any latent decodes inside the interval the forward accepts
    back = block.inverse(40 * torch.randn(4, 1, 4, 4, dtype=torch.float64), torch.ones(4).double())
    assert float(back.min()) >= block.lo and float(back.max()) <= block.hi
    assert torch.isfinite(block(back, torch.ones(4).double())).all()  # saturated pixels re-encode


def test_flag_logit_jacobian_gradients_and_errors():
    from linearizer.invertible.logit import FlagLogit

    block = FlagLogit(0.1)
    x = (0.05 + 0.9 * torch.rand(1, 1, 2, 2, dtype=torch.float64)).requires_grad_()
    one = torch.ones(1, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda v: block(v, one), (x,))
    z = block(x, one).detach().requires_grad_()
    assert torch.autograd.gradcheck(lambda v: block.inverse(v, one), (z,))
    with pytest.raises(LinearizerError, match=r"must lie in \[-0.125, 1.125\]"):
        block(torch.full((1, 1, 2, 2), 1.2, dtype=torch.float64), one)
    for bad in (0.0, 0.5, -1.0):
        with pytest.raises(LinearizerError, match="alpha"):
            FlagLogit(bad)


def test_flag_logit_linear_tails_match_on_pixels_and_invert_everywhere():
    from linearizer.invertible.logit import FlagLogit

    gen = torch.Generator().manual_seed(2)
    sig, lin = FlagLogit(0.05), FlagLogit(0.05, "linear")
    one = torch.ones(3, dtype=torch.float64)
    pixels = _in_domain((3, 1, 4, 4), gen)
    pixels[0, 0, 0, :2] = torch.tensor([0.0, 1.0], dtype=torch.float64)  # the edges themselves
    torch.testing.assert_close(lin(pixels, one), sig(pixels, one), rtol=0, atol=1e2 * EPS)
    # every latent decodes to a pixel that encodes back, where the sigmoid's tail saturates
    z = 40 * torch.randn(3, 1, 4, 4, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(lin(lin.inverse(z, one), one), z, rtol=0, atol=1e3 * EPS * 40)
    assert float((sig(sig.inverse(z, one), one) - z).abs().max()) > 1.0
    # clamped to [0, 1], both tails decode every latent to the same image
    torch.testing.assert_close(
        lin.inverse(z, one).clamp(0, 1), sig.inverse(z, one).clamp(0, 1), rtol=0, atol=1e2 * EPS
    )
    # value and slope continue across the edges (C1), so gradients exist everywhere
    x = torch.tensor([[[[-0.3, 1e-3, 0.999, 1.7]]]], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda v: lin(v, one[:1]), (x,))
    edge = torch.tensor(
        [[[[-1e-9, 1e-9, 1 - 1e-9, 1 + 1e-9]]]], dtype=torch.float64, requires_grad=True
    )
    y = lin(edge, one[:1]).flatten()
    gaps = (y[1::2] - y[::2]).detach().abs()
    assert float(gaps.max()) < 1e-6
    (slope,) = torch.autograd.grad(y.sum(), edge)
    torch.testing.assert_close(slope.flatten()[::2], slope.flatten()[1::2], rtol=1e-6, atol=0)
    assert "tails='linear'" in repr(lin)
    with pytest.raises(LinearizerError, match="tails"):
        FlagLogit(0.05, "cubic")


def test_logit_network_round_trip_and_config_checks():
    from linearizer.invertible.factory import NetworkConfig, build_network

    cfg = resolve("flow", "smoke", ["network.logit=0.05", "network.flag_actnorm=true"])
    model = build_flow(cfg).double()
    gen = torch.Generator().manual_seed(1)
    x = _in_domain((6, 1, 8, 8), gen)
    model.train()
    model.encode(x, torch.tensor([0.0, 1.0] * 3).double())  # data-dependent ActNorm start
    model.eval()
    flags = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 1.0], dtype=torch.float64)
    torch.testing.assert_close(
        model.decode(model.encode(x, flags), flags), x, rtol=0, atol=1e4 * EPS
    )
    samples = model.sample(
        torch.randn(5, 1, 8, 8, generator=gen, dtype=torch.float64), steps=4, final="skip"
    )
    lo, hi = -0.05 / 0.9, 1 + 0.05 / 0.9
    assert float(samples.min()) >= lo and float(samples.max()) <= hi
    with pytest.raises(LinearizerError, match="must lie in"):
        model.encode(x - 0.5, 1.0)
    for bad in ("-0.1", "0.5"):
        with pytest.raises(LinearizerError, match="network.logit"):
            NetworkConfig(logit=float(bad)).validate()
    with pytest.raises(LinearizerError, match="cpu network only"):
        NetworkConfig(kind="paper", logit=0.05).validate()
    with pytest.raises(LinearizerError, match="flagged network"):
        build_network(NetworkConfig(logit=0.05, img_size=8, hidden=4), 1, conditioned=False)


def test_dense_blocks_invert_exactly_and_see_the_whole_image():
    from linearizer.invertible import cpu_network
    from linearizer.invertible.dense import DenseConditioner

    torch.manual_seed(0)
    g = cpu_network(1, num_blocks=1, hidden=4, dense_blocks=2, dense_hidden=8, img_size=4).double()
    assert [type(b.F.cond).__name__ for b in g.blocks] == ["SmallCNN"] + ["DenseConditioner"] * 2
    with torch.no_grad():
        for p in g.parameters():
            p.add_(0.1 * torch.randn_like(p))
    x, one = torch.randn(1, 1, 4, 4, dtype=torch.float64), torch.ones(1, dtype=torch.float64)
    z = g(x, one)
    torch.testing.assert_close(g.inverse(z, one), x, rtol=0, atol=1e3 * EPS)
    jf = torch.autograd.functional.jacobian(lambda v: g(v, one), x).reshape(16, 16)
    ji = torch.autograd.functional.jacobian(lambda v: g.inverse(v, one), z.detach())
    torch.testing.assert_close(
        ji.reshape(16, 16) @ jf, torch.eye(16, dtype=torch.float64), rtol=0, atol=1e4 * EPS
    )
    assert torch.autograd.gradcheck(lambda v: g(v, one), (x.clone().requires_grad_(),))
    (g.inverse(z, one) ** 2).sum().backward()
    assert all(p.grad is not None and p.grad.abs().max() > 0 for p in g.parameters())
    # one input pixel moves every output of a dense coupling (a 3x3 conv reaches its neighbours)
    dense = g.blocks[1].F.cond
    u = torch.zeros(1, 2, 2, 2, dtype=torch.float64, requires_grad=True)
    dense(u, one)[0, :, 1, 1].sum().backward()
    assert bool((u.grad[0, :, 0, 0] != 0).all())
    with pytest.raises(LinearizerError, match="reads inputs of shape"):
        DenseConditioner(2, 4, 2, 2, hidden=8)(torch.zeros(1, 2, 3, 3))


def test_dense_blocks_config_and_flow():
    from linearizer.invertible import cpu_network
    from linearizer.invertible.dense import DenseConditioner
    from linearizer.invertible.factory import NetworkConfig, build_network

    cfg = resolve("flow", "smoke", ["network.dense_blocks=1", "network.dense_hidden=16"])
    model = build_flow(cfg).double()
    assert "net.blocks.1.F.cond.fc_in.weight" in model.state_dict()
    x = torch.rand(3, 1, 8, 8, dtype=torch.float64)
    torch.testing.assert_close(model.decode(model.encode(x, 1.0), 1.0), x, rtol=0, atol=1e4 * EPS)
    with pytest.raises(LinearizerError, match="dense_blocks"):
        NetworkConfig(dense_blocks=-1).validate()
    with pytest.raises(LinearizerError, match="cpu network only"):
        NetworkConfig(kind="paper", dense_blocks=1).validate()
    with pytest.raises(LinearizerError, match="even img_size"):
        cpu_network(1, dense_blocks=1)
    net = build_network(NetworkConfig(dense_blocks=1, img_size=8, hidden=4), 1)
    assert isinstance(net.blocks[2].G.cond, DenseConditioner)
