"""How well conditioned the networks' inverses are where the induced operations send them.

The linearity claim evaluates ``g_noise^-1`` and ``g_data^-1`` at latents that sampling never
produces: sums of two latents and scalar multiples ``a g(x)``, negative ``a`` included. A
float32 pass at a latent ``z`` rounds each stage by float32's eps, and the Jacobian carries that
rounding onwards, so the local condition number ``sigma_max / sigma_min`` of the inverse at
``z`` says how much worse float32 can do there than where training was. The claim's report
compares the latents of each term (sums, a > 0, a < 0) with the data latents sampling visits.
``eps32 x cond`` is a first-order scale of the float32 error there, and a loose one: the
measured errors of a trained run sit two to four orders of magnitude under it (docs/repro),
so it ranks the terms rather than bounding them.

``cond`` is measured in float64 without forming the Jacobian: ``sigma_max`` of ``J_{g^-1}(z)``
and of ``J_g(g^-1(z))`` (whose inverse it is, so ``1 / sigma_min``) by power iteration on
``J^T J``. Power iteration approaches ``sigma_max`` from below, so ``cond`` is a lower estimate.

>>> import torch
>>> lin = torch.tensor([[4.0, 0.0], [0.0, 0.5]], dtype=torch.float64)
>>> cond = inverse_condition(lambda z: z @ lin.T, lambda z: z @ lin.inverse().T,
...                          torch.ones(3, 2, dtype=torch.float64))
>>> [round(c, 6) for c in cond.tolist()]
[8.0, 8.0, 8.0]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import Tensor
from torch.autograd.functional import jvp, vjp

from .numbers import F64

if TYPE_CHECKING:
    from .context import Context

Map = Callable[[Tensor], Tensor]
EPS32 = float(torch.finfo(torch.float32).eps)


def top_singular_value(fn: Map, at: Tensor, iters: int = 20, seed: int = 0) -> Tensor:
    """``sigma_max`` of the Jacobian of ``fn`` at each row of ``at`` (``fn`` maps rows to rows
    independently), by ``iters`` steps of power iteration on ``J^T J``."""
    gen = torch.Generator().manual_seed(seed)
    v = _unit(torch.randn(at.shape, generator=gen, dtype=at.dtype).to(at.device))
    for _ in range(iters):
        jv = jvp(fn, at, v)[1]
        v = _unit(vjp(fn, at, jv)[1])
    return _norms(jvp(fn, at, v)[1])


def inverse_condition(g: Map, g_inv: Map, z: Tensor, iters: int = 20) -> Tensor:
    """``sigma_max / sigma_min`` of the Jacobian of ``g_inv`` at each row of ``z``: the gain of
    ``g_inv`` there times the gain of ``g`` at ``g_inv(z)``."""
    with torch.no_grad():
        x = g_inv(z)
    return top_singular_value(g_inv, z, iters) * top_singular_value(g, x, iters, seed=1)


def _norms(t: Tensor) -> Tensor:
    return t.flatten(1).norm(dim=1)


def _unit(t: Tensor) -> Tensor:
    return t / _norms(t).clamp_min(1e-300).reshape(-1, *([1] * (t.dim() - 1)))


def visited(ctx: Context, x1: Tensor, x2: Tensor, a: Tensor) -> dict[str, dict[str, float]]:
    """The largest condition number of ``g_noise^-1`` and of ``g_data^-1`` (float64 model) at the
    latents that each term of the linearity claim sends them to, with a mixture's pairs dealt
    over its components as the claim deals them (``x1, x2, a``: the claim's pairs, float64):

    * ``trained``: ``g_data^-1`` at ``B g_noise(x)``, where sampling always goes (the noise
      side's inverse is not visited there);
    * ``additivity``: ``g_noise^-1`` at ``g_noise(x1) + g_noise(x2)``, ``g_data^-1`` at the sum of
      the two images' data latents;
    * ``a_pos`` / ``a_neg``: both inverses at ``a`` times the latents, by the sign of ``a``.

    ``eps32`` times the sum of the two sides' condition numbers is the term's rounding scale.
    """
    from .context import DATA, NOISE

    with torch.no_grad():
        z1, z2 = (ctx.encode(ctx.model64, x, NOISE).to(ctx.device) for x in (x1, x2))
        y1, y2 = (
            ctx.by_parts(len(a), lambda k, r, z=z: z[r] @ ctx.B(ctx.opts.steps, component=k).T)
            for z in (z1, z2)
        )
    a = a[:, None]
    pos, neg = a[:, 0] > 0, a[:, 0] < 0
    points = {
        "trained": (None, y1),
        "additivity": (z1 + z2, y1 + y2),
        "a_pos": ((a * z1)[pos], (a * y1)[pos]),
        "a_neg": ((a * z1)[neg], (a * y1)[neg]),
    }
    out = {}
    for term, (zn, yd) in points.items():
        noise = _side_condition(ctx, NOISE, zn)
        data = _side_condition(ctx, DATA, yd)
        both = data if noise is None else noise + data
        out[term] = {
            "cond_noise": _max(noise),
            "cond_data": _max(data),
            "eps32_x_cond": EPS32 * _max(both),
        }
    return out


def _max(t: Tensor | None) -> float:
    return 0.0 if t is None or not len(t) else float(t.max())


def _side_condition(ctx: Context, flag: float, z: Tensor | None) -> Tensor | None:
    if z is None:
        return None
    m, batch = ctx.model64, ctx.opts.batch
    g = lambda x: m.encode(x, flag)  # noqa: E731
    g_inv = lambda w: m.decode(w, flag)  # noqa: E731
    parts = [inverse_condition(g, g_inv, w) for w in z.to(ctx.device).split(batch)]
    return torch.cat(parts).cpu() if parts else torch.zeros(0, dtype=F64)
