"""One lazy registry for presets, run kinds, run sources and commands: what each table declares
resolves, nothing is imported before it is looked up, an unknown name is one line listing the
known ones, and named runs open in a fresh interpreter with nothing imported first."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from linearizer.cli.common import TRAIN_KINDS
from linearizer.cli.main import COMMANDS, build_parser
from linearizer.errors import LinearizerError
from linearizer.registry import Registry
from linearizer.training import runs
from linearizer.training.config import PRESETS, config_class, get_preset, preset_names, resolve


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """Runs Python code in a new interpreter (caches in a temporary folder); returns stdout."""
    env = {**os.environ, "LINEARIZER_DATA": str(tmp_path_factory.mktemp("data"))}
    env["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("cache"))

    def run(code: str, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code), *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout

    return run


# -- named runs with nothing imported first --------------------------------------------------


def test_load_run_opens_a_pretrained_model_in_a_fresh_interpreter(fresh):
    out = fresh("""
        import sys
        from linearizer.training.runs import load_run

        assert "linearizer.pretrained" not in sys.modules
        run = load_run("pretrained:mnist")
        print(run.kind, run.step > 0)
    """)
    assert out.split() == ["flow", "True"]


def test_every_public_from_pretrained_is_one_function_that_opens_names(fresh):
    """The first call is ``linearizer.training``'s, before anything else is imported; then
    ``linearizer.pretrained`` and ``training.model_folder`` give the very same function."""
    out = fresh("""
        from linearizer.training import from_pretrained

        by_name = from_pretrained("mnist")
        by_spec = from_pretrained("pretrained:mnist")
        import linearizer.pretrained
        import linearizer.training.model_folder

        assert linearizer.pretrained.from_pretrained is from_pretrained
        assert linearizer.training.model_folder.from_pretrained is from_pretrained
        same = all(v.equal(by_spec.state_dict()[k]) for k, v in by_name.state_dict().items())
        print(type(by_name).__name__, by_name.training, same)
    """)
    assert out.split() == ["OneStepFlow", "False", "True"]


def test_train_starts_from_a_pretrained_model_in_a_fresh_interpreter(fresh, tmp_path):
    """``train(task, cfg, run)`` with ``init_from="pretrained:mnist"``: one step at lr = 0 keeps
    the shipped weights (the network of the shipped config, on synthetic images)."""
    out = fresh(
        """
        import json, sys
        from importlib import resources

        from linearizer.flow.config import FlowConfig
        from linearizer.flow.task import FlowTask
        from linearizer.training import apply_overrides, load_run, train

        text = resources.files("linearizer").joinpath("assets/flow_mnist.json").read_text()
        sets = [
            "init_from=pretrained:mnist", "data.dataset=synthetic", "max_steps=1",
            "batch_size=2", "lr=0", "ema_decay=0", "progress=false", "n_samples=2",
            "sampler.steps=2", "calibration_samples=0", "transport_steps=0",
            "finish_minutes=0", "max_minutes=0", "threads=1", "device=cpu", "ckpt_every=0",
        ]
        cfg = apply_overrides(FlowConfig.from_dict(json.loads(text)["config"]), sets)
        assert "linearizer.pretrained" not in sys.modules
        result = train(FlowTask(), cfg, sys.argv[1])
        start = load_run("pretrained:mnist").model.state_dict()
        after = load_run(sys.argv[1]).model.state_dict()
        print(result.step, all(v.equal(after[k]) for k, v in start.items()))
        """,
        str(tmp_path / "warm"),
    )
    assert out.split() == ["1", "True"]


def test_no_entry_is_imported_before_it_is_looked_up(fresh):
    """Importing the tables imports none of the modules they name; a look-up imports its own."""
    out = fresh("""
        import sys
        from linearizer.cli.main import COMMANDS
        from linearizer.training.config import PRESETS, get_preset
        from linearizer.training.runs import RUN_KINDS, SOURCES, run_folder

        homes = [r.homes[n].partition(":")[0] for r in (COMMANDS, PRESETS, RUN_KINDS, SOURCES)
                 for n in r.names()]
        early = sorted({m for m in homes if m in sys.modules})
        get_preset("projective", "smoke")
        RUN_KINDS.get("style")
        COMMANDS.get("svd")
        SOURCES.get("pretrained")
        wanted = ["linearizer.projective.config", "linearizer.style.task",
                  "linearizer.cli.cmd_svd", "linearizer.pretrained"]
        print("early:", *early)
        print("loaded:", *[m in sys.modules for m in wanted])
        print("others:", "linearizer.cli.cmd_sample" in sys.modules)
    """)
    assert out.splitlines() == ["early:", "loaded: True True True True", "others: False"]


# -- the registry itself ---------------------------------------------------------------------


def test_every_declared_entry_resolves():
    for kind in PRESETS.names():
        assert preset_names(kind) and PRESETS.loaded(kind)
        assert all(isinstance(get_preset(kind, n), config_class(kind)) for n in preset_names(kind))
    for kind in runs.RUN_KINDS.names():
        assert runs.run_kind(kind).name == kind
    for scheme in runs.SOURCES.names():
        assert callable(runs.SOURCES.get(scheme))
    # each command's register adds exactly the commands the table names for it, in its order
    sub = build_parser()._subparsers._group_actions[0]  # type: ignore[union-attr]
    assert list(sub.choices) == COMMANDS.names()
    train = sub.choices["train"]._subparsers._group_actions[0]
    assert list(train.choices) == TRAIN_KINDS.names()
    # other tests may add kinds of their own; the declared ones come first
    assert PRESETS.names()[: len(TRAIN_KINDS.names())] == TRAIN_KINDS.names()


@pytest.mark.parametrize(
    "look_up, message",
    [
        (lambda: get_preset("flow", "huge"), "unknown flow preset 'huge'; known: smoke, cpu, "),
        (lambda: resolve("nope", "smoke"), "unknown config kind 'nope'; known: flow, proj"),
        (lambda: runs.run_kind("nope"), "unknown run kind 'nope'; known: flow, projective, "),
        (lambda: runs.load_run("nope:x"), "no source registered for 'nope:' (known: pretr"),
        (lambda: COMMANDS.get("nope"), "unknown command 'nope'; known: calibrate, "),
        (lambda: TRAIN_KINDS.get("nope"), "unknown train kind 'nope'; known: flow, "),
    ],
)
def test_an_unknown_name_is_one_line_listing_the_known_ones(look_up, message):
    with pytest.raises(LinearizerError) as caught:
        look_up()
    text = str(caught.value)
    assert text.startswith(message) and "\n" not in text, text


def test_an_entry_is_an_attribute_or_registered_by_importing_its_module(tmp_path, monkeypatch):
    (tmp_path / "reg_probe_attr.py").write_text("VALUE = 42\n")
    (tmp_path / "reg_probe_adds.py").write_text(
        "from linearizer.training.runs import register_source\n"
        "register_source('shelf', lambda name: name.upper())\n"
    )
    (tmp_path / "reg_probe_none.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    table = {"shelf": "reg_probe_adds", "box": "reg_probe_attr:VALUE", "bin": "reg_probe_none"}
    monkeypatch.setattr(runs, "SOURCES", Registry("source", table))
    assert runs.sources() == ["bin", "box", "shelf"]
    assert "reg_probe_adds" not in sys.modules and not runs.SOURCES.loaded("shelf")
    assert runs.run_folder("shelf:abc").name == "ABC"
    assert "reg_probe_adds" in sys.modules and runs.SOURCES.loaded("shelf")
    assert runs.SOURCES.get("box") == 42
    with pytest.raises(LookupError, match="reg_probe_none registered no source 'bin'"):
        runs.SOURCES.get("bin")
    for name in ("reg_probe_adds", "reg_probe_attr", "reg_probe_none"):
        sys.modules.pop(name, None)


def test_added_names_follow_the_declared_ones_and_setdefault_imports_nothing():
    reg: Registry[int] = Registry("number", {"one": "no.such.module:ONE"})
    reg.add("two", 2)
    assert reg.setdefault("two", 3) == 2 and reg.setdefault("three", 3) == 3
    assert reg.names() == ["one", "two", "three"] and "one" in reg and "four" not in reg
    assert not reg.loaded("one") and reg.get("three") == 3
    with pytest.raises(ModuleNotFoundError):
        reg.get("one")
