"""The IGN baseline (Shocher et al., ICLR 2024): a DCGAN-like encoder/decoder ``f`` trained to
be idempotent near the data by its loss, not by construction.

Losses (IGN, with ``D`` the mean L1 distance and ``f_hat`` a frozen copy of ``f``: the same
weights, no gradient to them):

* ``L_rec = D(f(x), x)`` on data;
* ``L_idem = D(f_hat(f(z)), f(z))``: the gradient flows through the inner ``f`` only, pulling
  ``f(z)`` onto the fixed-point set;
* ``L_tight = -D(f(f_hat(z)), f_hat(z))``: through the outer ``f`` only, pushing generated
  points off the fixed-point set (keeping it tight); clamped as
  ``tanh(L_tight / (a L_rec)) a L_rec`` with ``L_rec`` detached, so it never dominates while
  reconstruction is poor.

``L = rec_weight L_rec + idem_weight L_idem + tight_weight L_tight`` with IGN's weights
20, 20, 2.5 and ``a = 1.5``. Images are in [0, 1]; inside, the network works on ``2x - 1`` and
ends in ``tanh``, as IGN's [-1, 1] convention (the output is ``(tanh + 1) / 2``).

Normalisation is BatchNorm, as in DCGAN and IGN (``norm="batch"``). With per-image GroupNorm
(``norm="group"``) this small network collapsed on MNIST within 300 steps: every output went to
the black background, a constant map that is exactly idempotent, where ``L_idem`` and
``L_tight`` are both zero and the saturated tanh leaves ``L_rec`` no gradient. Batch statistics
keep outputs varying across the batch during training and it escaped. In eval mode BatchNorm
uses its running statistics, so the trained ``f`` is a fixed function of one image.

>>> import torch
>>> net = IGN(img_size=16, width=4, latent=8).eval()
>>> net(torch.rand(2, 1, 16, 16)).shape
torch.Size([2, 1, 16, 16])
"""

from __future__ import annotations

import copy
import math

import torch
from torch import Tensor, nn
from torch.func import functional_call

from ..checks import check_image_batch
from ..errors import LinearizerError


def _norm(channels: int, kind: str) -> nn.Module:
    if kind == "batch":
        return nn.BatchNorm2d(channels)
    groups = next(g for g in (8, 4, 2, 1) if channels % g == 0)
    return nn.GroupNorm(groups, channels)


class IGN(nn.Module):
    """Encoder: stride-2 4x4 convs down to 4x4, then a 4x4 conv to ``latent`` channels at 1x1;
    decoder: the mirror with transposed convs. ``img_size`` must be a power of 2, >= 8."""

    def __init__(
        self,
        channels: int = 1,
        img_size: int = 32,
        width: int = 8,
        latent: int = 32,
        norm: str = "batch",
    ) -> None:
        super().__init__()
        if norm not in ("batch", "group"):
            raise LinearizerError(f"IGN norm must be 'batch' or 'group', got {norm!r}")
        if img_size < 8 or img_size & (img_size - 1):
            raise LinearizerError(f"IGN needs a power-of-2 image size >= 8, got {img_size}")
        self.image_shape = (channels, img_size, img_size)
        levels = int(math.log2(img_size)) - 2
        enc: list[nn.Module] = [nn.Conv2d(channels, width, 4, 2, 1), nn.LeakyReLU(0.2)]
        ch = width
        for _ in range(levels - 1):
            enc += [nn.Conv2d(ch, 2 * ch, 4, 2, 1), _norm(2 * ch, norm), nn.LeakyReLU(0.2)]
            ch *= 2
        enc.append(nn.Conv2d(ch, latent, 4, 1, 0))
        dec: list[nn.Module] = [nn.ConvTranspose2d(latent, ch, 4, 1, 0), _norm(ch, norm), nn.ReLU()]
        for _ in range(levels - 1):
            dec += [nn.ConvTranspose2d(ch, ch // 2, 4, 2, 1), _norm(ch // 2, norm), nn.ReLU()]
            ch //= 2
        dec.append(nn.ConvTranspose2d(ch, channels, 4, 2, 1))
        self.encoder = nn.Sequential(*enc)
        self.decoder = nn.Sequential(*dec)

    def check_images(self, x: Tensor, what: str = "inputs") -> None:
        check_image_batch(x, self.image_shape, what)

    def forward(self, x: Tensor) -> Tensor:
        self.check_images(x)
        h = self.decoder(self.encoder(2.0 * x - 1.0))
        return 0.5 * (torch.tanh(h) + 1.0)

    f = forward

    def generate(self, z: Tensor) -> Tensor:
        return self.forward(z)


def frozen(model: nn.Module):
    """``f_hat``: ``model`` with its current weights as constants (gradients reach only the
    input), without copying the module."""
    state = {k: v.detach() for k, v in model.named_parameters()}
    state.update(dict(model.named_buffers()))
    return lambda x: functional_call(model, state, (x,))


def ign_terms(
    model: nn.Module, x: Tensor, z: Tensor, tight_clamp: float = 1.5
) -> dict[str, Tensor]:
    """IGN's three loss terms (``rec``, ``idem``, clamped ``tight``) for any map ``model``.

    For the exactly projective model ``idem`` and ``tight`` vanish identically (to rounding):
    the tests check it, and :mod:`linearizer.projective.model` explains why it needs none.
    """
    f_hat = frozen(model)
    fx = model(x)
    rec = (fx - x).abs().mean()
    fz = model(z)
    idem = (f_hat(fz) - fz).abs().mean()
    fz_hat = fz.detach()  # = f_hat(z): same weights, so the same values, with no graph
    tight = -(model(fz_hat) - fz_hat).abs().mean()
    scale = tight_clamp * rec.detach().clamp_min(1e-12)
    tight = torch.tanh(tight / scale) * scale
    return {"rec": rec, "idem": idem, "tight": tight}


def ign_loss(
    model: nn.Module,
    x: Tensor,
    z: Tensor,
    rec_weight: float = 20.0,
    idem_weight: float = 20.0,
    tight_weight: float = 2.5,
    tight_clamp: float = 1.5,
) -> tuple[Tensor, dict[str, float]]:
    """IGN's training loss and its terms for logging."""
    t = ign_terms(model, x, z, tight_clamp)
    loss = rec_weight * t["rec"] + idem_weight * t["idem"] + tight_weight * t["tight"]
    return loss, {f"{k}_l1": float(v.detach()) for k, v in t.items()}


def as_trained(model: nn.Module) -> nn.Module:
    """The map as it was trained: a copy with BatchNorm layers on batch statistics (IGN), or
    ``model`` itself when it has none (ours). In eval mode BatchNorm would use running
    statistics averaged over data, noise and generated batches alike, a map IGN never trained."""
    if not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules()):
        return model
    twin = copy.deepcopy(model).eval()
    for m in twin.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.train()
    return twin
