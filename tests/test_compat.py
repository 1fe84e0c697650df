"""The authors' checkpoints: safe reading (nothing executes) and numerical parity with their code.

Parity targets come from ../shared/reference/official (golden.safetensors, computed by the
official code in eval mode). Tests needing that fixture skip with a reason when it is absent.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import io
import os
import pickle
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from linearizer.cli.main import main
from linearizer.compat.official import (
    convert_official,
    flow_config,
    key_map,
    load_official,
    read_official_args,
)
from linearizer.errors import LinearizerError
from linearizer.flow.spec import AUTHORS
from linearizer.safe_pickle import read_torch_checkpoint, unpickle_restricted
from official_fixture import CKPT, MANIFEST, load_golden, needs_fixture
from tolerance import assert_near

# float32 parity against outputs computed by the authors' code on another machine: the error is
# bounded relative to each tensor's own scale, in float32 epsilons (see tests/tolerance.py)
PARITY_EPS = 1000  # 20x the worst error measured here (46 eps)


@pytest.fixture(scope="module")
def golden():
    return load_golden()


@pytest.fixture(scope="module")
def official():
    torch.manual_seed(0)
    flow, layout = load_official(CKPT)
    return flow, layout


def close(actual, expected, eps_factor=PARITY_EPS):
    assert actual.dtype == torch.float32 and actual.shape == expected.shape
    ratio = assert_near(actual, expected, eps_factor=eps_factor, what="float32 parity")
    RATIOS.append(ratio)


RATIOS: list[float] = []


# ------------------------------------------------------------------------------- reading


@needs_fixture
def test_reader_reproduces_every_tensor_bit_exactly_in_torch_order():
    ckpt = read_torch_checkpoint(CKPT)
    rows = [
        line.rstrip("\n").split("\t")
        for line in MANIFEST.read_text().splitlines(keepends=True)
        if not line.startswith("#")
    ]
    assert len(ckpt.state_dict) == 3140
    unique = [k for k in ckpt.state_dict if not k.startswith("net_gy.")]
    assert unique == [r[0] for r in rows]
    for key, shape, _stride, _entry, sha, *_ in rows:
        t = ckpt.state_dict[key]
        assert str(tuple(t.shape)) == shape, key
        digest = hashlib.sha256(t.numpy().astype("<f4").tobytes()).hexdigest()
        assert digest == sha, key
    # net_gx and net_gy are one object in the pickle: the same tensors under both names
    assert ckpt.root.child("net_gx") is ckpt.root.child("net_gy")
    assert ckpt.state_dict["net_gy.g.blocks.0.mix.W"] is ckpt.state_dict["net_gx.g.blocks.0.mix.W"]


@needs_fixture
def test_reader_exposes_plain_attributes_of_the_module_tree():
    ckpt = read_torch_checkpoint(CKPT)
    root = ckpt.root
    assert root.type == "one_step.modules.one_step_linearizer.OneStepLinearizer"
    assert ckpt.storage_locations == {"cuda:0"} and ckpt.root_name == "lin_200"
    assert root.child("net_gx").plain_attrs["dim"] == 1024
    assert len(root.child("net_gx.g.blocks").modules) == 4
    block = root.child("net_gx.g.blocks.0")
    assert block.modules["actnorm"].plain_attrs["initialized"] is True
    assert block.modules["F"].plain_attrs["clamp"] == 5.0
    unet_block = root.child("net_gx.g.blocks.0.F.cond.net.enc.16x16_block0")
    assert unet_block.plain_attrs["skip_scale"] == pytest.approx(0.5**0.5, abs=0)  # numpy f8
    assert unet_block.plain_attrs["skip"] is None
    assert root.child("linear_network").plain_attrs["lora_features"] == 8
    with pytest.raises(LinearizerError, match="no module"):
        root.child("net_gx.g.blocks.9")


def test_reader_round_trips_torch_save(tmp_path):
    base = torch.arange(24, dtype=torch.float64)
    tensors = {
        "transposed": torch.randn(3, 5).T,  # strides (1, 5): column-major like mix.W
        "offset": base[7:13].view(2, 3),  # storage offset 7
        "half": torch.randn(4, dtype=torch.float16),
        "long": torch.arange(5),
        "bool": torch.tensor([True, False]),
        "param": nn.Parameter(torch.randn(2, 2)),
        "scalar": torch.tensor(3.5),
    }
    path = tmp_path / "plain.pth"
    torch.save({**tensors, "np": np.float64(0.25), "meta": {"names": ["a", "b"]}}, path)
    ckpt = read_torch_checkpoint(path)
    for key, t in tensors.items():
        got = ckpt.root[key]
        assert got.dtype == t.dtype and torch.equal(got, t.detach()), key
        assert got.is_contiguous()
    assert ckpt.root["np"] == 0.25 and type(ckpt.root["np"]) is float
    assert ckpt.root["meta"] == {"names": ["a", "b"]}
    assert set(ckpt.state_dict) == set(tensors)


def test_reader_reads_a_whole_pickled_module_as_inert_data(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.GroupNorm(1, 2), nn.Linear(4, 3)).eval()
    path = tmp_path / "module.pth"
    torch.save(model, path)
    ckpt = read_torch_checkpoint(path)
    assert ckpt.root.type == "torch.nn.modules.container.Sequential"
    assert ckpt.root.child("1").plain_attrs["num_groups"] == 1
    expected = model.state_dict()
    assert list(ckpt.state_dict) == list(expected)
    for key, t in expected.items():
        assert torch.equal(ckpt.state_dict[key], t)


# ------------------------------------------------------------------------------- safety


class _Evil:
    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


def _zip_like_torch(path: Path, pickled: bytes, storages: dict[str, bytes] | None = None) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        zf.writestr("archive/data.pkl", pickled)
        zf.writestr("archive/byteorder", "little")
        for key, data in (storages or {}).items():
            zf.writestr(f"archive/data/{key}", data)
        zf.writestr("archive/version", "3\n")
    return path


def test_malicious_reduce_is_refused_and_nothing_runs(tmp_path):
    marker = tmp_path / "pwned"
    payload = {"state": collections.OrderedDict(w=1.0), "x": _Evil(f"touch {marker}")}
    path = _zip_like_torch(tmp_path / "evil.pth", pickle.dumps(payload, protocol=2))
    with pytest.raises(LinearizerError, match=r"refusing to call (posix|os|nt)\.system"):
        read_torch_checkpoint(path)
    assert not marker.exists()
    # and through the command line: one line, exit status 2, still nothing ran
    assert main(["convert-official", str(path), "--out", str(tmp_path / "run")]) == 2
    assert not marker.exists() and not (tmp_path / "run").exists()


class _Call:
    """Pickles as a call ``func(*args)`` (what a hostile file would contain)."""

    def __init__(self, func, *args) -> None:
        self.func, self.args = func, args

    def __reduce__(self):
        return (self.func, self.args)


@pytest.mark.parametrize(
    "stream",
    [
        pickle.dumps(_Call(eval, "1+1"), protocol=2),
        pickle.dumps([_Call(exec, "x = 1")], protocol=2),
        pickle.dumps(_Call(__import__, "antigravity"), protocol=4),
        b"\x80\x02cbuiltins\ngetattr\ncos\nsystem\nX\x04\x00\x00\x00name\x86R.",
        b"(S'true'\nios\nsystem\n.",  # protocol 0 INST
    ],
    ids=["eval", "exec", "import", "getattr", "inst"],
)
def test_calls_outside_the_allow_list_are_refused(stream):
    with pytest.raises(LinearizerError, match="refusing to call"):
        unpickle_restricted(stream)


def test_unknown_classes_become_stubs_without_importing_anything():
    # a real module nobody imported yet (importing "this" prints the Zen of Python)
    real = next(m for m in ("this", "tabnanny", "netrc", "mailbox") if m not in sys.modules)
    # NEWOBJ of real.Zen and of a class from a module that does not exist: inert data
    stream = (
        b"\x80\x02c" + real.encode() + b"\nZen\n)\x81}X\x01\x00\x00\x00a\x4b\x07sb"
        b"cno_such_module_xyz\nThing\n)\x81\x86."
    )
    zen, thing = unpickle_restricted(stream)
    assert real not in sys.modules and "no_such_module_xyz" not in sys.modules
    assert zen._global_name == f"{real}.Zen" and zen._pickle_state == {"a": 7}
    assert thing._global_name == "no_such_module_xyz.Thing"


def _tensor_pickle(size, stride, offset, numel, storage_key="0") -> bytes:
    """A hand-built pickle of one tensor, as torch writes it (persistent id + rebuild call)."""
    import torch._utils as tu

    class Ref:
        def __reduce__(self):
            return (tu._rebuild_tensor_v2, (_Storage(), offset, size, stride, False, {}))

    class _Storage:
        pass

    class P(pickle.Pickler):
        def persistent_id(self, obj):
            if isinstance(obj, _Storage):
                return ("storage", torch.FloatStorage, storage_key, "cuda:3", numel)
            return None

    buf = io.BytesIO()
    P(buf, protocol=2).dump({"t": Ref()})
    return buf.getvalue()


def test_crafted_tensors_honour_strides_and_locations(tmp_path):
    data = np.arange(6, dtype="<f4").tobytes()
    path = _zip_like_torch(tmp_path / "ok.pth", _tensor_pickle((2, 2), (1, 3), 1, 6), {"0": data})
    got = read_torch_checkpoint(path)
    assert got.root["t"].tolist() == [[1.0, 4.0], [2.0, 5.0]]
    assert got.storage_locations == {"cuda:3"}


@pytest.mark.parametrize(
    "size, stride, offset, numel, nbytes, message",
    [
        ((2, 2), (1, 3), 2, 6, 24, "reads past its storage"),
        ((4,), (1,), 0, 6, 20, "holds 20 bytes"),
        ((2,), (-1,), 1, 6, 24, "bad tensor geometry"),
    ],
)
def test_crafted_tensors_with_bad_geometry_fail_cleanly(
    tmp_path, size, stride, offset, numel, nbytes, message
):
    stream = _tensor_pickle(size, stride, offset, numel)
    path = _zip_like_torch(tmp_path / "bad.pth", stream, {"0": b"\0" * nbytes})
    with pytest.raises(LinearizerError, match=message):
        read_torch_checkpoint(path)


def test_missing_storage_entry_fails_cleanly(tmp_path):
    path = _zip_like_torch(tmp_path / "bad.pth", _tensor_pickle((1,), (1,), 0, 1, "../x"), {})
    with pytest.raises(LinearizerError, match="missing storage"):
        read_torch_checkpoint(path)


def test_garbage_truncated_and_foreign_files_fail_cleanly(tmp_path):
    torch.save({"w": torch.randn(64, 64)}, tmp_path / "good.pth")
    good = (tmp_path / "good.pth").read_bytes()
    cases = {
        "garbage.pth": os.urandom(4096),
        "empty.pth": b"",
        "legacy.pth": pickle.dumps({"w": 1}, protocol=2),
        "head.pth": good[: len(good) // 2],  # central directory cut off
        "tail.pth": good[:100],
    }
    for name, blob in cases.items():
        (tmp_path / name).write_bytes(blob)
        with pytest.raises(LinearizerError):
            read_torch_checkpoint(tmp_path / name)
    cut = pickle.dumps({"a": [1, 2, 3]}, protocol=2)[:-5]
    with pytest.raises(LinearizerError, match="corrupt checkpoint pickle"):
        read_torch_checkpoint(_zip_like_torch(tmp_path / "cut.pth", cut))
    with zipfile.ZipFile(tmp_path / "two.pth", "w") as zf:
        zf.writestr("a/data.pkl", b"")
        zf.writestr("b/data.pkl", b"")
    with pytest.raises(LinearizerError, match="exactly one"):
        read_torch_checkpoint(tmp_path / "two.pth")
    with pytest.raises(LinearizerError, match="missing"):
        read_torch_checkpoint(tmp_path / "nope.pth")
    # a valid torch file that is not the authors' model is refused with a clear reason
    with pytest.raises(LinearizerError, match="not an official one-step checkpoint"):
        load_official(tmp_path / "good.pth")


# ------------------------------------------------------------------------------- parity


@needs_fixture
def test_layout_is_inferred_from_the_pickle(official):
    flow, layout = official
    assert (layout.num_blocks, layout.in_channels, layout.img_size) == (4, 1, 32)
    assert layout.unet["model_channels"] == 16 and layout.unet["attn_resolutions"] == [16]
    assert layout.lora == {
        "features": 1024,
        "rank": 8,
        "emb_dim": 128,
        "hidden": 512,
        "depth": 2,
        "activation": "gelu",
    }
    mapping = key_map(flow)
    assert mapping["op.u_net.5.weight"] == ("linear_network.lin2.5.weight", "copy")
    assert mapping["op.v_net.1.bias"] == ("linear_network.lin1.1.bias", "copy")
    theirs = mapping["net.blocks.3.G.cond.decoder.8.qkv.weight"]
    assert theirs == (
        "net_gx.g.blocks.3.G.cond.net.dec.16x16_block2.qkv.weight",
        "deinterleave-qkv",
    )
    assert not flow.training


@needs_fixture
def test_invertible_network_matches_official_forward_and_inverse(official, golden):
    net = official[0].net
    x0, x1 = golden["in.x0"], golden["in.x1"]
    with torch.no_grad():
        gy, gx = net(x0, 0.0), net(x1, 1.0)
        close(gy, golden["out.gy_x0"])
        close(gx, golden["out.gx_x1"])
        close(net.inverse(x0, 1.0), golden["out.gx_inv_x0"])
        close(net.inverse(x0, 0.0), golden["out.gy_inv_x0"])
        close(net.inverse(gx, 1.0), golden["out.gx_inv_gx_x1"])
        close(net.inverse(gy, 0.0), golden["out.gy_inv_gy_x0"])
        close(net.inverse(gx, 1.0), x1)


@needs_fixture
def test_per_block_traces_match(official, golden):
    net = official[0].net
    ones, zeros = torch.ones(4), torch.zeros(4)
    with torch.no_grad():
        x = net.squeeze(golden["in.x0"])
        close(x, golden["dbg.gy_x0.squeeze"])
        for k, block in enumerate(net.blocks):
            pre = f"dbg.gy_x0.b{k}."
            h = block.actnorm(x)
            close(h, golden[pre + "actnorm"])
            shift, logs = block.F.shift_log_scale(h[:, 2:], 2, zeros)
            close(shift, golden[pre + "F_shift"])
            close(logs, golden[pre + "F_logs"])
            y = block.F(h, zeros)
            close(y[:, :2], golden[pre + "y1"])
            shift, logs = block.G.shift_log_scale(y[:, :2], 2, zeros)
            close(shift, golden[pre + "G_shift"])
            close(logs, golden[pre + "G_logs"])
            y = block.G(y, zeros)
            close(y[:, 2:], golden[pre + "y2"])
            x = block.mix(y)
            close(x, golden[pre + "out"])
        x = net.squeeze(golden["in.x1"])
        close(x, golden["dbg.gx_x1.squeeze"])
        for k, block in enumerate(net.blocks):
            x = block(x, ones)
            close(x, golden[f"dbg.gx_x1.b{k}.out"])
        z = net.squeeze(golden["in.x0"])
        for k in reversed(range(len(net.blocks))):
            z = net.blocks[k].inverse(z, ones)
            close(z, golden[f"dbg.gx_inv_x0.after_inv_b{k}"])


@needs_fixture
def test_time_lora_matches_official_factors_and_matrix(official, golden):
    flow = official[0]
    op, t = flow.op, golden["in.t"]
    with torch.no_grad():
        u, v = op.factors(t)
        close(v, golden["out.A1_t"])  # their A1 (lin1) is our V
        close(u, golden["out.A2_t"])  # their A2 (lin2) is our U
        emb = op.v_net[0](t)
        close(emb, golden["dbg.lora.lin1.0"])
        for i in range(1, 5):
            emb = op.v_net[i](emb)
            close(emb, golden[f"dbg.lora.lin1.{i}"])
        # their row-vector matrix A1 A2^T is the transpose of our column-vector A = U V^T
        a = op.matrix(float(golden["in.t_lin"][0]))
        close(a.T, golden["out.lin_t_025"][0])
        z = flow.encode(golden["in.x1"], 1.0)
        close(op(z, t).view(4, 1, 32, 32), golden["out.A_gx1_t"])


# ------------------------------------------------------------------------------- conversion


@needs_fixture
def test_convert_dry_run_checks_everything_and_writes_nothing(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["convert-official", str(CKPT), "--out", str(run), "--dry-run"]) == 0
    assert not run.exists()
    printed = capsys.readouterr().out
    assert '"blocks": 4' in printed and '"method": "rk4-authors"' in printed
    # an existing run is refused before anything is read
    run.mkdir()
    (run / "run.json").write_text("{}")
    with pytest.raises(LinearizerError, match="already holds a run"):
        convert_official(tmp_path / "missing.pth", run)
    (tmp_path / "file").write_text("")
    with pytest.raises(LinearizerError, match="not a folder"):
        convert_official(CKPT, tmp_path / "file")


@needs_fixture
def test_flow_config_of_the_fixture_and_refusals(official):
    layout = official[1]
    cfg = flow_config(layout, read_official_args(CKPT))
    net = cfg.network
    assert (net.kind, net.blocks, net.hidden, cfg.rank, net.img_size) == ("paper", 4, 16, 8, 32)
    assert (net.unet_channel_mult, net.unet_blocks, net.unet_attn) == ((1, 1), 2, (16,))
    # the authors' test-script sampler, with the solver their args name
    assert cfg.sampler == AUTHORS and cfg.noise_level == 0.3
    assert flow_config(layout, {"sampling_method": "euler"}).sampler == AUTHORS.replace(
        method="euler"
    )
    bad = {
        "5-channel": dataclasses.replace(layout, in_channels=5),
        "squeeze": dataclasses.replace(layout, in_channels=3, squeeze=False),
        "clamp": dataclasses.replace(layout, clamp=4.0),
        "heads": dataclasses.replace(layout, unet={**layout.unet, "num_heads": 2}),
        "time embedding": dataclasses.replace(layout, unet={**layout.unet, "emb_mult": 2}),
    }
    for what, variant in bad.items():
        with pytest.raises(LinearizerError, match=f"cannot convert to a flow run: .*{what}"):
            flow_config(variant)


@needs_fixture
def test_args_json_is_read_two_folders_up_and_checked(tmp_path):
    (tmp_path / "models").mkdir()
    link = tmp_path / "models" / "model.pth"
    link.symlink_to(CKPT)
    assert read_official_args(link) is None  # no args.json beside the link: pickle only
    result = convert_official(link, tmp_path / "run", dry_run=True)
    assert result["official"]["args"] is None and result["config"]["network"]["img_size"] == 32
    assert result["official"]["args_json"] is None and not (tmp_path / "run").exists()
    (tmp_path / "args.json").write_text('{"img_size": 64, "in_ch": 1}')
    with pytest.raises(LinearizerError, match="img_size=64"):
        convert_official(link, tmp_path / "run", dry_run=True)
