"""The singular value decomposition of the one-step generator, rendered as figures.

The generator is the Linearizer ``f = L(g_noise, B, g_data)``. With ``B = U S V^T`` its induced
singular vectors are ``g_noise^-1(v_i)`` (inputs, noise images) and ``g_data^-1(u_i)`` (outputs,
images), and ``f(g_noise^-1(s v_i)) = g_data^-1(sigma_i s u_i)``.

Unit latent vectors decode to almost ``g^-1(0)``, because typical latents are much longer (about
``sqrt(D)`` for noise). So each direction is drawn at a typical latent length: inputs at
``s0 = median |g_noise(x0)|`` over Gaussian noise ``x0``, outputs at ``s1 = median |B g_noise(x0)|``
(the typical length of a generated data latent).

>>> result = induced_svd(model, SamplerSpec(steps=100, final="skip"), k=16)  # doctest: +SKIP
>>> render_svd(result, "out/")  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from ..errors import LinearizerError
from ..flow.model import DATA, NOISE, OneStepFlow
from ..flow.spec import SamplerSpec, sample_spec
from ..io import write_json
from ..report import new_figure, save_figure
from .numbers import F64
from .plots import caption, image_rows, noise_view


@dataclass
class GeneratorSVD:
    """Singular values (all, descending) and the top-k induced singular directions as images."""

    steps: int
    method: str
    sigma: Tensor
    scale_noise: float
    scale_data: float
    right: Tensor  # g_noise^-1(s0 v_i)            [k, C, H, W]
    left_pos: Tensor  # g_data^-1(+s1 u_i)
    left_neg: Tensor  # g_data^-1(-s1 u_i)
    mapped: Tensor  # f(right_i) = g_data^-1(sigma_i s0 u_i)
    zero_noise: Tensor  # g_noise^-1(0)                 [1, C, H, W]
    zero_data: Tensor  # g_data^-1(0)

    @property
    def k(self) -> int:
        return len(self.right)

    @property
    def cond(self) -> float:
        return float(self.sigma[0] / self.sigma[-1])


@torch.no_grad()
def induced_svd(
    model: OneStepFlow,
    spec: SamplerSpec | None = None,
    k: int = 16,
    n_scale: int = 256,
    seed: int = 0,
) -> GeneratorSVD:
    """SVD of the one-step matrix of ``spec`` (default :class:`SamplerSpec`, held in float64)
    and its top-``k`` directions as images."""
    if not 1 <= k <= model.dim:
        raise LinearizerError(f"k must be in 1..{model.dim}, got {k}")
    param = next(model.parameters())
    spec = sample_spec(spec, dtype="float64")
    b = model.one_step_matrix(spec)
    f = model.generator(spec)
    svd, sigma = f.svd(k), f.singular_values()
    gen = torch.Generator().manual_seed(seed)
    x0 = torch.randn(n_scale, *model.image_shape, generator=gen).to(param)
    z0 = model.encode(x0, NOISE).to(F64)
    s0 = float(z0.norm(dim=1).median())
    s1 = float((z0 @ b.T).norm(dim=1).median())
    u, v = svd.U_lat.T, svd.V_lat.T  # [k, D], unit rows

    def dec(z: Tensor, flag: float) -> Tensor:
        return model.decode(z.to(param), flag).cpu()

    zero = torch.zeros(1, model.dim, dtype=F64, device=param.device)
    return GeneratorSVD(
        steps=spec.steps,
        method=spec.method,
        sigma=sigma.cpu(),
        scale_noise=s0,
        scale_data=s1,
        right=dec(s0 * v, NOISE),
        left_pos=dec(s1 * u, DATA),
        left_neg=dec(-s1 * u, DATA),
        mapped=dec((svd.S[:, None] * s0) * u, DATA),
        zero_noise=dec(zero, NOISE),
        zero_data=dec(zero, DATA),
    )


def plot_spectrum(
    spectra: dict[str, Tensor], path: str | Path, steps: tuple[int, ...] = ()
) -> Path:
    """Singular values of one or more one-step matrices, log-log (the few large ones first)."""
    fig = new_figure(6.4, 3.8)
    ax = fig.add_subplot(1, 1, 1)
    styles = [("-", 2.6), ("--", 1.4), (":", 1.8), ("-.", 1.4)]
    for i, (label, s) in enumerate(spectra.items()):
        s = s.double()
        ls, lw = styles[i % len(styles)]
        ax.loglog(
            range(1, len(s) + 1),
            s.numpy(),
            ls=ls,
            lw=lw,
            label=f"{label} (cond {float(s[0] / s[-1]):.3g})",
        )
    for t in steps:
        ax.axhline(1.0 / t, color="grey", ls=":", lw=0.8)
        ax.annotate(
            f"1/T = {1 / t:g}",
            (1, 1.0 / t),
            fontsize=7,
            color="grey",
            xytext=(2, 2),
            textcoords="offset points",
        )
    ax.set_xlabel("index i")
    ax.set_ylabel("singular value sigma_i of B")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    caption(
        fig,
        "Singular spectrum of the collapsed one-step matrix B (z1 = B z0, float64), "
        "log-log. An Euler B is (1/T) I plus terms through the low-rank A(t): a few large "
        "singular values carry the generated content, the rest sit at 1/T (grey lines). "
        "Curves that coincide (Euler and RK4 at the same T) are drawn with different "
        "dash patterns.",
    )
    return save_figure(fig, path)


def plot_directions(result: GeneratorSVD, path: str | Path) -> Path:
    """The top-k induced singular directions: inputs, outputs (both signs) and f(inputs)."""
    rows = [
        ("noise: g_noise^-1(s0 v_i)", noise_view(torch.cat([result.zero_noise, result.right]))),
        ("image: g_data^-1(+s1 u_i)", torch.cat([result.zero_data, result.left_pos])),
        ("image: g_data^-1(-s1 u_i)", torch.cat([result.zero_data, result.left_neg])),
        ("f(noise_i) = g_data^-1(sigma_i s0 u_i)", torch.cat([result.zero_data, result.mapped])),
    ]
    k = result.k
    fig = new_figure(max(6.0, 0.55 * (k + 1)), 3.6)
    image_rows(fig, rows, nrow=k + 1, fontsize=6.5)
    sig = ", ".join(f"{float(s):.3g}" for s in result.sigma[: min(k, 6)])
    caption(
        fig,
        (
            f"Top-{k} induced singular directions of the one-step generator f = L(g_noise, B, "
            f"g_data), "
            f"B = {result.method} T={result.steps}. Column 0 is the zero vector g^-1(0) of each "
            f"induced space; column i is direction i (sigma = {sig}, ...). Directions are "
            f"decoded at a "
            f"typical latent length, not unit length (a unit latent decodes to almost g^-1(0)): "
            f"s0 = {result.scale_noise:.3g} = median |g_noise(x0)| over N(0, I) noise, s1 = "
            f"{result.scale_data:.3g} = median |B g_noise(x0)| (a generated data latent). "
            f"Noise images "
            f"are shown as 0.5 + x/6. The sign of each u_i is arbitrary, so both signs are shown; "
            f"the last row is what the generator makes from the inputs in the first row."
        ),
    )
    return save_figure(fig, path)


def render_svd(
    result: GeneratorSVD, out_dir: str | Path, extra: dict[str, Tensor] | None = None
) -> dict[str, Path]:
    """Write ``spectrum.png``, ``svd_directions.png`` and ``svd.json`` into ``out_dir``."""
    out = Path(out_dir)
    spectra = {f"{result.method} T={result.steps}": result.sigma, **(extra or {})}
    euler_steps = tuple(
        sorted({int(k.split("T=")[1]) for k in spectra if k.startswith("euler T=")})
    )
    paths = {
        "spectrum": plot_spectrum(spectra, out / "spectrum.png", euler_steps),
        "directions": plot_directions(result, out / "svd_directions.png"),
    }
    paths["json"] = write_json(
        out / "svd.json",
        {
            "steps": result.steps,
            "method": result.method,
            "k": result.k,
            "cond": result.cond,
            "scale_noise": result.scale_noise,
            "scale_data": result.scale_data,
            "sigma_top": [float(s) for s in result.sigma[: result.k]],
            "sigma_min": float(result.sigma[-1]),
            "spectra_top": {k: [float(s) for s in v[: result.k]] for k, v in spectra.items()},
            "spectra_cond": {k: float(v[0] / v[-1]) for k, v in spectra.items()},
        },
    )
    return paths
