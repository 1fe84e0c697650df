"""The paper's U-Net conditioner: parity with the authors' code, layout, init, dropout, errors."""

from __future__ import annotations

import math

import pytest
import torch

from linearizer.errors import LinearizerError
from linearizer.invertible import set_dropout_seed
from linearizer.invertible.unet import PaperUNet, ResBlock, paper_network, time_features
from official_fixture import CKPT, load_golden, needs_fixture
from tolerance import assert_near, rel_err

PREFIX = "net_gx.g.blocks.0.F.cond.net."
PARITY_EPS = 1000  # float32 parity with the authors' outputs, in eps of each tensor's scale


@pytest.fixture(scope="module")
def golden():
    return load_golden()


@pytest.fixture(scope="module")
def ckpt():
    from linearizer.safe_pickle import read_torch_checkpoint

    return read_torch_checkpoint(CKPT)


@pytest.fixture(scope="module")
def unet(ckpt):
    from linearizer.compat.official import unet_from_official

    return unet_from_official(ckpt.state_dict, PREFIX, ckpt.root.child(PREFIX[:-1]))


def _official_qkv(ours: torch.Tensor) -> torch.Tensor:
    """Our [q | k | v] channel blocks back to their per-feature interleaving, to compare."""
    c = ours.shape[1] // 3
    order = torch.arange(3 * c).view(3, c).T.reshape(-1)
    return ours[:, order]


def _record(unet: PaperUNet) -> tuple[dict[str, torch.Tensor], list]:
    """Hooks storing every intermediate under the golden ``dbg.cond.*`` names."""
    seen: dict[str, torch.Tensor] = {}
    handles = []

    def keep(name, pre=False, fix=None):
        def hook(module, args, out=None):
            value = args[0] if pre else out
            seen[name] = fix(value) if fix else value

        return hook

    handles.append(unet.time_mlp0.register_forward_hook(keep("map_layer0")))
    handles.append(unet.time_mlp1.register_forward_hook(keep("map_layer1")))
    top = unet.encoder_roles[0][1]
    for part, layers, roles in (
        ("enc", unet.encoder, unet.encoder_roles),
        ("dec", unet.decoder, unet.decoder_roles),
    ):
        for layer, (role, r, i) in zip(layers, roles):
            name = f"{part}.{r}x{r}_{role}" + ("" if role in ("conv", "down", "up") else str(i))
            handles.append(layer.register_forward_hook(keep(name)))
            if not isinstance(layer, ResBlock):
                continue
            handles.append(layer.register_forward_pre_hook(keep(name + ".input", pre=True)))
            for sub in ("norm0", "conv0", "affine", "norm1", "conv1", "skip", "norm2", "proj"):
                if getattr(layer, sub) is not None:
                    hook = keep(f"{name}.{sub}")
                    handles.append(getattr(layer, sub).register_forward_hook(hook))
            if layer.qkv is not None:
                hook = keep(f"{name}.qkv", fix=_official_qkv)
                handles.append(layer.qkv.register_forward_hook(hook))
    handles.append(unet.out_norm.register_forward_hook(keep(f"dec.{top}x{top}_aux_norm")))
    handles.append(unet.out_conv.register_forward_hook(keep(f"dec.{top}x{top}_aux_conv")))
    return seen, handles


@needs_fixture
def test_conditioner_matches_official_output_and_every_intermediate(golden, unet):
    seen, handles = _record(unet)
    try:
        with torch.no_grad():
            out = unet(golden["in.cond_x"], golden["in.cond_t"])
    finally:
        for h in handles:
            h.remove()
    assert_near(out, golden["out.cond_b0F_raw"], eps_factor=PARITY_EPS, what="cond_b0F_raw")
    # their map_noise is [cos | sin]; ours is the swapped [sin | cos] that feeds map_layer0
    feats = time_features(golden["in.cond_t"], unet.time_channels)
    half = unet.time_channels // 2
    swapped = torch.cat([feats[:, half:], feats[:, :half]], dim=1)
    assert_near(swapped, golden["dbg.cond.map_noise"], eps_factor=PARITY_EPS, what="map_noise")
    expected = [k[len("dbg.cond.") :] for k in golden if k.startswith("dbg.cond.")]
    expected.remove("map_noise")
    checked = 0
    for name in expected:
        assert name in seen, f"no intermediate recorded for dbg.cond.{name}"
        assert_near(seen[name], golden[f"dbg.cond.{name}"], eps_factor=PARITY_EPS, what=name)
        checked += 1
    assert checked == 49


