"""Latent calibration: the Gaussian transport map, K in every sampler (dense, factored,
multi-step), the fit's defining property, the run folder, ``linearizer calibrate``,
``--no-calibration`` and the pretrained asset (on smoke runs)."""

import json

import numpy as np
import pytest
import torch

from linearizer import pretrained
from linearizer.cli.main import main
from linearizer.errors import LinearizerError
from linearizer.flow import factored, solvers
from linearizer.flow.calibration import (
    FitOptions,
    LatentCalibration,
    fit_calibration,
    gaussian_transport,
    load_calibration,
    save_calibration,
)
from linearizer.flow.spec import SamplerSpec
from linearizer.flow.task import FlowTask, load_images
from linearizer.training.config import resolve
from linearizer.training.runs import load_run
from linearizer.training.trainer import train
from tolerance import assert_near

F64 = torch.float64


def _spd(k: int, seed: int) -> torch.Tensor:
    a = torch.randn(k, k, generator=torch.Generator().manual_seed(seed), dtype=F64)
    return a @ a.T + 0.1 * torch.eye(k, dtype=F64)


def _calibration(d: int = 16, k: int = 3, seed: int = 0) -> LatentCalibration:
    gen = torch.Generator().manual_seed(seed)
    q = torch.linalg.qr(torch.randn(d, k, generator=gen, dtype=F64)).Q
    return LatentCalibration(q, _spd(k, seed + 1))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("calibration") / "run"
    cfg = resolve("flow", "smoke", ["max_steps=4", "progress=false", "calibration_samples=256"])
    train(FlowTask(), cfg, folder)
    return folder


def test_gaussian_transport_maps_one_covariance_onto_the_other():
    s, c = _spd(6, 0), _spd(6, 1)
    m = gaussian_transport(s, c)
    assert torch.equal(m, m.T)
    assert float(torch.linalg.eigvalsh(m)[0]) > 0
    assert_near(m @ s @ m, c, eps_factor=1e4, what="M S M = C")
    assert_near(gaussian_transport(s, s), torch.eye(6, dtype=F64), eps_factor=1e4)
    with pytest.raises(LinearizerError, match="singular"):
        gaussian_transport(torch.zeros(2, 2, dtype=F64), c[:2, :2])


def test_k_acts_as_one_matrix_on_rows_on_dense_and_on_factored_b():
    cal = _calibration()
    k = cal.matrix()
    q, m = cal.basis, cal.core
    assert_near(
        k, torch.eye(16, dtype=F64) + q @ (m - torch.eye(3, dtype=F64)) @ q.T, eps_factor=100
    )
    z = torch.randn(5, 16, dtype=F64, generator=torch.Generator().manual_seed(2))
    assert_near(cal.apply_rows(z), z @ k.T, eps_factor=100)
    b = torch.randn(16, 16, dtype=F64, generator=torch.Generator().manual_seed(3))
    assert_near(cal.compose(b), k @ b, eps_factor=100)
    gen = torch.Generator().manual_seed(4)
    fb = factored.FactoredMatrix(0.3, *torch.randn(2, 16, 4, dtype=F64, generator=gen))
    composed = cal.compose(fb)
    assert isinstance(composed, factored.FactoredMatrix) and composed.width == 4 + 3
    assert_near(composed.to_dense(), k @ fb.to_dense(), eps_factor=100)


def test_bad_calibrations_are_refused():
    q = torch.zeros(8, 2, dtype=F64)
    with pytest.raises(LinearizerError, match="disagree"):
        LatentCalibration(q, torch.eye(3, dtype=F64))
    with pytest.raises(LinearizerError, match="NaN"):
        LatentCalibration(q, torch.full((2, 2), float("nan"), dtype=F64))


def test_the_fit_gives_samples_the_datas_covariance_in_the_samplers_range(run):
    loaded = load_run(run)
    model, cfg = loaded.model.double(), loaded.config
    images, _ = load_images(cfg, "train")
    opts = FitOptions(sampler=SamplerSpec(steps=6, temperature=1.3), n=200, seed=5)
    cal = fit_calibration(model, images, opts)
    q = cal.basis
    assert_near(q.T @ q, torch.eye(cfg.rank, dtype=F64), eps_factor=100, what="orthonormal")
    # the fit's own draws (same seed) through the calibrated sampler
    gen = torch.Generator().manual_seed(5)
    noise = (1.3 * torch.randn(200, *model.image_shape, generator=gen)).double()
    pick = torch.randperm(len(images), generator=gen)[:200]
    model.calibration = cal
    with torch.no_grad():
        b = model.one_step_matrix(steps=6, final="predict", maps="calibration")
        samples = (model.encode(noise, 0.0) @ b.T) @ q
        data = model.encode(images[pick].double(), 1.0) @ q
    want = torch.cov(data.T)
    assert_near(torch.cov(samples.T), want, eps_factor=1e6, what="calibrated covariance")
    model.calibration = None  # the fit ignores the model's own calibration: same result again
    model.calibration = cal
    again = fit_calibration(model, images, opts)
    assert torch.equal(again.core, cal.core)


