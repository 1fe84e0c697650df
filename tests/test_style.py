"""Style banks: exact mixing algebra, operators, offline targets, training and the CLI."""

from __future__ import annotations

import sys

import pytest
import torch

from linearizer.cli.main import main
from linearizer.errors import LinearizerError
from linearizer.invertible import cpu_network
from linearizer.io import read_json
from linearizer.style import (
    GatysSettings,
    IndexStyleNet,
    StyleBank,
    apply_operator,
    load_image,
    make_targets,
    save_image,
)
from linearizer.style.evaluate import kernel_linearity_error, mixing_errors, strip_metrics
from tolerance import assert_near

STYLES = ["a", "b", "c"]


def _bank(operator: str, dtype=torch.float64, flags=(1.0, 1.0), seed=0) -> StyleBank:
    """A bank whose g is genuinely nonlinear (coupling outputs perturbed away from zero)."""
    torch.manual_seed(seed)
    g = cpu_network(3, num_blocks=2, hidden=8)
    bank = StyleBank(
        g,
        STYLES,
        operator=operator,
        kernel_size=4,
        init_scale=0.2,
        x_flag=flags[0],
        y_flag=flags[1],
    )
    with torch.no_grad():
        for p in g.parameters():
            p.add_(0.1 * torch.randn_like(p))
        if bank.mixes is not None:
            bank.mixes.add_(0.2 * torch.randn_like(bank.mixes))
    bank = bank.to(dtype).eval()
    with torch.no_grad():
        bank.stylise(torch.rand(2, 3, 16, 16, dtype=dtype), 0)  # ActNorm's data init
    return bank


def _x(dtype=torch.float64, n=2, seed=1) -> torch.Tensor:
    return torch.rand(n, 3, 16, 16, generator=torch.Generator().manual_seed(seed), dtype=dtype)


# ----------------------------------------------------------------------------- algebra


@pytest.mark.parametrize("operator", ["depthwise", "channelmix"])
def test_mixing_is_exact_in_float64(operator):
    bank, x = _bank(operator), _x()
    with torch.no_grad():
        f = [bank.stylise(x, s) for s in range(3)]
        w = [0.2, -0.5, 1.1]
        mixed = bank.mix(x, dict(zip(STYLES, w)))
        induced = bank.space_y.lincomb(w, f)
        # the mixture differs from every single style, so the check is not vacuous
        assert (mixed - f[0]).abs().max() > 1e-3
    assert (mixed - induced).norm() / induced.norm() <= 1e-10
    assert mixing_errors(bank, x[:1], torch.float64)["rel_err_general"] <= 1e-10


@pytest.mark.parametrize("operator", ["depthwise", "channelmix"])
def test_mixing_is_exact_to_rounding_in_float32(operator):
    bank = _bank(operator)
    result = mixing_errors(bank, _x()[:1], torch.float32)
    assert result["dtype"] == "float32" and result["cases"] > 20
    assert result["general_cases"] > result["cases"]
    assert 0 < result["rel_err"] <= 1e-5 and result["rel_err_general"] <= 1e-5


def test_kernels_combine_linearly():
    bank, x = _bank("depthwise"), _x()
    assert kernel_linearity_error(bank, x) <= 1e-12
    z = torch.randn(2, 3, 8, 8, dtype=torch.float64)
    k1, k2 = bank.kernels[0].detach(), bank.kernels[1].detach()
    lhs = apply_operator(z, 0.3 * k1 - 2.0 * k2)
    rhs = 0.3 * apply_operator(z, k1) - 2.0 * apply_operator(z, k2)
    assert_near(lhs, rhs, eps_factor=1e4)
    assert kernel_linearity_error(_bank("channelmix"), x) <= 1e-12


def test_strength_endpoints_and_interpolation_line():
    bank, x = _bank("channelmix"), _x()
    with torch.no_grad():
        assert_near(bank.strength(x, "b", 0.0), x, eps_factor=1e6)  # g_x = g_y: identity
        assert_near(bank.strength(x, "b", 1.0), bank.stylise(x, "b"), eps_factor=1e4)
        frames, alphas = bank.interpolate(x[:1], "a", "c", 5)
        assert_near(frames[0], bank.stylise(x[:1], "a")[0], eps_factor=1e4)
        assert_near(frames[-1], bank.stylise(x[:1], "c")[0], eps_factor=1e4)
        metrics = strip_metrics(bank, frames, alphas)
    assert metrics["path_dev_g"] <= 1e-10


def test_bank_generator_matches_and_has_exact_adjoint():
    bank, x = _bank("channelmix", flags=(1.0, 0.0)), _x()
    weights = {"a": 0.4, "c": 0.6}
    f = bank.generator(weights, image_size=(16, 16), identity=0.25)
    with torch.no_grad():
        assert_near(f(x), bank.apply_weights(x, weights, 0.25), eps_factor=1e4)
    op = bank.operator(weights, 0.25, (16, 16))
    z, y = (
        torch.randn(2, op.in_features, dtype=torch.float64),
        torch.randn(2, op.in_features, dtype=torch.float64),
    )
    lhs, rhs = (op(z) * y).sum(), (z * op.transpose_apply(y)).sum()
    assert_near(lhs, rhs, eps_factor=1e3, scale=float((op(z) * y).abs().sum()))


def test_index_model_hits_styles_at_integer_indices():
    torch.manual_seed(0)
    net = (
        IndexStyleNet(
            cpu_network(3, 1, hidden=8),
            STYLES,
            emb_dim=8,
            hidden=16,
            depth=1,
            operator="channelmix",
        )
        .double()
        .eval()
    )
    with torch.no_grad():
        for p in net.hyper.parameters():
            p.add_(0.05 * torch.randn_like(p))
        x = _x()
        frames, _ = net.interpolate(x[:1], 0, 2, 3)
        assert_near(frames[1], net.stylise(x[:1], 1)[0], eps_factor=1e4)  # t passes b
        assert_near(net.at_index(x, 2.0), net.stylise(x, "c"), eps_factor=1e4)


