"""Why float32 homogeneity, ``f(a (.) x) = a (.) f(x)``, loses accuracy at ``a < 0``: which side
and which stage of the network amplify the rounding, against each stage's local condition number.

    python benchmarks/flipped_latents.py RUN [--n 256] [--steps 100] [--seed 0] [--worst 8]
                                         [--threads 1] [--out DIR]

The pairs are ``linearizer repro``'s linearity pairs (the same seeds, ``a ~ U[-2, 2]``, a
mixture's pairs dealt over its components in turn), with ``f = L(g_noise, B, g_data)``:

    f(a (.) x) = g_data^-1(B g_noise(g_noise^-1(a g_noise(x))))
    a (.) f(x) = g_data^-1(a g_data(g_data^-1(B g_noise(x))))

Both are ``g_data^-1(a B g_noise(x))`` in exact arithmetic. The script measures, per pair:

* the float32 error as ``repro`` measures it, and again with every pass of the noise side, or
  of the data side, in float64 (the side whose float64 run removes the error is the one that
  amplifies it);
* for the ``--worst`` pairs of each sign: the error after every stage (ActNorm, coupling F,
  coupling G, 1x1 mix, per block) of the inverse ``g_noise^-1(a g_noise(x))`` in the network's
  own float32 path against float64 from the same input; and each stage's local condition
  number ``sigma_max / sigma_min`` of its Jacobian, in float64 at the visited point;
* the condition number of the whole inverse there, and ``eps32 x`` that condition, the size of
  error float32 rounding can produce at that point.

Writes ``flipped_latents.json`` and ``flipped_latents.md`` (every table) into ``--out``.
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path

import torch
from torch import Tensor

from linearizer.flow.mixture import MixtureFlow
from linearizer.flow.model import DATA, NOISE
from linearizer.flow.spec import SamplerSpec
from linearizer.repro.claims import generator
from linearizer.training.runs import load_run

F64 = torch.float64
EPS32 = float(torch.finfo(torch.float32).eps)


def pairs(n: int, seed: int, shape: tuple[int, ...]) -> tuple[Tensor, Tensor]:
    """``repro``'s linearity noise (stream 20) and scalars ``a`` (seed + 22)."""
    gen = torch.Generator().manual_seed(seed * 1000 + 20)
    x = torch.randn(n, *shape, generator=gen)
    a = 4 * torch.rand(n, generator=torch.Generator().manual_seed(seed + 22), dtype=F64) - 2
    return x, a


def rel(a: Tensor, b: Tensor) -> Tensor:
    a, b = a.detach().to(F64).flatten(1), b.detach().to(F64).flatten(1)
    return (a - b).norm(dim=1) / b.norm(dim=1).clamp_min(1e-300)


def as_repro(f32, x: Tensor, a: Tensor) -> Tensor:
    """Per-pair relative error of ``f(a (.) x)`` against ``a (.) f(x)`` exactly as ``repro``
    measures it: ``f`` the float32 generator over the exact B."""
    x, a = x.float(), a.float()
    return rel(f32(f32.space_x.scale(a, x)), f32.space_y.scale(a, f32(x)))


def by_side(m32, m64, b: Tensor, x: Tensor, a: Tensor, noise: str, data: str) -> Tensor:
    """The same error with every pass of the noise side (``g_noise``, ``g_noise^-1``) in
    precision ``noise`` and every pass of the data side in precision ``data``; latents and
    ``B`` in float64 throughout (the float32 network's latents are float64 already)."""
    m = {"float32": m32, "float64": m64}

    def enc(v: Tensor, flag: float, p: str) -> Tensor:
        return m[p].encode(v.to(next(m[p].parameters()).dtype), flag).to(F64)

    def dec(z: Tensor, flag: float, p: str) -> Tensor:
        return m[p].decode(z, flag).to(F64)  # float32 networks take float64 latents

    z = enc(x, NOISE, noise)
    left = dec(enc(dec(a[:, None] * z, NOISE, noise), NOISE, noise) @ b.T, DATA, data)
    y = enc(dec(z @ b.T, DATA, data), DATA, data)
    return rel(left, dec(a[:, None] * y, DATA, data))


