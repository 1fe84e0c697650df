"""Latent transport: the coupling flow's exact inverse and likelihood, tau's invertibility and
its action on the sampler's range only, what the fit learns (a dependence between coordinates
that no linear map of a Gaussian has), and the transport inside a calibrated sampler:
one-step = multi-step, the generator still a Linearizer, the run folder, ``linearizer
calibrate`` and the pretrained asset."""

import json
import math

import pytest
import torch

from linearizer import pretrained
from linearizer.cli.main import main
from linearizer.errors import LinearizerError
from linearizer.flow.calibration import (
    FitOptions,
    fit_calibration,
    load_calibration,
    save_calibration,
)
from linearizer.flow.model import TransportedSide
from linearizer.flow.spec import SamplerSpec
from linearizer.flow.task import FlowTask, load_images
from linearizer.flow.transport import Mixing, TransportOptions, VectorFlow, fit_transport
from linearizer.io import load_tensors
from linearizer.training.config import resolve
from linearizer.training.runs import load_run
from linearizer.training.trainer import train
from tolerance import assert_near

F64 = torch.float64


# pretrained:mnist's transport (the asset of 2026-12-04) as this code computes it: F on three
# Gaussian rows (their first three coordinates), log |det dF^-1/du| there, and the means of eight
# multi-step samples with it, all in float64. (Entries saved under older names: the Mixing test
# below.)
SHIPPED_FLOW = [
    -1.1288657879861081,
    -1.0110923143717883,
    0.015677428507455904,
    1.6971051940010546,
    1.4300883393987762,
    0.5984546074804906,
    1.2256091926989803,
    0.720001675657457,
    0.29542481258231135,
]
SHIPPED_LOGDET = [-0.3369181212639214, 12.360045862247022, -0.72682743838917]
SHIPPED_SAMPLE_MEANS = [
    0.06858308867619371,
    0.1747922375844266,
    0.1580685969891325,
    0.10477498659475076,
    0.09955760211751062,
    0.18750781801792832,
    0.16015002185297467,
    0.0987628864389644,
]


def _random_flow(dim: int, seed: int = 0) -> VectorFlow:
    flow = VectorFlow(dim, blocks=4, hidden=16, seed=seed).double()
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in flow.parameters():
            p.copy_(0.3 * torch.randn(p.shape, generator=gen, dtype=F64))
    return flow


def _banana(n: int, seed: int) -> torch.Tensor:
    """Rows ``(a, a^2 + noise)``: uncorrelated coordinates with a dependence no linear map of a
    Gaussian has (for jointly Gaussian ``y``, ``corr(y_1, y_0^2) = 0``)."""
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(n, generator=gen, dtype=F64)
    return torch.stack([a, a**2 - 1 + 0.2 * torch.randn(n, generator=gen, dtype=F64)], dim=1)


def _square_dependence(y: torch.Tensor) -> float:
    return float(torch.corrcoef(torch.stack([y[:, 1], (y[:, 0] - y[:, 0].mean()) ** 2]))[0, 1])


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("transport") / "run"
    cfg = resolve(
        "flow",
        "smoke",
        ["max_steps=4", "progress=false", "calibration_samples=256", "transport_steps=40"],
    )
    train(FlowTask(), cfg, folder)
    return folder


@pytest.mark.parametrize("dim", [1, 2, 7])
def test_the_coupling_flow_inverts_exactly_and_its_likelihood_is_a_density(dim):
    flow = _random_flow(dim)
    u = torch.randn(6, dim, dtype=F64, generator=torch.Generator().manual_seed(2))
    assert_near(flow.inverse(flow(u)), u, eps_factor=1e3, what="F^-1 F = id")
    if dim == 1:  # one coordinate: the likelihood integrates to one on a fine grid
        grid = torch.linspace(-12, 12, 20001, dtype=F64)[:, None]
        with torch.no_grad():
            y, logdet = flow.inverse_logdet(grid)
            density = torch.exp(-0.5 * y[:, 0] ** 2 - 0.5 * math.log(2 * math.pi) + logdet)
        mass = float(torch.trapezoid(density, grid[:, 0]))
        assert abs(mass - 1) < 1e-3
    plain = VectorFlow(dim, blocks=3, hidden=8, mixing=False)
    assert torch.equal(plain(u.float()), u.float())  # starts as the identity
    fresh = VectorFlow(dim, blocks=3, hidden=8).double()  # a rotation (float32 factors)
    assert_near(
        fresh(u).norm(dim=1),
        u.norm(dim=1),
        eps_factor=1e2,
        dtype=torch.float32,
        what="a fresh flow keeps lengths",
    )