def test_its_sampler_applies_k_one_and_multi_step_and_other_samplers_do_not(run):
    model = load_run(run).model.double()
    cal = model.calibration
    assert cal.sampler.schedule == (10, "euler", "predict")  # the smoke run's own sampler
    x0 = torch.randn(4, *model.image_shape, dtype=F64, generator=torch.Generator().manual_seed(6))
    kw = {"steps": 10, "final": "predict", "maps": "calibration"}
    assert cal.applies_to(SamplerSpec(steps=10)) and not cal.applies_to(SamplerSpec())
    for other in ({"steps": 6, "final": "predict"}, {"steps": 10, "final": "skip"}):
        with pytest.raises(LinearizerError, match="fitted for euler T = 10, final predict"):
            model.sample(x0, **other, maps="calibration")
        with torch.no_grad():
            raw = solvers.collapse(model.op, method="euler", dtype=F64, **other)
            plain = model.decode(model.encode(x0, 0.0) @ raw.T, 1.0)
        assert_near(model.sample(x0, **other), plain, eps_factor=1e5, what=f"no K for {other}")
    one = model.sample(x0, **kw)
    multi = model.sample(x0, one_step=False, **kw)
    assert_near(multi, one, eps_factor=1e5, what="one-step = multi-step, calibrated")
    with torch.no_grad():
        raw = solvers.collapse(model.op, steps=10, final="predict", dtype=F64, method="euler")
        want = model.decode(model.calibration.apply_rows(model.encode(x0, 0.0) @ raw.T), 1.0)
    assert_near(one, want, eps_factor=1e5)
    model.calibration = None  # the cached B is dropped with the calibration
    with pytest.raises(LinearizerError, match="holds no latent calibration"):
        model.sample(x0, **kw)
    with pytest.raises(LinearizerError, match="latents"):
        model.calibration = _calibration(d=16)
    model.calibration = cal
    f = model.generator(**kw, dtype=F64)  # still a Linearizer: exactly linear in its spaces
    a, b = x0[:2], x0[2:]
    lhs = f(f.space_x.add(a, b))
    rhs = f.space_y.add(f(a), f(b))
    assert_near(lhs, rhs, eps_factor=1e6, what="additivity")


