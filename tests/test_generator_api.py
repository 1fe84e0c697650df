"""Every model gives its Linearizer the same way, ``model.generator(...)``, and encodes and
decodes with the same signature, ``encode(x, flag=...)`` / ``decode(z, flag=...)``; the former
names still work for one release, with a DeprecationWarning."""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from torch import Tensor, nn

from linearizer.algebra import Linearizer
from linearizer.flow.build import build_flow
from linearizer.flow.config import FlowConfig
from linearizer.invertible import Conditioned, cpu_network
from linearizer.invertible.factory import NetworkConfig
from linearizer.projective.config import ProjectiveConfig
from linearizer.projective.task import build_model
from linearizer.style.build import build_style_model
from linearizer.style.config import StyleConfig

F64 = torch.float64
TINY = NetworkConfig(img_size=8, hidden=8)


@dataclass
class Case:
    """A tiny model, the arguments of its ``generator``, an input of it and the map it names."""

    model: nn.Module
    args: tuple[Any, ...]
    x: Tensor
    own_map: Callable[[Tensor], Tensor]
    alias: str | None  # the deprecated name of ``generator``, if any


def _perturbed(model: nn.Module) -> nn.Module:
    model = model.double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


def _flow() -> Case:
    cfg = FlowConfig(network=TINY, rank=2, lora_emb=8, lora_hidden=16, v_scale=0.125)
    model = _perturbed(build_flow(cfg))
    x0 = torch.randn(2, 1, 8, 8, dtype=F64)
    return Case(model, (), x0, lambda x: model.sample(x), None)


def _projective() -> Case:
    model = _perturbed(build_model(ProjectiveConfig(network=TINY, rank=4), channels=1))
    x = torch.randn(2, 1, 8, 8, dtype=F64)
    return Case(model, (), x, model, "as_linearizer")


def _style() -> Case:
    bank = _perturbed(build_style_model(StyleConfig(network=TINY), ["a", "b"], channels=3))
    weights = {"a": 0.3, "b": 0.7}
    x = torch.rand(1, 3, 8, 8, dtype=F64)
    return Case(bank, (weights, (8, 8)), x, lambda x: bank.mix(x, weights), "linearizer")


CASES = {"flow": _flow, "projective": _projective, "style": _style}


@pytest.fixture(params=sorted(CASES))
def case(request: pytest.FixtureRequest) -> Case:
    torch.manual_seed(0)
    return CASES[request.param]()


def _close(a: Tensor, b: Tensor) -> bool:
    return bool(torch.allclose(a, b, rtol=1e-9, atol=1e-9 * float(b.abs().max())))


def test_generator_is_a_method_returning_the_models_map_as_a_linearizer(case: Case) -> None:
    f = case.model.generator(*case.args)
    assert isinstance(f, Linearizer)
    with torch.no_grad():
        assert _close(f(case.x), case.own_map(case.x))


def test_deprecated_aliases_warn_and_give_the_same_map(case: Case) -> None:
    if case.alias is None:
        pytest.skip("this model never had another name for its generator")
    with pytest.warns(DeprecationWarning, match="generator"):
        old = getattr(case.model, case.alias)(*case.args)
    new = case.model.generator(*case.args)
    assert isinstance(old, Linearizer)
    with torch.no_grad():
        assert _close(old(case.x), new(case.x))


def test_encode_decode_take_the_same_flag_keyword(case: Case) -> None:
    model, x = case.model, case.x
    with torch.no_grad():  # flag 1, the data side (an unconditioned network ignores it)
        assert _close(model.decode(model.encode(x, flag=1.0), flag=1.0), x)
        if inspect.signature(model.encode).parameters["flag"].default is None:
            assert _close(model.decode(model.encode(x)), x)  # each model's own sides


def test_invertible_modules_accept_the_former_cond_keyword() -> None:
    torch.manual_seed(0)
    net = cpu_network(1, num_blocks=1, hidden=8).double().eval()
    x, tau = torch.rand(2, 1, 8, 8, dtype=F64), torch.ones(2, dtype=F64)
    with pytest.warns(DeprecationWarning, match="cond="):
        old = net(x, cond=tau)
    with pytest.warns(DeprecationWarning, match="cond="):
        back = net.inverse(old, cond=tau)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert torch.equal(old, net(x, flag=tau)) and _close(back, x)
    with pytest.warns(DeprecationWarning, match="value="):
        view = Conditioned(net, value=1.0)
    assert view.flag == 1.0 and torch.equal(view(x), old)
    with pytest.warns(DeprecationWarning, match="flag"):
        assert view.value == 1.0


def test_as_cond_is_a_deprecated_alias_of_as_flag() -> None:
    from linearizer.invertible import as_cond, as_flag

    ref = torch.zeros(3, dtype=F64)
    with pytest.warns(DeprecationWarning, match="as_flag"):
        old = as_cond(0.5, 3, ref)
    assert torch.equal(old, as_flag(0.5, 3, ref)) and old.dtype == F64
