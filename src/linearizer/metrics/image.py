"""PSNR and SSIM between image batches, computed in float64.

Both take ``a`` and ``b`` of the same shape ``[N, C, H, W]`` (PSNR accepts any ``[N, ...]``)
and a ``reduction``: ``"none"`` gives one value per sample (a float64 tensor ``[N]``),
``"mean"`` the mean of those (a float). PSNR also has ``"global"``: the PSNR of the mean MSE,
which is what "MSE / PSNR of a whole sample set" usually means. Identical images give
PSNR = inf and SSIM = 1.

SSIM follows Wang et al. (2004): Gaussian window 11x11 with sigma 1.5, K1 = 0.01, K2 = 0.03,
population (not sample) statistics, averaged over the valid positions and the channels. That
matches ``skimage.metrics.structural_similarity(..., gaussian_weights=True, sigma=1.5,
use_sample_covariance=False, data_range=...)``.

>>> a = torch.zeros(2, 1, 16, 16)
>>> round(psnr(a, a + 0.1), 6), psnr(a, a), ssim(a, a)
(20.0, inf, 1.0)
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from ..errors import LinearizerError

REDUCTIONS = ("none", "mean", "global")


def _pair(a, b, what: str, min_dim: int = 1) -> tuple[Tensor, Tensor]:
    a = torch.as_tensor(a).detach().to(torch.float64)
    b = torch.as_tensor(b).detach().to(device=a.device, dtype=torch.float64)
    if a.shape != b.shape:
        raise LinearizerError(f"{what}: shapes differ, {tuple(a.shape)} vs {tuple(b.shape)}")
    if a.dim() < min_dim or a.numel() == 0:
        raise LinearizerError(f"{what}: expected a non-empty batch [N, ...], got {tuple(a.shape)}")
    return a, b


def _reduce(values: Tensor, reduction: str, what: str):
    if reduction == "none":
        return values
    if reduction == "mean":
        return float(values.mean())
    raise LinearizerError(f"{what}: reduction must be one of {REDUCTIONS}, got {reduction!r}")


def mse_per_sample(a, b) -> Tensor:
    """Mean squared error of each sample, float64 ``[N]``."""
    a, b = _pair(a, b, "mse")
    return (a - b).square().reshape(len(a), -1).mean(1)


def psnr_from_mse(mse, data_range: float = 1.0):
    """``10 log10(data_range^2 / mse)`` = ``-10 log10(mse)`` for range 1; inf where mse = 0."""
    if data_range <= 0:
        raise LinearizerError(f"data_range must be positive, got {data_range}")
    if isinstance(mse, Tensor):
        mse = mse.to(torch.float64)
        return 10.0 * torch.log10(data_range**2 / mse)  # 1/0 -> inf, as wanted
    mse = float(mse)
    return math.inf if mse == 0 else 10.0 * math.log10(data_range**2 / mse)


def psnr(a, b, data_range: float = 1.0, reduction: str = "mean"):
    """Peak signal-to-noise ratio in dB (see the module docstring for ``reduction``)."""
    mse = mse_per_sample(a, b)
    if reduction == "global":
        return psnr_from_mse(float(mse.mean()), data_range)
    return _reduce(psnr_from_mse(mse, data_range), reduction, "psnr")


def gaussian_window(size: int = 11, sigma: float = 1.5, dtype=torch.float64, device=None) -> Tensor:
    """Normalised 1-D Gaussian of odd length ``size`` (computed in ``dtype`` on ``device``).

    >>> gaussian_window(3, 1.0).tolist() == gaussian_window(3, 1.0).flip(0).tolist()
    True
    """
    if size < 1 or size % 2 == 0 or sigma <= 0:
        raise LinearizerError(f"window size must be odd and sigma positive, got {size}, {sigma}")
    x = torch.arange(size, dtype=dtype, device=device) - (size - 1) / 2
    w = torch.exp(-(x**2) / (2 * sigma**2))
    return w / w.sum()


def _blur(x: Tensor, window: Tensor) -> Tensor:
    c = x.shape[1]
    k = len(window)
    x = F.conv2d(x, window.view(1, 1, 1, k).expand(c, 1, 1, k), groups=c)
    return F.conv2d(x, window.view(1, 1, k, 1).expand(c, 1, k, 1), groups=c)


def ssim_map(
    a,
    b,
    data_range: float = 1.0,
    window_size: int = 11,
    sigma: float = 1.5,
    k1: float = 0.01,
    k2: float = 0.03,
) -> Tensor:
    """Local SSIM ``[N, C, H - window_size + 1, W - window_size + 1]`` (valid positions only)."""
    a, b = _pair(a, b, "ssim", min_dim=4)
    if a.dim() != 4:
        raise LinearizerError(f"ssim: expected images [N, C, H, W], got {tuple(a.shape)}")
    if min(a.shape[-2:]) < window_size:
        raise LinearizerError(
            f"ssim: images {tuple(a.shape[-2:])} are smaller than the {window_size}x{window_size} "
            "window"
        )
    if data_range <= 0:
        raise LinearizerError(f"data_range must be positive, got {data_range}")
    w = gaussian_window(window_size, sigma).to(a.device)
    return local_ssim(a, b, w, (k1 * data_range) ** 2, (k2 * data_range) ** 2)


def local_ssim(a: Tensor, b: Tensor, window: Tensor, c1: float, c2: float) -> Tensor:
    """The SSIM formula at every valid position of the separable ``window``, in the inputs'
    dtype and differentiable (the flow objective's SSIM loss shares it)."""
    mu_a, mu_b = _blur(a, window), _blur(b, window)
    var_a = _blur(a * a, window) - mu_a**2
    var_b = _blur(b * b, window) - mu_b**2
    cov = _blur(a * b, window) - mu_a * mu_b
    num = (2 * mu_a * mu_b + c1) * (2 * cov + c2)
    den = (mu_a**2 + mu_b**2 + c1) * (var_a + var_b + c2)
    return num / den


def ssim(
    a,
    b,
    data_range: float = 1.0,
    reduction: str = "mean",
    window_size: int = 11,
    sigma: float = 1.5,
    k1: float = 0.01,
    k2: float = 0.03,
):
    """Structural similarity (Wang et al. 2004), per sample or averaged; 1 for identical images."""
    if reduction == "global":
        reduction = "mean"  # SSIM has no pooled-MSE form; the mean is the usual summary
    values = ssim_map(a, b, data_range, window_size, sigma, k1, k2).flatten(1).mean(1)
    return _reduce(values, reduction, "ssim")