def test_training_stores_the_calibration_of_the_weights_that_sample(run, tmp_path, capsys):
    meta = json.loads((run / "calibration.json").read_text())
    assert meta["sections"] == ["ema"] and meta["step"] == 4
    assert meta["fit"]["n"] == 256 and meta["fit"]["sampler"]["steps"] == 10
    assert "calibration_seconds" in json.loads((run / "run.json").read_text())["finish"]
    ema, raw = load_run(run), load_run(run, use_ema=False)
    assert (ema.weights, raw.weights) == ("ema", "model")
    assert ema.model.calibration is not None and raw.model.calibration is None
    argv = ["sample", str(run), "--n", "2", "--out", str(tmp_path / "s")]
    assert main(argv + ["--no-ema", "--maps", "calibration"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "linearizer: error: --maps calibration: the run's latent maps were fitted for its EMA "
        "weights, not the raw ones (linearizer calibrate RUN fits both)"
    ]
    assert main(argv + ["--no-ema"]) == 0
    assert main(argv + ["--maps", "calibration"]) == 0
    assert capsys.readouterr().err == ""
    assert load_calibration(run, 3, "ema") is None  # fitted on another checkpoint: not applied
    plain = resolve("flow", "smoke", [])
    assert plain.calibration_samples == 0
    with pytest.raises(LinearizerError, match="calibration_samples"):
        resolve("flow", "smoke", ["calibration_samples=1"])


def test_calibrate_command_fits_a_run_and_sample_can_leave_it_out(run, tmp_path, capsys):
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    for name in ("calibration.json", "calibration.safetensors"):
        (copy / name).unlink()
    assert load_run(copy).model.calibration is None
    assert main(["calibrate", str(copy), "--n", "64", "--steps", "6", "--dry-run"]) == 0
    assert "would calibrate" in capsys.readouterr().out
    assert not (copy / "calibration.json").exists()
    assert main(["calibrate", str(copy), "--n", "64", "--steps", "6"]) == 0
    assert "EMA weights: 2 directions" in capsys.readouterr().out
    assert load_run(copy).model.calibration.sampler.steps == 6
    outs = {}
    for flag in ([], ["--maps", "calibration"]):
        out = tmp_path / ("on" if flag else "off")
        argv = ["sample", str(copy), "--steps", "6", "--n", "3", "--out", str(out), *flag]
        assert main(argv) == 0
        assert ("maps calibration" in capsys.readouterr().out) is bool(flag)
        with np.load(out / "samples.npz") as z:
            outs[bool(flag)] = z["samples"]
            assert json.loads(str(z["meta"]))["spec"]["maps"] == ("calibration" if flag else "none")
    assert not np.allclose(outs[True], outs[False])
    for argv, why in (
        ([str(copy), "--n", "1"], "--n must be >= 2"),
        (["pretrained:mnist"], "ships with its calibration"),
        ([str(tmp_path / "none")], "no such run folder"),
    ):
        assert main(["calibrate", *argv]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and why in err[0]


def test_evaluate_calibrates_the_fitted_sampler_only_and_says_so(run, tmp_path):
    argv = [
        "evaluate",
        str(run),
        "--n",
        "16",
        "--kid-subsets",
        "2",
        "--no-progress",
        "--no-references",
    ]
    assert main(argv + ["--out", str(tmp_path / "a"), "--maps", "calibration"]) == 0
    assert main(argv + ["--out", str(tmp_path / "b")]) == 0
    a, b = (json.loads((tmp_path / x / "results.json").read_text()) for x in "ab")
    assert a["calibration"]["fitted_for"]["steps"] == 10
    assert [r["name"] for r in a["rows"]] == ["method", "authors-grid", "calibration"]
    assert [r["name"] for r in b["rows"]] == ["method", "authors-grid"]
    assert [r["spec"]["maps"] for r in a["rows"]] == ["none", "none", "calibration"]
    assert a["rows"][0]["fid_lenet"] == b["rows"][0]["fid_lenet"]
    assert a["rows"][2]["fid_lenet"] != a["rows"][0]["fid_lenet"]
    assert "maps calibration" in (tmp_path / "a" / "results.md").read_text()
    assert main(argv + ["--out", str(tmp_path / "c"), "--maps", "calibration", "--steps", "4"]) == 2


def test_the_fit_through_a_factored_b_matches_the_dense_one(run, monkeypatch):
    model = load_run(run).model.double()
    images, _ = load_images(load_run(run).config, "train")
    opts = FitOptions(sampler=SamplerSpec(steps=4), n=128)
    dense = fit_calibration(model, images, opts)
    monkeypatch.setattr(factored, "MIN_FACTORED_DIM", 1)
    fact = fit_calibration(model, images, opts)
    model.calibration = fact
    kw = {"steps": 4, "final": "predict", "maps": "calibration"}
    assert isinstance(model.one_step_operator(**kw), factored.FactoredMatrix)
    assert_near(
        model.one_step_operator(**kw).to_dense(),
        dense.compose(solvers.collapse(model.op, steps=4, final="predict", method="euler")),
        eps_factor=1e6,
    )
    # the bases may differ in the sign of each column; K itself may not
    assert_near(fact.matrix(), dense.matrix(), eps_factor=1e6)


def test_a_pretrained_asset_carries_its_calibration(run, tmp_path, monkeypatch):
    root = tmp_path / "assets"
    pretrained.export(run, "tiny", root, {})
    meta = json.loads((root / "tiny.json").read_text())
    assert meta["calibration"]["fit"]["n"] == 256
    monkeypatch.setattr(pretrained, "asset_root", lambda: root)
    monkeypatch.setitem(pretrained.ASSETS, "tiny", "tiny")
    monkeypatch.setenv("LINEARIZER_DATA", str(tmp_path / "cache"))
    back, original = load_run("pretrained:tiny").model, load_run(run).model
    assert back.calibration is not None
    assert_near(
        back.calibration.matrix(),
        original.calibration.matrix(),
        eps_factor=1,
        dtype=torch.float32,
        what="float32 storage",
    )
    cal = back.calibration
    save_calibration(tmp_path, {"model": cal}, 1, FitOptions())
    assert load_calibration(tmp_path, 1, "model") is not None


def test_a_failed_fit_leaves_the_trained_run_usable(tmp_path, monkeypatch):
    import linearizer.flow.task as task

    def refuse(*args, **kwargs):
        raise LinearizerError("the one-step matrix is zero: nothing to calibrate")

    monkeypatch.setattr(task, "fit_calibration", refuse)
    cfg = resolve("flow", "smoke", ["max_steps=2", "progress=false", "calibration_samples=16"])
    with pytest.warns(UserWarning, match="no latent calibration"):
        train(FlowTask(), cfg, tmp_path / "run")
    status = json.loads((tmp_path / "run" / "run.json").read_text())
    assert status["status"] == "finished" and status["finish"]["calibration"].startswith("failed")
    assert load_run(tmp_path / "run").model.calibration is None
