"""The on-disk cache of one-step matrices (linearizer.flow.bcache): a stored B is returned
bit-identical, and only for exactly its key; a bad file or folder only costs a rebuild."""

import os
import warnings

import pytest
import torch

from linearizer.flow import bcache
from linearizer.flow.build import build_flow
from linearizer.flow.config import FlowModelConfig
from linearizer.flow.factored import FactoredMatrix
from linearizer.invertible.factory import NetworkConfig

F64 = torch.float64


def key(**changes):
    base = {
        "weights": "0" * 64,
        "spec": {"steps": 100, "method": "euler", "final": "skip", "dtype": "float64"},
        "form": "dense",
        "label": None,
        "guidance": 0.0,
    }
    return {**base, **changes}


class Builder:
    """``build`` for :func:`bcache.cached` that counts its calls."""

    def __init__(self, value):
        self.value, self.calls = value, 0

    def __call__(self):
        self.calls += 1
        return self.value


def dense(seed=0, d=6):
    return torch.randn(d, d, dtype=F64, generator=torch.Generator().manual_seed(seed))


def only_file(folder):
    (path,) = folder.glob("*.safetensors")
    return path


def test_a_fresh_load_is_bit_identical(tmp_path):
    b = dense()
    first = bcache.cached(key(), Builder(b), folder=tmp_path)
    again = Builder(torch.zeros(6, 6, dtype=F64))
    loaded = bcache.cached(key(), again, folder=tmp_path)
    assert again.calls == 0
    assert first is b
    assert loaded.dtype == b.dtype and torch.equal(loaded, b)
    assert loaded.numpy().tobytes() == b.numpy().tobytes()


def test_float32_keeps_its_dtype(tmp_path):
    b = dense().float()
    bcache.cached(key(), Builder(b), folder=tmp_path)
    loaded = bcache.cached(key(), Builder(None), folder=tmp_path)
    assert loaded.dtype == torch.float32 and torch.equal(loaded, b)


@pytest.mark.parametrize(
    "changes",
    [
        {"weights": "1" + "0" * 63},
        {"spec": {"steps": 1000, "method": "euler", "final": "skip", "dtype": "float64"}},
        {"spec": {"steps": 100, "method": "rk4", "final": "skip", "dtype": "float64"}},
        {"spec": {"steps": 100, "method": "euler", "final": "predict", "dtype": "float64"}},
        {"spec": {"steps": 100, "method": "euler", "final": "skip", "dtype": "float32"}},
        {"form": "factored"},
        {"label": 3},
        {"guidance": 0.5},
        {"calibration": "abc"},
    ],
)
def test_any_other_key_field_builds_again(tmp_path, changes):
    bcache.cached(key(), Builder(dense(0)), folder=tmp_path)
    other = Builder(dense(1))
    got = bcache.cached(key(**changes), other, folder=tmp_path)
    assert other.calls == 1 and torch.equal(got, dense(1))
    assert len(list(tmp_path.glob("*.safetensors"))) == 2
    assert torch.equal(bcache.cached(key(), Builder(None), folder=tmp_path), dense(0))


def test_key_order_does_not_matter(tmp_path):
    k = key()
    bcache.cached(k, Builder(dense()), folder=tmp_path)
    reordered = dict(reversed(list(k.items())))
    again = Builder(None)
    assert torch.equal(bcache.cached(reordered, again, folder=tmp_path), dense())
    assert again.calls == 0


def test_another_format_version_builds_again(tmp_path, monkeypatch):
    bcache.cached(key(), Builder(dense(0)), folder=tmp_path)
    monkeypatch.setattr(bcache, "FORMAT_VERSION", bcache.FORMAT_VERSION + 1)
    again = Builder(dense(1))
    bcache.cached(key(), again, folder=tmp_path)
    assert again.calls == 1


