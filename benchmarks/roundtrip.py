"""Round-trip exactness of a flow run's data side, ``decode(encode(x, 1), 1)``, in float32 and
float64, on and off the data manifold; where in the network the error comes from; and the effect
and cost of candidate fixes. Results: docs/flow/roundtrip.md.

    python benchmarks/roundtrip.py [--run pretrained:mnist] [--out DIR] [--n 64] [--threads 1]
                                   [--train-n 4000] [--samples 512] [--time-n 256] [--quick]

Writes ``DIR/roundtrip.json`` (everything) and ``DIR/roundtrip.md`` (the tables); about 5
minutes on one thread. ``--quick`` walks the network on fewer families.

Measured:

* families of inputs (``n`` images each): MNIST test digits; digits plus Gaussian noise
  (sigma 0.05 and 0.2), clamped to [0, 1] and unclamped; uniform noise; constant images;
  synthetic pen strokes (clean, ink texture, paper texture); the images and latents reached by
  the induced scalar multiplication ``a (.) v = g^-1(a g(v))`` of test digits, a in [-2, 2];
  the latents the run's own sampler decodes. For each: max abs error and worst-image PSNR
  (peak 1, capped at 200 dB) of the round trip in float32 and float64, the largest latent, and
  the float32 round trip of the noise side (flag 0) on the same images.
* per stage of the data-side network (each layer, and each block of layers), on a subset of
  the families: the pixel error when only that stage's inverse (or only its forward) runs in
  float32 and everything else in float64, and the gain of the exact inverse, max |change of
  output| / max |perturbation of input| for a relative perturbation of float32's size, of the
  stage alone and from the stage's output back to logit space and to pixels; per coupling, how
  far its conditioner's input lies outside the training range, its shifts and log-scales.
* fixes, each a wrapped copy of the model (the library is untouched): float32 round trip per
  family, how far each moves the forward on training images and the decoded samples, time per
  call; and ``linearizer invert``'s round trip through B in float32, float64 and mixed.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import math
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import linearizer.pretrained  # noqa: F401  (registers pretrained:NAME)
from linearizer.data import load_mnist
from linearizer.errors import LinearizerError
from linearizer.flow.factored import apply_rows, solve_rows
from linearizer.flow.inversion import condition_number
from linearizer.flow.spec import sample_spec
from linearizer.invertible.base import as_flag
from linearizer.invertible.dense import DenseConditioner
from linearizer.invertible.logit import FlagLogit
from linearizer.training.runs import load_run

DATA, NOISE = 1.0, 0.0
U32 = 2.0**-24  # float32's unit roundoff: the size of one rounding, relative
PSNR_CAP = 200.0
SCALARS = (-2.0, -1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0)


# --- inputs ---------------------------------------------------------------------------------------


def strokes(n: int, size: int, gen: torch.Generator) -> Tensor:
    """Anti-aliased quadratic Bezier pen strokes, 1 to 3 per image, ink 1 on background 0, in
    the central 20 x 20 box where MNIST keeps its digits (at size 32)."""
    grid = torch.arange(size, dtype=torch.float64) + 0.5
    yy, xx = torch.meshgrid(grid, grid, indexing="ij")
    t = torch.linspace(0, 1, 64, dtype=torch.float64)[:, None]
    lo, span = size * 6 / 32, size * 20 / 32
    out = torch.zeros(n, 1, size, size, dtype=torch.float64)
    for i in range(n):
        dist = torch.full((size, size), math.inf, dtype=torch.float64)
        for _ in range(int(torch.randint(1, 4, (), generator=gen))):
            p = lo + span * torch.rand(3, 2, generator=gen, dtype=torch.float64)
            path = (1 - t) ** 2 * p[0] + 2 * (1 - t) * t * p[1] + t**2 * p[2]
            d = torch.hypot(xx[None] - path[:, 0, None, None], yy[None] - path[:, 1, None, None])
            dist = torch.minimum(dist, d.min(0).values)
        half_width = 0.8 + 1.2 * float(torch.rand((), generator=gen))
        out[i, 0] = (half_width + 0.5 - dist).clamp(0, 1)  # a one-pixel soft edge
    return out.float()


def paper(clean: Tensor, gen: torch.Generator) -> Tensor:
    """Strokes on a faintly lit, smoothly mottled background (a scanned sheet, inverted)."""
    noise = torch.randn(clean.shape, generator=gen)
    tex = F.avg_pool2d(noise, 5, 1, 2, count_include_pad=False)
    tex = tex / tex.std()
    sheet = (0.08 + 0.04 * tex).clamp(0, 1)
    return (clean + (1 - clean) * sheet).clamp(0, 1)


def image_families(n: int, size: int, gen: torch.Generator) -> dict[str, tuple[str, Tensor]]:
    digits, _ = load_mnist("test", download=False, size=size)
    x = digits[:n]
    fams: dict[str, tuple[str, Tensor]] = {"digits": ("MNIST test digits", x)}
    for sigma in (0.05, 0.2):
        eps = sigma * torch.randn(x.shape, generator=gen)
        fams[f"noisy{sigma:g}"] = (
            f"digits + N(0, {sigma:g}^2), clamped to [0, 1]",
            (x + eps).clamp(0, 1),
        )
        fams[f"noisy{sigma:g}-raw"] = (f"digits + N(0, {sigma:g}^2), unclamped", x + eps)
    fams["uniform"] = ("uniform noise in [0, 1]", torch.rand(x.shape, generator=gen))
    for v in (0.0, 0.5, 1.0):
        fams[f"const{v:g}"] = (f"constant {v:g}", torch.full_like(x, v))
    clean = strokes(n, size, gen)
    fams["strokes"] = ("synthetic pen strokes", clean)
    ink = clean * (1 + 0.3 * torch.randn(x.shape, generator=gen))
    fams["strokes-ink"] = ("strokes x (1 + 0.3 N(0, 1)), clamped to [0, 1]", ink.clamp(0, 1))
    fams["strokes-paper"] = (
        "strokes on paper texture (background 0.08 +- 0.04)",
        paper(clean, gen),
    )
    return fams


# --- the network as a chain of stages -------------------------------------------------------------

Stage = tuple[str, list[tuple[nn.Module, bool]]]  # name, [(module, run backwards?)]


def stages(net: nn.Module, by_block: bool) -> list[Stage]:
    """The data side's network as the chain its ``forward`` runs: logit, squeeze, each block
    (or each block's layers), un-squeeze. Refuses a network this walk does not cover."""
    out: list[Stage] = []
    if getattr(net, "logit", None) is not None:
        out.append(("logit", [(net.logit, False)]))
    if getattr(net, "squeeze", None) is not None:
        out.append(("squeeze", [(net.squeeze, False)]))
    for i, block in enumerate(net.blocks):
        parts = ("actnorm", "F", "G", "mix")
        if not all(hasattr(block, p) for p in parts):
            raise SystemExit(f"block {i} is a {type(block).__name__}; only CouplingBlocks walk")
        layers = [(f"b{i}.{p}", getattr(block, p)) for p in parts]
        if by_block:
            out.append((f"block{i}", [(m, False) for _, m in layers]))
        else:
            out.extend((name, [(m, False)]) for name, m in layers)
    if getattr(net, "squeeze", None) is not None:
        out.append(("unsqueeze", [(net.squeeze, True)]))
    return out


def run_forward(stage: Stage, h: Tensor, cond: Tensor) -> Tensor:
    for mod, backwards in stage[1]:
        h = mod.inverse(h, cond) if backwards else mod(h, cond)
    return h


def run_inverse(stage: Stage, h: Tensor, cond: Tensor) -> Tensor:
    for mod, backwards in reversed(stage[1]):
        h = mod(h, cond) if backwards else mod.inverse(h, cond)
    return h


def flag(value: float, ref: Tensor) -> Tensor:
    return as_flag(value, ref.shape[0], ref)


def amax(t: Tensor) -> float:
    return float(t.abs().max()) if t.numel() else 0.0


def stage_table(
    chain32: list[Stage], chain64: list[Stage], x: Tensor, gen: torch.Generator
) -> list[dict]:
    """Per stage k: activation size, pixel error with only k's inverse / forward in float32,
    gain of k's exact inverse alone and from k's output back to logit space and to pixels."""
    x64 = x.double()
    c64, c32 = flag(DATA, x64), flag(DATA, x64.float())
    traj = [x64]
    for st in chain64:
        traj.append(run_forward(st, traj[-1], c64))
    logit_at = 1 if chain64[0][0] == "logit" else 0  # traj[1]: logit space, when there is one
    rows = []
    for k in range(len(chain64)):
        y = traj[k + 1]
        # The cast to float32 is part of the stage's cost: a float32 run holds its input so.
        h = run_inverse(chain32[k], y.float(), c32).double()
        for j in range(k - 1, -1, -1):
            h = run_inverse(chain64[j], h, c64)
        inv_only = amax(h - x64)
        h = run_forward(chain32[k], traj[k].float(), c32).double()
        for j in range(k + 1, len(chain64)):
            h = run_forward(chain64[j], h, c64)
        for j in range(len(chain64) - 1, -1, -1):
            h = run_inverse(chain64[j], h, c64)
        fwd_only = amax(h - x64)
        # One float32 rounding of every element, in size and sign, but exact otherwise.
        u = 2 * torch.rand(y.shape, generator=gen, dtype=torch.float64) - 1
        delta = y * U32 * u
        size = amax(delta)
        h = run_inverse(chain64[k], y + delta, c64)
        local = amax(h - traj[k]) / size if size else 0.0
        to_logit = amax(h - traj[k]) / size if (size and k == logit_at) else None
        for j in range(k - 1, -1, -1):
            h = run_inverse(chain64[j], h, c64)
            if j == logit_at and size:
                to_logit = amax(h - traj[j]) / size
        rows.append(
            {
                "stage": chain64[k][0],
                "out_max": amax(y),
                "in_max": amax(traj[k]),
                "pixel_err_inverse_only_f32": inv_only,
                "pixel_err_forward_only_f32": fwd_only,
                "gain": local,
                "gain_to_logit": to_logit if k >= logit_at else None,
                "gain_to_pixels": amax(h - x64) / size if size else 0.0,
            }
        )
    return rows


# --- measuring round trips ------------------------------------------------------------------------


def psnr_worst(err: Tensor) -> float:
    mse = err.double().pow(2).flatten(1).mean(1)
    psnr = 10 * torch.log10(1 / mse.clamp_min(10 ** (-PSNR_CAP / 10)))
    return float(psnr.min())


def image_stats(back: Tensor, x: Tensor) -> dict:
    err = back.double() - x.double()
    if not bool(torch.isfinite(err).all()):
        return {"max_err": math.inf, "worst_psnr": -math.inf, "nonfinite": True}
    return {"max_err": amax(err), "worst_psnr": psnr_worst(err)}


Codec = tuple[Callable[[Tensor], Tensor], Callable[[Tensor], Tensor]]  # encode, decode


def plain(model: nn.Module, dtype: torch.dtype, side: float = DATA) -> Codec:
    def enc(x: Tensor) -> Tensor:
        return model.encode(x.to(dtype), side)

    def dec(z: Tensor) -> Tensor:
        return model.decode(z.to(dtype), side)

    return enc, dec


def image_roundtrip(codec: Codec, x: Tensor) -> dict:
    enc, dec = codec
    try:
        z = enc(x)
        back = dec(z)
    except LinearizerError as e:
        return {"refused": str(e).splitlines()[0]}
    out = image_stats(back, x)
    out["latent_max"] = amax(z)
    return out


def latent_roundtrip(codec: Codec, z: Tensor) -> dict:
    """encode(decode(z)) against z: max abs error, and relative to max |z|."""
    enc, dec = codec
    try:
        back = enc(dec(z))
    except LinearizerError as e:
        return {"refused": str(e).splitlines()[0]}
    err = amax(back.double() - z.double())
    return {"max_err": err, "rel_err": err / amax(z) if amax(z) else None}


# --- fixes, each a wrapped copy of the float32 model ---------------------------------------------


class FixedEpsLogit(FlagLogit):
    """The logit with one clamp ``eps`` for every dtype (the library's follows the dtype)."""

    def __init__(self, alpha: float, eps: float) -> None:
        super().__init__(alpha)
        self.eps = eps

    def _logit(self, x: Tensor) -> Tensor:
        p = self.alpha + self.width * x
        if p.numel() and not bool(((p >= -16 * self.eps) & (p <= 1 + 16 * self.eps)).all()):
            raise LinearizerError(f"data-flag images outside [{self.lo:.4g}, {self.hi:.4g}]")
        return torch.logit(p.clamp(self.eps, 1 - self.eps))


class ClippedConditioner(nn.Module):
    """A conditioner that reads its input clipped per channel to a box: a coupling stays an
    exact bijection whatever its conditioner computes, and inside the box nothing changes."""

    def __init__(self, inner: nn.Module, lo: Tensor, hi: Tensor) -> None:
        super().__init__()
        self.inner = inner
        self.register_buffer("lo", lo)
        self.register_buffer("hi", hi)

    def forward(self, u: Tensor, cond: Tensor | None = None) -> Tensor:
        return self.inner(torch.maximum(torch.minimum(u, self.hi.to(u)), self.lo.to(u)), cond)


def couplings(net: nn.Module) -> list[tuple[str, nn.Module]]:
    return [(f"b{i}.{p}", getattr(b, p)) for i, b in enumerate(net.blocks) for p in ("F", "G")]


@torch.no_grad()
def kept_ranges(model: nn.Module, x: Tensor, batch: int = 1000) -> dict[str, tuple[Tensor, ...]]:
    """Per coupling, per channel min and max of the half its conditioner reads, on ``x``."""
    seen: dict[str, list[Tensor]] = {}
    hooks = []
    for name, cp in couplings(model.network):

        def hook(mod, args, name=name):
            u = args[0].detach()
            lo, hi = u.amin((0, 2, 3)), u.amax((0, 2, 3))
            if name in seen:
                lo, hi = torch.minimum(lo, seen[name][0]), torch.maximum(hi, seen[name][1])
            seen[name] = [lo, hi]

        hooks.append(cp.cond.register_forward_pre_hook(hook))
    try:
        for i in range(0, len(x), batch):
            model.encode(x[i : i + batch], DATA)
    finally:
        for h in hooks:
            h.remove()
    return {k: (v[0], v[1]) for k, v in seen.items()}


def clipped_model(model: nn.Module, ranges: dict, margin: float) -> nn.Module:
    """A copy whose conditioners read their input clipped to ``ranges`` widened by ``margin``
    of each channel's span on both sides."""
    out = copy.deepcopy(model)
    for name, cp in couplings(out.network):
        lo, hi = ranges[name]
        pad = margin * (hi - lo)
        shape = (1, -1, 1, 1)
        cp.cond = ClippedConditioner(cp.cond, (lo - pad).view(shape), (hi + pad).view(shape))
    return out


@torch.no_grad()
def clip_hits(model: nn.Module, x: Tensor | None, z: Tensor | None) -> int:
    """How many conditioner inputs a clipped model clips while encoding ``x`` / decoding ``z``."""
    count = [0]
    hooks = []
    for _, cp in couplings(model.network):
        cc = cp.cond

        def hook(mod, args, cc=cc):
            u = args[0]
            count[0] += int(((u < cc.lo.to(u)) | (u > cc.hi.to(u))).sum())

        hooks.append(cc.register_forward_pre_hook(hook))
    try:
        for i in range(0, 0 if x is None else len(x), 1000):
            model.encode(x[i : i + 1000], DATA)
        for i in range(0, 0 if z is None else len(z), 1000):
            model.decode(z[i : i + 1000], DATA)
    finally:
        for h in hooks:
            h.remove()
    return count[0]


def with_logit(model: nn.Module, logit: FlagLogit) -> nn.Module:
    out = copy.deepcopy(model)
    out.network.logit = logit
    return out


class Float32ToleranceLogit(FlagLogit):
    """The logit accepting, in every dtype, pixels up to float32's tolerance past the interval's
    edges (the library's tolerance follows the dtype, so a float64 encode refuses a saturated
    pixel that a float32 decode rounded just past the edge)."""

    def _logit(self, x: Tensor) -> Tensor:
        p = self.alpha + self.width * x
        tol = 16 * torch.finfo(torch.float32).eps
        if p.numel() and not bool(((p >= -tol) & (p <= 1 + tol)).all()):
            raise LinearizerError(f"data-flag images outside [{self.lo:.4g}, {self.hi:.4g}]")
        eps = torch.finfo(p.dtype).eps
        return torch.logit(p.clamp(eps, 1 - eps))


def split_at_dense(net: nn.Module) -> int:
    """Index, in ``stages(net, by_block=True)``, of the first block with a fully connected
    conditioner (the blocks the measurements single out); the number of stages if none."""
    chain = stages(net, True)
    for k, (name, mods) in enumerate(chain):
        if name.startswith("block") and isinstance(mods[1][0].cond, DenseConditioner):
            return k
    return len(chain)


def mixed(m32: nn.Module, m64: nn.Module, value: float = DATA) -> Codec:
    """Stages before the first dense block in float32, the rest and the latent in float64."""
    c32, c64 = stages(m32.network, True), stages(m64.network, True)
    cut = split_at_dense(m32.network)
    shape = tuple(m32.image_shape)

    def enc(x: Tensor) -> Tensor:
        h = x.float()
        for st in c32[:cut]:
            h = run_forward(st, h, flag(value, h))
        h = h.double()
        for st in c64[cut:]:
            h = run_forward(st, h, flag(value, h))
        return h.reshape(len(h), -1)

    def dec(z: Tensor) -> Tensor:
        h = z.double().reshape(len(z), *shape)
        for st in reversed(c64[cut:]):
            h = run_inverse(st, h, flag(value, h))
        h = h.float()
        for st in reversed(c32[:cut]):
            h = run_inverse(st, h, flag(value, h))
        return h

    return enc, dec


def fixes(m32: nn.Module, m64: nn.Module, ranges: dict) -> dict[str, tuple[str, Codec, dict]]:
    """name -> (what it does, codec, facts for the report)."""
    alpha = m32.network.logit.alpha

    def enc32(x: Tensor) -> Tensor:
        return m32.encode(x.float(), DATA)

    def dec32(z: Tensor) -> Tensor:
        return m32.decode(z.float(), DATA)

    def enc64(x: Tensor) -> Tensor:
        return m64.encode(x.double(), DATA)

    def dec64(z: Tensor) -> Tensor:
        return m64.decode(z.double(), DATA).float()

    def enc64_store32(x: Tensor) -> Tensor:
        return m64.encode(x.double(), DATA).float()

    tol64 = with_logit(m64, Float32ToleranceLogit(alpha)).eval()

    def enc_tol(x: Tensor) -> Tensor:
        return tol64.encode(x.double(), DATA)

    def dec_tol(z: Tensor) -> Tensor:
        return tol64.decode(z.double(), DATA).float()

    out: dict[str, tuple[str, Codec, dict]] = {
        "none": ("float32 throughout (as shipped)", (enc32, dec32), {}),
        "a:decode64": ("encode float32, float32 latent, decode in float64", (enc32, dec64), {}),
        "a:both64-latent32": (
            "encode and decode in float64, latent rounded to float32",
            (enc64_store32, dec64),
            {},
        ),
        "a:both64": ("encode and decode in float64, latent kept float64", (enc64, dec64), {}),
        "a:dense64": (
            "convolutional blocks float32; dense blocks and latent float64",
            mixed(m32, m64),
            {},
        ),
        "b:tol32+both64": (
            "a:both64 with the logit's edge tolerance of float32 in float64",
            (enc_tol, dec_tol),
            {},
        ),
    }
    m = with_logit(m32, FixedEpsLogit(alpha, 1e-6)).eval()
    out["b:eps1e-6"] = ("logit clamp eps 1e-6 in every dtype", plain(m, torch.float32), {})
    m = with_logit(m32, FlagLogit(0.1)).eval()
    out["b:alpha0.1"] = (
        "logit alpha 0.1, not 0.05 (another function)",
        plain(m, torch.float32),
        {},
    )
    for margin in (0.25, 0.5, 2.0):
        m = clipped_model(m32, ranges, margin).eval()
        out[f"c:clip{margin:g}"] = (
            f"conditioner inputs clipped to the training range widened by {margin:g} x its span",
            plain(m, torch.float32),
            {"model": m},
        )
    return out


def timed(fn: Callable[[], Tensor], repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)  # on a shared machine the fastest call is the least disturbed


def coupling_facts(net64: nn.Module, x: Tensor, ranges: dict) -> list[dict]:
    """Per coupling on ``x`` (float64 forward): largest kept value read by its conditioner and
    how far past the training range, largest shift, log-scale range, share saturated."""
    rows = []
    layers = stages(net64, False)
    h = x.double()
    c = flag(DATA, h)
    for name, mods in layers:
        mod = mods[0][0]
        if name.endswith((".F", ".G")):
            changed, kept = mod._halves(h)
            shift, log_scale = mod.shift_log_scale(kept, changed.shape[1], c)
            lo, hi = (r.double().view(1, -1, 1, 1) for r in ranges[name])
            past = torch.maximum(kept - hi, lo - kept).clamp_min(0) / (hi - lo)
            rows.append(
                {
                    "coupling": name,
                    "kept_max": amax(kept),
                    "past_training_range": amax(past),
                    "shift_max": amax(shift),
                    "log_scale_min": float(log_scale.min()),
                    "log_scale_max": float(log_scale.max()),
                    "saturated": float((log_scale.abs() > 0.95 * mod.clamp).double().mean()),
                }
            )
        h = run_forward((name, mods), h, c)
    return rows


def static_facts(net: nn.Module) -> dict:
    """Conditioning of the layers that hold no conditioner: ActNorm's scales, the 1x1 mixes."""
    out = {}
    for i, b in enumerate(net.blocks):
        w = b.mix.weight().detach().double()
        ls = b.actnorm.log_scale.detach().double()
        ls = ls[1] if ls.shape[0] == 2 else ls  # a FlagActNorm's data-flag row
        out[f"block{i}"] = {
            "mix_condition": float(torch.linalg.cond(w)),
            "actnorm_inverse_scale_max": float(torch.exp(-ls).max()),
            "actnorm_inverse_scale_min": float(torch.exp(-ls).min()),
        }
    return out


def pre_sigmoid(m64: nn.Module, z: Tensor) -> Tensor:
    """The logit-space image a latent decodes to, before the final sigmoid (float64)."""
    chain = stages(m64.network, True)
    h = z.double().reshape(len(z), *m64.image_shape)
    for st in reversed(chain[1:]):
        h = run_inverse(st, h, flag(DATA, h))
    return h


def finite(v: object) -> object:
    """JSON without NaN/Infinity: non-finite numbers become strings."""
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, dict):
        return {k: finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [finite(x) for x in v]
    return v


INVERT_FAMILIES = ("digits", "noisy0.05", "noisy0.2", "uniform", "strokes-paper")


def invert_section(m32: nn.Module, m64: nn.Module, m32_b: nn.Module, spec, every: dict) -> dict:
    """``linearizer invert``'s round trip ``g_data^-1(B g_noise(g_noise^-1(B^-1 g_data(x))))``
    with everything in float32, everything in float64, and the data side of ``a:dense64``."""
    inv = spec.invertible()
    b64 = m64.one_step_operator(inv.replace(dtype="float64"))
    b32 = m32_b.one_step_operator(inv.replace(dtype="float32"))
    enc_mixed, dec_mixed = mixed(m32, m64)

    def side(model: nn.Module, value: float, dtype: torch.dtype) -> Codec:
        return (
            lambda x: model.encode(x.to(dtype), value),
            lambda z: model.decode(z.to(dtype), value),
        )

    configs = {
        "float32": (side(m32, DATA, torch.float32), side(m32, NOISE, torch.float32), b32),
        "float64": (side(m64, DATA, torch.float64), side(m64, NOISE, torch.float64), b64),
        "a:dense64 data side, float32 noise side, B float64": (
            (enc_mixed, dec_mixed),
            side(m32, NOISE, torch.float32),
            b64,
        ),
        "a:dense64 both sides, B float64": ((enc_mixed, dec_mixed), mixed(m32, m64, NOISE), b64),
    }
    out: dict = {"spec": inv.describe(), "condition_number_b": condition_number(b64)}
    for name, ((enc_d, dec_d), (enc_n, dec_n), b) in configs.items():
        rows = {}
        for fam in INVERT_FAMILIES:
            x = every[fam]
            z1 = enc_d(x).to(b.dtype)
            z0 = solve_rows(b, z1)
            x0 = dec_n(z0)
            back = dec_d(apply_rows(b, enc_n(x0).to(b.dtype)))
            rows[fam] = {**image_stats(back, x), "noise_max": amax(x0), "z0_max": amax(z0)}
        out[name] = rows
    return out


# --- report ---------------------------------------------------------------------------------------


def fmt(v: object) -> str:
    if v is None:
        return "–"
    if isinstance(v, str):
        return v
    if isinstance(v, float):
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        if v == 0:
            return "0"
        return f"{v:.3g}" if 1e-3 <= abs(v) < 1e4 else f"{v:.2e}"
    return str(v)


def md_table(head: list[str], rows: list[list[object]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(fmt(c) for c in r) + " |" for r in rows]
    return lines


FIX_COLUMNS = (
    "digits",
    "noisy0.05",
    "noisy0.2",
    "uniform",
    "const0.5",
    "const1",
    "strokes-ink",
    "strokes-paper",
    "scalar-2",
    "scalar+1.5",
    "samples",
)


def markdown(rep: dict) -> str:
    meta = rep["meta"]
    out = [
        f"# Round trip of `{meta['run']}`'s data side",
        "",
        f"`{meta['command']}`: torch {meta['torch']}, {meta['date']}, {meta['threads']} "
        f"thread(s), n = {meta['n']} per family, {meta['seconds']:.0f} s.",
        "",
        "## Image round trip decode(encode(x, 1), 1)",
        "",
    ]
    rows = []
    for name, f in rep["families"].items():
        a, b = f["float32"], f["float64"]
        if "refused" in a:
            rows.append(
                [
                    name,
                    f["desc"],
                    "refused by the logit "
                    f"({100 * f['outside_logit_domain']:.1f} % of pixels outside)",
                    "",
                    "",
                    "",
                    "",
                    f["noise_side_float32"]["max_err"],
                ]
            )
            continue
        rows.append(
            [
                name,
                f["desc"],
                a["max_err"],
                a["worst_psnr"],
                b["max_err"],
                b["worst_psnr"],
                a["latent_max"],
                f["noise_side_float32"]["max_err"],
            ]
        )
    out += md_table(
        [
            "family",
            "input",
            "f32 max err",
            "f32 worst PSNR dB",
            "f64 max err",
            "f64 worst PSNR dB",
            "max abs latent",
            "noise side f32 max err",
        ],
        rows,
    )
    out += [
        "",
        "## Scalar multiplication a (.) v = g^-1(a g(v)), v = test digits, and sampler latents",
        "",
    ]
    rows = []
    for a, f in [*rep["scalar"].items(), ("samples", rep["samples"])]:
        rows.append(
            [
                a,
                f["latent_max"],
                f["pre_sigmoid_max"],
                f["latent_float32"]["rel_err"],
                f["latent_float64"]["rel_err"],
                f["image_float32"]["max_err"],
                f["image_float32"]["worst_psnr"],
                f["image_float64"]["max_err"],
            ]
        )
    out += md_table(
        [
            "a",
            "max abs latent",
            "max abs pre-sigmoid",
            "z->x->z f32 rel err",
            "z->x->z f64 rel err",
            "x->z->x f32 max err",
            "x->z->x f32 worst PSNR",
            "x->z->x f64 max err",
        ],
        rows,
    )
    out += ["", f"Sampler: {rep['samples']['spec']}.", ""]
    for level in ("blocks", "layers"):
        out += [
            f"## Per {level[:-1]}: float32 error contribution and gain of the exact inverse",
            "",
        ]
        for fam, rows_ in rep[level].items():
            out += [f"**{fam}**", ""]
            rows = [
                [
                    r["stage"],
                    r["out_max"],
                    r["pixel_err_inverse_only_f32"],
                    r["pixel_err_forward_only_f32"],
                    r["gain"],
                    r["gain_to_logit"],
                    r["gain_to_pixels"],
                ]
                for r in rows_
            ]
            out += md_table(
                [
                    "stage",
                    "max abs output",
                    "pixel err, only its inverse f32",
                    "pixel err, only its forward f32",
                    "gain of its inverse",
                    "gain to logit space",
                    "gain to pixels",
                ],
                rows,
            )
            out.append("")
    out += ["## Couplings (float64 forward)", ""]
    for fam, rows_ in rep["couplings"].items():
        out += [f"**{fam}**", ""]
        rows = [
            [
                r["coupling"],
                r["kept_max"],
                r["past_training_range"],
                r["shift_max"],
                f"[{fmt(r['log_scale_min'])}, {fmt(r['log_scale_max'])}]",
                r["saturated"],
            ]
            for r in rows_
        ]
        out += md_table(
            [
                "coupling",
                "max abs kept half",
                "past training range (spans)",
                "max abs shift",
                "log-scale range",
                "share saturated",
            ],
            rows,
        )
        out.append("")
    rows = [
        [k, v["mix_condition"], v["actnorm_inverse_scale_min"], v["actnorm_inverse_scale_max"]]
        for k, v in rep["static"].items()
    ]
    out += md_table(
        [
            "block",
            "1x1 mix condition number",
            "ActNorm inverse scale min",
            "ActNorm inverse scale max",
        ],
        rows,
    )
    inv = rep["invert"]
    out += [
        "",
        f"## Round trip through B (`linearizer invert`): {inv['spec']}, "
        f"condition number of B {fmt(inv['condition_number_b'])}",
        "",
    ]
    rows = []
    for name, fams in inv.items():
        if isinstance(fams, dict):
            for fam, r in fams.items():
                rows.append([name, fam, r["max_err"], r["worst_psnr"], r["z0_max"], r["noise_max"]])
    out += md_table(
        ["precision", "family", "max err", "worst PSNR dB", "max abs B^-1 latent", "max abs noise"],
        rows,
    )
    out += ["", "## Fixes: float32-input round trip max err (worst PSNR dB)", ""]
    rows = []
    for name, f in rep["fixes"].items():
        cells = []
        for fam in FIX_COLUMNS:
            r = f["families"][fam]
            cells.append(
                "refused" if "refused" in r else f"{fmt(r['max_err'])} ({fmt(r['worst_psnr'])})"
            )
        rows.append([name, *cells])
    out += md_table(["fix", *FIX_COLUMNS], rows)
    out += ["", "## Fixes: what each changes, and cost", ""]
    rows = []
    for name, f in rep["fixes"].items():
        c = f["change"]
        rows.append(
            [
                name,
                f["desc"],
                c["train_latent_max_change"],
                c["sample_image_max_change"],
                c.get("clipped_test"),
                c.get("clipped_samples"),
                f["latent_samples"].get("rel_err"),
                f["time_encode_s"],
                f["time_decode_s"],
            ]
        )
    out += md_table(
        [
            "fix",
            "what",
            "train latents: max change vs f64",
            "samples: max pixel change vs f64",
            "clipped values (test set)",
            "clipped values (samples)",
            "sampler z->x->z rel err",
            "encode s",
            "decode s",
        ],
        rows,
    )
    out += [
        "",
        f"Times: fastest of {meta['repeats']} calls on {meta['time_n']} test digits, "
        f"{meta['threads']} thread(s). Clip ranges from {meta['range_n']} training images; "
        f"changes to samples on {meta['samples']} sampler latents; "
        f"forward change on {meta['train_n']}.",
    ]
    return "\n".join(out) + "\n"


# --- main -----------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", default="pretrained:mnist")
    parser.add_argument("--out", type=Path, default=Path("runs/roundtrip"))
    parser.add_argument("--n", type=int, default=64, help="images per family")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--train-n",
        type=int,
        default=4000,
        help="training images on which the fixes' forward change is measured",
    )
    parser.add_argument("--time-n", type=int, default=256)
    parser.add_argument(
        "--samples", type=int, default=512, help="sampler latents for the fixes' change to samples"
    )
    parser.add_argument("--quick", action="store_true", help="fewer families in the stage walk")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)
    started = time.perf_counter()
    gen = torch.Generator().manual_seed(args.seed)

    def progress(what: str) -> None:
        print(f"[{time.perf_counter() - started:4.0f} s] {what}", flush=True)

    run = load_run(args.run)
    m32 = copy.deepcopy(run.model).float().eval()
    m64 = copy.deepcopy(run.model).double().eval()
    shape = tuple(m32.image_shape)
    size = shape[-1]
    train, _ = load_mnist("train", download=False, size=size)
    test, _ = load_mnist("test", download=False, size=size)
    rep: dict = {
        "meta": {
            "run": args.run,
            "command": "python " + " ".join(sys.argv),
            "n": args.n,
            "torch": torch.__version__,
            "python": platform.python_version(),
            "date": datetime.date.today().isoformat(),
            "threads": args.threads,
            "seed": args.seed,
            "cpu": platform.processor() or platform.machine(),
            "time_n": args.time_n,
            "repeats": 7,
            "train_n": args.train_n,
            "range_n": len(train),
            "samples": args.samples,
            "psnr_cap_db": PSNR_CAP,
            "unit_roundoff_f32": U32,
        }
    }

    fams = image_families(args.n, size, gen)
    digits = fams["digits"][1]
    z_digits = m64.encode(digits.double(), DATA)
    scalar_images: dict[str, Tensor] = {}
    rep["scalar"] = {}
    for a in SCALARS:
        z = a * z_digits
        x_a = m64.decode(z, DATA)
        scalar_images[f"scalar{a:+g}"] = x_a.float()
        rep["scalar"][f"{a:+g}"] = {
            "latent_max": amax(z),
            "pre_sigmoid_max": amax(pre_sigmoid(m64, z)),
            "image_range": [float(x_a.min()), float(x_a.max())],
            "latent_float32": latent_roundtrip(plain(m32, torch.float32), z.float()),
            "latent_float64": latent_roundtrip(plain(m64, torch.float64), z),
            "image_float32": image_roundtrip(plain(m32, torch.float32), x_a.float()),
            "image_float64": image_roundtrip(plain(m64, torch.float64), x_a),
        }

    spec = getattr(run.config, "sampler", None) or sample_spec(None)
    captured: list[Tensor] = []
    sampler = copy.deepcopy(m32)
    sampler.decode = lambda z, side: captured.append(z.detach().clone()) or z  # type: ignore
    sampler.sample(spec.noise(max(args.n, args.samples), shape, gen), spec)
    z_many = captured[0].double()  # what sample() hands decode (cast to the model's dtype)
    z_samples = z_many[: args.n]
    many64 = m64.decode(z_many, DATA)
    samples64 = m64.decode(z_samples, DATA)
    rep["samples"] = {
        "spec": spec.describe(),
        "latent_max": amax(z_samples),
        "pre_sigmoid_max": amax(pre_sigmoid(m64, z_samples)),
        "latent_float32": latent_roundtrip(plain(m32, torch.float32), z_samples.float()),
        "latent_float64": latent_roundtrip(plain(m64, torch.float64), z_samples),
        "image_float32": image_roundtrip(plain(m32, torch.float32), samples64.float()),
        "image_float64": image_roundtrip(plain(m64, torch.float64), samples64),
    }
    progress("scalar multiplication and sampler latents")

    rep["families"] = {}
    for name, (desc, x) in fams.items():
        entry = {
            "desc": desc,
            "float32": image_roundtrip(plain(m32, torch.float32), x),
            "float64": image_roundtrip(plain(m64, torch.float64), x.double()),
            "noise_side_float32": image_roundtrip(plain(m32, torch.float32, NOISE), x),
        }
        if "refused" in entry["float32"]:
            lo, hi = m32.network.logit.lo, m32.network.logit.hi
            entry["outside_logit_domain"] = float(((x <= lo) | (x >= hi)).double().mean())
        rep["families"][name] = entry
    progress("image families")

    walk = (
        ["digits", "noisy0.05", "uniform", "const0.5", "scalar-2"]
        if args.quick
        else [
            "digits",
            "noisy0.05",
            "noisy0.2",
            "uniform",
            "const0.5",
            "const1",
            "strokes",
            "strokes-ink",
            "strokes-paper",
            "scalar-2",
            "scalar+2",
        ]
    )
    every = {**{k: v[1] for k, v in fams.items()}, **scalar_images}
    for level, by_block in (("blocks", True), ("layers", False)):
        chain32, chain64 = stages(m32.network, by_block), stages(m64.network, by_block)
        check = digits.double()
        for st in chain64:
            check = run_forward(st, check, flag(DATA, check))
        if amax(check.reshape(len(check), -1) - z_digits) != 0:
            raise SystemExit("the stage walk does not reproduce the network's forward")
        rep[level] = {fam: stage_table(chain32, chain64, every[fam], gen) for fam in walk}
        progress(f"stage walk by {level}")

    ranges = kept_ranges(m32, train)
    rep["couplings"] = {fam: coupling_facts(m64.network, every[fam], ranges) for fam in walk}
    rep["static"] = static_facts(m32.network)

    check_train = train[: args.train_n]
    z_train64 = torch.cat(
        [
            m64.encode(check_train[i : i + 1000].double(), DATA)
            for i in range(0, len(check_train), 1000)
        ]
    )
    timing = test[: args.time_n]
    rep["fixes"] = {}
    for name, (desc, (enc, dec), facts) in fixes(m32, m64, ranges).items():
        entry: dict = {"desc": desc, "families": {}}
        for fam, x in every.items():
            entry["families"][fam] = image_roundtrip((enc, dec), x)
        entry["families"]["samples"] = image_roundtrip((enc, dec), samples64.float())
        entry["latent_samples"] = latent_roundtrip((enc, dec), z_samples)
        entry["latent_scalar-2"] = latent_roundtrip((enc, dec), -2 * z_digits)
        z_train = torch.cat(
            [enc(check_train[i : i + 1000]) for i in range(0, len(check_train), 1000)]
        )
        change = {
            "train_latent_max_change": amax(z_train.double() - z_train64),
            "sample_image_max_change": amax(dec(z_many).double() - many64),
        }
        if "model" in facts:
            m = facts["model"]
            change["clipped_test"] = clip_hits(m, test, None)
            change["clipped_samples"] = clip_hits(m, None, z_many.float())
        entry["change"] = change
        zt = enc(timing)
        entry["time_encode_s"] = timed(lambda enc=enc: enc(timing), 7)
        entry["time_decode_s"] = timed(lambda dec=dec, zt=zt: dec(zt), 7)
        rep["fixes"][name] = entry
        progress(f"fix {name}")

    rep["invert"] = invert_section(m32, m64, sampler, spec, every)
    progress("round trips through B")

    rep["meta"]["seconds"] = time.perf_counter() - started
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "roundtrip.json").write_text(json.dumps(finite(rep), indent=1) + "\n")
    (args.out / "roundtrip.md").write_text(markdown(rep))
    progress(f"wrote {args.out}/roundtrip.json and roundtrip.md")


if __name__ == "__main__":
    main()
