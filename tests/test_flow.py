"""One-step flow matching end to end on the smoke preset: training, exact collapse, inversion,
the sampling commands and their bad-input paths."""

import copy
import json
import math

import numpy as np
import pytest
import torch

from linearizer.cli.main import main
from linearizer.errors import LinearizerError
from linearizer.flow.inversion import condition_number, interpolate, round_trip
from linearizer.flow.model import DATA, NOISE
from linearizer.flow.objective import draw_noise, flow_loss
from linearizer.flow.task import FlowTask, load_flow_run
from linearizer.training.config import resolve
from linearizer.training.trainer import train
from tolerance import assert_near, rel_err


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("flow") / "run"
    train(FlowTask(), resolve("flow", "smoke", ["max_steps=8", "progress=false"]), folder)
    return folder


@pytest.fixture(scope="module")
def model64(run):
    model, _, _ = load_flow_run(run)
    return copy.deepcopy(model).double()


def psnr(a, b):
    mse = (a - b).pow(2).mean().item()
    return math.inf if mse == 0 else -10 * math.log10(mse)


# float64 end to end: one step and many steps agree to a few epsilons (measured: <= 2 eps of
# the images' scale), so the bar sits at rounding: a float32 cast anywhere gives ~1e8 eps.
ROUNDING = 100


@pytest.mark.parametrize("form", ["dense", "factored"])
@pytest.mark.parametrize("final", ["skip", "predict"])
@pytest.mark.parametrize("method", ["euler", "rk4", "rk4-authors"])
def test_one_step_equals_multi_step_float64(model64, method, final, form):
    x0 = torch.randn(16, *model64.image_shape, dtype=torch.float64)
    with torch.no_grad():
        one = model64.sample(x0, steps=100, method=method, final=final, form=form)
        multi = model64.sample(x0, steps=100, method=method, final=final, one_step=False)
    assert one.dtype == multi.dtype == torch.float64
    assert_near(one, multi, eps_factor=ROUNDING)


def test_final_predict_is_the_x1_prediction_of_the_last_state(model64):
    """``final="predict"`` = decode(A(1 - 1/T) z_skip): the jump at exactly t = 1 - 1/T."""
    steps = 50
    x0 = torch.randn(4, *model64.image_shape, dtype=torch.float64)
    with torch.no_grad():
        z_skip = model64.one_step_matrix(steps=steps, final="skip") @ model64.encode(x0, NOISE).T
        a = model64.op.matrix(1.0 - 1.0 / steps, dtype=torch.float64)
        want = model64.decode((a @ z_skip).T, DATA)
        got = model64.sample(x0, steps=steps, final="predict")
    assert_near(got, want, eps_factor=ROUNDING)


@pytest.mark.parametrize("one_step", [True, False])
def test_sample_builds_no_autograd_graph(model64, one_step):
    x0 = torch.randn(4, *model64.image_shape, dtype=torch.float64, requires_grad=True)
    x = model64.sample(x0, steps=5, one_step=one_step, final="skip")
    assert x.grad_fn is None and not x.requires_grad


def test_authors_rk_matrix_misses_true_rk4(model64):
    x0 = torch.randn(16, *model64.image_shape, dtype=torch.float64)
    with torch.no_grad():
        authors = model64.sample(x0, steps=100, method="rk4-authors", final="skip")
        rk4 = model64.sample(x0, steps=100, method="rk4", one_step=False, final="skip")
    assert 0 < (authors - rk4).abs().max() and psnr(authors, rk4) < 120


def test_inversion_round_trip_float64(model64):
    x1 = torch.rand(6, *model64.image_shape, dtype=torch.float64)
    with torch.no_grad():
        b = model64.one_step_matrix(steps=100, final="skip")
        _, back = round_trip(model64, x1, b)
    assert_near(back, x1, eps_factor=ROUNDING * condition_number(b))  # measured 6 eps, cond 3


@pytest.mark.parametrize("space", ["noise", "latent"])
def test_interpolation_runs_from_the_first_image_to_the_second(model64, space):
    xa, xb = torch.rand(2, 1, *model64.image_shape, dtype=torch.float64)
    with torch.no_grad():
        b = model64.one_step_matrix(steps=100, final="skip")
        frames = interpolate(model64, xa, xb, b, n=5, space=space)
        bar = ROUNDING * condition_number(b)
        assert frames.shape == (5, *model64.image_shape)
        assert_near(frames[0], xa[0], eps_factor=bar)
        assert_near(frames[-1], xb[0], eps_factor=bar)
        # a quarter of the way: the straight line of the chosen space, at alpha = 1/4
        if space == "latent":
            za, zb = model64.encode(xa, DATA), model64.encode(xb, DATA)
            want = model64.decode(0.75 * za + 0.25 * zb, DATA)
        else:
            na, nb = model64.invert(xa, b), model64.invert(xb, b)
            want = model64.sample(0.75 * na + 0.25 * nb, steps=100, final="skip")
        assert_near(frames[1], want[0], eps_factor=bar)
        assert rel_err(frames[1], frames[3]) > 1e-3  # not a constant path


