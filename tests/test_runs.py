"""One run contract: load_run for every kind, old flat config.json files, pretrained specs."""

from __future__ import annotations

import pytest
import torch

from linearizer.cli.main import main
from linearizer.errors import LinearizerError
from linearizer.io import read_json, write_json
from linearizer.training.config import FLAT_KEYS
from linearizer.training.runs import Run, load_run


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    for kind, preset in (("flow", "smoke"), ("projective", "smoke-ign")):
        out = root / preset
        args = ["train", kind, "--preset", preset, "--out", str(out), "--set", "max_steps=2"]
        assert main([*args, "--set", "progress=false"]) == 0
    return root


def _flatten(nested: dict) -> dict:
    """The config.json layout of runs written before the network and data sections."""
    flat = {k: v for k, v in nested.items() if k not in ("network", "data")}
    for old, new in FLAT_KEYS.items():
        section, leaf = new.split(".")
        flat[old] = nested[section][leaf]
    return flat


def test_load_run_reports_kind_step_and_config(runs):
    flow = load_run(runs / "smoke")
    assert isinstance(flow, Run) and flow.kind == "flow" and flow.step == 2
    assert flow.config.network.img_size == 8 and not flow.model.training
    ign = load_run(runs / "smoke-ign")
    assert ign.kind == "ign" and ign.config.model == "ign"


def test_old_flat_config_json_loads_to_the_same_model(runs, tmp_path):
    run = runs / "smoke"
    new = load_run(run)
    old_dir = tmp_path / "old"
    old_dir.mkdir()
    for name in ("run.json",):
        write_json(old_dir / name, read_json(run / name))
    write_json(old_dir / "config.json", _flatten(read_json(run / "config.json")))
    (old_dir / "checkpoints").symlink_to(run / "checkpoints")
    old = load_run(old_dir)
    assert old.config == new.config
    x = torch.rand(3, 1, 8, 8)
    assert torch.equal(old.model.encode(x, 1.0), new.model.encode(x, 1.0))


def test_wrong_kind_missing_folder_and_unknown_pretrained_are_one_line(runs, tmp_path):
    with pytest.raises(LinearizerError, match="is a projective run, not a flow run"):
        load_run(runs / "smoke-ign", expect="flow")
    with pytest.raises(LinearizerError, match="no such run folder"):
        load_run(tmp_path / "missing")
    with pytest.raises(LinearizerError, match="no-such-model"):
        load_run("pretrained:no-such-model")


def test_old_flat_overrides_and_nested_option_names(capsys):
    from linearizer.training.config import render_options, resolve

    old = resolve("flow", "smoke", ["hidden=16", "network=paper", "dataset=fashion-mnist"])
    new = resolve(
        "flow", "smoke", ["network.hidden=16", "network.kind=paper", "data.dataset=fashion-mnist"]
    )
    assert old == new and old.network.hidden == 16 and old.hidden == 16  # old name reads through
    with pytest.raises(LinearizerError, match="unknown config key 'hiddn'"):
        resolve("flow", "smoke", ["hiddn=3"])
    table = render_options(old)
    assert "network.hidden" in table and "data.dataset" in table and "\n  hidden " not in table
    assert main(["train", "projective", "--list-options"]) == 0
    assert "network.blocks" in capsys.readouterr().out


def test_a_registered_source_opens_its_names_and_training_names_none(runs, monkeypatch):
    """``SCHEME:NAME`` specs come from the layers above (``pretrained`` is declared by module
    name, others are registered); an unknown scheme gets one line naming the known ones."""
    from linearizer.registry import Registry
    from linearizer.training import runs as runs_module

    monkeypatch.setattr(runs_module, "SOURCES", Registry("source"))
    with pytest.raises(LinearizerError, match="no source registered for 'shelf:'"):
        load_run("shelf:smoke")
    runs_module.register_source("shelf", lambda name: runs / name)
    assert runs_module.sources() == ["shelf"]
    assert load_run("shelf:smoke").step == load_run(runs / "smoke").step == 2
    assert runs_module.run_folder("shelf:smoke-ign") == runs / "smoke-ign"
