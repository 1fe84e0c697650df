"""Checkpoints (safetensors + JSON, verified, pruned), EMA and Hub-style folders."""

from __future__ import annotations

import errno
import json
import os
import random

import numpy as np
import pytest
import torch
from torch import nn

from linearizer.errors import LinearizerError
from linearizer.training.checkpoint import (
    checkpoint_path,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    load_weights,
    model_signature,
    save_checkpoint,
    sidecar,
)
from linearizer.training.ema import EMA
from linearizer.training.model_folder import (
    checkpoint_to_pretrained,
    from_pretrained,
    save_pretrained,
)
from tolerance import assert_near
from toy_task import ToyConfig, ToyNet


def make_net(width: int = 6) -> nn.Module:
    torch.manual_seed(0)
    return ToyNet(3, width).double()  # has a shared sub-network and an integer buffer


def adam_steps(net: nn.Module, opt: torch.optim.Optimizer, n: int, seed: int = 1) -> None:
    gen = torch.Generator().manual_seed(seed)
    for _ in range(n):
        x = torch.randn(5, 3, generator=gen, dtype=torch.float64)
        opt.zero_grad()
        net(x).pow(2).mean().backward()
        opt.step()


def states_equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_round_trip_continues_identically(tmp_path):
    net = make_net()
    opt = torch.optim.Adam(net.parameters(), lr=1e-2, betas=(0.8, 0.95))
    ema = EMA(net, decay=0.9, warmup=2)
    adam_steps(net, opt, 3)
    ema.update(net)
    torch.manual_seed(5), np.random.seed(6), random.seed(7)
    save_checkpoint(
        tmp_path,
        3,
        net,
        optimizer=opt,
        ema=ema,
        config={"lr": 0.01},
        model_kind="toy",
        extra={"note": "hi"},
        extra_tensors={"t": torch.ones(2)},
    )
    after = (torch.rand(3), np.random.rand(3), random.random())

    net2 = make_net(6)
    with torch.no_grad():
        for p in net2.parameters():
            p.add_(1.0)
    opt2 = torch.optim.Adam(net2.parameters(), lr=1.0)
    ema2 = EMA(net2, decay=0.5)
    ckpt = load_checkpoint(
        latest_checkpoint(tmp_path), net2, optimizer=opt2, ema=ema2, model_kind="toy"
    )
    assert (ckpt.step, ckpt.config, ckpt.extra) == (3, {"lr": 0.01}, {"note": "hi"})
    assert torch.equal(ckpt.meta["extra_tensors"]["t"], torch.ones(2))
    assert torch.equal(torch.rand(3), after[0])
    assert np.array_equal(np.random.rand(3), after[1]) and random.random() == after[2]
    assert opt2.param_groups[0]["betas"] == (0.8, 0.95) and opt2.param_groups[0]["lr"] == 1e-2
    assert (ema2.decay, ema2.warmup, ema2.num_updates) == (0.9, 2, 1)
    assert states_equal(ema.shadow, ema2.shadow)
    adam_steps(net, opt, 2, seed=9)
    adam_steps(net2, opt2, 2, seed=9)
    assert states_equal(net.state_dict(), net2.state_dict())


def test_shared_weights_stored_once_and_files_are_plain(tmp_path):
    net = make_net()
    path = save_checkpoint(tmp_path, 1, net, model_kind="toy")
    meta = json.loads(sidecar(path).read_text())
    assert meta["model_aliases"] == {
        "twice.0.weight": "body.0.weight",
        "twice.0.bias": "body.0.bias",
        "twice.2.weight": "body.2.weight",
        "twice.2.bias": "body.2.bias",
    }
    from safetensors.torch import load_file

    keys = load_file(str(path)).keys()
    assert "model.body.0.weight" in keys and not any(k.startswith("model.twice") for k in keys)
    fresh = ToyNet(3, 6).double()
    load_checkpoint(path, fresh)
    assert fresh.twice is fresh.body and states_equal(fresh.state_dict(), net.state_dict())


def test_foreign_checkpoints_are_refused_in_one_line(tmp_path):
    path = save_checkpoint(tmp_path, 1, make_net(6), model_kind="toy")
    with pytest.raises(LinearizerError) as err:
        load_checkpoint(path, ToyNet(3, 7).double(), model_kind="toy")
    msg = str(err.value)
    assert "different architecture" in msg and "'body.0.bias' is (6,) there, (7,) here" in msg
    assert "\n" not in msg
    with pytest.raises(LinearizerError, match="saved by a 'toy' model, not a 'flow' model"):
        load_checkpoint(path, make_net(6), model_kind="flow")
    assert model_signature(make_net(6)) != model_signature(ToyNet(3, 7))