def test_one_step_matrix_is_cached_until_weights_change(run):
    model, _, _ = load_flow_run(run)
    b1 = model.one_step_matrix(steps=20, final="skip")
    assert model.one_step_matrix(steps=20, final="skip") is b1
    with torch.no_grad():
        next(model.op.parameters()).add_(0.01)
    assert not torch.equal(model.one_step_matrix(steps=20, final="skip"), b1)


def test_loss_uses_exact_inverses_with_dropout_in_train_mode(run):
    model, cfg, _ = load_flow_run(run)
    model = copy.deepcopy(model).double().train()
    x1 = torch.rand(4, *model.image_shape, dtype=torch.float64)
    loss, logs = flow_loss(model, x1, draw_noise(x1, torch.Generator().manual_seed(0)))
    loss.backward()
    assert math.isfinite(loss.item()) and set(logs) == {"latent", "x0_rec", "x1_rec", "x1_pred_rec"}
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
    z = model.encode(x1, DATA)
    assert_near(model.decode(z, DATA), x1, eps_factor=1e4)
    assert rel_err(model.encode(x1, NOISE), z) > 1e-3


def test_sample_command_writes_npz_and_grid(run, tmp_path):
    assert main(["sample", str(run), "--out", str(tmp_path), "--n", "5", "--steps", "10"]) == 0
    with np.load(tmp_path / "samples.npz") as z:
        assert z["samples"].shape == (5, 1, 8, 8) and z["samples"].dtype == np.float32
    assert (tmp_path / "samples.png").stat().st_size > 0