def stages(net) -> list[tuple[str, object, bool]]:
    """``(name, module, in_float64_tail)`` of every stage in forward order."""
    out = []
    for i, block in enumerate(net.blocks):
        tail = i >= net.tail_start
        for name in ("actnorm", "F", "G", "mix"):
            out.append((f"block {i} {name}", getattr(block, name), tail))
    return out


def trace_inverse(net32, net64, w: Tensor, flag: float) -> list[dict]:
    """The inverse of ``w`` (one latent, image shaped) stage by stage: float32's own path (its
    fully connected tail in float64) against float64, from the same input; each stage's
    relative error after it and its local condition number (float64, at the float64 input)."""
    s32, s64 = stages(net32), stages(net64)
    h64 = net64.squeeze(w.to(F64)) if net64.squeeze is not None else w.to(F64)
    h32 = h64.clone()
    f64 = torch.full((1,), flag, dtype=F64)
    rows = []
    for (name, mod32, tail), (_, mod64, _) in zip(reversed(s32), reversed(s64), strict=True):
        jac = torch.autograd.functional.jacobian(
            lambda v, m=mod64, shape=h64.shape: m.inverse(v.reshape(shape), f64).flatten(),
            h64.flatten(),
            vectorize=True,
        )
        sv = torch.linalg.svdvals(jac)
        with torch.no_grad():
            if tail:
                h32 = mod64.inverse(h32.to(F64), f64)  # the network's float64 tail copy
            else:
                h32 = mod32.inverse(h32.float(), f64.float())
            h64 = mod64.inverse(h64, f64)
        rows.append(
            {
                "stage": name,
                "float64_tail": tail,
                "rel_err_after": float(rel(h32, h64)[0]),
                "cond": float(sv[0] / sv[-1]),
                "gain": float(sv[0]),
                "max_abs_in": float(h64.abs().max()),
            }
        )
    return rows


def whole_cond(model64, w: Tensor, flag: float) -> float:
    """sigma_max / sigma_min of the whole inverse's Jacobian at latent ``w`` (float64)."""
    fn = lambda v: model64.decode(v[None], flag).flatten()  # noqa: E731
    sv = torch.linalg.svdvals(torch.autograd.functional.jacobian(fn, w.to(F64), vectorize=True))
    return float(sv[0] / sv[-1])


def run(args: argparse.Namespace) -> dict:
    torch.set_num_threads(args.threads)
    loaded = load_run(args.run, expect="flow")
    m32 = loaded.model.eval()
    m64 = copy.deepcopy(m32).double().eval()
    k = m32.components if isinstance(m32, MixtureFlow) else 1
    labels = torch.arange(args.n) % k
    x, a = pairs(args.n, args.seed, tuple(m32.image_shape))
    spec = SamplerSpec(steps=args.steps, method="euler", final="skip", dtype="float64")
    combos = {
        "both sides float32": ("float32", "float32"),
        "noise side float64": ("float64", "float32"),
        "data side float64": ("float32", "float64"),
        "both sides float64": ("float64", "float64"),
    }
    errs = {c: torch.zeros(args.n, dtype=F64) for c in ("float32 (as repro)", *combos)}
    with torch.no_grad():
        for c in range(k):
            rows = labels == c
            b = m64.one_step_matrix(spec.replace(label=c) if k > 1 else spec)
            errs["float32 (as repro)"][rows] = as_repro(generator(m32, b), x[rows], a[rows])
            for name, (pn, pd) in combos.items():
                errs[name][rows] = by_side(m32, m64, b, x[rows], a[rows], pn, pd)
    summary = {}
    for name, e in errs.items():
        summary[name] = {
            "a>0 max": float(e[a > 0].max()),
            "a<0 max": float(e[a < 0].max()),
            "a>0 median": float(e[a > 0].median()),
            "a<0 median": float(e[a < 0].median()),
        }
    traced = {}
    base = errs["float32 (as repro)"]
    for sign, mask in (("a<0", a < 0), ("a>0", a > 0)):
        idx = mask.nonzero().squeeze(1)
        worst = idx[base[idx].argsort(descending=True)[: args.worst]]
        rows = []
        for i in worst.tolist():
            with torch.no_grad():
                z = m64.encode(x[i : i + 1].double(), NOISE)
            w = (a[i] * z).reshape(1, *m32.image_shape)
            trace = trace_inverse(m32.network, m64.network, w, NOISE)
            cond = whole_cond(m64, (a[i] * z)[0], NOISE)
            rows.append(
                {
                    "pair": i,
                    "a": float(a[i]),
                    "err_float32": float(base[i]),
                    "err_noise_float64": float(errs["noise side float64"][i]),
                    "cond_noise_inverse": cond,
                    "eps32_x_cond": EPS32 * cond,
                    "stages": trace,
                }
            )
        traced[sign] = rows
    return {
        "run": str(args.run),
        "step": loaded.step,
        "pairs": args.n,
        "components": k,
        "steps": args.steps,
        "eps32": EPS32,
        "torch": torch.__version__,
        "threads": args.threads,
        "date": time.strftime("%Y-%m-%d"),
        "summary": summary,
        "traced": traced,
    }


