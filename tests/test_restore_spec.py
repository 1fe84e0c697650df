"""Every restoration setting has one default, in :class:`RestoreSpec`: the commands' options,
the report, :func:`restore` and the algorithms all read it from there."""

from __future__ import annotations

import argparse
import dataclasses
import inspect

import pytest

from linearizer.errors import LinearizerError
from linearizer.restore import algorithms, evaluate, report
from linearizer.restore.spec import DEFAULT, RestoreSpec

FIELDS = {f.name: f.default for f in dataclasses.fields(RestoreSpec)}
HELP = {f.name: f.metadata["help"] for f in dataclasses.fields(RestoreSpec)}


def _subparser(name: str) -> argparse.ArgumentParser:
    from linearizer.cli.main import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


@pytest.mark.parametrize("command", ["restore", "restore-report"])
def test_command_defaults_are_the_spec_defaults(command):
    actions = {a.dest: a for a in _subparser(command)._actions}
    shared = [name for name in FIELDS if name in actions]
    assert {"iters", "noise_steps", "map_steps", "fit_n"} <= set(shared)
    for name in shared:
        assert actions[name].default == FIELDS[name], name
        assert actions[name].help == HELP[name], name


def test_restore_takes_noise_lam_and_the_report_does_not():
    assert "noise_lam" in {a.dest for a in _subparser("restore")._actions}
    assert "noise_lam" not in {a.dest for a in _subparser("restore-report")._actions}


def test_functions_default_to_the_spec():
    assert inspect.signature(evaluate.restore).parameters["spec"].default == DEFAULT
    assert inspect.signature(report.run_task).parameters["spec"].default == DEFAULT
    assert inspect.signature(report.restore_report).parameters["spec"].default == DEFAULT
    params = {
        (algorithms.alternating, "iters"): DEFAULT.iters,
        (algorithms.range_map, "steps"): DEFAULT.map_steps,
        (algorithms.noise_optimisation, "steps"): DEFAULT.noise_steps,
    }
    for (fn, name), value in params.items():
        assert inspect.signature(fn).parameters[name].default == value, fn.__name__


def test_the_spec_is_frozen_and_checked():
    spec = RestoreSpec()
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.iters = 3  # type: ignore[misc]
    assert spec.replace(map_steps=7).map_steps == 7
    assert RestoreSpec.from_dict(spec.to_dict()) == spec
    for bad in ({"iters": 0}, {"noise_steps": -1}, {"fit_n": 0}, {"noise_lam": float("nan")}):
        with pytest.raises(LinearizerError):
            RestoreSpec(**bad)


def test_a_bad_setting_is_one_line_before_any_work(tmp_path, capsys):
    from linearizer.cli.main import main

    argv = ["restore", "pretrained:none", "--task", "sr2", "--out", str(tmp_path), "--dry-run"]
    assert main([*argv, "--iters", "0"]) != 0
    assert "iters must be >= 1, got 0" in capsys.readouterr().err