@pytest.mark.parametrize("damage", ["garbage", "truncated", "flipped", "empty"])
def test_a_corrupt_file_is_rebuilt_with_one_warning(tmp_path, damage):
    bcache.cached(key(), Builder(dense()), folder=tmp_path)
    path = only_file(tmp_path)
    data = path.read_bytes()
    if damage == "garbage":
        path.write_bytes(b"not a safetensors file at all")
    elif damage == "truncated":
        path.write_bytes(data[: len(data) - 50])
    elif damage == "flipped":  # still parses: only the checksum sees it
        path.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    else:
        path.write_bytes(b"")
    again = Builder(dense())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = bcache.cached(key(), again, folder=tmp_path)
    assert again.calls == 1 and torch.equal(got, dense())
    assert len(caught) == 1 and "\n" not in str(caught[0].message)
    assert "rebuilding" in str(caught[0].message)
    # the rebuilt copy replaced the bad file
    assert torch.equal(bcache.cached(key(), Builder(None), folder=tmp_path), dense())


def test_a_hash_collision_is_refused_by_the_stored_key(tmp_path, monkeypatch):
    monkeypatch.setattr(bcache, "_file_name", lambda canonical: "same")
    bcache.cached(key(), Builder(dense(0)), folder=tmp_path)
    other = Builder(dense(1))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = bcache.cached(key(label=7), other, folder=tmp_path)
    assert other.calls == 1 and torch.equal(got, dense(1))
    assert len(caught) == 1 and "another key" in str(caught[0].message)
    assert only_file(tmp_path).name == "same.safetensors"


def test_an_unwritable_folder_still_builds(tmp_path):
    blocker = tmp_path / "a file"
    blocker.write_text("x")
    folder = blocker / "cache"  # cannot be made, whoever runs the test (root included)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            build = Builder(dense())
            assert torch.equal(bcache.cached(key(), build, folder=folder), dense())
            assert build.calls == 1
    assert len(caught) == 1 and "not cached" in str(caught[0].message)
    assert "\n" not in str(caught[0].message)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes anywhere")
