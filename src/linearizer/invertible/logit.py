"""A fixed logit on the data flag: pixel intensities in [0, 1] to the real line, and back.

A flow's latent is Gaussian-like and unbounded, while MNIST's pixels pile up at exactly 0 and 1.
Through ``y = logit(alpha + (1 - 2 alpha) x)`` (RealNVP's preprocessing, Dinh et al. 2017) the
inverse ends in a sigmoid: whatever latent the sampler hands over decodes to a pixel inside
``(-alpha / (1 - 2 alpha), 1 + alpha / (1 - 2 alpha))``, and a latent that leaves the data
manifold saturates towards the background instead of spraying grey speckle across it
(:class:`FlagLogit` also offers straight tails beyond pixels 0 and 1).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..errors import LinearizerError
from .base import InvertibleModule

DATA_FLAG = 1.0
TAILS = ("sigmoid", "linear")


class FlagLogit(InvertibleModule):
    """``logit(alpha + (1 - 2 alpha) x)`` on the rows whose flag is 1 (data); the identity on
    the others (noise, flag 0; ``flag=None`` means flag 0, as for :class:`FlagActNorm`).

    ``tails="sigmoid"``: the map is a bijection from the open interval ``(lo, hi) =
    (-alpha / (1 - 2 alpha), 1 + alpha / (1 - 2 alpha))`` onto the real line. The interval's
    edges, where a saturated sigmoid lands, encode to the largest logit the dtype resolves;
    data-flag inputs outside it are refused with a one-line error rather than turned into NaN.

    ``tails="linear"``: the same logit on pixels in [0, 1], continued linearly (value and slope
    match at 0 and 1) outside, so the map is a bijection of the whole real line. Nothing
    changes for pixels in [0, 1], nor for a decoded image clamped to [0, 1]; but a latent whose
    pixel the sigmoid would squeeze into ``(1, hi)`` decodes to a pixel beyond 1 that encodes
    back to it, where the sigmoid's flat tail keeps only a few digits of it
    (docs/flow/roundtrip.md §2).

    :meth:`centre_` subtracts a per-pixel centre from the logits, set from the first training
    batch's data rows (their mean logit image, the way :class:`FlagActNorm` starts from its
    first batch): a network odd after the logit is then odd about the data's mean image
    rather than about pixel 1/2.

    >>> block = FlagLogit(0.05)
    >>> x = torch.tensor([[0.0, 0.5, 1.0], [-3.0, 0.0, 3.0]]).view(2, 1, 1, 3)
    >>> flags = torch.tensor([1.0, 0.0])
    >>> y = block(x, flags)
    >>> [round(v, 3) for v in y[0].flatten().tolist()], y[1].flatten().tolist()
    ([-2.944, 0.0, 2.944], [-3.0, 0.0, 3.0])
    >>> bool(torch.allclose(block.inverse(y, flags), x, atol=1e-6))
    True
    """

    centre: Tensor | None
    centred: Tensor

    def __init__(self, alpha: float, tails: str = "sigmoid") -> None:
        super().__init__()
        if not 0.0 < alpha < 0.5:
            raise LinearizerError(f"the logit's alpha must be in (0, 0.5), got {alpha}")
        if tails not in TAILS:
            raise LinearizerError(f"the logit's tails must be one of {TAILS}, got {tails!r}")
        self.alpha, self.tails = float(alpha), tails
        self.width = 1.0 - 2.0 * self.alpha
        self.lo, self.hi = -self.alpha / self.width, 1.0 + self.alpha / self.width
        self.edge = math.log((1.0 - self.alpha) / self.alpha)  # the logit of pixel 1
        self.slope = self.width / (self.alpha * (1.0 - self.alpha))  # its derivative there
        self.register_buffer("centre", None)  # no centre: odd about pixel 1/2

    def centre_(self, shape: tuple[int, int, int]) -> FlagLogit:
        """Subtract a per-pixel centre of ``shape`` (channels, height, width) from the logits,
        set from the first training batch; returns ``self``."""
        self.register_buffer("centre", torch.zeros(shape))
        self.register_buffer("centred", torch.zeros((), dtype=torch.uint8))
        return self

    def _on_data_rows(self, x: Tensor, flag: Tensor | None, fn) -> Tensor:  # noqa: ANN001
        if flag is None:
            return x
        data = flag.reshape(-1) == DATA_FLAG
        if bool(data.all()):
            return fn(x)
        rows = data.nonzero().flatten()
        if rows.numel() == 0:
            return x
        return x.index_copy(0, rows, fn(x.index_select(0, rows)))

    def _logit(self, x: Tensor) -> Tensor:
        if self.tails == "linear":
            inside = torch.logit(self.alpha + self.width * x.clamp(0, 1))
            return inside + (x - x.clamp(0, 1)) * self.slope
        p = self.alpha + self.width * x
        # A decoded pixel can sit exactly on the interval's edge (a saturated sigmoid, rounded):
        # it encodes to the largest finite logit this dtype resolves instead of an infinity.
        # The refusal's tolerance is float32's in every dtype, so what a float32 decode
        # produced encodes in float64 too.
        eps, tol = torch.finfo(p.dtype).eps, 16 * torch.finfo(torch.float32).eps
        if p.numel() and not bool(((p >= -tol) & (p <= 1 + tol)).all()):
            raise LinearizerError(
                f"data-flag images must lie in [{self.lo:.8g}, {self.hi:.8g}] for a logit with "
                f"alpha={self.alpha:g} (pixels in [0, 1]); got values in "
                f"[{float(x.min()):.8g}, {float(x.max()):.8g}]"
            )
        return torch.logit(p.clamp(eps, 1 - eps))

    def _sigmoid(self, y: Tensor) -> Tensor:
        if self.tails == "linear":
            inside = y.clamp(-self.edge, self.edge)
            return (torch.sigmoid(inside) - self.alpha) / self.width + (y - inside) / self.slope
        return (torch.sigmoid(y) - self.alpha) / self.width

    def _centred_logit(self, x: Tensor) -> Tensor:
        y = self._logit(x)
        if self.centre is None:
            return y
        if self.training and not bool(self.centred) and len(y):
            with torch.no_grad():
                self.centre.copy_(y.mean(dim=0))
                self.centred.fill_(1)
        return y - self.centre

    def _centred_sigmoid(self, y: Tensor) -> Tensor:
        return self._sigmoid(y if self.centre is None else y + self.centre)

    def forward(self, x: Tensor, flag: Tensor | None = None) -> Tensor:
        return self._on_data_rows(x, flag, self._centred_logit)

    def inverse(self, z: Tensor, flag: Tensor | None = None) -> Tensor:
        return self._on_data_rows(z, flag, self._centred_sigmoid)

    def extra_repr(self) -> str:
        tails = "" if self.tails == "sigmoid" else f", tails={self.tails!r}"
        centre = "" if self.centre is None else f", centre={tuple(self.centre.shape)}"
        return f"alpha={self.alpha:g}, flag={DATA_FLAG:g}{tails}{centre}"