def tables(result: dict) -> str:
    out = [
        f"# Homogeneity in float32 at a < 0: `{result['run']}` (step {result['step']})",
        "",
        f"{result['pairs']} pairs as `linearizer repro` draws them (a ~ U[-2, 2]), Euler "
        f"T = {result['steps']}, {result['components']} component(s); torch {result['torch']}, "
        f"{result['threads']} thread(s), {result['date']}. Relative error per pair in image space.",
        "",
        "| precision of the sides | a > 0 max | a < 0 max | a > 0 median | a < 0 median |",
        "|---|---|---|---|---|",
    ]
    for name, s in result["summary"].items():
        out.append(
            f"| {name} | {s['a>0 max']:.2e} | {s['a<0 max']:.2e} | {s['a>0 median']:.2e} "
            f"| {s['a<0 median']:.2e} |"
        )
    for sign, rows in result["traced"].items():
        out += [
            "",
            f"## The {len(rows)} worst pairs with {sign}",
            "",
            "| pair | a | error (float32) | noise side in float64 | cond of g_noise^-1 at a z "
            "| eps32 x cond |",
            "|---|---|---|---|---|---|",
        ]
        for r in rows:
            out.append(
                f"| {r['pair']} | {r['a']:.3f} | {r['err_float32']:.2e} | "
                f"{r['err_noise_float64']:.2e} | {r['cond_noise_inverse']:.3g} | "
                f"{r['eps32_x_cond']:.2e} |"
            )
        out += [
            "",
            f"Stage by stage, the inverse at `a g_noise(x)` (medians over these {len(rows)} pairs; "
            "stages in the order the inverse runs them):",
            "",
            "| stage | float64 tail | rel. error after | local cond | gain | max abs input |",
            "|---|---|---|---|---|---|",
        ]
        for j, st in enumerate(rows[0]["stages"]):
            col = {
                key: torch.tensor([r["stages"][j][key] for r in rows]).median().item()
                for key in ("rel_err_after", "cond", "gain", "max_abs_in")
            }
            out.append(
                f"| {st['stage']} | {'yes' if st['float64_tail'] else 'no'} | "
                f"{col['rel_err_after']:.2e} | {col['cond']:.3g} | {col['gain']:.3g} | "
                f"{col['max_abs_in']:.3g} |"
            )
    return "\n".join(out) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run")
    p.add_argument("--n", type=int, default=256)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--worst", type=int, default=8)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path, default=Path("runs/flipped_latents"))
    args = p.parse_args()
    result = run(args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "flipped_latents.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / "flipped_latents.md").write_text(tables(result))
    print(tables(result))


if __name__ == "__main__":
    main()