def test_keep_last_prunes_oldest(tmp_path):
    net = make_net()
    for step in range(1, 6):
        save_checkpoint(tmp_path, step, net, keep_last=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == [
        "ckpt_00000004.safetensors",
        "ckpt_00000005.safetensors",
    ]
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [
        "ckpt_00000004.json",
        "ckpt_00000004.safetensors",
        "ckpt_00000005.json",
        "ckpt_00000005.safetensors",
    ]


@pytest.mark.parametrize("damage", ["flip", "truncate", "no-json", "bad-json", "no-tensors"])
def test_latest_falls_back_past_a_damaged_newest(tmp_path, damage):
    net = make_net()
    for step in (10, 20):
        save_checkpoint(tmp_path, step, net, keep_last=5)
    newest = checkpoint_path(tmp_path, 20)
    blob = bytearray(newest.read_bytes())
    if damage == "flip":
        blob[len(blob) // 2] ^= 0xFF
        newest.write_bytes(bytes(blob))
    elif damage == "truncate":
        newest.write_bytes(bytes(blob[: len(blob) // 2]))
    elif damage == "no-json":
        sidecar(newest).unlink()
    elif damage == "bad-json":
        sidecar(newest).write_text('{"format": ')
    else:
        newest.unlink()
    with pytest.warns(UserWarning, match="falling back to ckpt_00000010"):
        assert latest_checkpoint(tmp_path) == checkpoint_path(tmp_path, 10)
    if damage in ("flip", "truncate"):
        with pytest.raises(LinearizerError, match="corrupt|truncated"):
            load_checkpoint(newest, net)


def test_no_usable_checkpoint(tmp_path):
    assert latest_checkpoint(tmp_path) is None
    path = save_checkpoint(tmp_path, 1, make_net())
    path.write_bytes(b"garbage")
    with pytest.warns(UserWarning, match="no usable checkpoint"):
        assert latest_checkpoint(tmp_path) is None


def test_disk_full_is_a_clear_error_and_leaves_nothing_behind(tmp_path, monkeypatch):
    real_replace = os.replace

    def full(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(LinearizerError, match="No space left on device"):
        save_checkpoint(tmp_path, 1, make_net())
    monkeypatch.setattr(os, "replace", real_replace)
    assert list((tmp_path / "checkpoints").iterdir()) == []


# ----------------------------------------------------------------------------- EMA


def test_ema_warmup_and_decay():
    net = nn.Linear(2, 2, bias=False).double()
    ema = EMA(net, decay=0.9, warmup=4)
    assert [ema.current_decay() for _ in range(1)] == [0.0]
    w = []
    for k in range(6):
        with torch.no_grad():
            net.weight.fill_(float(k))
        w.append(ema.current_decay())
        ema.update(net)
    assert w == pytest.approx([0.0, 0.225, 0.45, 0.675, 0.9, 0.9])
    expect = 0.0
    for k, d in enumerate(w):
        expect = d * expect + (1 - d) * k
    expected = torch.full((2, 2), expect, dtype=torch.float64)
    assert_near(ema.shadow["weight"], expected, eps_factor=100)


def test_ema_swap_restores_bitwise_even_with_shared_weights():
    net = make_net()
    ema = EMA(net, decay=0.5)
    train_state = {k: v.clone() for k, v in net.state_dict().items()}
    with torch.no_grad():
        for p in net.parameters():
            p.mul_(3.0)
    ema.update(net)
    trained = {k: v.clone() for k, v in net.state_dict().items()}
    averaged = (train_state["body.0.weight"] + trained["body.0.weight"]) / 2
    with pytest.raises(RuntimeError), ema.applied(net):
        assert torch.equal(net.body[0].weight, averaged)
        assert net.twice[0].weight is net.body[0].weight
        raise RuntimeError("evaluation failed")
    assert states_equal(net.state_dict(), trained)
    clone = EMA(make_net(), decay=0.1)
    clone.load_state_dict(ema.state_dict())
    assert states_equal(clone.shadow, ema.shadow) and clone.decay == 0.5


def test_ema_refuses_another_model():
    ema = EMA(make_net(6))
    with pytest.raises(LinearizerError, match="shape"):
        EMA(make_net(7)).load_state_dict(ema.state_dict())


# ----------------------------------------------------------------------------- Hub folders


def test_pretrained_round_trip_and_refusal(tmp_path):
    cfg = ToyConfig(dim=3, width=5)
    net = ToyNet(cfg.dim, cfg.width)
    save_pretrained(net, tmp_path / "hub", cfg, model_kind="toy")
    assert sorted(p.name for p in (tmp_path / "hub").iterdir()) == [
        "config.json",
        "model.safetensors",
    ]
    back = from_pretrained(tmp_path / "hub", lambda c: ToyNet(c.dim, c.width), ToyConfig, "toy")
    assert states_equal(back.state_dict(), net.state_dict()) and back.twice is back.body
    with pytest.raises(LinearizerError, match="different architecture"):
        from_pretrained(tmp_path / "hub", lambda c: ToyNet(c.dim, c.width + 1), ToyConfig)
    with pytest.raises(LinearizerError, match="not a 'flow' model"):
        from_pretrained(tmp_path / "hub", lambda c: ToyNet(3, 5), ToyConfig, "flow")


def test_checkpoint_exports_ema_weights(tmp_path):
    net = make_net()
    ema = EMA(net, decay=0.5)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(1.0)
    ema.update(net)
    path = save_checkpoint(tmp_path, 7, net, ema=ema, config={"width": 6}, model_kind="toy")
    out = checkpoint_to_pretrained(path, tmp_path / "hub", make_net())
    back = from_pretrained(out, lambda c: ToyNet(3, c["width"]).double())
    assert torch.equal(back.body[0].weight, ema.shadow["body.0.weight"])
    raw = load_weights(path, make_net(), use_ema=False)
    assert raw.step == 7
