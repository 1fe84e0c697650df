"""Every command that reads a user's file, against files that are bad in every way we know.

Each case must end in one line ``linearizer: error: ...`` naming the file, and exit 2: never a
traceback, never a hang or a huge allocation (the crafted files claim sizes of terabytes or nest
JSON 100000 deep). Commands run in-process through ``linearizer.cli.main.main``.
"""

from __future__ import annotations

import io
import json
import shutil
import struct
import zipfile
import zlib

import numpy as np
import pytest

from linearizer.cli.main import main

# --------------------------------------------------------------------------- the bad files


def _npy_header(shape: tuple, descr: str = "<f4") -> bytes:
    header = repr({"descr": descr, "fortran_order": False, "shape": shape}).encode()
    pad = 64 - (10 + len(header) + 1) % 64
    header += b" " * pad + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _png_claiming(width: int, height: int) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    idat = zlib.compress(b"\x00" * 64)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", ihdr)
        + _png_chunk(b"IDAT", idat)
        + _png_chunk(b"IEND", b"")
    )


def _npz(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


def _object_npy() -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    return buf.getvalue()


def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


def _pth(pkl: bytes, storages: dict[str, bytes] | None = None) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("archive/data.pkl", pkl)
        for key, data in (storages or {}).items():
            zf.writestr(f"archive/data/{key}", data)
    return buf.getvalue()


DEEP = 100_000
ARRAY_FILES = {
    "empty.npy": b"",
    "garbage.npy": bytes(range(256)) * 4,
    "huge-claim.npy": _npy_header((10**6, 10**6)) + b"\x00" * 64,
    "truncated.npy": _npy(np.zeros((4, 1, 8, 8), np.float32))[:-100],
    "object.npy": _object_npy(),
    "strings.npy": _npy(np.array(["a", "b"])),
    "complex.npy": _npy(np.zeros((2, 1, 8, 8), np.complex64)),
    "wrong-shape.npy": _npy(np.zeros((2, 3), np.float32)),
    "nan.npy": _npy(np.full((2, 1, 8, 8), np.nan, np.float32)),
    "bad-zip.npz": b"PK\x03\x04" + b"\x00" * 40,
    "object.npz": _npz({"images.npy": _object_npy()}),
    "huge-claim.npz": _npz({"images.npy": _npy_header((10**7, 10**7)) + b"\x00" * 16}),
    "empty.npz": _npz({}),
}
IMAGE_FILES = {
    "garbage.png": b"\x89PNG\r\n\x1a\n" + b"\xff" * 100,
    "bomb.png": _png_claiming(200_000, 200_000),
    "text.png": b"hello, not an image",
}
JSON_FILES = {
    "deep.json": b"[" * DEEP + b"]" * DEEP,
    "deep-object.json": b'{"a":' * DEEP + b"1" + b"}" * DEEP,
    "list.json": b"[1, 2, 3]",
    "not-utf8.json": b'{"a": "\xff\xfe"}',
    "truncated.json": b'{"preset": ',
}
SAFETENSORS_FILES = {
    "huge-header.safetensors": struct.pack("<Q", 2**60) + b"{}",
    "short.safetensors": b"\x01\x02",
    "bad-header.safetensors": struct.pack("<Q", 8) + b"not json",
    "huge-tensor.safetensors": (lambda h: struct.pack("<Q", len(h)) + h)(
        json.dumps(
            {"w": {"dtype": "F32", "shape": [10**9, 10**9], "data_offsets": [0, 4 * 10**18]}}
        ).encode()
    ),
}


def _deep_pickle() -> bytes:
    # PROTO 2, then DEEP nested one-element lists: EMPTY_LIST, (MARK ... APPENDS) nested
    return b"\x80\x02" + b"](" * DEEP + b"e" * DEEP + b"."


CHECKPOINT_FILES = {
    "not-a-zip.pth": b"\x80\x02}q\x00.",
    "garbage.pth": b"\x00" * 100,
    "deep.pth": _pth(_deep_pickle()),
    "no-pkl.pth": _npz({"other/file": b"x"}),
    # a storage the pickle says holds 10^15 floats, backed by 4 bytes
    "huge-storage.pth": _pth(
        b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storage"
        b"ctorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpu"
        b"\x8a\x07\x00\x80\xc6\xa4~\x8d\x03tQK\x00K\x01\x85K\x01\x85tR.",
        {"0": b"\x00" * 4},
    ),
}


@pytest.fixture(scope="module")
def bad(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad-files")
    groups = {}
    for group, files in {
        "array": ARRAY_FILES,
        "image": IMAGE_FILES,
        "json": JSON_FILES,
        "safetensors": SAFETENSORS_FILES,
        "checkpoint": CHECKPOINT_FILES,
    }.items():
        paths = {}
        for name, data in files.items():
            (root / name).write_bytes(data)
            paths[name] = root / name
        (root / f"dir-{group}").mkdir()
        paths["a-directory"] = root / f"dir-{group}"
        paths["missing"] = root / f"missing-{group}"
        groups[group] = paths
    return groups


# crafted files: the message must name the problem, not just fail somewhere later
PROBLEM = {
    "object.npy": "pickled",
    "object.npz": "pickled",
    "huge-claim.npy": "claims",
    "huge-claim.npz": "claims",
    "truncated.npy": "holds only",
    "deep.json": "deeper",
    "deep-object.json": "deeper",
    "list.json": "JSON object",
    "bomb.png": "pixels",
    "huge-header.safetensors": "header claims",
    "deep.pth": "too deeply",
    "huge-storage.pth": "holds 4 bytes",
    "strings.npy": "not numbers",
    "complex.npy": "not numbers",
}


def _fails_cleanly(argv: list[str], capsys, path, bad_name: str | None = None) -> None:
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    err = out.err.strip()
    assert code == 2, f"{argv}: exit {code}\n{out.out[-500:]}\n{err[-2000:]}"
    assert err.startswith("linearizer: error:") and "\n" not in err, err[-2000:]
    assert "Traceback" not in err
    assert path.name in err, f"the message does not name the file: {err}"
    problem = PROBLEM.get(bad_name or path.name)
    assert problem is None or problem in err, f"the message does not say {problem!r}: {err}"


def _broken_run(src, tmp_path, relative: str, data: bytes | None):
    """A copy of run ``src`` with one file replaced by ``data`` (``None``: a directory)."""
    run = tmp_path / "run"
    shutil.copytree(src, run)
    target = run / relative
    if target.is_dir():
        shutil.rmtree(target)
    if data is None:
        target.unlink(missing_ok=True)
        target.mkdir()
    else:
        target.write_bytes(data)
    return run, target


# --------------------------------------------------------------------------- the commands
@pytest.mark.parametrize("name", sorted(ARRAY_FILES) + ["a-directory", "missing"])
def test_sample_noise(smoke_flow_run, bad, name, tmp_path, capsys):
    path = bad["array"][name]
    argv = ["sample", smoke_flow_run, "--noise", path, "--out", tmp_path / "o", "--steps", "2"]
    _fails_cleanly(argv, capsys, path)


@pytest.mark.parametrize(
    "group, name",
    [("array", n) for n in sorted(ARRAY_FILES)]
    + [("image", n) for n in sorted(IMAGE_FILES)]
    + [("array", "a-directory"), ("array", "missing")],
)
def test_invert_images(smoke_flow_run, bad, group, name, tmp_path, capsys):
    path = bad[group][name]
    argv = ["invert", smoke_flow_run, "--images", path, "--out", tmp_path / "o", "--steps", "2"]
    _fails_cleanly(argv, capsys, path)


@pytest.mark.parametrize("name", sorted(ARRAY_FILES) + ["a-directory", "missing"])
def test_project_input(smoke_projective_run, bad, name, tmp_path, capsys):
    path = bad["array"][name]
    _fails_cleanly(
        ["project", smoke_projective_run, "--input", path, "--out", tmp_path / "o"], capsys, path
    )


@pytest.mark.parametrize(
    "group, name",
    [("array", n) for n in sorted(ARRAY_FILES)]
    + [("image", n) for n in sorted(IMAGE_FILES)]
    + [("array", "a-directory"), ("array", "missing")],
)
def test_restore_input(smoke_projective_run, bad, group, name, tmp_path, capsys):
    path = bad[group][name]
    argv = [
        "restore",
        smoke_projective_run,
        "--task",
        "sr2",
        "--input",
        path,
        "--methods",
        "pinv",
        "--n",
        "2",
        "--out",
        tmp_path / "o",
    ]
    _fails_cleanly(argv, capsys, path)


@pytest.mark.parametrize("name", sorted(IMAGE_FILES) + ["a-directory", "missing"])
def test_style_apply_input(smoke_style_run, bad, name, tmp_path, capsys):
    path = bad["image"][name]
    argv = [
        "style",
        "apply",
        smoke_style_run,
        "--input",
        path,
        "--style",
        "red",
        "--out",
        tmp_path / "x.png",
    ]
    _fails_cleanly(argv, capsys, path)


@pytest.mark.parametrize("name", sorted(CHECKPOINT_FILES) + ["a-directory", "missing"])
def test_convert_official(bad, name, tmp_path, capsys):
    path = bad["checkpoint"][name]
    _fails_cleanly(["convert-official", path, "--out", tmp_path / "run"], capsys, path)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("name", sorted(SAFETENSORS_FILES) + ["a-directory", "missing"])
def test_classifier_weights(bad, name, capsys):
    path = bad["safetensors"][name]
    _fails_cleanly(["classifier", "eval", "--weights", path], capsys, path)


@pytest.mark.parametrize("name", sorted(SAFETENSORS_FILES) + sorted(CHECKPOINT_FILES))
def test_style_vgg_weights(bad, name, tmp_path, capsys):
    group = "safetensors" if name.endswith(".safetensors") else "checkpoint"
    path = bad[group][name]
    argv = [
        "style",
        "targets",
        "--features",
        f"vgg19:{path}",
        "--out",
        tmp_path / "t",
        "--steps",
        "1",
        "--size",
        "16",
    ]
    _fails_cleanly(argv, capsys, path)


RUN_COMMANDS = {
    "sample": lambda run, out: ["sample", run, "--out", out, "--steps", "2", "--n", "1"],
    "svd": lambda run, out: ["svd", run, "--out", out, "--steps", "2", "--k", "2"],
    "resume": lambda run, out: ["train", "flow", "--resume", run],
}


@pytest.mark.parametrize("command", sorted(RUN_COMMANDS))
@pytest.mark.parametrize("name", sorted(JSON_FILES) + ["a-directory"])
def test_flow_run_config(smoke_flow_run, bad, command, name, tmp_path, capsys):
    data = None if name == "a-directory" else bad["json"][name].read_bytes()
    run, target = _broken_run(smoke_flow_run, tmp_path, "config.json", data)
    _fails_cleanly(RUN_COMMANDS[command](run, tmp_path / "o"), capsys, target, name)


@pytest.mark.parametrize("name", sorted(SAFETENSORS_FILES))
def test_flow_run_checkpoint(smoke_flow_run, bad, name, tmp_path, capsys):
    ckpts = sorted((smoke_flow_run / "checkpoints").glob("*.safetensors"))
    relative = f"checkpoints/{ckpts[-1].name}"
    data = bad["safetensors"][name].read_bytes()
    run, target = _broken_run(smoke_flow_run, tmp_path, relative, data)
    for other in ckpts[:-1]:  # no older checkpoint to fall back to
        (run / "checkpoints" / other.name).unlink()
        (run / "checkpoints" / other.with_suffix(".json").name).unlink(missing_ok=True)
    _fails_cleanly(["sample", run, "--out", tmp_path / "o", "--steps", "2"], capsys, target)


@pytest.mark.parametrize("name", sorted(JSON_FILES))
def test_flow_run_checkpoint_sidecar(smoke_flow_run, bad, name, tmp_path, capsys):
    ckpts = sorted((smoke_flow_run / "checkpoints").glob("*.json"))
    data = bad["json"][name].read_bytes()
    run, target = _broken_run(smoke_flow_run, tmp_path, f"checkpoints/{ckpts[-1].name}", data)
    for other in ckpts[:-1]:
        (run / "checkpoints" / other.name).unlink()
        (run / "checkpoints" / other.with_suffix(".safetensors").name).unlink(missing_ok=True)
    _fails_cleanly(["sample", run, "--out", tmp_path / "o", "--steps", "2"], capsys, target, name)


@pytest.mark.parametrize("name", sorted(JSON_FILES))
def test_projective_and_style_run_config(
    smoke_projective_run, smoke_style_run, bad, name, tmp_path, capsys
):
    data = bad["json"][name].read_bytes()
    run, target = _broken_run(smoke_projective_run, tmp_path / "p", "config.json", data)
    _fails_cleanly(["project", run, "--out", tmp_path / "o"], capsys, target, name)
    run, target = _broken_run(smoke_style_run, tmp_path / "s", "config.json", data)
    argv = ["style", "apply", run, "--style", "red", "--out", tmp_path / "x.png"]
    _fails_cleanly(argv, capsys, target, name)
