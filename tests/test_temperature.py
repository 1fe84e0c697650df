"""Sampling temperature: x0 ~ N(0, tau^2 I) in the library, the config, ``linearizer sample``,
``linearizer evaluate`` and the pixel-spread calibration (on a smoke run)."""

import json

import numpy as np
import pytest
import torch

from linearizer.cli.main import main
from linearizer.errors import LinearizerError
from linearizer.flow.evaluate import EvalOptions, evaluate_flow
from linearizer.flow.spec import SamplerSpec
from linearizer.flow.task import FlowTask, load_flow_run, load_images
from linearizer.flow.temperature import calibrate_temperature, check_temperature, pixel_spread
from linearizer.training.config import resolve
from linearizer.training.trainer import train


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("temperature") / "run"
    train(FlowTask(), resolve("flow", "smoke", ["max_steps=3", "progress=false"]), folder)
    return folder


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf"), "1"])
def test_bad_temperatures_are_refused(bad):
    with pytest.raises(LinearizerError, match="must be a finite number > 0"):
        check_temperature(bad)


def test_config_records_and_checks_the_temperature():
    assert resolve("flow", "smoke", []).sampler.temperature == 1.0
    assert resolve("flow", "smoke", ["sampler.temperature=1.5"]).sampler.temperature == 1.5
    # the key of runs written before the sampler spec still reads (and sets) the temperature
    assert resolve("flow", "smoke", ["sample_temperature=1.5"]).sampler.temperature == 1.5
    with pytest.raises(LinearizerError, match="temperature"):
        resolve("flow", "smoke", ["sampler.temperature=0"])


def test_pixel_spread_is_the_mean_per_pixel_std():
    x = torch.zeros(4, 1, 2, 2)
    x[:2, 0, 0, 0] = 1.0  # one pixel on in half the images, the others constant
    expected = float(torch.tensor([1.0, 1.0, 0.0, 0.0], dtype=torch.float64).std()) / 4
    assert pixel_spread(x) == pytest.approx(expected, rel=1e-12)
    assert pixel_spread(torch.full((3, 1, 2, 2), 0.5)) == 0.0
    with pytest.raises(LinearizerError, match="batch"):
        pixel_spread(torch.zeros(1, 1, 2, 2))


def test_calibration_recovers_the_temperature_of_its_target_or_stops_at_a_bound(run):
    model, cfg, _ = load_flow_run(run)
    kw = {"n": 64, "spec": SamplerSpec(steps=10)}
    # the calibration's own noise (seed 0) at tau = 1.7 makes a target it can match exactly
    noise = torch.randn(64, *model.image_shape, generator=torch.Generator().manual_seed(0))
    target = model.sample(1.7 * noise, steps=10, final="predict")
    # bisection on log tau over [1/4, 4], 12 halvings: within 4^(2^-12) - 1 = 3.4e-4 of tau
    assert calibrate_temperature(model, target, **kw) == pytest.approx(1.7, rel=1e-3)
    flat = torch.full_like(target[:8], 0.5)
    assert calibrate_temperature(model, flat, **kw) == 0.25  # no spread to reach
    images, _ = load_images(cfg, "train")
    # the 3-step smoke model varies less than its data even at tau = 4: the upper bound
    assert pixel_spread(images) > pixel_spread(model.sample(4 * noise, steps=10, final="predict"))
    assert calibrate_temperature(model, images, **kw) == 4.0


def test_evaluate_flow_draws_scaled_noise(run):
    model, cfg, _ = load_flow_run(run)
    reference, _ = load_images(cfg, "test")
    base = EvalOptions(n=16, batch=8, kid_subsets=2, references=False)
    _, cold = evaluate_flow(model, reference, [("T4", SamplerSpec(steps=4))], base)
    _, hot = evaluate_flow(model, reference, [("T4", SamplerSpec(steps=4, temperature=2.0))], base)
    noise = torch.randn(16, *model.image_shape, generator=torch.Generator().manual_seed(0))
    for tau, got in ((1.0, cold), (2.0, hot)):
        want = model.sample(tau * noise.to(torch.float32), steps=4)
        torch.testing.assert_close(got["T4"], want.float())


def test_sample_command_scales_the_noise_and_refuses_it_with_a_noise_file(run, tmp_path, capsys):
    outs = {}
    for tau in ("1", "2"):
        out = tmp_path / tau
        argv = ["sample", str(run), "--steps", "4", "--n", "3", "--out", str(out)]
        assert main(argv + ["--temperature", tau]) == 0
        with np.load(out / "samples.npz") as z:
            outs[tau] = z["samples"]
    assert "temperature 2" in capsys.readouterr().out
    assert not np.allclose(outs["1"], outs["2"])
    np.save(tmp_path / "x0.npy", np.zeros((2, 1, 8, 8), dtype=np.float32))
    code = main(
        [
            "sample",
            str(run),
            "--noise",
            str(tmp_path / "x0.npy"),
            "--temperature",
            "2",
            "--out",
            str(tmp_path / "n"),
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--noise file is used as given" in err[0]
    assert main(["sample", str(run), "--temperature", "0", "--out", str(tmp_path / "z")]) == 2
    assert "finite number > 0" in capsys.readouterr().err


def test_evaluate_command_defaults_to_the_runs_temperature(run, tmp_path):
    config = json.loads((run / "config.json").read_text())
    assert config["sampler"]["temperature"] == 1.0
    argv = [
        "evaluate",
        str(run),
        "--n",
        "16",
        "--steps",
        "4",
        "--kid-subsets",
        "2",
        "--no-progress",
        "--no-references",
    ]
    assert main(argv + ["--out", str(tmp_path / "a")]) == 0
    assert main(argv + ["--out", str(tmp_path / "b"), "--temperature", "1.5"]) == 0
    a, b = (json.loads((tmp_path / x / "results.json").read_text()) for x in "ab")
    assert a["spec"]["temperature"] == 1.0 and b["spec"]["temperature"] == 1.5
    assert "temperature 1.5" in b["title"]
    assert a["rows"][0]["fid_lenet"] != b["rows"][0]["fid_lenet"]


def test_explorer_draws_at_the_runs_temperature(run, tmp_path):
    import shutil

    from linearizer.explore import Explorer, open_run

    hot = tmp_path / "hot"
    shutil.copytree(run, hot)
    config = json.loads((hot / "config.json").read_text())
    config["sampler"]["temperature"] = 2.0
    (hot / "config.json").write_text(json.dumps(config))
    cold_app, hot_app = Explorer(open_run(run), k=2), Explorer(open_run(hot), k=2)
    assert (cold_app.flow.spec.temperature, hot_app.flow.spec.temperature) == (1.0, 2.0)
    # the same weights and seed: only the noise scale differs, so the samples do too
    assert not np.array_equal(cold_app.flow.sample_picture(5), hot_app.flow.sample_picture(5))
