"""The sampler spec: one definition, one default, and every command takes it the same way."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from linearizer.cli.flowargs import spec_from_args
from linearizer.cli.main import build_parser
from linearizer.config import apply_overrides
from linearizer.errors import LinearizerError
from linearizer.flow.config import FlowConfig
from linearizer.flow.spec import AUTHORS, SamplerSpec, sample_spec

# every command that samples, inverts or measures a flow run
SPEC_COMMANDS = {
    "sample": ["RUN", "--out", "o"],
    "invert": ["RUN", "--out", "o"],
    "interpolate": ["RUN", "--out", "o"],
    "svd": ["RUN", "--out", "o"],
    "evaluate": ["RUN"],
    "calibrate": ["RUN"],
    "explore": ["RUN"],
    "restore": ["RUN", "--out", "o", "--task", "sr4"],
    "swap": ["RUN", "--out", "o", "--from", "1", "--to", "2"],
}


@pytest.mark.parametrize("command", sorted(SPEC_COMMANDS))
def test_every_command_defaults_to_the_runs_spec_and_takes_every_field(command):
    parser = build_parser()
    args = parser.parse_args([command, *SPEC_COMMANDS[command]])
    recorded = SamplerSpec(steps=37, temperature=1.3)  # a run's own spec
    assert spec_from_args(args, recorded) == recorded
    assert spec_from_args(args, SamplerSpec()) == SamplerSpec()
    given = [
        "--steps",
        "12",
        "--method",
        "rk4",
        "--final",
        "skip",
        "--dtype",
        "float32",
        "--temperature",
        "0.9",
        "--maps",
        "calibration",
        "--class",
        "3",
        "--guidance",
        "1.5",
    ]
    args = parser.parse_args([command, *SPEC_COMMANDS[command], *given])
    want = SamplerSpec(
        steps=12,
        method="rk4",
        final="skip",
        dtype="float32",
        temperature=0.9,
        maps="calibration",
        component=3,
        guidance=1.5,
    )
    assert spec_from_args(args, recorded) == want


def test_the_default_is_defined_once_and_a_run_records_it():
    assert FlowConfig().sampler == SamplerSpec()
    assert FlowConfig.from_dict({}).sampler == SamplerSpec()
    assert AUTHORS.schedule == (100, "rk4-authors", "skip") and AUTHORS.maps == "none"
    cfg = apply_overrides(FlowConfig(), ["sampler.steps=50", "sampler.maps=transport"])
    assert cfg.sampler == SamplerSpec(steps=50, maps="transport")
    assert FlowConfig.from_dict(cfg.to_dict()).sampler == cfg.sampler


def test_a_config_written_before_the_spec_still_loads():
    old = {"sample_steps": 100, "sample_method": "rk4", "sample_temperature": 1.16}
    # the old keys set the training grids only: the run samples with the default schedule
    assert FlowConfig.from_dict(old).sampler == SamplerSpec(temperature=1.16)


def test_the_renamed_component_reads_its_old_name_label():
    stored = {"sampler": {"steps": 50, "label": 3}}
    assert FlowConfig.from_dict(stored).sampler == SamplerSpec(steps=50, component=3)
    assert apply_overrides(FlowConfig(), ["sampler.label=4"]).sampler.component == 4
    with pytest.warns(DeprecationWarning, match="label is renamed component"):
        assert SamplerSpec(label=2) == SamplerSpec(component=2)
    with pytest.warns(DeprecationWarning, match="label is renamed component"):
        assert SamplerSpec(component=5).label == 5
    with pytest.warns(DeprecationWarning, match="label is renamed component"):
        assert SamplerSpec().replace(label=1).component == 1
    with pytest.raises(LinearizerError, match="both"):
        FlowConfig.from_dict({"sampler": {"label": 1, "component": 1}})
    with pytest.raises(LinearizerError, match="not both"), pytest.warns(DeprecationWarning):
        SamplerSpec().replace(label=1, component=1)
    assert "label" not in SamplerSpec().to_dict()


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"steps": 1}, "steps must be"),
        ({"method": "heun"}, "method must be"),
        ({"final": "jump"}, "final must be"),
        ({"dtype": "float16"}, "dtype must be"),
        ({"temperature": 0.0}, "temperature must be"),
        ({"maps": "all"}, "maps must be"),
    ],
)
def test_bad_settings_are_one_line(changes, message):
    with pytest.raises(LinearizerError, match=message):
        SamplerSpec(**changes)


def test_specs_are_frozen_hashable_and_take_torch_dtypes():
    spec = SamplerSpec()
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.steps = 3
    assert {spec: 1}[SamplerSpec()] == 1
    assert sample_spec(None, dtype=torch.float32).dtype == "float32"
    assert sample_spec(spec, dtype=None) == spec
    assert spec.invertible() == spec.replace(final="skip") and AUTHORS.invertible() is AUTHORS
    gen = torch.Generator().manual_seed(0)
    x = SamplerSpec(temperature=2.0).noise(3, (1, 4, 4), gen)
    assert torch.equal(x, 2.0 * torch.randn(3, 1, 4, 4, generator=torch.Generator().manual_seed(0)))
