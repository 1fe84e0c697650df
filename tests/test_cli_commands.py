"""Every command of the README, run once on smoke runs (in-process, shared session runs).

This is the "does the product still work" check a user would do by hand: each command exits 0
and writes what it promises. Exactness is tested elsewhere; here the commands and their flags.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from conftest import write_png
from linearizer.cli.main import build_parser, main
from linearizer.training.checkpoint import latest_checkpoint
from official_fixture import CKPT, needs_fixture


def run_ok(*argv) -> None:
    code = main([str(a) for a in argv])
    assert code == 0, f"linearizer {' '.join(map(str, argv))} exited {code}"


def test_every_command_has_help(capsys):
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    assert {
        "train",
        "sample",
        "invert",
        "interpolate",
        "svd",
        "repro",
        "project",
        "style",
        "convert-official",
        "classifier",
        "info",
        "demo",
        "data",
        "swap",
        "evaluate",
        "calibrate",
        "restore",
        "explore",
    } <= set(commands)
    for name in commands:
        with pytest.raises(SystemExit) as exit_:
            main([name, "--help"])
        assert exit_.value.code == 0, name
    assert "usage: linearizer" in capsys.readouterr().out


def test_train_flow_options_dry_run_and_resume(smoke_flow_run, tmp_path, capsys):
    run_ok("train", "flow", "--list-options")
    run_ok("train", "flow", "--preset", "smoke", "--out", tmp_path / "dry", "--dry-run")
    assert not (tmp_path / "dry").exists()
    copy = tmp_path / "run"
    shutil.copytree(smoke_flow_run, copy)
    before = int(latest_checkpoint(copy).stem.split("_")[1])
    run_ok("train", "flow", "--resume", copy, "--set", f"max_steps={before + 2}")
    assert latest_checkpoint(copy).stem == f"ckpt_{before + 2:08d}"


@pytest.mark.parametrize("mode", [[], ["--multi-step"]])
def test_sample(smoke_flow_run, tmp_path, mode):
    out = tmp_path / "s"
    run_ok(
        "sample",
        smoke_flow_run,
        "--steps",
        "10",
        "--method",
        "rk4",
        "--n",
        "4",
        "--out",
        out,
        *mode,
    )
    with np.load(out / "samples.npz") as z:
        assert z["samples"].shape[0] == 4
    assert (out / "samples.png").is_file()


def test_invert_and_interpolate(smoke_flow_run, tmp_path):
    run_ok("invert", smoke_flow_run, "--steps", "10", "--out", tmp_path / "inv")
    assert any((tmp_path / "inv").iterdir())
    run_ok("interpolate", smoke_flow_run, "--steps", "10", "--n", "4", "--out", tmp_path / "int")
    assert any(p.suffix == ".png" for p in (tmp_path / "int").iterdir())


def test_interpolate_says_when_a_path_end_misses_its_image(
    smoke_flow_run, tmp_path, capsys, monkeypatch
):
    from linearizer.cli import cmd_interpolate
    from linearizer.flow.inversion import interpolate

    def off_at_the_end(*args, **kwargs):  # the path's last frame no longer is its image
        path = interpolate(*args, **kwargs).clone()
        path[-1] = path[-1] + 0.1
        return path

    monkeypatch.setattr(cmd_interpolate, "interpolate", off_at_the_end)
    capsys.readouterr()
    run_ok(
        "interpolate",
        smoke_flow_run,
        "--steps",
        "10",
        "--n",
        "3",
        "--pair",
        "2,5",
        "--out",
        tmp_path / "int",
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2, err  # one line per path, noise then latent
    assert err[0].startswith(
        "note: noise path, image 0 = test 2, 1 = test 5: the round trip of image(s) 1 is off"
    )
    assert err[1].startswith("note: latent path")


def test_svd(smoke_flow_run, tmp_path):
    run_ok("svd", smoke_flow_run, "--steps", "10", "--k", "2", "--out", tmp_path / "svd")
    assert any((tmp_path / "svd").iterdir())


def test_repro_on_smoke_settings(smoke_flow_run, tmp_path):
    quick = [
        "--quick",
        "--n",
        "8",
        "--fid-n",
        "32",
        "--invert-n",
        "8",
        "--steps",
        "10",
        "--long-steps",
        "20",
        "--k",
        "2",
    ]
    run_ok("repro", smoke_flow_run, "--out", tmp_path / "r", *quick)
    assert (tmp_path / "r" / "results.json").is_file() and (tmp_path / "r" / "REPORT.md").is_file()


def test_projective_train_ign_and_project(smoke_projective_run, tmp_path):
    run_ok("project", smoke_projective_run, "--n", "2", "--out", tmp_path / "p")
    assert any((tmp_path / "p").iterdir())
    run_ok(
        "train",
        "projective",
        "--preset",
        "smoke",
        "--baseline",
        "ign",
        "--set",
        "max_steps=2",
        "--out",
        tmp_path / "ign",
    )
    run_ok("project", tmp_path / "ign", "--n", "2", "--out", tmp_path / "pi")


def test_style_commands(smoke_style_run, tmp_path):
    run_ok("style", "apply", smoke_style_run, "--style", "red", "--out", tmp_path / "a.png")
    run_ok(
        "style",
        "mix",
        smoke_style_run,
        "--weights",
        "red=0.3,blue=0.7",
        "--out",
        tmp_path / "m.png",
    )
    run_ok(
        "style",
        "interpolate",
        smoke_style_run,
        "--from",
        "red",
        "--to",
        "blue",
        "--n",
        "3",
        "--out",
        tmp_path / "i.png",
    )
    for name in ("a.png", "m.png", "i.png"):
        assert (tmp_path / name).stat().st_size > 0
    dry = [
        ["apply", smoke_style_run, "--style", "red"],
        ["mix", smoke_style_run, "--weights", "red=1"],
        ["strength", smoke_style_run, "--style", "red"],
        ["interpolate", smoke_style_run, "--from", "red", "--to", "blue"],
    ]
    for argv in dry:  # every style command that writes takes --dry-run and writes nothing
        run_ok("style", *argv, "--out", tmp_path / "dry" / "x.png", "--dry-run")
    run_ok("style", "evaluate", smoke_style_run, "--out", tmp_path / "dry" / "e", "--dry-run")
    assert not (tmp_path / "dry").exists()
    content = write_png(tmp_path / "in" / "cat.png", 1)
    style = write_png(tmp_path / "in" / "s.png", 2)
    run_ok(
        "style",
        "targets",
        "--content",
        content,
        "--style-image",
        f"red={style}",
        "--out",
        tmp_path / "t",
        "--size",
        "16",
        "--steps",
        "1",
    )
    assert (tmp_path / "t" / "red" / "cat.png").is_file()


@needs_fixture
def test_convert_official_then_sample(tmp_path):
    run_ok("convert-official", CKPT, "--out", tmp_path / "official")
    run_ok("sample", tmp_path / "official", "--steps", "2", "--n", "1", "--out", tmp_path / "s")


def test_info_demo_data_classifier(tmp_path, capsys):
    run_ok("info")
    run_ok("demo")
    run_ok("data", "fetch", "--dataset", "mnist", "--dry-run", "--cache-dir", tmp_path)
    assert not any(tmp_path.iterdir())
    with pytest.raises(SystemExit) as exit_:
        main(["classifier", "--help"])
    assert exit_.value.code == 0


@pytest.mark.parametrize("command, cls", [("repro", "ReproOptions"), ("evaluate", "EvalOptions")])
def test_options_made_from_a_config_take_its_defaults_and_checks(command, cls, capsys):
    import dataclasses

    from linearizer.cli.configargs import config_from_args
    from linearizer.flow.evaluate import EvalOptions
    from linearizer.repro.options import ReproOptions

    config = {"ReproOptions": ReproOptions, "EvalOptions": EvalOptions}[cls]
    args = build_parser().parse_args([command, "RUN", "--out", "o"])
    assert config_from_args(config, args) == config()  # every default is the config's own
    with pytest.raises(SystemExit):
        build_parser().parse_args([command, "--help"])
    shown = " ".join(capsys.readouterr().out.split())  # argparse wraps the help text
    assert all(" ".join(f.metadata["help"].split()) in shown for f in dataclasses.fields(config))
    assert main([command, "RUN", "--out", "o", "--n", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("linearizer: error: ") and "n" in err[0]


def test_init_from_starts_from_a_runs_weights_and_refuses_other_shapes(
    tmp_path, smoke_flow_run, capsys
):
    """``init_from`` loads a run's EMA weights into a network whose options differ (a shift
    bound here) but whose shapes match: with lr = 0 the new run keeps them exactly. A network of
    other shapes is one error line, and nothing is trained."""
    from linearizer.training.runs import load_run

    def train(out, *sets: str) -> int:
        args = [
            a
            for kv in (f"init_from={smoke_flow_run}", "lr=0", "ema_decay=0", "max_steps=1", *sets)
            for a in ("--set", kv)
        ]
        return main(["train", "flow", "--preset", "smoke", *args, "--out", str(out)])

    assert train(tmp_path / "warm", "network.shift_bound=16") == 0
    source = load_run(smoke_flow_run).model.state_dict()
    warm = load_run(tmp_path / "warm").model.state_dict()
    assert source.keys() == warm.keys()
    for key, value in source.items():
        assert torch.equal(value, warm[key]), key
    capsys.readouterr()
    assert train(tmp_path / "wide", "network.hidden=4") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "init_from=" in err[0] and "do not fit" in err[0], err