def test_tau_inverts_and_moves_only_the_samplers_range():
    gen = torch.Generator().manual_seed(3)
    q = torch.linalg.qr(torch.randn(12, 3, generator=gen, dtype=F64)).Q
    source = torch.randn(400, 3, generator=gen, dtype=F64)
    tau = fit_transport(q, source, source**3, TransportOptions(steps=30, hidden=16))
    z = source[:8] @ q.T + 0.1 * torch.randn(8, 12, generator=gen, dtype=F64)
    w = tau(z)
    assert_near(tau.inverse(w), z, eps_factor=1e4, what="tau^-1 tau = id")
    outside = torch.eye(12, dtype=F64) - q @ q.T
    assert_near(w @ outside, z @ outside, eps_factor=1e3, what="the complement is untouched")
    with pytest.raises(LinearizerError, match=r"\[n, 3\]"):
        fit_transport(q, source[:, :2], source)
    with pytest.raises(LinearizerError, match=">= 10 data rows"):
        fit_transport(q, source, source[:5])
    with pytest.raises(LinearizerError, match="must be >= 1"):
        fit_transport(q, source, source, TransportOptions(steps=0))


def test_the_fit_gives_gaussian_samples_a_dependence_no_linear_map_can():
    gen = torch.Generator().manual_seed(5)
    q = torch.eye(4, 2, dtype=F64)
    source = 0.5 * torch.randn(2000, 2, generator=gen, dtype=F64) + 1
    target = _banana(4000, 6)
    tau = fit_transport(q, source, target, TransportOptions(steps=300, hidden=32, blocks=6))
    with torch.no_grad():
        moved = tau(torch.cat([source, torch.zeros(2000, 2, dtype=F64)], dim=1))[:, :2]
    assert _square_dependence(target) > 0.9
    assert abs(_square_dependence(source)) < 0.1
    assert _square_dependence(moved) > 0.7
    assert float((moved.mean(0) - target.mean(0)).abs().max()) < 0.2


def test_a_calibrated_sampler_applies_tau_one_and_multi_step_and_stays_a_linearizer(run):
    model = load_run(run).model.double()
    cal = model.calibration
    assert cal.transport is not None
    kw = {"steps": 10, "final": "predict", "maps": "transport"}
    x0 = torch.randn(4, *model.image_shape, dtype=F64, generator=torch.Generator().manual_seed(7))
    one = model.sample(x0, **kw)
    assert_near(
        model.sample(x0, one_step=False, **kw),
        one,
        eps_factor=1e6,
        what="one-step = multi-step with tau",
    )
    with torch.no_grad():
        b = model.one_step_matrix(**kw)
        want = model.decode(cal.transport(model.encode(x0, 0.0) @ b.T), 1.0)
    assert_near(one, want, eps_factor=1e5)
    f = model.generator(**kw, dtype=F64)
    assert isinstance(f.g_y, TransportedSide)
    assert_near(f(x0), one, eps_factor=1e6, what="the generator is the sampler")
    a, c = x0[:2], x0[2:]
    assert_near(
        f(f.space_x.add(a, c)),
        f.space_y.add(f(a), f(c)),
        eps_factor=1e7,
        what="additivity in the transported space",
    )
    x1 = one[:2]
    assert_near(f.g_y.inverse(f.g_y(x1)), x1, eps_factor=1e6, what="tau^-1 o g_data inverts")
    other = model.sample(x0, steps=6, final="skip")  # other samplers run without tau
    with torch.no_grad():
        b6 = model.one_step_matrix(steps=6, final="skip")
        plain = model.decode(model.encode(x0, 0.0) @ b6.T, 1.0)
    assert_near(other, plain, eps_factor=1e5)


