"""Colour: image-folder and CelebA-layout datasets on images the tests make, 3-channel
checkpoints of the authors' release format, and every application at C = 3."""

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from linearizer.cli.main import main
from linearizer.data.folder import load_folder, parse_dataset, resize_crop
from linearizer.errors import LinearizerError

# Beside the repository, like tests/official_fixture.py's ../shared/reference/official.
OFFICIAL_RGB = Path(__file__).resolve().parents[2] / "shared" / "reference" / "official-rgb"
RGB_CKPT = OFFICIAL_RGB / "checkpoint" / "models" / "model.pth"
RGB_GOLDEN = OFFICIAL_RGB / "golden_rgb.npz"
needs_rgb_fixture = pytest.mark.skipif(
    not (RGB_CKPT.is_file() and RGB_GOLDEN.is_file()),
    reason=f"3-channel reference fixture not found under {OFFICIAL_RGB}",
)


def write_images(folder, n=4, size=(30, 20), fmt="png", sub=""):
    """Images whose pixel (x, y) encodes its position, so a crop can be located exactly."""
    (folder / sub).mkdir(parents=True, exist_ok=True)
    w, h = size
    for i in range(n):
        arr = np.zeros((h, w, 3), np.uint8)
        arr[..., 0] = (np.arange(w) * 255 // max(w - 1, 1))[None, :]
        arr[..., 1] = (np.arange(h) * 255 // max(h - 1, 1))[:, None]
        arr[..., 2] = 20 * i
        Image.fromarray(arr).save(folder / sub / f"img{i}.{fmt}")


def test_folder_loads_rgb_and_grey(tmp_path):
    write_images(tmp_path / "data", n=5)
    rgb, labels = load_folder(tmp_path / "data", "all", img_size=8, cache_dir=tmp_path / "c")
    assert rgb.shape == (5, 3, 8, 8) and rgb.dtype == torch.float32
    assert 0.0 <= float(rgb.min()) and float(rgb.max()) <= 1.0
    assert labels.tolist() == [0] * 5
    # blue encodes the file index: files come in sorted order
    blue = torch.tensor([0.0, 20, 40, 60, 80])
    assert torch.allclose(rgb[:, 2, 0, 0] * 255, blue, rtol=0, atol=0.5)  # half an 8-bit level
    grey, _ = load_folder(
        tmp_path / "data", "all", img_size=8, channels=1, cache_dir=tmp_path / "c"
    )
    assert grey.shape == (5, 1, 8, 8)


def test_resize_then_centre_crop_like_the_authors():
    # CelebA's 178 x 218 goes to 64 x 78, then rows 7..70.
    img = Image.new("RGB", (178, 218))
    out = resize_crop(img, 64)
    assert out.size == (64, 64)
    arr = np.zeros((218, 178), np.uint8)
    arr[:, 89:] = 255  # right half white: stays centred after the crop
    grey = np.asarray(resize_crop(Image.fromarray(arr), 64))
    assert grey[:, :31].max() < 128 and grey[:, 33:].min() > 128


def test_labels_from_subfolders_and_stable_splits(tmp_path):
    write_images(tmp_path / "d", n=12, sub="cats")
    write_images(tmp_path / "d", n=12, sub="dogs")
    kw = dict(img_size=4, cache_dir=tmp_path / "c")
    every, labels = load_folder(tmp_path / "d", "all", **kw)
    train, _ = load_folder(tmp_path / "d", "train", **kw)
    test, _ = load_folder(tmp_path / "d", "test", **kw)
    assert sorted(set(labels.tolist())) == [0, 1]
    assert len(train) + len(test) == len(every) == 24 and len(test) > 0


def test_cache_is_reused_and_rebuilt_when_a_file_changes(tmp_path):
    write_images(tmp_path / "d", n=3)
    cache = tmp_path / "c"
    first, _ = load_folder(tmp_path / "d", "all", img_size=6, cache_dir=cache)
    files = sorted(cache.iterdir())
    assert len(files) == 1
    with np.load(files[0]) as z:
        assert list(z["files"]) == ["img0.png", "img1.png", "img2.png"] and len(z["sha256"]) == 3
    again, _ = load_folder(tmp_path / "d", "all", img_size=6, cache_dir=cache)
    assert torch.equal(first, again) and sorted(cache.iterdir()) == files
    Image.fromarray(np.full((20, 30, 3), 255, np.uint8)).save(tmp_path / "d" / "img1.png")
    changed, _ = load_folder(tmp_path / "d", "all", img_size=6, cache_dir=cache)
    assert len(list(cache.iterdir())) == 2
    assert float(changed[1].min()) == 1.0 and torch.equal(changed[0], first[0])


def test_empty_folder_is_one_line_error(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("no images")
    with pytest.raises(LinearizerError, match="no PNG or JPEG") as e:
        load_folder(tmp_path / "empty", cache_dir=tmp_path / "c")
    assert "\n" not in str(e.value)
    with pytest.raises(LinearizerError, match="no such image folder"):
        load_folder(tmp_path / "missing", cache_dir=tmp_path / "c")


def test_unreadable_file_is_named(tmp_path):
    write_images(tmp_path / "d", n=2, fmt="jpg")
    (tmp_path / "d" / "broken.png").write_bytes(b"\x89PNG not really")
    with pytest.raises(LinearizerError, match="broken.png") as e:
        load_folder(tmp_path / "d", "all", img_size=4, cache_dir=tmp_path / "c")
    assert "\n" not in str(e.value)


def test_mixed_sizes_are_refused_unless_allowed(tmp_path):
    write_images(tmp_path / "d", n=2, size=(30, 20))
    Image.new("RGB", (16, 16)).save(tmp_path / "d" / "odd.png")
    with pytest.raises(LinearizerError, match="mixed sizes.*odd.png"):
        load_folder(tmp_path / "d", "all", img_size=4, cache_dir=tmp_path / "c")
    images, _ = load_folder(
        tmp_path / "d", "all", img_size=4, mixed_sizes=True, cache_dir=tmp_path / "c"
    )
    assert images.shape == (3, 3, 4, 4)


def test_celeba_layout_and_partition(tmp_path):
    root = tmp_path / "celeba"
    write_images(root, n=5, size=(178, 218), fmt="jpg", sub="img_align_celeba")
    names = [f"img{i}.jpg" for i in range(5)]
    parts = ["0", "0", "1", "2", "0"]
    (root / "list_eval_partition.txt").write_text(
        "".join(f"{n} {p}\n" for n, p in zip(names, parts))
    )
    kw = dict(img_size=16, layout="celeba", cache_dir=tmp_path / "c")
    train, _ = load_folder(root, "train", **kw)
    test, _ = load_folder(root, "test", **kw)
    assert train.shape == (3, 3, 16, 16) and test.shape == (1, 3, 16, 16)
    assert float(test[0, 2, 0, 0]) * 255 == pytest.approx(60, abs=3)  # img3 (jpeg-rounded)
    (root / "list_eval_partition.txt").write_text("img0.jpg seven\n")
    with pytest.raises(LinearizerError, match="line 1"):
        load_folder(root, "train", **kw)
    with pytest.raises(LinearizerError, match="not a CelebA folder"):
        load_folder(tmp_path, "train", **kw)


def test_parse_dataset():
    assert parse_dataset("folder:/a/b") == ("folder", "/a/b")
    assert parse_dataset("mnist") == ("mnist", None)
    with pytest.raises(LinearizerError, match="names no folder"):
        parse_dataset("folder:")


def test_colour_strokes_are_coloured():
    from linearizer.data.photos import colour_strokes

    images, labels = colour_strokes(16, size=8, seed=1)
    assert images.shape == (16, 3, 8, 8) and labels.shape == (16,)
    assert 0.0 <= float(images.min()) and float(images.max()) <= 1.0
    assert float((images[:, 0] - images[:, 1]).abs().max()) > 0.1  # not grey


def test_photo_crops_split_the_bundled_photographs():
    pytest.importorskip("skimage")
    from linearizer.data.photos import PHOTOS, photo_crops

    train, labels = photo_crops("train", img_size=16, shorter=48, stride=16)
    test, _ = photo_crops("test", img_size=16, shorter=48, stride=16)
    every, _ = photo_crops("all", img_size=16, shorter=48, stride=16)
    assert train.shape[1:] == (3, 16, 16) and len(train) + len(test) == len(every)
    assert sorted(set(labels.tolist())) == list(range(len(PHOTOS)))
    with pytest.raises(LinearizerError, match="img_size"):
        photo_crops("train", img_size=64, shorter=48)


@needs_rgb_fixture
def test_converted_rgb_release_reproduces_the_authors_samples(tmp_path, capsys):
    """convert-official on their 3-channel (CelebA-configuration) checkpoint, then
    ``linearizer sample`` on the run: one-step Euler (T = 37) and multi-step RK4 (T = 23)."""
    golden = dict(np.load(RGB_GOLDEN))
    run = tmp_path / "run"
    assert main(["convert-official", str(RGB_CKPT), "--out", str(run)]) == 0
    np.save(tmp_path / "x0.npy", golden["x0"])
    cases = {
        "one_euler_T37": ["--steps", "37", "--method", "euler"],
        "multi_rk_T23": ["--steps", "23", "--method", "rk4", "--multi-step"],
    }
    for key, how in cases.items():
        out = tmp_path / key
        argv = [
            "sample",
            str(run),
            "--noise",
            str(tmp_path / "x0.npy"),
            "--out",
            str(out),
            "--final",
            "skip",
        ]  # the authors' grid
        assert main(argv + how) == 0
        with np.load(out / "samples.npz") as z:
            ours = z["samples"].astype(np.float64)
        theirs = golden[key].astype(np.float64)
        assert ours.shape == theirs.shape == (3, 3, 8, 8)
        # Their float32 against our float64: relative to the outputs' scale (README: 1e-5).
        scale = np.abs(theirs).max()
        assert np.abs(ours - theirs).max() <= 1e-5 * scale, key


@pytest.fixture(scope="module")
def rgb_runs(tmp_path_factory):
    """Smoke-size flow, projective and IGN runs on coloured strokes."""
    from linearizer.flow.task import FlowTask
    from linearizer.projective.task import ProjectiveTask
    from linearizer.training.config import resolve
    from linearizer.training.trainer import train

    root = tmp_path_factory.mktemp("rgb")
    settings = ["dataset=synthetic-rgb", "max_steps=3", "progress=false"]
    train(FlowTask(), resolve("flow", "smoke", settings), root / "flow")
    for preset in ("smoke", "smoke-ign"):
        train(ProjectiveTask(), resolve("projective", preset, settings), root / preset)
    return root


def test_flow_trains_samples_and_inverts_in_colour(rgb_runs):
    from linearizer.flow.inversion import round_trip
    from linearizer.training.runs import load_run

    run = load_run(rgb_runs / "flow")
    model = run.model
    assert model.image_shape == (3, 8, 8) and run.config.data.channels == 3
    x0 = torch.randn(4, 3, 8, 8)
    assert model.sample(x0, steps=10, final="skip").shape == (4, 3, 8, 8)
    x1 = torch.rand(2, 3, 8, 8, dtype=torch.float64)
    model = model.double()
    with torch.no_grad():
        _, back = round_trip(
            model, x1, model.one_step_operator(steps=10, form="factored", final="skip")
        )
    scale = float(x1.abs().max())
    assert float((back - x1).abs().max()) <= 1e6 * torch.finfo(torch.float64).eps * scale


@pytest.mark.parametrize("preset", ["smoke", "smoke-ign"])
def test_projective_runs_project_colour_images(rgb_runs, preset, tmp_path):
    from linearizer.training.runs import load_run

    run = load_run(rgb_runs / preset)
    assert run.config.data.channels == 3
    out = tmp_path / "out"
    assert (
        main(["project", str(rgb_runs / preset), "--input", "noise", "--n", "3", "--out", str(out)])
        == 0
    )
    assert (out / "strip_noise.png").is_file()
    with Image.open(out / "strip_noise.png") as img:
        assert img.mode == "RGB"


def test_gpu_celeba_step_runs_on_cpu(tmp_path):
    """The prepared celeba GPU step's whole path on the CPU with a tiny network and synthetic
    colour data, so a typo cannot waste a GPU lease."""
    import json
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_celeba.py"
    cmd = [
        sys.executable,
        str(script),
        "--device",
        "cpu",
        "--tiny",
        "--steps",
        "1",
        "--samples",
        "4",
        "--probe-steps",
        "1",
        "--out",
        str(tmp_path),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "gpu_celeba.json").read_text())
    assert report["data"] == "synthetic-rgb" and report["train"]["steps"] == 1
    assert report["config"]["data"]["dataset"] == "synthetic-rgb"
    one = report["one_step"]
    assert one["B_T100_factored_mib"] > 0 and (tmp_path / "samples.png").is_file()
