"""Memory-saving backprop: same values and gradients as ordinary backprop, far fewer saved bytes."""

import pytest
import torch

from linearizer.flow.build import build_flow
from linearizer.flow.config import FlowConfig
from linearizer.flow.objective import draw_noise, flow_loss
from linearizer.invertible import cpu_network, memsave, paper_network, set_dropout_seed
from linearizer.invertible.factory import NetworkConfig
from tolerance import assert_near

TINY = dict(rank=2, lora_emb=8, lora_hidden=16, v_scale=0.125)


def _flow(network: str, dropout: float) -> torch.nn.Module:
    extra = dict(blocks=1, hidden=8, unet_attn=(4,)) if network == "paper" else dict(hidden=8)
    if network == "cpu-2-levels":
        network, extra = "cpu", dict(hidden=8, levels=2)
    if network == "cpu-logit":
        network, extra = "cpu", dict(hidden=8, logit=0.05)
    if network == "cpu-dense":
        network, extra = "cpu", dict(hidden=8, dense_blocks=1, dense_hidden=16)
    if network == "cpu-shift-noise":  # noise rows skip the blocks, data rows save memory
        network, extra = "cpu", dict(hidden=8, logit=0.05, noise_side="shift")
    if network == "cpu-odd-noise-mean":  # the mean is added outside the saved chain
        network = "cpu"
        extra = dict(hidden=8, flag_actnorm=True, odd_noise=True, noise_mean=True)
    net = NetworkConfig(kind=network, img_size=8, dropout=dropout, **extra)
    cfg = FlowConfig(network=net, **TINY)
    torch.manual_seed(0)
    model = build_flow(cfg).double().train()
    x = torch.rand(6, 1, 8, 8, dtype=torch.float64)
    with torch.no_grad():  # data-dependent ActNorm start, then perturb every parameter
        model.encode(x, 0.0)
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


def _grads(model, memory_saving: bool) -> tuple[torch.Tensor, list[torch.Tensor]]:
    model.memory_saving = memory_saving
    model.zero_grad(set_to_none=True)
    set_dropout_seed(model, 7)
    x1 = torch.rand(5, 1, 8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    draws = draw_noise(x1, torch.Generator().manual_seed(2))
    loss, _ = flow_loss(model, x1, draws)
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize(
    "network,dropout",
    [
        ("cpu", 0.0),
        ("cpu", 0.2),
        ("cpu-2-levels", 0.0),
        ("cpu-logit", 0.0),
        ("cpu-dense", 0.0),
        ("cpu-shift-noise", 0.0),
        ("cpu-odd-noise-mean", 0.0),
        ("paper", 0.1),
    ],
)
def test_flow_loss_gradients_equal_ordinary_backprop(network, dropout):
    model = _flow(network, dropout)
    loss0, g0 = _grads(model, False)
    loss1, g1 = _grads(model, True)
    assert torch.equal(loss0, loss1)
    worst = max(float((a - b).abs().max()) for a, b in zip(g0, g1))
    assert worst <= 1e-10
    assert max(float(g.abs().max()) for g in g0) > 1e-3  # the comparison is not vacuous


def _saved_bytes(fn) -> int:
    total = 0

    def pack(t):
        nonlocal total
        total += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()  # what the forward keeps (the backward's own saves are transient)
    out.sum().backward()
    return total


def test_saves_only_the_output_and_input_gradient_matches():
    torch.manual_seed(0)
    g = cpu_network(hidden=16, num_blocks=2).double()
    x = torch.randn(4, 1, 8, 8, dtype=torch.float64)
    g(x, 1.0)  # initialise the ActNorms
    xa = x.clone().requires_grad_(True)
    xb = x.clone().requires_grad_(True)
    plain = _saved_bytes(lambda: g.inverse(g(xa, 1.0), 0.0))
    saving = _saved_bytes(lambda: memsave.inverse(g, memsave.forward(g, xb, 1.0), 0.0))
    assert saving * 10 < plain
    assert_near(xa.grad, xb.grad, eps_factor=1e5)


def test_plain_path_without_gradients_or_before_actnorm_start():
    torch.manual_seed(0)
    g = paper_network(img_size=8, num_blocks=1, model_channels=8, dropout=0.0).double()
    x = torch.randn(3, 1, 8, 8, dtype=torch.float64)
    assert not bool(g.blocks[0].actnorm.initialized)
    first = _saved_bytes(lambda: memsave.forward(g, x, 1.0))  # uninitialised: ordinary path
    assert bool(g.blocks[0].actnorm.initialized)
    again = _saved_bytes(lambda: memsave.forward(g, x, 1.0))
    assert again * 10 < first
    with torch.no_grad():
        y = g(x, 1.0)
        assert torch.equal(memsave.inverse(g, y, 1.0), g.inverse(y, 1.0))


def test_config_flag_reaches_the_model():
    cfg = FlowConfig(network=NetworkConfig(img_size=8, memory_saving=True), **TINY)
    assert build_flow(cfg).memory_saving
    assert not build_flow(FlowConfig(network=NetworkConfig(img_size=8), **TINY)).memory_saving
    assert len(memsave.pieces(build_flow(cfg).net)) == 4 * cfg.network.blocks
