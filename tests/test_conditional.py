"""Class-conditional one-step flow: exact per-class generators, exact guidance, inversion given
a class, the class swap, training with labels, and the commands over a conditional run."""

import copy
import json
import math

import numpy as np
import pytest
import torch

from linearizer.cli.main import main
from linearizer.errors import LinearizerError
from linearizer.flow.build import build_flow
from linearizer.flow.conditional import class_accuracy
from linearizer.flow.spec import SamplerSpec
from linearizer.flow.task import FlowTask, class_frequencies, load_flow_run
from linearizer.operators import TimeLoRA
from linearizer.testing import LinearizerTests
from linearizer.training.config import resolve
from linearizer.training.trainer import train
from tolerance import assert_near, eps

F64 = torch.float64
CLASSES = 3


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cond") / "run"
    cfg = resolve(
        "flow", "smoke", ["max_steps=4", "progress=false", "conditional=true", f"classes={CLASSES}"]
    )
    train(FlowTask(), cfg, folder)
    return folder


def perturbed(model):
    """Float64, class embeddings and every other weight moved: a few smoke steps leave the
    embeddings near their zero init, which would make every class the same."""
    model = copy.deepcopy(model).double()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.op.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=gen, dtype=F64))
    return model


@pytest.fixture(scope="module")
def model(run):
    return perturbed(load_flow_run(run)[0])


def db(a, b):
    """``20 log10(max|a| / max|a - b|)``: agreement in dB of the signal's peak."""
    err = float((a - b).abs().max())
    return math.inf if err == 0 else 20 * math.log10(float(a.abs().max()) / err)


def test_classes_give_different_operators(model):
    with torch.no_grad():
        a0, a1, null = (model.op.matrix(0.5, c=c) for c in (0, 1, CLASSES))
    assert float((a0 - a1).abs().max()) > 1e-3 * float(a0.abs().max())
    assert float((a0 - null).abs().max()) > 1e-3 * float(a0.abs().max())


@pytest.mark.parametrize("method", ["euler", "rk4"])
@pytest.mark.parametrize("label,guidance", [(0, 0.0), (1, 0.0), (2, 2.0), (0, 4.0), (1, 0.5)])
def test_one_step_equals_multi_step_per_class_and_guidance(model, method, label, guidance):
    spec = SamplerSpec(steps=40, method=method, component=label, guidance=guidance)
    x0 = torch.randn(6, *model.image_shape, dtype=F64)
    with torch.no_grad():
        z0 = model.encode(x0, 0.0)
        one = z0 @ model.one_step_matrix(spec).T
        multi = model.integrate(z0, spec)
    assert db(one, multi) >= 120


def test_guided_matrix_is_the_guided_multi_step_velocity(model):
    """B_{c,w} collapses (1 + w) v_c - w v_null: one Euler step by hand against the solver."""
    spec = SamplerSpec(steps=2, final="skip", component=1, guidance=2.0)
    z0 = torch.randn(3, model.dim, dtype=F64)
    a = 3 * model.op.matrix(0.0, c=1) - 2 * model.op.matrix(0.0, c=CLASSES)
    h = 0.5  # z(h) = z0 + h (A z0 - z0) / (1 - 0)
    assert_near(model.integrate(z0, spec), z0 + h * (z0 @ a.T - z0), eps_factor=100)


def test_inversion_given_a_class_and_the_swap_are_exact(model):
    spec = SamplerSpec(steps=30, final="skip", component=2)
    x0 = torch.randn(5, *model.image_shape, dtype=F64)
    x = model.sample(x0, spec)
    b = model.one_step_matrix(spec)
    back = model.invert(x, b)
    assert_near(model.encode(back, 0.0), model.encode(x0, 0.0), eps_factor=1e5)
    y = model.swap(x, spec, 0)
    assert db(y, x) < 80  # another class: another image
    assert_near(model.swap(y, spec.replace(component=0), 2), x, eps_factor=1e5)
    # the swap keeps the noise: y is what class 0's generator makes of x's noise
    assert_near(y, model.sample(x0, spec.replace(component=0)), eps_factor=1e5)


def test_mixture_samples_each_row_with_its_class(model):
    spec = SamplerSpec(steps=20)
    x0 = torch.randn(6, *model.image_shape, dtype=F64)
    labels = torch.tensor([0, 2, 1, 0, 2, 1])
    mixed = model.sample(x0, spec, labels=labels)
    for c in range(CLASSES):
        rows = labels == c
        assert_near(mixed[rows], model.sample(x0[rows], spec.replace(component=c)), eps_factor=100)


def test_refusals(model, run):
    with pytest.raises(LinearizerError, match="give one class"):
        model.one_step_matrix(SamplerSpec(steps=10))
    with pytest.raises(LinearizerError, match="out of range"):
        model.one_step_matrix(SamplerSpec(steps=10, component=CLASSES))
    with pytest.raises(LinearizerError, match="integer >= 0"):
        SamplerSpec(component=-1)
    with pytest.raises(LinearizerError, match="not fitted for class-conditional"):
        from linearizer.flow.calibration import fit_calibration

        fit_calibration(model, torch.rand(4, *model.image_shape), n=4)
    unconditional = build_flow(resolve("flow", "smoke"))
    for spec in (SamplerSpec(steps=10, component=1), SamplerSpec(steps=10, guidance=1.0)):
        with pytest.raises(LinearizerError, match="need a class-conditional model"):
            unconditional.one_step_matrix(spec)
    with pytest.raises(LinearizerError, match="not class-conditional"):
        TimeLoRA(4, 1, emb_dim=8, hidden=8)(torch.randn(2, 4), 0.5, 1)


