"""The explorer: its handlers called directly, then the Gradio page served on 127.0.0.1 in this
process and driven through gradio_client, one test per tab (smoke runs made by the CLI)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from linearizer.cli.main import main
from linearizer.errors import LinearizerError
from linearizer.explore import MAX_UPLOAD_BYTES, Explorer, open_run
from linearizer.explore.images import drawing_array, picture, read_upload, to_model_image
from linearizer.flow.task import FlowTask
from linearizer.style.images import save_image
from linearizer.training.config import resolve
from linearizer.training.trainer import train

F64_EPS = torch.finfo(torch.float64).eps
F32_EPS = torch.finfo(torch.float32).eps
# `.[dev]` brings gradio_client (through trackio) but not gradio: only gradio proves the extra.
APP_EXTRA = "needs the [app] extra: pip install -e '.[app]'"
needs_app = pytest.mark.skipif(importlib.util.find_spec("gradio") is None, reason=APP_EXTRA)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("explore")
    quiet = ["--set", "progress=false"]
    assert main(["train", "flow", "--preset", "smoke", "--out", str(root / "flow"), *quiet]) == 0
    assert (
        main(["train", "projective", "--preset", "smoke", "--out", str(root / "proj"), *quiet]) == 0
    )
    for i, path in enumerate(["cat.png", "t/red/cat.png", "t/blue/cat.png"]):
        img = torch.rand(3, 32, 32, generator=torch.Generator().manual_seed(i))
        save_image(img, root / "s" / path)
    for name, bank in (("style", "operators"), ("index", "index")):
        content, styles = str(root / "s" / "cat.png"), str(root / "s" / "t")
        assert (
            main(
                [
                    "train",
                    "style",
                    "--preset",
                    "smoke",
                    "--content",
                    content,
                    "--styles",
                    styles,
                    "--out",
                    str(root / name),
                    "--set",
                    f"bank={bank}",
                ]
            )
            == 0
        )
    return root


@pytest.fixture(scope="module")
def flow(runs):
    return Explorer(open_run(runs / "flow"), k=4)


CLASSES = 3


def _mixture_explorer(folder: Path, overrides: list[str]) -> Explorer:
    """A smoke mixture run's explorer, its operator's weights moved so that the components
    differ (four smoke steps leave their embeddings near their zero init)."""
    train(
        FlowTask(), resolve("flow", "smoke", ["max_steps=4", "progress=false", *overrides]), folder
    )
    run = open_run(folder)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in run.model.op.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=gen))
    return Explorer(run, k=4)


@pytest.fixture(scope="module")
def cond(tmp_path_factory):
    """A class-conditional smoke run (3 classes)."""
    folder = tmp_path_factory.mktemp("explore-cond") / "run"
    return _mixture_explorer(folder, ["conditional=true", f"classes={CLASSES}"])


def _digit(bright_page: bool = True) -> np.ndarray:
    """A drawn '1' as a sketchpad gives it: RGBA, ink opaque, the rest transparent."""
    img = np.zeros((120, 120, 4), np.uint8)
    img[20:100, 55:68] = (0, 0, 0, 255) if bright_page else (255, 255, 255, 255)
    return img


def _png(path, array) -> str:
    Image.fromarray(array).save(path)
    return str(path)


# ----------------------------------------------------------------------------- pictures


def test_drawing_is_centred_light_on_dark():
    x = to_model_image(_digit(), (1, 16, 16))
    assert x.shape == (1, 1, 16, 16) and float(x.min()) >= 0 and float(x.max()) <= 1
    assert float(x[0, 0, :, 7:9].mean()) > 0.5  # the stroke, in the centre, is light
    assert float(x[0, 0, :, :3].max()) == 0.0  # the margin is dark
    assert drawing_array({"composite": np.zeros((30, 30, 4), np.uint8)}) is None  # blank canvas


def test_uploads_that_are_not_images_or_too_large_are_refused(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("not a picture")
    with pytest.raises(LinearizerError, match="notes.txt: not an image"):
        read_upload(text)
    big = tmp_path / "big.png"
    big.write_bytes(b"\x89PNG" + bytes(MAX_UPLOAD_BYTES))
    with pytest.raises(LinearizerError, match="big.png: .* over the 2 MiB limit"):
        read_upload(big)
    ok = read_upload(_png(tmp_path / "ok.png", np.full((9, 7), 200, np.uint8)))
    assert ok.shape == (9, 7, 3)


# ----------------------------------------------------------------------------- handlers


def test_flow_tabs_and_generate(flow):
    assert flow.tabs == ["Generate", "Walk", "Invert & edit"]
    one, multi, text = flow.flow.generate(3, 4, 10, "euler")
    assert one.shape == multi.shape and one.dtype == np.uint8
    assert "PSNR" in text
    with pytest.raises(LinearizerError, match="T must be in"):
        flow.flow.generate(0, 1, 0, "euler")


def test_walk_is_the_induced_linear_combination(flow):
    f = flow.flow
    still, base, _ = f.walk(0, [0.0] * f.k)
    assert np.array_equal(still, base)
    moved, base2, text = f.walk(0, [2.0, 0.0, -1.0, 0.0])
    assert np.array_equal(base, base2) and not np.array_equal(moved, base)
    assert "+2.00·" in text and "u3" in text and "u2" not in text
    z1, _, combination = f.walk_latents(0, torch.tensor([2.0, 0.0, -1.0, 0.0]))
    scale = float(z1.abs().max())  # B(z0 + Σ c s v) = B z0 + Σ c s σ u, in float64
    torch.testing.assert_close(combination, z1, rtol=0, atol=1e3 * F64_EPS * scale)
    with pytest.raises(LinearizerError, match="4 finite coefficients"):
        f.walk(0, [1.0])


def test_invert_regenerates_the_drawing(flow):
    f = flow.flow
    seen, noise, again, text = f.invert(_digit())
    x = f.model_input(_digit())
    x0 = f.model.invert(x, f.b)
    assert x.dtype == torch.float64  # the views run the networks in float64, like B
    back = f.model.decode(f.model.encode(x0, 0.0) @ f.b.T, 1.0)
    torch.testing.assert_close(back, x, rtol=0, atol=1e4 * F64_EPS)
    assert seen.shape == again.shape and "max |f(x0) − x|" in text
    strip_noise, strip_latent, _ = f.interpolate(_digit(), f.sample_picture(1), 5)
    assert (
        strip_noise.shape == strip_latent.shape and strip_noise.shape[1] > 4 * strip_noise.shape[0]
    )


def test_unconditional_views_have_no_classes(flow):
    f = flow.flow
    assert f.components == 0 and not f.guided and f.class_choices == []
    assert "Class-conditional" not in flow.describe()
    with pytest.raises(LinearizerError, match="not class-conditional"):
        f.generate(0, 1, 10, "euler", "1")
    with pytest.raises(LinearizerError, match="guidance needs a class-conditional run"):
        f.walk(0, [0.0] * f.k, None, 1.0)


def _x0(f, seed: int, count: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return (f.spec.temperature * torch.randn(count, *f.shape, generator=gen)).to(f.param)


def test_conditional_generate_one_class_and_the_mixture(cond):
    f = cond.flow
    assert cond.tabs == ["Generate", "Walk", "Invert & edit"]
    assert f.class_choices == ["mixture", "0", "1", "2"] and f.default_class == "mixture"
    assert "Class-conditional: 3 classes" in cond.describe()
    one, multi, text = f.generate(0, 4, 10, "euler", "1", 2.0)
    assert "class 1, guidance 2**" in text and "PSNR" in text
    spec = f.spec.replace(steps=10, method="euler", component=1, guidance=2.0)
    with torch.no_grad():
        want = f.model.sample(_x0(f, 0, 4), spec)
    assert np.array_equal(one, picture(want, 4))
    assert not np.array_equal(one, f.generate(0, 4, 10, "euler", "0", 2.0)[0])
    mixed, _, text = f.generate(0, 4, 10, "euler", "mixture", 0.0)
    labels = f.model.draw_labels(4, torch.Generator().manual_seed(0))
    assert f"classes {', '.join(map(str, labels.tolist()))} drawn from the training" in text
    with torch.no_grad():
        want = f.model.sample(
            _x0(f, 0, 4), spec.replace(component=None, guidance=0.0), labels=labels
        )
    assert np.array_equal(mixed, picture(want, 4))
    for label, w, message in (
        ("7", 0.0, "class 7 is out of range"),
        ("x", 0.0, "class must be 'mixture' or 0..2"),
        ("1", float("nan"), "guidance must be a finite number"),
    ):
        with pytest.raises(LinearizerError, match=message):
            f.generate(0, 1, 10, "euler", label, w)


def test_conditional_walk_is_exact_per_class(cond):
    f = cond.flow
    c = [2.0, 0.0, -1.0, 0.0]
    moved, base, text = f.walk(0, c, "2", 1.0)
    assert "class 2, guidance 1**" in text and not np.array_equal(moved, base)
    z1, base_z, combination = f.walk_latents(0, torch.tensor(c), "2", 1.0)
    scale = float(z1.abs().max())
    torch.testing.assert_close(combination, z1, rtol=0, atol=1e3 * F64_EPS * scale)
    other = f.walk_latents(0, torch.tensor(c), "0", 1.0)[1]
    assert not torch.allclose(other, base_z)  # another class: another B
    drawn = int(f.model.draw_labels(1, torch.Generator().manual_seed(5))[0])
    _, base_m, text = f.walk(5, c, "mixture", 0.0)
    assert f"class {drawn}** (class drawn from the training frequencies for seed 5)" in text
    assert np.array_equal(base_m, f.walk(5, c, str(drawn), 0.0)[1])


def test_conditional_invert_and_swap(cond):
    f = cond.flow
    sample = f.sample_picture(0, "1")
    seen, noise, again, text = f.invert(sample, "1")
    assert "class 1:" in text and "(exact up to rounding)" in text
    strip, text = f.swap(sample, "1", "all")
    row = torch.zeros(1 + CLASSES, *f.shape)  # the picture, then every class
    assert strip.shape == picture(row, nrow=1 + CLASSES).shape
    assert "t = 0, 1, 2" in text and "Swapped back to class 1" in text
    assert "(exact up to rounding)" in text
    one, _ = f.swap(sample, "1", "2")
    x = f.model_input(sample)
    with torch.no_grad():
        want = f.model.swap(x, f.walk_spec.replace(component=1), 2)
    assert np.array_equal(one, picture(torch.cat([x, want]), nrow=2))
    assert float((want - x).abs().max()) > 1e-3  # another class: another picture
    _, _, text = f.interpolate(sample, f.sample_picture(1, "1"), 4, "1")
    assert "4 frames" in text
    with pytest.raises(LinearizerError, match="pick the image's class .0..2., not the mixture"):
        f.invert(sample, "mixture")
    with pytest.raises(LinearizerError, match="class 7 is out of range"):
        f.swap(sample, "1", "7")


@pytest.fixture(scope="module")
def mix(tmp_path_factory):
    """A mixture of 3 components found without labels."""
    folder = tmp_path_factory.mktemp("explore-mix") / "run"
    return _mixture_explorer(folder, [f"components={CLASSES}"])


def test_a_mixture_without_labels_is_picked_by_component(mix):
    """Its components are picked like classes, named components, and have no guidance."""
    f = mix.flow
    assert f.components == CLASSES and not f.guided and f.noun == "component"
    assert f.class_choices == ["mixture", "0", "1", "2"]
    text = mix.describe()
    assert "Class-conditional" not in text and "3 components found without labels" in text
    _, _, text = f.generate(0, 4, 10, "euler", "mixture")
    drawn = f.model.draw_labels(4, torch.Generator().manual_seed(0))
    assert f"components {', '.join(map(str, drawn.tolist()))} drawn from the learned" in text
    with pytest.raises(LinearizerError, match="guidance needs a class-conditional run"):
        f.walk(0, [0.0] * f.k, "1", 1.0)
    sample = f.sample_picture(0, "1")
    strip, text = f.swap(sample, "1", "all")
    assert "drawn as each component" in text and "Swapped back to component 1" in text
    with pytest.raises(LinearizerError, match="component 7 is out of range"):
        f.swap(sample, "1", "7")
    with pytest.raises(LinearizerError, match="pick the image's component .0..2., not the mix"):
        f.invert(sample, "mixture")


def test_projective_idempotence(runs):
    ex = Explorer(open_run(runs / "proj"))
    assert ex.tabs == ["Project / restore"]
    p = ex.projective
    shown, once, twice, text = p.project(p.model_input(_digit()), "occlusion", 1)
    assert once.shape == twice.shape
    x = p.model_input(_digit())
    with torch.no_grad():
        fx = p.model(x)
        residual = (p.model(fx) - fx).abs().max() / fx.abs().max()
    assert float(residual) < 1e3 * F32_EPS
    assert "idempotence residual" in text
    assert "inpaint-box" in p.tasks
    strip, text = p.restore(x, "inpaint-box", 0)
    assert strip.shape[1] > 4 * strip.shape[0] and "alternating" in text
    with pytest.raises(LinearizerError, match="unknown degradation"):
        p.restore(x, "denoise-0.2", 0)  # noisy tasks need the prior's error: not offered


def test_style_mixing_is_linear_in_the_weights(runs):
    ex = Explorer(open_run(runs / "style"))
    assert ex.tabs == ["Style"]
    s = ex.style
    x = s.content("cat")
    _, full, text = s.mix(x, [1.0, 0.0], 1.0)
    _, none, _ = s.mix(x, [1.0, 0.0], 0.0)
    assert "weights sum to 1.00" in text and not np.array_equal(full, none)
    content = np.rint(x[0].permute(1, 2, 0).numpy() * 255).astype(np.uint8)
    _, identity, _ = s.mix(s.content("cat", content), [0.0, 0.0], 0.0)  # (0 A + 1 I)
    assert np.abs(identity.astype(int) - s.mix(x, [0.0, 0.0], 0.0)[1].astype(int)).max() <= 2
    with pytest.raises(LinearizerError, match="give 2 finite weights"):
        s.mix(x, [1.0], 1.0)


def test_style_bank_beside_the_index_model(runs):
    index = open_run(runs / "index")
    ex = Explorer(open_run(runs / "style"), index=index)
    s = ex.style
    x = s.content("cat")
    beside, note = s.index_beside(x, [1.0, 3.0])  # mean index 0.75 between styles 0 and 1
    assert "t = 0.75" in note and beside.ndim == 3
    with torch.no_grad():
        want = picture(index.model.at_index(x, 0.75), min_side=192)
    assert np.array_equal(want, beside)
    _, got, _ = Explorer(index).style.at_index(x, 0.75)  # the index run's own tab agrees
    assert np.array_equal(got, beside)
    with pytest.raises(LinearizerError, match="positive sum"):
        s.index_beside(x, [0.0, 0.0])
    with pytest.raises(LinearizerError, match="goes with a style bank"):
        Explorer(open_run(runs / "proj"), index=index)


def test_missing_gradio_is_one_line(runs, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "gradio", None)  # as if not installed
    assert main(["explore", str(runs / "flow"), "--dry-run"]) == 2
    assert capsys.readouterr().err.strip().endswith("pip install linearizer[app]")


@needs_app
def test_explore_dry_run_lists_tabs(runs, capsys):
    assert main(["explore", str(runs / "proj"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "tabs: Project / restore" in out and "http://127.0.0.1:7860" in out


@needs_app
def test_explore_a_pretrained_model(runs, tmp_path, monkeypatch, capsys):
    """``pretrained:NAME`` opens like a run folder (a smoke run exported as a package asset)."""
    from linearizer import pretrained

    root = tmp_path / "assets"
    pretrained.export(runs / "flow", "tiny", root, {"data_sha256": "0" * 64})
    monkeypatch.setattr(pretrained, "asset_root", lambda: root)
    monkeypatch.setitem(pretrained.ASSETS, "tiny", "tiny")
    monkeypatch.setenv("LINEARIZER_DATA", str(tmp_path / "cache"))
    assert main(["explore", "pretrained:tiny", "--dry-run"]) == 0
    assert "tabs: Generate, Walk, Invert & edit" in capsys.readouterr().out


@needs_app
def test_explore_opens_the_mixture_without_a_run(capsys):
    assert main(["explore", "--dry-run"]) == 0
    assert capsys.readouterr().out.startswith("pretrained:mnist-mix: flow run")


def test_open_run_errors(tmp_path):
    with pytest.raises(LinearizerError, match="no run kind|not a run folder"):
        open_run(tmp_path)
    with pytest.raises(LinearizerError, match="no such run folder|not a run folder"):
        open_run(tmp_path / "missing")


# ----------------------------------------------------------------------------- the served page

# Imported here, not skipped on: a module-level skip would also skip the handler tests above.
try:
    import gradio_client

    AppError = gradio_client.exceptions.AppError
except ImportError:
    gradio_client = AppError = None


@pytest.fixture(scope="module")
def serve():
    from linearizer.explore import build_app, launch

    served = []

    def start(run_or_explorer):
        demo = build_app(run_or_explorer)
        launch(demo, host="127.0.0.1", port=None, block=False)
        served.append(demo)
        assert demo.local_url.startswith("http://127.0.0.1:")
        return gradio_client.Client(demo.local_url, verbose=False)

    yield start
    for demo in served:
        demo.close()


def _read(path) -> np.ndarray:
    return np.array(Image.open(path))


@needs_app
def test_page_generate_walk_invert_interpolate(serve, flow, tmp_path):
    client = serve(flow)
    one, multi, text = client.predict(0, 4, 10, "euler", api_name="/generate")
    assert _read(one).shape == _read(multi).shape and "PSNR" in text
    walked, base, text = client.predict(0, 1.5, 0, 0, 0, api_name="/walk")
    assert not np.array_equal(_read(walked), _read(base)) and "u1" in text
    digit = gradio_client.handle_file(_png(tmp_path / "d.png", _digit()))
    sketch = {"background": None, "layers": [], "composite": digit}
    seen, noise, again, text = client.predict(sketch, None, 0, api_name="/invert")
    assert "max |f(x0) − x|" in text and _read(seen).shape == _read(again).shape
    a, b, text = client.predict(None, digit, 0, None, 2, 4, api_name="/interpolate")
    assert "4 frames" in text


@needs_app
def test_page_conditional_pickers(serve, cond, tmp_path):
    client = serve(cond)
    one, multi, text = client.predict(0, 4, 10, "euler", "1", 1.5, api_name="/generate")
    assert "class 1, guidance 1.5**" in text and _read(one).shape == _read(multi).shape
    walked, base, text = client.predict(0, "mixture", 0, 1.5, 0, 0, 0, api_name="/walk")
    assert "drawn from the training frequencies" in text
    digit = gradio_client.handle_file(_png(tmp_path / "d.png", _digit()))
    sketch = {"background": None, "layers": [], "composite": digit}
    seen, noise, again, strip, text = client.predict(
        sketch, None, 0, "2", "all", api_name="/invert"
    )
    assert "class 2:" in text and "Swapped back to class 2" in text
    assert _read(strip).shape[1] > CLASSES * _read(seen).shape[1]
    a, b, text = client.predict(None, digit, 0, None, 2, 4, "2", api_name="/interpolate")
    assert "4 frames" in text


@needs_app
def test_page_rejects_bad_uploads_and_keeps_serving(serve, flow, tmp_path):
    client = serve(flow)
    bad = tmp_path / "notes.txt"
    bad.write_text("hello")
    out = client.predict(None, gradio_client.handle_file(str(bad)), 0, api_name="/invert")
    assert out[:3] == (None, None, None) and "notes.txt: not an image" in out[3]
    big = tmp_path / "huge.png"
    big.write_bytes(b"\x89PNG" + bytes(MAX_UPLOAD_BYTES + 10))
    out = client.predict(None, gradio_client.handle_file(str(big)), 0, api_name="/invert")
    assert "over the 2 MiB limit" in out[3]
    with pytest.raises(AppError, match="greater than maximum value 1000"):  # Gradio's check
        client.predict(0, 1, 5000, "euler", api_name="/generate")
    one, _, text = client.predict(0, 1, 10, "euler", api_name="/generate")  # still serving
    assert _read(one).ndim in (2, 3) and "PSNR" in text


@needs_app
def test_page_project(serve, runs, tmp_path):
    client = serve(open_run(runs / "proj"))
    digit = gradio_client.handle_file(_png(tmp_path / "d.png", _digit()))
    seen, once, twice, text = client.predict(None, digit, "blur", 0, api_name="/project")
    assert "idempotence residual" in text and _read(once).shape == _read(twice).shape
    strip, text = client.predict(None, digit, 0, "sr2", api_name="/restore")
    assert "sr2" in text and _read(strip).shape[1] > 4 * _read(strip).shape[0]
    names = {
        e.lstrip("/")
        for e in client.view_api(print_info=False, return_format="dict")["named_endpoints"]
    }
    assert "generate" not in names and "walk" not in names  # flow tabs hidden


@needs_app
def test_latency_benchmark_runs(tmp_path):
    """benchmarks/explore_latency.py stays runnable (a smoke run; no timing asserts)."""
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "explore_latency.py"
    out = tmp_path / "latency.json"
    cmd = [
        sys.executable,
        str(script),
        "--quick",
        "--threads",
        "1",
        "--run",
        "untrained:flow",
        "--out",
        str(out),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(out.read_text())["results"][0]["rows"]
    assert {r["interaction"].split(" ")[0] for r in rows} == {
        "generate",
        "walk",
        "invert",
        "interpolate",
    }


@needs_app
def test_page_style(serve, runs):
    client = serve(open_run(runs / "style"))
    shown, styled, pure, text = client.predict("cat", None, 0.5, 1.0, 0.0, api_name="/style_mix")
    assert "0.50·(1.00·A[" in text and _read(pure).shape[1] > _read(pure).shape[0]
    client = serve(Explorer(open_run(runs / "style"), index=open_run(runs / "index")))
    *pictures, text = client.predict("cat", None, 1.0, 1.0, 1.0, api_name="/style_mix")
    assert len(pictures) == 4 and "index model at t = 0.50" in text
    client = serve(open_run(runs / "index"))
    shown, styled, pure, text = client.predict("cat", None, 0.5, api_name="/style_index")
    assert "t = 0.50" in text