def test_bad_style_inputs_raise():
    bank = _bank("depthwise")
    with pytest.raises(LinearizerError, match="unknown style"):
        bank.stylise(_x(), "nope")
    with pytest.raises(LinearizerError, match="one per style"):
        bank.mix(_x(), [1.0, 2.0])
    with pytest.raises(LinearizerError, match="distinct"):
        StyleBank(cpu_network(3, 1, hidden=4), ["a", "a"])


# ----------------------------------------------------------------------------- targets


def _write_png(path, seed, size=16):
    img = torch.rand(3, size, size, generator=torch.Generator().manual_seed(seed))
    return str(save_image(img, path))


def test_targets_on_a_tiny_image(tmp_path):
    content = _write_png(tmp_path / "in" / "cat.png", 0)
    styles = {
        "red": _write_png(tmp_path / "in" / "s1.png", 1),
        "blue": _write_png(tmp_path / "in" / "s2.png", 2),
    }
    out = tmp_path / "targets"
    manifest = make_targets(
        [content], styles, out, size=16, settings=GatysSettings(steps=3, pyramid=2)
    )
    assert manifest["styles"] == styles
    for name in styles:
        y = load_image(out / name / "cat.png", 16)
        assert y.shape == (3, 16, 16) and 0 <= float(y.min()) and float(y.max()) <= 1
    assert (out / "content" / "cat.png").is_file() and (out / "targets.json").is_file()


def test_missing_scikit_image_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "skimage", None)
    monkeypatch.setitem(sys.modules, "skimage.data", None)
    with pytest.raises(LinearizerError, match="scikit-image is not installed"):
        load_image("skimage:chelsea", 16)


# ----------------------------------------------------------------------------- training + CLI


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("style")
    content = _write_png(root / "cat.png", 0, size=32)
    for i, name in enumerate(["red", "blue"]):
        _write_png(root / "targets" / name / "cat.png", 10 + i, size=32)
    run = root / "run"
    args = [
        "train",
        "style",
        "--preset",
        "smoke",
        "--content",
        content,
        "--styles",
        str(root / "targets"),
        "--out",
        str(run),
    ]
    assert main(args) == 0
    return root, run


def test_smoke_training_and_commands(smoke_run, capsys):
    root, run = smoke_run
    assert (run / "checkpoints").is_dir()
    out = root / "apply.png"
    assert (
        main(
            ["style", "apply", str(run), "--style", "blue", "--strength", "0.5", "--out", str(out)]
        )
        == 0
    )
    assert load_image(out, 32).shape == (3, 32, 32)
    assert (
        main(
            [
                "style",
                "mix",
                str(run),
                "--weights",
                "red=0.3,blue=0.7",
                "--out",
                str(root / "mix.png"),
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "style",
                "interpolate",
                str(run),
                "--from",
                "red",
                "--to",
                "blue",
                "--n",
                "3",
                "--out",
                str(root / "strip.png"),
            ]
        )
        == 0
    )
    assert (root / "strip.png").is_file()
    assert main(["style", "evaluate", str(run), "--frames", "3", "--out", str(root / "ev")]) == 0
    results = read_json(root / "ev" / "results.json")
    assert results["mix"]["rel_err"] <= 1e-5 and results["mix_float64"]["rel_err_general"] <= 1e-10
    assert "index_interpolation" in results and (root / "ev" / "REPORT.md").is_file()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["style", "mix", "RUN", "--weights", "red:0.5", "--out", "x.png"], "NAME=NUMBER"),
        (["style", "apply", "RUN", "--style", "green", "--out", "x.png"], "unknown style"),
        (["style", "apply", "NO_SUCH_RUN", "--style", "red", "--out", "x.png"], "no such run"),
        (
            ["train", "style", "--preset", "smoke", "--content", "missing.png", "--styles", "."],
            "no such content image",
        ),
        (
            [
                "style",
                "interpolate",
                "RUN",
                "--from",
                "red",
                "--to",
                "blue",
                "--n",
                "1",
                "--out",
                "x.png",
            ],
            "n must be",
        ),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(smoke_run, capsys, argv, message, tmp_path):
    _, run = smoke_run
    argv = [str(run) if a == "RUN" else str(tmp_path / a) if a == "x.png" else a for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("linearizer: error:") and "\n" not in err and message in err


def test_vgg_features_from_a_user_weights_file(tmp_path):
    from linearizer.io import save_tensors
    from linearizer.style.targets import make_features

    gen = torch.Generator().manual_seed(0)
    widths, tensors, c_in, index = (
        [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512],
        {},
        3,
        0,
    )
    for w in widths:
        if w == "M":
            index += 1
            continue
        tensors[f"features.{index}.weight"] = 0.01 * torch.randn(w, c_in, 3, 3, generator=gen)
        tensors[f"features.{index}.bias"] = torch.zeros(w)
        c_in, index = w, index + 2
    path = tmp_path / "vgg19.safetensors"
    save_tensors(path, tensors)
    features = make_features(f"vgg19:{path}")
    out = features(torch.rand(1, 3, 16, 16))
    assert [f.shape[1] for f in out] == [64, 128, 256, 512, 512]
    del tensors["features.21.weight"]
    save_tensors(path, tensors)
    with pytest.raises(LinearizerError, match="features.21.weight"):
        make_features(f"vgg19:{path}")
