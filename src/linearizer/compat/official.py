"""The authors' released one-step checkpoints -> our paper network + TimeLoRA, with parity.

Their release is a whole pickled ``OneStepLinearizer`` (``models/model.pth``) next to
``args.json`` two folders up. We read the pickle with :mod:`linearizer.safe_pickle` (nothing in
it runs), infer the architecture from the pickle itself (block count, U-Net widths, levels,
attention, LoRA sizes - never from ``args.json``, which older runs got wrong), translate every
tensor name through :data:`KEY_TABLE`, and translate their row-vector operator
``z @ (A1 A2^T)`` into our
column convention ``A = U V^T`` with ``U = A2`` (their ``lin2``) and ``V = A1`` (their ``lin1``).

>>> flow, layout = load_official("ckpt/models/model.pth")  # doctest: +SKIP
>>> convert_official("ckpt/models/model.pth", "runs/official")  # doctest: +SKIP
>>> model, cfg, step = load_flow_run("runs/official")  # doctest: +SKIP
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from .. import __version__
from ..errors import LinearizerError
from ..flow.config import PAPER, FlowConfig
from ..flow.spec import AUTHORS
from ..invertible.unet import PaperUNet, paper_network
from ..io import file_sha256, read_json, write_json
from ..operators.lora import TimeLoRA
from ..safe_pickle import PickledObject, TorchCheckpoint, read_torch_checkpoint

__all__ = [
    "KEY_TABLE",
    "OfficialLayout",
    "build_official_flow",
    "convert_official",
    "flow_config",
    "infer_layout",
    "key_map",
    "load_official",
    "read_official_args",
    "unet_from_official",
    "unet_key_map",
]

# ------------------------------------------------------------------------------------------
# The one mapping table: our module path (in OneStepFlow) <- the authors' module path, and how
# the tensors move. ``{k}`` = invertible block, ``{c}`` = coupling F|G, ``{j}`` = Sequential
# index; inside a conditioner, ``{i}`` = our encoder/decoder index, whose name on their side
# (``{enc}``/``{dec}``) comes from UNET_NAMES, and ``{top}`` = the top resolution ("16x16").
# Leaf names below a mapped module are the same on both sides unless LEAF_TRANSFORMS says so.
# ------------------------------------------------------------------------------------------
KEY_TABLE: tuple[tuple[str, str, str], ...] = (
    # ours                               theirs                                   how
    ("net.blocks.{k}.actnorm", "net_gx.g.blocks.{k}.actnorm", "copy"),
    ("net.blocks.{k}.mix", "net_gx.g.blocks.{k}.mix.W", "dense-to-lu"),
    ("net.blocks.{k}.{c}.cond", "net_gx.g.blocks.{k}.{c}.cond.net", "unet"),
    ("op.u_net.{j}", "linear_network.lin2.{j}", "copy"),  # U = A2 (column convention)
    ("op.v_net.{j}", "linear_network.lin1.{j}", "copy"),  # V = A1
    # inside one conditioner (PaperUNet <- their SongUNet), relative to the "unet" row
    ("time_mlp0", "map_layer0", "copy"),
    ("time_mlp1", "map_layer1", "copy"),
    ("encoder.{i}", "enc.{enc}", "copy"),
    ("decoder.{i}", "dec.{dec}", "copy"),
    ("out_norm", "dec.{top}_aux_norm", "copy"),
    ("out_conv", "dec.{top}_aux_conv", "copy"),
)
# Our U-Net roles (PaperUNet.encoder_roles / decoder_roles) -> the authors' segment names.
UNET_NAMES = {
    ("enc", "conv"): "{r}x{r}_conv",
    ("enc", "down"): "{r}x{r}_down",
    ("enc", "block"): "{r}x{r}_block{i}",
    ("dec", "in"): "{r}x{r}_in{i}",
    ("dec", "up"): "{r}x{r}_up",
    ("dec", "block"): "{r}x{r}_block{i}",
}
# Leaves that need more than a copy: their qkv rows interleave (q, k, v) per feature.
LEAF_TRANSFORMS = {"qkv.weight": "deinterleave-qkv", "qkv.bias": "deinterleave-qkv"}
# Their tensors we do not need: constant 0.25 resampling filters (we mean-pool / repeat).
IGNORED_LEAVES = ("resample_filter",)
_UNET_ROWS = 5  # the first rows are whole-model rows, the rest conditioner-relative


@dataclass
class OfficialLayout:
    """Everything needed to rebuild the authors' model with our modules (all from the pickle)."""

    in_channels: int
    img_size: int
    num_blocks: int
    squeeze: bool
    clamp: float
    unet: dict[str, Any] = field(default_factory=dict)
    lora: dict[str, Any] = field(default_factory=dict)

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return (self.in_channels, self.img_size, self.img_size)

    def network_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of :func:`paper_network` for this layout."""
        u = self.unet
        return {
            "in_channels": self.in_channels,
            "img_size": self.img_size,
            "num_blocks": self.num_blocks,
            "model_channels": u["model_channels"],
            "dropout": u["dropout"],
            "channel_mult": list(u["channel_mult"]),
            "unet_blocks": u["num_blocks"],
            "attn_resolutions": list(u["attn_resolutions"]),
            "clamp": self.clamp,
        }


# ------------------------------------------------------------------------------------------
# reading
# ------------------------------------------------------------------------------------------


def read_official_args(pth_path: str | Path) -> dict[str, Any] | None:
    """``args.json`` two folders up from ``.../models/model.pth`` (as their loader), or None."""
    # Like their loader: plain path arithmetic, no symlink resolution.
    path = Path(os.path.abspath(pth_path)).parent.parent / "args.json"
    if not path.is_file():
        return None
    args = read_json(path)
    if not isinstance(args, dict):
        raise LinearizerError(f"{path} is not a JSON object")
    return args


def _tensor(state: dict[str, Tensor], key: str) -> Tensor:
    t = state.get(key)
    if t is None:
        raise LinearizerError(f"official checkpoint lacks {key!r}; not a supported layout")
    return t


def _unet_layout(state: dict[str, Tensor], prefix: str, node: PickledObject | None) -> dict:
    """The U-Net hyper-parameters, read off one conditioner's keys and shapes (and attributes)."""
    segs = {k[len(prefix) :].split(".")[1] for k in state if k.startswith(prefix + "enc.")}
    res_of = {int(m.group(1)) for s in segs if (m := re.match(r"(\d+)x\1_", s))}
    if not res_of:
        raise LinearizerError(f"no U-Net encoder found under {prefix!r}")
    top = max(res_of)
    levels = [top >> lv for lv in range(len(res_of))]  # resolutions, finest first
    if sorted(res_of, reverse=True) != levels:
        raise LinearizerError(f"unexpected U-Net resolutions {sorted(res_of)}")
    conv = _tensor(state, f"{prefix}enc.{top}x{top}_conv.weight")
    model_channels, in_channels = conv.shape[0], conv.shape[1]
    num_blocks = sum(1 for s in segs if re.fullmatch(rf"{top}x{top}_block\d+", s))
    mult = []
    for r in levels:
        width = _tensor(state, f"{prefix}enc.{r}x{r}_block0.conv0.weight").shape[0]
        if width % model_channels:
            raise LinearizerError(f"U-Net width {width} is not a multiple of {model_channels}")
        mult.append(width // model_channels)
    attn = [r for r in levels if f"{prefix}enc.{r}x{r}_block0.qkv.weight" in state]
    map0 = _tensor(state, f"{prefix}map_layer0.weight")
    out = _tensor(state, f"{prefix}dec.{top}x{top}_aux_conv.weight")
    dropout, heads = 0.1, 1
    if node is not None:
        block = node.child(f"enc.{top}x{top}_block0")
        dropout = float(block.attrs.get("dropout", dropout))
        heads = int(block.attrs.get("num_heads", heads) or heads)
        if block.attrs.get("adaptive_scale", False):
            raise LinearizerError("official U-Net with adaptive (scale-shift) time is unsupported")
        skip_scale = float(block.attrs.get("skip_scale", math.sqrt(0.5)))
        if abs(skip_scale - math.sqrt(0.5)) > 1e-12:
            raise LinearizerError(f"official U-Net skip scale {skip_scale} is unsupported")
        pos = node.modules.get("map_noise")
        if pos is not None and (
            pos.attrs.get("max_positions", 10000) != 10000 or not pos.attrs.get("endpoint", True)
        ):
            raise LinearizerError("official U-Net time embedding variant is unsupported")
    return {
        "in_channels": int(in_channels),
        "out_channels": int(out.shape[0]),
        "model_channels": int(model_channels),
        "channel_mult": mult,
        "num_blocks": num_blocks,
        "attn_resolutions": attn,
        "resolution": top,
        "dropout": dropout,
        "emb_mult": int(map0.shape[0]) // int(model_channels),
        "time_channels": int(map0.shape[1]),
        "num_heads": heads,
    }


def _lora_layout(state: dict[str, Tensor], root: PickledObject, dim: int) -> dict:
    lin = root.child("linear_network.lin1")
    linears = sorted(int(k) for k, m in lin.modules.items() if m is not None and m.parameters)
    if not linears or linears != list(range(1, 2 * len(linears), 2)):
        raise LinearizerError(f"unexpected official LoRA MLP layout (linear layers at {linears})")
    for idx, mod in lin.modules.items():
        if int(idx) % 2 == 0 and int(idx) > 0:
            if not mod.type.endswith("GELU") or mod.attrs.get("approximate", "none") != "none":
                raise LinearizerError(f"official LoRA activation {mod.type} is unsupported")
    first = _tensor(state, "linear_network.lin1.1.weight")
    last = _tensor(state, f"linear_network.lin1.{linears[-1]}.weight")
    if last.shape[0] % dim:
        raise LinearizerError(f"LoRA output {last.shape[0]} is not a multiple of D = {dim}")
    emb = lin.modules.get("0")
    if emb is None or not emb.type.endswith("SinusoidalPosEmb"):
        raise LinearizerError("official LoRA MLP does not start with SinusoidalPosEmb")
    return {
        "features": dim,
        "rank": int(last.shape[0]) // dim,
        "emb_dim": int(first.shape[1]),
        "hidden": int(first.shape[0]),
        "depth": len(linears) - 1,
        "activation": "gelu",
    }


def infer_layout(ckpt: TorchCheckpoint, args: dict[str, Any] | None = None) -> OfficialLayout:
    """Read the architecture off the pickle (the block count from ``net_gx.g.blocks``)."""
    root, state = ckpt.root, ckpt.state_dict
    if not isinstance(root, PickledObject) or not root.type.endswith("OneStepLinearizer"):
        kind = root.type if isinstance(root, PickledObject) else type(root).__name__
        raise LinearizerError(f"not an official one-step checkpoint (root object is {kind})")
    gx, gy = root.child("net_gx"), root.child("net_gy")
    if gx is not gy and any(
        not torch.equal(t, state.get("net_gy" + k[6:], t.new_empty(0)))
        for k, t in state.items()
        if k.startswith("net_gx.")
    ):
        raise LinearizerError("checkpoint has separate g_x and g_y networks: unsupported")
    inv = root.child("net_gx.g")
    blocks = root.child("net_gx.g.blocks").modules
    num_blocks = len(blocks)
    if num_blocks < 1:
        raise LinearizerError("official checkpoint has no invertible blocks")
    for k, block in blocks.items():
        if not block.modules["actnorm"].attrs.get("initialized", True):
            raise LinearizerError(f"block {k}: ActNorm was never initialised (untrained model)")
    width = int(_tensor(state, "net_gx.g.blocks.0.actnorm.bias").shape[1])
    squeeze = bool(inv.attrs.get("use_squeeze", width % 4 == 0))
    in_channels = width // 4 if squeeze else width
    prefix = "net_gx.g.blocks.0.F.cond.net."
    unet = _unet_layout(state, prefix, root.child("net_gx.g.blocks.0.F.cond.net"))
    img_size = unet["resolution"] * (2 if squeeze else 1)
    dim = int(gx.attrs.get("dim", in_channels * img_size * img_size))
    if dim != in_channels * img_size * img_size:
        raise LinearizerError(f"latent size {dim} does not match images {in_channels}x{img_size}²")
    if args is not None:
        for key, value in (("img_size", img_size), ("in_ch", in_channels)):
            if key in args and args[key] != value:
                raise LinearizerError(
                    f"args.json says {key}={args[key]} but the checkpoint holds {value}"
                )
    clamp = float(blocks["0"].modules["F"].attrs.get("clamp", 5.0))
    return OfficialLayout(
        in_channels=in_channels,
        img_size=img_size,
        num_blocks=num_blocks,
        squeeze=squeeze,
        clamp=clamp,
        unet=unet,
        lora=_lora_layout(state, root, dim),
    )


# ------------------------------------------------------------------------------------------
# building and mapping
# ------------------------------------------------------------------------------------------


def build_official_flow(layout: OfficialLayout) -> nn.Module:
    """Our :class:`OneStepFlow` with the paper network and TimeLoRA for ``layout`` (random init)."""
    from ..flow.model import OneStepFlow

    net = paper_network(**layout.network_kwargs())
    op = TimeLoRA(**layout.lora)
    return OneStepFlow(net, op, layout.image_shape)


def _pattern(template: str) -> re.Pattern:
    out = re.escape(template)
    for name in ("k", "i", "j"):
        out = out.replace(re.escape("{" + name + "}"), rf"(?P<{name}>\d+)")
    out = out.replace(re.escape("{c}"), r"(?P<c>[FG])")
    return re.compile(out + r"(?:\.(?P<leaf>.+))?$")


_PATTERNS = [(_pattern(ours), theirs, how) for ours, theirs, how in KEY_TABLE]
_OUTER, _INNER = _PATTERNS[:_UNET_ROWS], _PATTERNS[_UNET_ROWS:]


def _match(key: str, rows: list, what: str) -> tuple[dict[str, str], str | None, str, str]:
    """The first row of ``rows`` naming ``key``: its fields, leaf, their template and transform;
    a key no row names is a gap in the table, an error naming ``what`` the key is."""
    for pattern, theirs, how in rows:
        m = pattern.match(key)
        if m is not None:
            fields = {k: v for k, v in m.groupdict().items() if v is not None}
            return fields, fields.pop("leaf", None), theirs, how
    raise LinearizerError(f"no official name for {what} {key!r} (table gap)")


def _with_leaf(name: str, leaf: str | None, how: str) -> tuple[str, str]:
    if not leaf:
        return name, how
    return f"{name}.{leaf}", LEAF_TRANSFORMS.get(".".join(leaf.split(".")[-2:]), how)


def unet_key_map(unet: PaperUNet) -> dict[str, tuple[str, str]]:
    """``our key -> (their key, transform)`` inside one conditioner (keys relative to it)."""
    names = {}
    for part, roles in (("enc", unet.encoder_roles), ("dec", unet.decoder_roles)):
        for n, (role, r, i) in enumerate(roles):
            names[f"{part}:{n}"] = UNET_NAMES[(part, role)].format(r=r, i=i)
    top = unet.encoder_roles[0][1]
    out = {}
    for key in unet.state_dict():
        fields, leaf, theirs, how = _match(key, _INNER, "U-Net tensor")
        i = fields.get("i", "")
        fields |= {"top": f"{top}x{top}"}
        fields |= {"enc": names.get(f"enc:{i}"), "dec": names.get(f"dec:{i}")}
        out[key] = _with_leaf(theirs.format(**fields), leaf, how)
    return out


def key_map(flow: nn.Module) -> dict[str, tuple[str, str]]:
    """``our key -> (their key, transform)`` for every tensor of ``flow``'s state dict.

    Transforms: ``copy``, ``deinterleave-qkv``, ``dense-to-lu`` (our LU parameters of one
    layer all come from one dense ``mix.W``), ``initialized`` (our ActNorm flag; theirs is a
    plain attribute, and a loaded model is initialised).
    """
    out: dict[str, tuple[str, str]] = {}
    inner: dict[str, dict[str, tuple[str, str]]] = {}
    for key in flow.state_dict():
        fields, leaf, theirs, how = _match(key, _OUTER, "our tensor")
        name = theirs.format(**fields)
        if how == "unet":
            prefix = key[: len(key) - len(leaf) - 1]
            if prefix not in inner:
                inner[prefix] = unet_key_map(flow.get_submodule(prefix))
            rel, rel_how = inner[prefix][leaf]
            out[key] = (f"{name}.{rel}", rel_how)
        elif how == "dense-to-lu":
            out[key] = (name, how)
        elif leaf == "initialized":
            out[key] = (name, "initialized")
        else:
            out[key] = _with_leaf(name, leaf, how)
    return out


def _deinterleave(t: Tensor) -> Tensor:
    """Their qkv rows (q_0, k_0, v_0, q_1, ...) -> ours (q_0..q_{C-1}, k_..., v_...)."""
    c = t.shape[0] // 3
    order = torch.arange(3 * c).view(c, 3).T.reshape(-1)
    return t[order]


def _load_into(flow: nn.Module, state: dict[str, Tensor]) -> None:
    """Fill ``flow`` from their state dict; every needed key must exist, every key must be used."""
    mapping = key_map(flow)
    ours = flow.state_dict()
    new: dict[str, Tensor] = {}
    used: set[str] = set()
    for key, (theirs, how) in mapping.items():
        if how == "initialized":
            new[key] = torch.ones_like(ours[key])
            continue
        if how == "dense-to-lu":
            continue  # set below, once per layer
        src = _tensor(state, theirs)
        value = _deinterleave(src) if how == "deinterleave-qkv" else src
        if tuple(value.shape) != tuple(ours[key].shape):
            raise LinearizerError(
                f"shape mismatch: our {key} is {tuple(ours[key].shape)}, "
                f"their {theirs} is {tuple(src.shape)}"
            )
        new[key] = value.to(ours[key].dtype)
        used.add(theirs)
    missing = [k for k in ours if k not in new and mapping[k][1] != "dense-to-lu"]
    if missing:
        raise LinearizerError(f"unmapped tensors: {missing[:5]}")
    flow.load_state_dict({**ours, **new})
    for key, (theirs, how) in mapping.items():
        if how == "dense-to-lu" and theirs not in used:
            layer = flow.get_submodule(key.rsplit(".", 1)[0])
            layer.set_weight_(_tensor(state, theirs).to(torch.float64))
            used.add(theirs)
    unused = [
        k
        for k in state
        if k.startswith(("net_gx.", "linear_network."))
        and k not in used
        and not k.endswith(IGNORED_LEAVES)
    ]
    if unused:
        raise LinearizerError(f"official tensors with no place in our model: {unused[:5]}")


def load_official(pth_path: str | Path) -> tuple[nn.Module, OfficialLayout]:
    """Our :class:`OneStepFlow` holding the authors' weights (eval mode), and its layout."""
    ckpt = read_torch_checkpoint(pth_path)
    layout = infer_layout(ckpt, read_official_args(pth_path))
    flow = build_official_flow(layout)
    _load_into(flow, ckpt.state_dict)
    return flow.eval(), layout


def unet_from_official(
    state: dict[str, Tensor], prefix: str, node: PickledObject | None = None
) -> PaperUNet:
    """One official conditioner (keys under ``prefix``, e.g. ``"...F.cond.net."``) as a
    :class:`PaperUNet` in eval mode, loaded through the same table as the whole model."""
    unet = PaperUNet(**_unet_layout(state, prefix, node))
    own = {}
    for key, (theirs, how) in unet_key_map(unet).items():
        value = _tensor(state, prefix + theirs)
        own[key] = _deinterleave(value) if how == "deinterleave-qkv" else value
    unet.load_state_dict(own)
    return unet.eval()


# ------------------------------------------------------------------------------------------
# writing a run folder
# ------------------------------------------------------------------------------------------

# Their ``sampling_method`` -> ours. Their one-step "rk" is a Simpson-averaged generator step,
# not RK4 (our "rk4-authors"); their multi-step "rk" is true RK4 (our "rk4").
SAMPLING = {"rk": "rk4-authors", "euler": "euler"}
DATASETS = {
    "mnist": "mnist",
    "fashion": "fashion-mnist",
    "fashion_mnist": "fashion-mnist",
    "fashion-mnist": "fashion-mnist",
    "fmnist": "fashion-mnist",
    "celeba": "celeba",
}
# What build_flow's paper network fixes rather than reads from the config.
_FIXED = {"clamp": 5.0, "emb_mult": 4, "num_heads": 1}


def _check_representable(layout: OfficialLayout) -> None:
    """Refuse, in one line, a layout that a flow run folder cannot describe exactly."""
    u = layout.unet
    why = []
    if layout.in_channels not in (1, 3):
        why.append(f"{layout.in_channels}-channel images (runs hold grey or RGB images)")
    if layout.squeeze != (layout.in_channels % 2 == 1):
        why.append(f"squeeze={layout.squeeze} with {layout.in_channels} channel(s)")
    if layout.clamp != _FIXED["clamp"]:
        why.append(f"log-scale clamp {layout.clamp} (ours: {_FIXED['clamp']})")
    if u["emb_mult"] != _FIXED["emb_mult"] or u["time_channels"] != u["model_channels"]:
        why.append(f"time embedding {u['time_channels']}->{u['emb_mult']}x{u['model_channels']}")
    if u["num_heads"] != _FIXED["num_heads"]:
        why.append(f"{u['num_heads']} attention heads")
    if why:
        raise LinearizerError(f"cannot convert to a flow run: {'; '.join(why)}")


def _config_and_notes(
    layout: OfficialLayout, args: dict[str, Any] | None
) -> tuple[FlowConfig, list[str]]:
    _check_representable(layout)
    a, u, lora, notes = args or {}, layout.unet, layout.lora, []
    dataset = DATASETS.get(str(a.get("dataset", "mnist")).lower())
    if dataset is None:
        dataset = "mnist"
        notes.append(f"args.json dataset {a.get('dataset')!r} has no loader here; using mnist")
    method = SAMPLING.get(str(a.get("sampling_method", "rk")))
    if method is None:
        method = "rk4-authors"
        notes.append(f"args.json sampling_method {a.get('sampling_method')!r} unknown; using rk")
    if "num_of_layers" in a and 2 * a["num_of_layers"] != layout.num_blocks:
        notes.append(
            f"args.json num_of_layers={a['num_of_layers']} but the pickle holds "
            f"{layout.num_blocks} blocks; the pickle wins"
        )
    network = {
        "kind": "paper",
        "img_size": layout.img_size,
        "blocks": layout.num_blocks,
        "hidden": u["model_channels"],
        "unet_channel_mult": list(u["channel_mult"]),
        "unet_blocks": u["num_blocks"],
        "unet_attn": list(u["attn_resolutions"]),
        "dropout": u["dropout"],
        "clamp": layout.clamp,
        "clamp_mode": "hard",
    }
    values = {
        "data": {"dataset": dataset, "colour": "rgb" if layout.in_channels == 3 else "grey"},
        "network": network,
        "rank": lora["rank"],
        "lora_emb": lora["emb_dim"],
        "lora_hidden": lora["hidden"],
        "lora_depth": lora["depth"],
        "lora_activation": lora["activation"],
        "v_scale": 1.0,
        "noise_level": a.get("noise_level", 0.3),
        "perceptual": "auto",
        # their test script's sampler (one step, T = 100, last interval skipped, tau = 1), with
        # the solver their args name: `linearizer sample RUN` with no flags reproduces them
        "sampler": AUTHORS.replace(method=method).to_dict(),
        "batch_size": a.get("batch_size", 256),
        "lr": a.get("lr", 1e-4),
    }
    # Through from_dict, so a malformed args.json value is one error naming its key.
    return FlowConfig.from_dict({**PAPER.to_dict(), **values}), notes


def flow_config(layout: OfficialLayout, args: dict[str, Any] | None = None) -> FlowConfig:
    """The :class:`FlowConfig` of a converted run: the architecture from the pickle, the
    training and sampling settings from ``args.json`` (the authors' defaults when absent)."""
    return _config_and_notes(layout, args)[0]


def _official_record(
    pth_path: Path, ckpt: TorchCheckpoint, layout: OfficialLayout, args: dict | None, notes: list
) -> dict[str, Any]:
    """``official.json``: where the run came from and everything inferred from the pickle."""
    u = layout.unet
    args_path = Path(os.path.abspath(pth_path)).parent.parent / "args.json"
    return {
        "format": "official-one-step",
        "source": str(pth_path.resolve()),
        "sha256": file_sha256(pth_path),
        "bytes": pth_path.stat().st_size,
        "zip_root": ckpt.root_name,
        "root_class": ckpt.root.type,
        "storage_locations": sorted(ckpt.storage_locations),
        "tensors": len(ckpt.state_dict),
        "inferred": {
            "num_blocks": layout.num_blocks,
            "image_shape": list(layout.image_shape),
            "squeeze": layout.squeeze,
            "clamp": layout.clamp,
            "unet_widths": [u["model_channels"] * m for m in u["channel_mult"]],
            "unet": u,
            "lora": layout.lora,
        },
        "args_json": str(args_path) if args is not None else None,
        "args": args,
        "notes": notes,
    }


def _check_free(out_dir: Path) -> None:
    if out_dir.exists() and not out_dir.is_dir():
        raise LinearizerError(f"{out_dir} exists and is not a folder")
    for name in ("config.json", "run.json"):
        if (out_dir / name).exists():
            raise LinearizerError(f"{out_dir} already holds a run ({name} exists)")


def convert_official(
    pth_path: str | Path,
    out_run_dir: str | Path,
    dry_run: bool = False,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Read ``pth_path`` safely and write a flow run folder that :func:`load_flow_run` opens:
    ``config.json`` (a full :class:`FlowConfig`), ``run.json``, ``official.json`` and the
    weights as the step-0 checkpoint. With ``dry_run`` only read, map and check.

    Returns ``{"config": config dict, "official": the official.json record}``.
    """
    from ..flow.build import build_flow
    from ..training.checkpoint import save_checkpoint

    pth_path, out_dir = Path(pth_path), Path(out_run_dir)
    say = log or (lambda _msg: None)
    if not dry_run:
        _check_free(out_dir)
    ckpt = read_torch_checkpoint(pth_path)
    args = read_official_args(pth_path)
    say(f"args.json: {'found' if args is not None else 'absent (architecture from the pickle)'}")
    layout = infer_layout(ckpt, args)
    cfg, notes = _config_and_notes(layout, args)
    for note in notes:
        say(f"note: {note}")
    with torch.random.fork_rng(devices=[]):  # the fresh init is overwritten; keep callers' RNG
        model = build_flow(cfg, channels=layout.in_channels)
    _load_into(model, ckpt.state_dict)
    n = sum(p.numel() for p in model.parameters())
    say(f"layout: {layout.num_blocks} blocks, U-Net {layout.unet}, LoRA {layout.lora}; {n} params")
    record = _official_record(pth_path, ckpt, layout, args, notes)
    result = {"config": cfg.to_dict(), "official": record}
    if dry_run:
        say(f"dry run: nothing written (would create {out_dir})")
        return result
    source = {k: record[k] for k in ("source", "sha256", "zip_root")}
    save_checkpoint(
        out_dir,
        0,
        model.eval(),
        model_kind="flow",
        config=cfg.to_dict(),
        extra={"converted_from": source},
    )
    write_json(out_dir / "official.json", record)
    run = {"kind": "flow", "status": "converted", "step": 0, "library_version": __version__}
    run |= {"source": record["source"], "sha256": record["sha256"]}
    write_json(out_dir / "run.json", run)
    write_json(out_dir / "config.json", cfg.to_dict())  # last: marks the folder as a run
    say(f"wrote {out_dir} (open it with load_flow_run or any run command)")
    return result
