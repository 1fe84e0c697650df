"""The authors' training objective for one-step flow matching, computed with batched passes.

Per batch of data ``x1`` and noise ``x0``, with ``t ~ U[0, 1)`` and latent noise ``n0, n1``:

* ``a, b = g_noise(x0), g_data(x1)`` — one network call on the concatenated batch;
* ``p = A(t) ((1 - t) a + t b)`` — the x1-prediction, applied through the factors;
* loss = ``mean((p - b)^2)`` + ``MSE(x0, g_noise^-1(a + s n0))``
  + ``D(x1, g_data^-1(b + s n1))`` + ``D(x1, g_data^-1(p))``, all weights 1, ``s = noise_level``;
  the three inverses run as one call as well.

``D`` is LPIPS in the paper. LPIPS needs torchvision and downloaded VGG/AlexNet weights, so it is
used only when ``piq`` is importable (``perceptual="lpips"`` or ``"auto"``); otherwise a stand-in
that needs no network (and never the LeNet behind FID (LeNet)):

* ``"mse"``: pixel MSE (the stand-in the reference fixture's golden loss uses);
* ``"l1"``: pixel L1;
* ``"ssim"``: ``0.84 (1 - SSIM) + 0.16 L1`` (Zhao et al. 2017's mix; SSIM with the usual 11x11
  Gaussian window, sigma 1.5, on images of at least 11x11);
* ``"grad"``: pixel MSE plus the MSE of the horizontal and vertical differences (an edge loss:
  it penalises the high-frequency speckle that pixel MSE weighs lightly).

The run's config records which one ran. Times ``t`` are uniform on [0, 1) (the authors) or
logit-normal (``sigmoid(N(0, 1))``, more weight on the middle of the path).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from ..errors import LinearizerError
from ..metrics.image import gaussian_window, local_ssim
from ..training.random_streams import StepRandom
from .model import DATA, NOISE, OneStepFlow

Distance = Callable[[Tensor, Tensor], Tensor]
PERCEPTUAL = ("auto", "lpips", "mse", "l1", "ssim", "grad")
TIME_SAMPLING = ("uniform", "logit-normal")


def resolve_perceptual(kind: str) -> str:
    """The distance that will actually run for ``kind`` on this machine."""
    if kind not in PERCEPTUAL:
        raise LinearizerError(f"unknown perceptual distance {kind!r}; choose one of {PERCEPTUAL}")
    if kind in ("auto", "lpips"):
        try:
            import piq  # noqa: F401
        except Exception:
            if kind == "lpips":
                raise LinearizerError(
                    "perceptual='lpips' needs the piq package (and its LPIPS weights)"
                ) from None
            return "mse"
        return "lpips"
    return kind


def make_distance(kind: str) -> Distance:
    kind = resolve_perceptual(kind)
    plain = {"mse": F.mse_loss, "l1": F.l1_loss, "ssim": ssim_l1_loss, "grad": gradient_loss}
    if kind in plain:
        return plain[kind]
    import piq

    lpips = piq.LPIPS(replace_pooling=True, reduction="none")

    def distance(x: Tensor, y: Tensor) -> Tensor:
        rgb = (lambda v: v.expand(-1, 3, -1, -1)) if x.shape[1] == 1 else (lambda v: v)
        return lpips(rgb(x.clamp(0, 1)), rgb(y.clamp(0, 1))).mean()

    return distance


def ssim_value(x: Tensor, y: Tensor, data_range: float = 1.0) -> Tensor:
    """Mean SSIM of two batches ``[B, C, H, W]`` (differentiable; valid window positions).

    Same definition as :func:`linearizer.metrics.ssim` (Wang et al. 2004; K1 = 0.01, K2 = 0.03)
    but in the inputs' dtype and with autograd, for use in a loss.
    """
    w = gaussian_window(dtype=x.dtype, device=x.device)
    if min(x.shape[-2:]) < len(w):
        raise LinearizerError(f"the ssim distance needs images of at least {len(w)}x{len(w)}")
    c1, c2 = (0.01 * data_range) ** 2, (0.03 * data_range) ** 2
    return local_ssim(x, y, w, c1, c2).mean()


def ssim_l1_loss(x: Tensor, y: Tensor) -> Tensor:
    """``0.84 (1 - SSIM) + 0.16 L1`` (Zhao, Gallo, Frosio and Kautz 2017)."""
    return 0.84 * (1 - ssim_value(x, y)) + 0.16 * F.l1_loss(x, y)


def gradient_loss(x: Tensor, y: Tensor) -> Tensor:
    """Pixel MSE plus the MSE of the horizontal and vertical finite differences."""
    d = x - y
    dh = d[..., :, 1:] - d[..., :, :-1]
    dv = d[..., 1:, :] - d[..., :-1, :]
    return d.square().mean() + dh.square().mean() + dv.square().mean()


def draw_times(kind: str, rand: Callable[[], Tensor], randn: Callable[[], Tensor]) -> Tensor:
    """Times in [0, 1): ``rand()`` as is (uniform) or ``sigmoid(randn())`` (logit-normal)."""
    if kind == "uniform":
        return rand()
    if kind == "logit-normal":
        return torch.sigmoid(randn())
    raise LinearizerError(f"unknown time sampling {kind!r}; choose one of {TIME_SAMPLING}")


def group_times(t: Tensor, groups: int) -> Tensor:
    """``t`` with its rows in ``groups`` consecutive runs, each taking its first row's time.

    Each run's time keeps ``t``'s distribution; the operator builds its factors once per run.

    >>> group_times(torch.tensor([0.1, 0.2, 0.3, 0.4, 0.5]), 2)
    tensor([0.1000, 0.1000, 0.1000, 0.4000, 0.4000])
    """
    if groups <= 0 or groups >= len(t):
        return t
    run = -(-len(t) // groups)
    return t[torch.arange(len(t), device=t.device) // run * run]


def draw_noise(
    x1: Tensor, gen: torch.Generator | StepRandom | None, *, times: str = "uniform", groups: int = 0
) -> dict[str, Tensor]:
    """t, x0, n0, n1 for a batch, in a fixed order from ``gen`` (so runs replay exactly).

    ``gen``: a generator (None: torch's global one) drawing this batch's rows, or a training
    step's :class:`~linearizer.training.random_streams.StepRandom`, which draws the whole
    global batch and keeps this process's rows. ``times``: the time sampling
    (:func:`draw_times`); ``groups``: rows sharing a time (:func:`group_times`).

    >>> x1 = torch.zeros(4, 1, 2, 2)
    >>> a, b = (draw_noise(x1, torch.Generator().manual_seed(0)) for _ in range(2))
    >>> sorted(a), all(torch.equal(a[k], b[k]) for k in a)
    (['n0', 'n1', 't', 'x0'], True)
    """
    n, shape = x1.shape[0], tuple(x1.shape[1:])
    if isinstance(gen, StepRandom):
        step = gen

        def rand() -> Tensor:
            return step.rand(like=x1)

        def randn(*size: int) -> Tensor:
            return step.randn(*size, like=x1)

    else:
        source, dtype, device = gen, x1.dtype, x1.device

        def rand() -> Tensor:
            return torch.rand(n, generator=source, dtype=dtype, device=device)

        def randn(*size: int) -> Tensor:
            return torch.randn((n, *size), generator=source, dtype=dtype, device=device)

    draws = {"t": group_times(draw_times(times, rand, randn), groups)}
    return draws | {k: randn(*shape) for k in ("x0", "n0", "n1")}


def flow_loss(
    model: OneStepFlow,
    x1: Tensor,
    draws: dict[str, Tensor],
    *,
    noise_level: float = 0.3,
    distance: Distance = F.mse_loss,
    labels: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """The total loss and its four terms (as floats, for logging); ``labels``: each row's
    class for a class-conditional operator (its null class for unconditional rows)."""
    t, x0, n0, n1 = draws["t"], draws["x0"], draws["n0"], draws["n1"]
    n = x1.shape[0]
    flags = torch.cat([torch.full((n,), NOISE), torch.full((n,), DATA)]).to(x1)
    a, b = model.encode(torch.cat([x0, x1]), flags).split(n)
    tt = t[:, None]
    z = (1 - tt) * a + tt * b
    p = model.op(z, t) if labels is None else model.op(z, t, labels)
    latent = F.mse_loss(p, b)
    s = noise_level
    targets = torch.cat([a + s * n0.reshape(n, -1), b + s * n1.reshape(n, -1), p])
    dec = model.decode(targets, torch.cat([flags, torch.full((n,), DATA).to(x1)]))
    x0_rec, x1_rec, pred_rec = dec.split(n)
    terms = {
        "latent": latent,
        "x0_rec": F.mse_loss(x0_rec, x0),
        "x1_rec": distance(x1_rec, x1),
        "x1_pred_rec": distance(pred_rec, x1),
    }
    total = sum(terms.values())
    return total, {k: float(v.detach()) for k, v in terms.items()}