def test_class_frequencies_and_accuracy():
    freq = class_frequencies(torch.tensor([0, 0, 1, 2]), 4)
    assert freq.tolist() == [0.5, 0.25, 0.25, 0.0]
    with pytest.raises(LinearizerError, match="outside classes"):
        class_frequencies(torch.tensor([0, 5]), 3)
    acc = class_accuracy(torch.tensor([1, 1, 0]), torch.tensor([1, 0, 0]), 3)
    assert acc[:2] == [0.5, 1.0] and math.isnan(acc[2])


def test_training_draws_labels_and_records_the_prior(run):
    model, cfg, _ = load_flow_run(run)
    assert cfg.conditional and model.classes == CLASSES
    # a float32 sum of normalised weights: one rounding per term at most
    prior = model.class_prior
    assert math.isclose(float(prior.sum()), 1.0, rel_tol=4 * len(prior) * eps(prior.dtype))
    assert model.op.u_class.weight.abs().sum() > 0  # the embeddings trained


def test_unconditional_stream_is_unchanged_by_the_option(tmp_path):
    """conditional=false draws nothing more: a pinned smoke run trains to the same loss."""
    out = []
    for name in ("a", "b"):
        cfg = resolve("flow", "smoke", ["max_steps=2", "progress=false"])
        train(FlowTask(), cfg, tmp_path / name)
        lines = (tmp_path / name / "metrics.jsonl").read_text().splitlines()
        out.append([json.loads(x).get("loss") for x in lines if '"loss"' in x])
    assert out[0] == out[1]


def test_cpu_preset_with_conditional_true_says_which_preset():
    with pytest.raises(LinearizerError, match="cpu-cond"):
        resolve("flow", "cpu", ["conditional=true"])
    assert resolve("flow", "cpu-cond").conditional


class TestGuidedGenerator(LinearizerTests):
    """The property suite on one class's guided generator g_data^-1(B_{c,w} g_noise(.))."""

    rtol = 1e-8

    @pytest.fixture(autouse=True)
    def _model(self, model):
        self.flow = model

    def build(self):
        f = self.flow.generator(SamplerSpec(steps=20, final="skip", component=1, guidance=1.5))
        return f.g_x, f.A, f.g_y

    def sample_x(self, n):
        return torch.randn(n, *self.flow.image_shape, dtype=F64)


def test_cli_sample_class_swap_and_evaluate(run, tmp_path, capsys):
    assert (
        main(
            [
                "sample",
                str(run),
                "--class",
                "1",
                "--guidance",
                "2",
                "--steps",
                "20",
                "--n",
                "6",
                "--out",
                str(tmp_path / "s"),
            ]
        )
        == 0
    )
    meta = json.loads((tmp_path / "s" / "samples.json").read_text())
    assert meta["spec"]["component"] == 1 and meta["spec"]["guidance"] == 2.0
    assert meta["labels"] == [1] * 6
    assert (
        main(
            [
                "sample",
                str(run),
                "--steps",
                "20",
                "--n",
                "7",
                "--seed",
                "3",
                "--out",
                str(tmp_path / "m"),
            ]
        )
        == 0
    )
    with np.load(tmp_path / "m" / "samples.npz") as f:
        labels = f["labels"]
    assert len(labels) == 7 and set(labels.tolist()) <= set(range(CLASSES))
    capsys.readouterr()
    assert (
        main(
            [
                "swap",
                str(run),
                "--from",
                "1",
                "--to",
                "0,2",
                "--steps",
                "20",
                "--n",
                "3",
                "--out",
                str(tmp_path / "w"),
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "round-trip PSNR" in text and (tmp_path / "w" / "swap.png").exists()
    with np.load(tmp_path / "w" / "swap.npz") as f:
        assert f["swapped"].shape[:2] == (3, 2)
    assert (
        main(
            [
                "evaluate",
                str(run),
                "--n",
                "40",
                "--steps",
                "20",
                "--guidances",
                "0,1",
                "--no-progress",
                "--batch",
                "20",
                "--out",
                str(tmp_path / "e"),
            ]
        )
        == 0
    )
    res = json.loads((tmp_path / "e" / "results.json").read_text())
    assert [r["name"] for r in res["rows"]] == ["w=0", "w=1"]
    assert len(res["rows"][0]["lenet_accuracy"]) == CLASSES
    assert res["rows"][1]["spec"]["guidance"] == 1.0


def test_cli_refusals(run, tmp_path, capsys):
    assert main(["swap", str(run), "--from", "9", "--to", "0", "--out", str(tmp_path)]) != 0
    assert "--from must be a class in 0..2" in capsys.readouterr().err
    assert main(["swap", str(run), "--from", "0", "--to", "x", "--out", str(tmp_path)]) != 0
    assert "--to takes classes" in capsys.readouterr().err
    assert main(["sample", str(run), "--class", "7", "--out", str(tmp_path)]) != 0
    assert "out of range" in capsys.readouterr().err