def test_a_read_only_folder_still_builds(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            build = Builder(dense())
            assert torch.equal(bcache.cached(key(), build, folder=folder), dense())
        assert build.calls == 1 and len(caught) == 1
        assert not list(folder.iterdir())
    finally:
        folder.chmod(0o755)


@pytest.mark.parametrize("value", ["off", "0", "OFF"])
def test_disabled_cache_builds_every_time(tmp_path, monkeypatch, value):
    monkeypatch.setenv("LINEARIZER_CACHE", value)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("LINEARIZER_DATA", raising=False)
    assert bcache.cache_folder() is None
    for _ in range(2):
        build = Builder(dense())
        assert torch.equal(bcache.cached(key(), build), dense())
        assert build.calls == 1
    assert not list(tmp_path.rglob("*.safetensors"))


def test_cache_folder_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("LINEARIZER_DATA", raising=False)
    monkeypatch.setenv("LINEARIZER_CACHE", str(tmp_path / "mine"))
    assert bcache.cache_folder() == tmp_path / "mine"
    monkeypatch.delenv("LINEARIZER_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert bcache.cache_folder() == tmp_path / "xdg" / "linearizer" / "one-step"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert bcache.cache_folder() == tmp_path / "home" / ".cache" / "linearizer" / "one-step"
    monkeypatch.setenv("LINEARIZER_CACHE", str(tmp_path / "env"))
    build = Builder(dense())
    bcache.cached(key(), build)  # the default folder is the environment's
    assert len(list((tmp_path / "env").glob("*.safetensors"))) == 1


def test_a_factored_matrix_round_trips(tmp_path):
    g = torch.Generator().manual_seed(0)
    fm = FactoredMatrix(
        0.001, torch.randn(6, 3, generator=g, dtype=F64), torch.randn(6, 3, dtype=F64)
    )
    bcache.cached(key(form="factored"), Builder(fm), folder=tmp_path)
    got = bcache.cached(key(form="factored"), Builder(None), folder=tmp_path)
    assert isinstance(got, FactoredMatrix)
    assert got.c == fm.c and torch.equal(got.u, fm.u) and torch.equal(got.v, fm.v)
    assert got.dtype == F64


def test_a_key_that_is_not_json_is_one_line(tmp_path):
    with pytest.raises(bcache.LinearizerError, match="plain JSON"):
        bcache.cached({"weights": object()}, Builder(dense()), folder=tmp_path)
    with pytest.raises(bcache.LinearizerError, match="plain JSON"):
        bcache.cached({"guidance": float("nan")}, Builder(dense()), folder=tmp_path)


def test_weights_digest_sees_every_bit():
    a, b = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    b.load_state_dict(a.state_dict())
    assert bcache.weights_digest(a) == bcache.weights_digest(b)
    with torch.no_grad():
        w = b.weight.view(-1).view(torch.int32)
        w[0] ^= 1  # one bit of one float
    assert bcache.weights_digest(a) != bcache.weights_digest(b)
    assert bcache.weights_digest(a) != bcache.weights_digest(a.double())
    assert bcache.weights_digest(a, b) != bcache.weights_digest(b, a)
    bn = torch.nn.BatchNorm1d(2)
    before = bcache.weights_digest(bn)
    bn(torch.randn(4, 2))  # changes only buffers
    assert bcache.weights_digest(bn) != before


def test_weights_digest_of_a_tiny_flow_model():
    torch.manual_seed(0)
    net = NetworkConfig(img_size=8, blocks=1, hidden=8)
    model = build_flow(FlowModelConfig(network=net, rank=2, lora_emb=8, lora_hidden=16))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    start = bcache.weights_digest(model)
    opt.zero_grad()
    opt.step()  # no gradients: a no-op
    assert bcache.weights_digest(model) == start
    x = torch.rand(2, *model.image_shape)
    loss = model.encode(x, 1.0).square().mean() + sum(
        p.square().sum() for p in model.op.parameters()
    )
    loss.backward()
    opt.step()
    assert bcache.weights_digest(model) != start
    assert bcache.weights_digest(model.op) != bcache.weights_digest(model)


def test_a_stored_copy_goes_to_the_device_asked(tmp_path):
    bcache.cached(key(), Builder(dense()), folder=tmp_path)
    got = bcache.cached(key(), Builder(None), folder=tmp_path, device=torch.device("meta"))
    assert got.device.type == "meta" and got.shape == (6, 6)


def test_the_folder_keeps_the_most_recently_used_files_within_its_limit(tmp_path, monkeypatch):
    def store(i, value=None):
        builder = Builder(dense(i) if value is None else value)
        bcache.cached(key(weights=str(i) * 64), builder, folder=tmp_path)
        return builder.calls

    files = {}
    for i in range(3):
        store(i)
        files[i] = max(tmp_path.glob("*.safetensors"), key=lambda p: p.stat().st_mtime_ns)
        os.utime(files[i], (1000.0 * (i + 1), 1000.0 * (i + 1)))  # 0 is the oldest
    assert store(0) == 0  # a read marks 0 as just used
    monkeypatch.setenv(bcache.SIZE_ENV, str(2.5 * files[0].stat().st_size / 2**20))
    store(3)
    assert files[0].is_file() and not files[1].exists() and not files[2].exists()
    assert store(3, torch.zeros(6, 6, dtype=F64)) == 0  # the newest file always stays
    monkeypatch.setenv(bcache.SIZE_ENV, "lots")
    with pytest.raises(bcache.LinearizerError, match="LINEARIZER_CACHE_MB"):
        bcache.max_bytes()


def test_a_training_runs_grids_build_no_b(tmp_path, monkeypatch):
    from linearizer.flow import factored
    from linearizer.flow.task import FlowTask
    from linearizer.training.config import resolve
    from linearizer.training.trainer import train

    def refuse(*args, **kwargs):
        raise AssertionError("a training grid built a one-step matrix")

    cache = tmp_path / "cache"
    monkeypatch.setenv(bcache.ENV, str(cache))
    monkeypatch.setattr(factored, "one_step", refuse)
    overrides = ["progress=false", "components=2", "eval_every=3"]
    train(FlowTask(), resolve("flow", "smoke", overrides), tmp_path / "run")
    assert len(list((tmp_path / "run" / "samples").glob("*.png"))) >= 2  # the grids were drawn
    assert not list(cache.glob("*.safetensors"))
