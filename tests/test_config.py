"""Typed configs: strict loading, overrides with type coercion, presets, rendered help."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal, Optional

import pytest

from linearizer.errors import LinearizerError
from linearizer.training.config import (
    Config,
    TrainConfig,
    apply_overrides,
    config_class,
    describe,
    get_preset,
    option,
    preset_names,
    register_preset,
    render_options,
    resolve,
    undocumented,
)


@dataclass
class Model(Config):
    channels: int = option(16, "channels")
    blocks: tuple[int, ...] = option((1, 2), "blocks per level")


@dataclass
class Demo(TrainConfig):
    name: str = option("x", "a name")
    scale: float = option(1.5, "a scale")
    flag: bool = option(False, "a flag")
    pair: tuple[float, float] = option((0.1, 0.2), "two numbers")
    tags: list[str] = option(["a"], "tags")
    limit: Optional[int] = option(None, "optional limit")  # noqa: UP045 (tests typing.Optional)
    other: float | None = option(2.0, "optional float")
    mode: Literal["fast", "slow"] = option("fast", "speed")
    model: Model = option(Model(), "network")


def test_round_trip_through_json():
    cfg = apply_overrides(Demo(), ["limit=3", "model.blocks=4,5,6", "tags=p,q"])
    back = Demo.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert back == cfg
    assert back.model.blocks == (4, 5, 6) and back.pair == (0.1, 0.2) and back.tags == ["p", "q"]


def test_unknown_key_names_it_and_lists_valid_ones():
    with pytest.raises(LinearizerError) as err:
        Demo.from_dict({"scael": 1.0})
    msg = str(err.value)
    assert "'scael'" in msg and "did you mean 'scale'" in msg and "valid keys:" in msg
    assert "max_steps" in msg and "model" in msg


def test_unknown_nested_key_is_dotted():
    with pytest.raises(LinearizerError, match=r"'model\.chanels'.*model\.channels"):
        Demo.from_dict({"model": {"chanels": 3}})
    with pytest.raises(LinearizerError, match=r"'model\.chanels'"):
        apply_overrides(Demo(), ["model.chanels=3"])


def test_missing_keys_take_defaults_and_types_are_checked():
    assert Demo.from_dict({}).scale == 1.5
    assert Demo.from_dict({"scale": 2}).scale == 2.0  # JSON ints are fine floats
    with pytest.raises(LinearizerError, match="'scale' expects float"):
        Demo.from_dict({"scale": "big"})
    with pytest.raises(LinearizerError, match="'max_steps' expects int"):
        Demo.from_dict({"max_steps": 1.5})
    with pytest.raises(LinearizerError, match="'flag' expects bool"):
        Demo.from_dict({"flag": 1})


@pytest.mark.parametrize(
    "item, attr, value",
    [
        ("max_steps=1e3", "max_steps", 1000),
        ("max_steps=2_000", "max_steps", 2000),
        ("lr=3e-4", "lr", 3e-4),
        ("flag=yes", "flag", True),
        ("flag=off", "flag", False),
        ("name=hello=world", "name", "hello=world"),
        ("pair=(1, 2.5)", "pair", (1.0, 2.5)),
        ("tags=[]", "tags", []),
        ("limit=7", "limit", 7),
        ("limit=none", "limit", None),
        ("other=null", "other", None),
        ("mode=slow", "mode", "slow"),
        ("betas=0.5,0.9", "betas", (0.5, 0.9)),
    ],
)
def test_override_coercion(item, attr, value):
    assert getattr(apply_overrides(Demo(), [item]), attr) == value


@pytest.mark.parametrize(
    "item, pattern",
    [
        ("max_steps=ten", "'max_steps' expects int"),
        ("max_steps=2.5", "'max_steps' expects int"),
        ("flag=maybe", "'flag' expects bool"),
        ("pair=1,2,3", "'pair' expects 2 values"),
        ("mode=medium", "'mode' must be one of fast, slow"),
        ("scale=", "'scale' expects float"),
        ("lr", "not of the form key=value"),
        ("model=3", "is a section"),
        ("scale.x=1", "has no sub-keys"),
        ("lr=-1", "'lr' must be >= 0"),
        ("batch_size=0", "'batch_size' must be >= 1"),
        ("ema_decay=1", "'ema_decay' must be in"),
        ("device=tpu", "'device' must be"),
    ],
)
def test_bad_overrides_are_clear(item, pattern):
    with pytest.raises(LinearizerError, match=pattern):
        apply_overrides(Demo(), [item])


def test_settings_that_need_each_other_may_come_in_any_order():
    """A nested section validates once every override is in, not after each one."""
    from linearizer.flow.config import FlowConfig

    keys = ["network.odd_noise=true", "network.flag_actnorm=true"]
    for order in (keys, keys[::-1]):
        cfg = apply_overrides(FlowConfig(), order)
        assert cfg.network.odd_noise and cfg.network.flag_actnorm
    with pytest.raises(LinearizerError, match="network.odd_noise"):
        apply_overrides(FlowConfig(), keys[:1])


def test_overrides_do_not_touch_the_original():
    base = Demo()
    apply_overrides(base, ["model.channels=64", "tags=z"])
    assert base.model.channels == 16 and base.tags == ["a"]
    assert Demo().tags is not Demo().tags  # mutable defaults are per instance


def test_presets_registry_and_resolve():
    register_preset("test-kind-a", "small", Demo(max_steps=5))
    register_preset("test-kind-a", "big", Demo(max_steps=500, model=Model(channels=64)))
    assert preset_names("test-kind-a") == ["small", "big"]
    assert config_class("test-kind-a") is Demo
    cfg = resolve("test-kind-a", "big", ["lr=1e-3"])
    assert (cfg.max_steps, cfg.lr, cfg.model.channels) == (500, 1e-3, 64)
    get_preset("test-kind-a", "big").model.channels = 1  # copies: the registry is untouched
    assert get_preset("test-kind-a", "big").model.channels == 64
    with pytest.raises(LinearizerError, match="unknown test-kind-a preset 'huge'.*small, big"):
        get_preset("test-kind-a", "huge")
    with pytest.raises(LinearizerError, match="unknown config kind 'no-such-kind'"):
        resolve("no-such-kind", "x")
    with pytest.raises(TypeError, match="must all be Demo"):
        register_preset("test-kind-a", "other", TrainConfig())


def test_undocumented_fields_are_refused():
    @dataclass
    class Sloppy(Config):
        x: int = 3

    assert undocumented(Sloppy) == ["x"]
    with pytest.raises(TypeError, match="lack help text: x"):
        register_preset("test-kind-b", "p", Sloppy())


def test_every_train_option_is_documented_and_rendered():
    assert undocumented(TrainConfig) == []
    text = render_options(Demo)
    for name, _, _, help_ in describe(Demo):
        assert name in text and help_ in text
    assert "model.channels" in text and "default: 0.9,0.999" in text
    table = render_options(Demo(lr=0.5), markdown=True)
    assert table.startswith("| option |") and "| `lr` | float | `0.5` |" in table
    assert "{fast,slow}" in table and "int \\| None" in table


def test_a_flow_model_is_built_from_its_model_config_alone():
    from linearizer.flow.build import build_flow
    from linearizer.flow.config import FlowConfig, FlowModelConfig
    from linearizer.invertible.factory import NetworkConfig

    cpu = resolve("flow", "cpu")
    part = cpu.model_config()
    assert type(part) is FlowModelConfig and not isinstance(part, TrainConfig)
    assert part.to_dict().items() <= cpu.to_dict().items()
    # A model config reads back as the whole config's model keys (the saved layout is flat).
    assert FlowConfig.from_dict(part.to_dict()).model_config() == part
    tiny = FlowModelConfig(
        network=NetworkConfig(img_size=8, blocks=1, hidden=8), rank=3, lora_emb=8, lora_hidden=16
    )
    assert build_flow(tiny).op.rank == 3
    with pytest.raises(LinearizerError, match="rank"):
        FlowModelConfig(rank=0)