def test_the_run_stores_the_transport_and_calibrate_refits_or_drops_it(run, tmp_path, capsys):
    import shutil

    meta = json.loads((run / "calibration.json").read_text())
    assert meta["fit"]["transport_steps"] == 40
    # training fits the weights that sample by default (the EMA ones); calibrate fits both
    assert load_calibration(run, 4, "ema").transport is not None
    assert load_calibration(run, 4, "model") is None
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    argv = ["calibrate", str(copy), "--n", "64", "--steps", "6"]
    assert main(argv + ["--transport-steps", "0"]) == 0
    assert "latent transport" not in capsys.readouterr().out
    assert load_run(copy).model.calibration.transport is None
    assert main(argv + ["--transport-steps", "20", "--dry-run"]) == 0
    assert "latent transport 20 steps" in capsys.readouterr().out
    assert main(argv + ["--transport-steps", "20"]) == 0
    assert "latent transport" in capsys.readouterr().out
    assert load_run(copy).model.calibration.transport is not None
    assert load_run(copy, use_ema=False).model.calibration.transport is not None
    assert main(argv + ["--transport-steps", "-1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--transport-steps must be >= 0" in err[0]
    with pytest.raises(LinearizerError, match="transport_steps"):
        resolve("flow", "smoke", ["transport_steps=5"])  # needs calibration_samples


def test_the_fit_is_reproducible_and_a_pretrained_asset_carries_the_transport(
    run, tmp_path, monkeypatch
):
    loaded = load_run(run)
    images, _ = load_images(loaded.config, "train")
    opts = FitOptions(sampler=SamplerSpec(steps=6), n=128, transport_steps=10)
    a, b = (fit_calibration(loaded.model, images, opts).transport for _ in range(2))
    z = torch.randn(3, loaded.model.dim, generator=torch.Generator().manual_seed(8))
    assert torch.equal(a(z), b(z))
    root = tmp_path / "assets"
    pretrained.export(run, "tiny", root, {})
    assert json.loads((root / "tiny.json").read_text())["calibration"]["fit"]["transport_steps"]
    monkeypatch.setattr(pretrained, "asset_root", lambda: root)
    monkeypatch.setitem(pretrained.ASSETS, "tiny", "tiny")
    monkeypatch.setenv("LINEARIZER_DATA", str(tmp_path / "cache"))
    back = load_run("pretrained:tiny").model.calibration.transport
    original = loaded.model.calibration.transport
    with torch.no_grad():
        w = original(z)
    # the flow's weights are stored in half precision, the linear parts in float32
    assert_near(back(z), w, eps_factor=10, dtype=torch.float16, what="asset round trip")
    assert not torch.equal(back(z), w)


def test_sampling_at_another_temperature_than_the_fit_says_so(run, tmp_path, capsys):
    argv = ["sample", str(run), "--maps", "transport", "--n", "2"]
    assert main(argv + ["--out", str(tmp_path / "a")]) == 0
    assert "note:" not in capsys.readouterr().err
    assert main(argv + ["--out", str(tmp_path / "b"), "--temperature", "1.3"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "note: the latent maps were fitted at temperature 1; sampling at 1.3 "
        "(linearizer calibrate RUN --temperature 1.3 refits them)"
    ]


def test_a_calibration_recorded_before_the_mixing_layers_still_loads(run, tmp_path):
    import shutil

    loaded = load_run(run)
    images, _ = load_images(loaded.config, "train")
    opts = FitOptions(
        sampler=SamplerSpec(steps=6), n=128, transport_steps=10, transport_mixing=False
    )
    cal = fit_calibration(loaded.model, images, opts)
    assert cal.transport.flow.mixes is None
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    save_calibration(copy, {"ema": cal}, 4, opts)
    meta = json.loads((copy / "calibration.json").read_text())
    del meta["fit"]["transport_mixing"]  # the record of an earlier version
    (copy / "calibration.json").write_text(json.dumps(meta))
    back = load_calibration(copy, 4, "ema").transport
    z = torch.randn(3, loaded.model.dim, generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        assert torch.equal(back(z), cal.transport(z))


def test_a_mixing_saved_under_its_old_entry_names_loads_to_the_same_map():
    """Transports saved before Mixing shared InvConv1x1's LU factors named two entries
    ``sign`` and ``log_scale`` (now ``sign_s`` and ``log_s``)."""
    mix = Mixing(5, seed=3).double()
    renamed = {"sign_s": "sign", "log_s": "log_scale"}
    old = {renamed.get(k, k): v for k, v in mix.state_dict().items()}
    assert set(old) == {"order", "sign", "lower", "upper", "log_scale"}
    back = Mixing(5, seed=4).double()
    back.load_state_dict(old)
    x = torch.randn(4, 5, dtype=F64)
    assert torch.equal(back(x), mix(x)) and torch.equal(back.inverse(x), mix.inverse(x))


def test_the_shipped_transport_loads_and_gives_what_it_gave(monkeypatch, tmp_path):
    monkeypatch.setenv("LINEARIZER_DATA", str(tmp_path))
    stored = load_tensors(pretrained.asset_paths("mnist")[0])
    assert "calibration.transport.flow.mixes.0.log_s" in stored
    model = pretrained.from_pretrained("mnist")
    flow = model.calibration.transport.flow
    u = torch.randn(3, 64, generator=torch.Generator().manual_seed(1), dtype=F64)
    x0 = torch.randn(8, 1, 32, 32, generator=torch.Generator().manual_seed(0))
    kw = {"maps": "transport", "one_step": False}  # B of 1024 columns costs more than 8 rows
    with torch.no_grad():
        y, (_, logdet) = flow(u), flow.inverse_logdet(u)
        low = model.sample(x0, **kw).mean(dim=(1, 2, 3))
        high = model.double().sample(x0.double(), dtype=F64, **kw).mean(dim=(1, 2, 3))
    # the transport's flow runs in float64 (its weights are float16 values), so these hold to
    # float64 rounding on any CPU
    assert_near(y[:, :3].flatten(), torch.tensor(SHIPPED_FLOW, dtype=F64), eps_factor=1e3)
    assert_near(logdet, torch.tensor(SHIPPED_LOGDET, dtype=F64), eps_factor=1e3)
    # the float64 sampler still computes the U-Net's time frequencies in float32 (see
    # time_features), and scalar and vector pow round them differently: a float32 bound
    shipped = torch.tensor(SHIPPED_SAMPLE_MEANS, dtype=F64)
    assert_near(high, shipped, eps_factor=16, dtype=torch.float32, what="float64 sample means")
    # float32 samples: each latent passes dot products over D = 1024 terms (D eps worst case)
    # through four chained maps, whatever order a CPU's kernels sum them in
    bound = 4 * model.dim
    assert_near(
        low.double(), high, eps_factor=bound, dtype=torch.float32, scale=1.0, what="float32 means"
    )
