"""The application models compose a Linearizer: one attribute gives the generator's algebra."""

from __future__ import annotations

import pytest
import torch

from linearizer.algebra import Linearizer
from linearizer.errors import LinearizerError
from linearizer.flow.build import build_flow
from linearizer.flow.config import FlowConfig
from linearizer.image_model import ImageModel
from linearizer.invertible import cpu_network
from linearizer.invertible.factory import NetworkConfig
from linearizer.operators import OrthogonalProjector
from linearizer.projective.model import ProjectiveModel
from linearizer.style.bank import StyleBank

F64 = torch.float64
EPS = torch.finfo(F64).eps


def _flow() -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = FlowConfig(
        network=NetworkConfig(img_size=8, hidden=8),
        rank=2,
        lora_emb=8,
        lora_hidden=16,
        v_scale=0.125,
    )
    model = build_flow(cfg).double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


def _close(a: torch.Tensor, b: torch.Tensor, factor: float = 1e3) -> bool:
    scale = float(b.detach().abs().max())
    return bool(torch.allclose(a, b, rtol=factor * EPS, atol=factor * EPS * scale))


def test_flow_generator_is_the_one_step_sampler_as_a_linearizer():
    model = _flow()
    f = model.generator(steps=12, method="rk4", final="skip")
    assert isinstance(f, Linearizer) and f is model.generator(steps=12, method="rk4", final="skip")
    x0 = torch.randn(3, 1, 8, 8, dtype=F64)
    assert _close(f(x0), model.sample(x0, steps=12, method="rk4", final="skip"))
    assert _close(f.pinv(f(x0)), x0, factor=1e6)  # B is square and invertible
    svd = f.svd(4)
    assert svd.S.shape == (4,) and bool((svd.S[:-1] >= svd.S[1:]).all())
    assert f.g_x.flag == 0.0 and f.g_y.flag == 1.0  # g_noise in, g_data out


def test_projective_generator_is_the_model_and_a_projector():
    torch.manual_seed(1)
    net = cpu_network(1, 1, 8, cond_dim=0)
    model = ProjectiveModel(net, OrthogonalProjector(64, 4), (1, 8, 8)).double().eval()
    f = model.generator()
    assert isinstance(f, Linearizer) and f is model.generator()
    x = 3 * torch.randn(2, 1, 8, 8, dtype=F64)
    y = model(x)
    assert _close(f(x), y) and _close(f.project(y), y, factor=1e5)
    assert f.svd(4).S.shape == (4,)


def test_style_bank_linearizer_comes_from_the_shared_base():
    torch.manual_seed(2)
    bank = StyleBank(cpu_network(3, 1, hidden=8), ["a", "b"], init_scale=0.1).double()
    f = bank.generator("a", (8, 8))
    x = torch.rand(1, 3, 8, 8, dtype=F64)
    assert _close(f(x), bank.stylise(x, "a"))
    assert isinstance(bank, ImageModel) and bank.network is bank.g


@pytest.mark.parametrize("bad", [torch.zeros(2, 8, 8), torch.full((1, 1, 8, 8), float("nan"))])
def test_one_input_check_for_every_model(bad):
    model = _flow()
    with pytest.raises(LinearizerError, match="noise"):
        model.sample(bad.double())