@needs_fixture
def test_conditioner_layout_matches_the_specification(ckpt, unet):
    assert [r[0] for r in unet.encoder_roles] == [
        "conv",
        "block",
        "block",
        "down",
        "block",
        "block",
    ]
    assert [r[0] for r in unet.decoder_roles] == ["in", "in"] + ["block"] * 3 + ["up"] + [
        "block"
    ] * 3
    attention = [i for i, b in enumerate(unet.encoder) if isinstance(b, ResBlock) and b.num_heads]
    assert attention == [1, 2]
    assert [i for i, b in enumerate(unet.decoder) if b.num_heads] == [0, 8]
    assert [b.norm0.num_groups for b in unet.decoder][2] == 8  # 32 channels -> 8 groups
    assert unet.encoder[1].norm0.num_groups == 4 and unet.encoder[1].norm0.eps == 1e-6
    theirs = sum(
        t.numel()
        for k, t in ckpt.state_dict.items()
        if k.startswith(PREFIX) and not k.endswith("resample_filter")
    )
    assert sum(p.numel() for p in unet.parameters()) == theirs


def test_fresh_init_follows_section_3_5():
    torch.manual_seed(0)
    net = PaperUNet(2, 4, model_channels=16, resolution=16)
    block = net.encoder[1]

    def bound(w):
        fan_in = w.shape[1] * w[0, 0].numel()
        fan_out = w.shape[0] * w[0, 0].numel()
        return math.sqrt(6.0 / (fan_in + fan_out))

    for w, factor in (
        (block.conv0.weight, 1.0),
        (block.conv1.weight, 1e-5),
        (block.qkv.weight, math.sqrt(0.2)),
        (block.proj.weight, 1e-5),
        (net.out_conv.weight, 1e-5),
        (net.time_mlp0.weight, 1.0),
    ):
        w = w.detach()
        top = bound(w) * factor
        assert float(w.abs().max()) <= top
        assert float(w.abs().max()) > 0.5 * top  # a uniform draw reaches near its bound
    biases = [m.bias for m in net.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    assert all(float(b.detach().abs().max()) == 0.0 for b in biases)
    # the output layer is near zero, so the coupling starts close to the identity
    with torch.no_grad():
        out = net(torch.randn(2, 2, 16, 16), torch.ones(2))
    assert float(out.abs().max()) < 1e-3


def test_shapes_dtypes_and_flag_handling():
    torch.manual_seed(1)
    net = PaperUNet(
        3,
        6,
        model_channels=8,
        channel_mult=(1, 2),
        resolution=8,
        attn_resolutions=(4,),
        dropout=0.0,
    ).double()
    for w in (net.out_conv.weight, *[b.conv1.weight for b in net.decoder]):
        torch.nn.init.normal_(w)  # leave the near-zero init so the flag visibly matters
    x = torch.randn(2, 3, 8, 8, dtype=torch.float64)
    out = net(x, torch.zeros(2, dtype=torch.float64))
    assert out.shape == (2, 6, 8, 8) and out.dtype == torch.float64
    assert torch.equal(net(x), out)  # flag=None means tau = 0
    assert rel_err(net(x, torch.ones(2)), out) > 1e-3
    assert torch.equal(net(x, torch.tensor(1.0)), net(x, torch.ones(2)))  # scalar broadcasts
    per_sample = net(x, torch.tensor([0.0, 1.0]))
    assert_near(per_sample[0], out[0], eps_factor=1e3)
    with pytest.raises(LinearizerError, match="expects"):
        net(torch.randn(2, 2, 8, 8, dtype=torch.float64))
    with pytest.raises(LinearizerError, match="divisible"):
        net(torch.randn(2, 3, 7, 7, dtype=torch.float64))
    with pytest.raises(LinearizerError, match="flag"):
        net(x, torch.ones(3))


def test_paper_network_is_exactly_invertible_in_train_mode_with_dropout():
    torch.manual_seed(2)
    g = paper_network(img_size=8, num_blocks=2, model_channels=8, dropout=0.5).double()
    for m in g.modules():  # make the couplings far from the identity
        if isinstance(m, ResBlock):
            torch.nn.init.normal_(m.conv1.weight, std=0.3)
        if isinstance(m, PaperUNet):
            torch.nn.init.normal_(m.out_conv.weight, std=0.1)
    g.train()
    set_dropout_seed(g, 7)
    x = torch.randn(3, 1, 8, 8, dtype=torch.float64)
    z = g(x, 1.0)
    assert_near(g.inverse(z, 1.0), x, eps_factor=1e5, what="round trip")
    # the dropout is really active: another seed gives another map
    set_dropout_seed(g, 8)
    assert rel_err(g(x, 1.0), z) > 1e-3
    assert g.blocks[0].F.clamp_mode == "hard" and g.blocks[0].F.clamp == 5.0
    assert isinstance(g.blocks[0].F.cond, PaperUNet) and g.blocks[0].F.cond.in_channels == 2