def test_given_noise_reproduces_seeded_samples(run, tmp_path):
    noise = torch.randn(3, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    np.save(tmp_path / "noise.npy", noise.numpy())
    main(["sample", str(run), "--out", str(tmp_path / "a"), "--noise", str(tmp_path / "noise.npy")])
    main(["sample", str(run), "--out", str(tmp_path / "b"), "--n", "3", "--seed", "0"])
    a = np.load(tmp_path / "a" / "samples.npz")["samples"]
    b = np.load(tmp_path / "b" / "samples.npz")["samples"]
    assert np.array_equal(a, b)


def test_invert_and_interpolate_commands(run, tmp_path):
    x = np.random.default_rng(0).random((2, 1, 8, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    assert (
        main(["invert", str(run), "--images", str(tmp_path / "x.npy"), "--out", str(tmp_path)]) == 0
    )
    assert (tmp_path / "inversion.png").is_file()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["sample", "{missing}", "--out", "{tmp}"], "no such run folder"),
        (["sample", "{run}", "--out", "{tmp}", "--method", "heun"], None),
        (["sample", "{run}", "--out", "{tmp}", "--noise", "{bad_noise}"], "noise"),
        (["sample", "{run}", "--out", "{tmp}", "--noise", "{nan_noise}"], "NaN"),
        (["invert", "{run}", "--out", "{tmp}", "--images", "{bad_noise}"], "shape"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(run, tmp_path, capsys, argv, message):
    np.save(tmp_path / "bad.npy", np.zeros((2, 1, 5, 5), np.float32))
    nan = np.zeros((2, 1, 8, 8), np.float32)
    nan[0, 0, 0, 0] = np.nan
    np.save(tmp_path / "nan.npy", nan)
    fill = {
        "missing": str(tmp_path / "nope"),
        "tmp": str(tmp_path / "o"),
        "run": str(run),
        "bad_noise": str(tmp_path / "bad.npy"),
        "nan_noise": str(tmp_path / "nan.npy"),
    }
    args = [a.format(**fill) for a in argv]
    with pytest.raises(SystemExit) if message is None else _no_raise():
        code = main(args)
        assert code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0]


class _no_raise:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_checkpoint_of_another_model_is_refused(run, tmp_path):
    other = tmp_path / "other"
    train(
        FlowTask(), resolve("flow", "smoke", ["max_steps=2", "hidden=4", "progress=false"]), other
    )
    (other / "config.json").write_text((run / "config.json").read_text())
    with pytest.raises(LinearizerError, match="do not fit|architecture|signature"):
        load_flow_run(other)


def test_unknown_config_key_and_nan_loss_stop_cleanly(tmp_path, capsys):
    assert main(["train", "flow", "--preset", "smoke", "--set", "nosuch=1", "--dry-run"]) == 2
    assert "unknown config key 'nosuch'" in capsys.readouterr().err
    folder = tmp_path / "nan"
    code = main(
        [
            "train",
            "flow",
            "--preset",
            "smoke",
            "--out",
            str(folder),
            "--set",
            "lr=1e30",
            "--set",
            "max_steps=30",
            "--set",
            "ckpt_every=1",
            "--set",
            "progress=false",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "non-finite" in err.lower()


@pytest.mark.parametrize("extra", [[], ["time_groups=3"]])
def test_flow_run_resumes_bit_for_bit(tmp_path, extra):
    """8 steps straight, or 4 then resumed to 8: the same weights, EMA (and its counter),
    optimizer state, random streams and task state, bit for bit (also with times shared by
    runs of rows)."""
    from linearizer.training.checkpoint import latest_checkpoint, read_checkpoint

    common = ["progress=false", "ckpt_every=4", "ema_warmup=3", "log_every=1", "threads=1", *extra]

    def cfg(steps):
        return resolve("flow", "smoke", [*common, f"max_steps={steps}"])

    train(FlowTask(), cfg(8), tmp_path / "straight")
    train(FlowTask(), cfg(4), tmp_path / "resumed")
    train(FlowTask(), cfg(8), tmp_path / "resumed", resume=True)
    (meta_a, ta), (meta_b, tb) = (
        read_checkpoint(latest_checkpoint(tmp_path / run)) for run in ("straight", "resumed")
    )
    assert meta_a["step"] == meta_b["step"] == 8
    assert ta.keys() == tb.keys()
    assert {k.split(".")[0] for k in ta} >= {"model", "ema", "optim", "rng"}
    different = [k for k in ta if not torch.equal(ta[k], tb[k])]
    assert not different, different
    for key in ("ema", "optimizer", "rng", "extra"):
        assert meta_a.get(key) == meta_b.get(key), key
    assert meta_a["ema"], "the EMA state (with its update counter) is checkpointed"


@pytest.mark.parametrize(
    "flags, kwargs",
    [
        (["--final", "skip", "--method", "rk4"], {"final": "skip", "method": "rk4"}),
        (["--multi-step", "--method", "rk4-authors"], {"one_step": False, "method": "rk4-authors"}),
        (["--dtype", "float32", "--form", "factored"], {"dtype": "float32", "form": "factored"}),
    ],
)
def test_sample_command_passes_its_flags_to_the_model(run, tmp_path, flags, kwargs):
    """What ``linearizer sample`` writes equals ``OneStepFlow.sample`` with the same spec."""
    x0 = torch.randn(3, 1, 8, 8, generator=torch.Generator().manual_seed(5))
    np.save(tmp_path / "noise.npy", x0.numpy())
    argv = [
        "sample",
        str(run),
        "--out",
        str(tmp_path / "o"),
        "--steps",
        "12",
        "--noise",
        str(tmp_path / "noise.npy"),
        *flags,
    ]
    assert main(argv) == 0
    with np.load(tmp_path / "o" / "samples.npz") as z:
        got = torch.from_numpy(z["samples"])
        meta = json.loads(str(z["meta"]))
    model, cfg, _ = load_flow_run(run)
    form = kwargs.pop("form", "auto")
    one_step = kwargs.pop("one_step", True)
    spec = cfg.sampler.replace(steps=12, **kwargs)
    assert meta["spec"] == spec.to_dict()
    if spec.dtype == "float64":  # the command runs the networks in the spec's dtype too
        model = copy.deepcopy(model).double()
    x = x0.to(spec.torch_dtype)
    with torch.no_grad():
        want = model.sample(x, spec, one_step=one_step, form=form).float()
        other = model.sample(x, spec.replace(final="predict" if spec.final == "skip" else "skip"))
    assert_near(got, want, eps_factor=10)
    assert rel_err(other.float(), got) > 1e-4


def test_bfloat16_conditioners_train_and_are_recorded(tmp_path):
    """``conditioner_precision=bfloat16`` changes the training losses once the conditioners
    leave their zero start (step 2 on), keeps them close to float32's, and run.json records the
    precision that ran (``auto`` resolved for this machine)."""
    import json

    from linearizer.invertible.precision import resolve_precision
    from linearizer.training.tracking import read_metrics

    common = ["max_steps=3", "progress=false", "threads=1", "log_every=1"]
    losses = {}
    for precision in ("float32", "bfloat16", "auto"):
        folder = tmp_path / precision
        train(
            FlowTask(),
            resolve("flow", "smoke", [*common, f"conditioner_precision={precision}"]),
            folder,
        )
        recorded = json.loads((folder / "run.json").read_text())["conditioner_precision"]
        assert recorded == resolve_precision(precision, torch.device("cpu"))
        losses[precision] = [r["loss"] for r in read_metrics(folder) if "loss" in r]
    full, low = losses["float32"], losses["bfloat16"]
    assert len(full) == len(low) == 3 and all(math.isfinite(v) for v in low)
    assert low[0] == full[0]  # zero-initialised conditioners: exactly zero in any precision
    assert low[2] != full[2]
    assert abs(low[2] - full[2]) <= 0.05 * abs(full[2])
