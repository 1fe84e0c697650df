"""A class-conditional model's recommended guidance: the rule that picks it, where a run folder
records it, and the flow commands taking it when ``--class`` comes without ``--guidance``."""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from linearizer import pretrained
from linearizer.cli.main import main
from linearizer.errors import LinearizerError
from linearizer.flow.build import build_flow
from linearizer.flow.conditional import recommended_guidance, write_guidance
from linearizer.flow.config import SMOKE
from linearizer.io import write_json
from linearizer.training.checkpoint import save_checkpoint
from linearizer.training.runs import GUIDANCE_FILE, load_run, read_guidance


def make_run(folder, conditional=True, w=None):
    """A tiny untrained flow run folder (8x8, 3 classes when ``conditional``), with a
    recommended guidance ``w`` recorded when given."""
    cfg = dataclasses.replace(SMOKE, conditional=conditional, classes=3 if conditional else 0)
    torch.manual_seed(0)
    model = build_flow(cfg)
    write_json(folder / "config.json", cfg.to_dict())
    write_json(folder / "run.json", {"kind": "flow", "status": "finished", "step": 1})
    save_checkpoint(folder, 1, model, config=cfg.to_dict(), model_kind="flow")
    if w is not None:
        results = {"n": 30, "recommended_guidance": {"w": w, "rule": "test"}}
        write_guidance(folder, results, "test")
    return folder


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("guidance")
    made = {}
    for name, kw in {
        "recommended": {"w": 0.75},
        "none": {},
        "plain": {"conditional": False},
    }.items():
        (root / name).mkdir()
        made[name] = make_run(root / name, **kw)
    return made


def sample(run, tmp_path, *extra):
    out = tmp_path / "s"
    assert main(["sample", str(run), "--n", "2", *extra, "--out", str(out)]) == 0
    return json.loads((out / "samples.json").read_text())


def test_the_rule_takes_the_smallest_passing_weight():
    rows = [
        {"w": 0.0, "lenet_accuracy_min": 0.83},
        {"w": 2.0, "lenet_accuracy_min": 0.985},
        {"w": 1.0, "lenet_accuracy_min": 0.97},
        {"w": 0.5, "lenet_accuracy_min": 0.954},
    ]
    assert recommended_guidance(rows) == 1.0
    assert recommended_guidance(rows, threshold=0.98) == 2.0
    assert recommended_guidance(rows, threshold=0.99) is None
    assert recommended_guidance([]) is None
    sweep = [{"spec": {"guidance": 0.5}, "lenet_accuracy_min": 0.99}]  # a sweep row's spec
    assert recommended_guidance(sweep) == 0.5


def test_the_run_folder_records_it_and_load_run_reads_it(runs):
    assert load_run(runs["recommended"]).recommended_guidance == 0.75
    assert load_run(runs["none"]).recommended_guidance is None
    record = json.loads((runs["recommended"] / GUIDANCE_FILE).read_text())
    assert record == {"w": 0.75, "rule": "test", "source": "test", "n": 30}


def test_a_damaged_record_is_one_line(tmp_path):
    (tmp_path / GUIDANCE_FILE).write_text('{"w": "high"}')
    with pytest.raises(LinearizerError, match="finite number or null"):
        read_guidance(tmp_path)
    (tmp_path / GUIDANCE_FILE).write_text('{"w": null}')
    assert read_guidance(tmp_path) is None


def test_class_without_guidance_takes_the_recommended(runs, tmp_path, capsys):
    meta = sample(runs["recommended"], tmp_path, "--class", "1")
    assert meta["spec"]["component"] == 1 and meta["spec"]["guidance"] == 0.75
    assert "recommended" in meta["guidance"]
    out = capsys.readouterr().out
    assert "guidance 0.75: the model's recommended" in out


def test_an_explicit_guidance_wins(runs, tmp_path, capsys):
    for given in ("0", "2"):
        meta = sample(runs["recommended"], tmp_path, "--class", "1", "--guidance", given)
        assert meta["spec"]["guidance"] == float(given) and "guidance" not in meta
    assert "recommended" not in capsys.readouterr().out


def test_no_class_or_no_recommendation_keeps_zero(runs, tmp_path):
    meta = sample(runs["recommended"], tmp_path)  # the class mixture
    assert meta["spec"]["guidance"] == 0.0 and "guidance" not in meta
    meta = sample(runs["none"], tmp_path, "--class", "2")
    assert meta["spec"]["guidance"] == 0.0 and "guidance" not in meta
    meta = sample(runs["plain"], tmp_path)
    assert meta["spec"]["guidance"] == 0.0


def test_swap_takes_it_too(runs, tmp_path, capsys):
    images = tmp_path / "x.npy"
    np.save(images, torch.rand(2, 1, 8, 8).numpy())
    argv = ["swap", str(runs["recommended"]), "--from", "0", "--to", "1", "--images", str(images)]
    assert main([*argv, "--out", str(tmp_path / "w")]) == 0
    assert "guidance 0.75: the model's recommended" in capsys.readouterr().out
    assert main([*argv, "--guidance", "0", "--out", str(tmp_path / "z")]) == 0
    assert "recommended" not in capsys.readouterr().out


def test_the_help_names_the_default(capsys):
    with pytest.raises(SystemExit):
        main(["sample", "--help"])
    assert "recommended guidance when --class is given" in " ".join(capsys.readouterr().out.split())


def test_evaluate_records_the_recommendation_of_the_runs_own_sampler(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    run = make_run(tmp_path / "run", w=0.75)
    argv = ["evaluate", str(run), "--n", "30", "--guidances", "0,1", "--no-progress"]
    assert main([*argv, "--steps", "20", "--out", str(tmp_path / "other")]) == 0
    assert "not recorded" in capsys.readouterr().out
    assert read_guidance(run) == 0.75  # another sampler's sweep leaves the record alone
    assert main([*argv, "--out", str(tmp_path / "e")]) == 0
    results = json.loads((tmp_path / "e" / "results.json").read_text())
    chosen = results["recommended_guidance"]
    assert chosen["w"] == recommended_guidance(results["rows"]) and "LeNet" in chosen["rule"]
    record = json.loads((run / GUIDANCE_FILE).read_text())
    assert record["w"] == chosen["w"] and record["source"].endswith("results.json")
    assert load_run(run).recommended_guidance == chosen["w"]


def test_the_shipped_model_carries_the_measured_choice(monkeypatch, tmp_path):
    """pretrained:mnist-cond ships the w that benchmarks/guidance_choice.py chose by the rule."""
    shipped = pretrained.info("mnist-cond")["recommended_guidance"]
    root = Path(__file__).resolve().parents[1]
    measured = json.loads((root / shipped["source"]).read_text())
    assert shipped["w"] == measured["chosen_w"] and shipped["rule"] == measured["rule"]
    assert recommended_guidance(measured["rows"], measured["threshold"]) == shipped["w"]
    monkeypatch.setenv("LINEARIZER_DATA", str(tmp_path))
    assert load_run("pretrained:mnist-cond").recommended_guidance == shipped["w"]
    assert load_run("pretrained:mnist").recommended_guidance is None
