"""What every style model shares: the network ``g``, its two sides' flags, the latent layout
and the style names (:class:`~linearizer.style.bank.StyleBank`,
:class:`~linearizer.style.index_net.IndexStyleNet`)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from ..algebra import InducedSpace
from ..errors import LinearizerError
from ..image_model import ImageModel
from .latent import LatentView
from .operators import OPERATORS


class StyleModel(ImageModel):
    """Shared parts of :class:`StyleBank` and :class:`IndexStyleNet`: ``g``, flags, latent layout.

    ``g``: an invertible network ``g(x, cond)`` on ``[B, channels, H, W]`` images (any H, W).
    ``x_flag``/``y_flag``: the conditioning flags of the two sides (equal: ``g_x = g_y``, so the
    identity operator is the identity map and style strength interpolates from the content).
    ``latent_squeeze``: operate on the 2x2-squeezed latent (``4 * channels`` channels).
    """

    NET_ATTR = "g"

    def __init__(
        self,
        g: nn.Module,
        styles: Sequence[str],
        channels: int = 3,
        operator: str = "depthwise",
        kernel_size: int = 4,
        latent_squeeze: bool = False,
        x_flag: float = 1.0,
        y_flag: float = 1.0,
    ) -> None:
        super().__init__(g, None, channels=channels)
        styles = [str(s) for s in styles]
        if not styles or len(set(styles)) != len(styles):
            raise LinearizerError(f"a style model needs distinct style names, got {styles}")
        if operator not in OPERATORS:
            raise LinearizerError(f"operator must be one of {OPERATORS}, got {operator!r}")
        if kernel_size < 1:
            raise LinearizerError(f"kernel_size must be >= 1, got {kernel_size}")
        self.styles = styles
        self.operator_kind = operator
        self.kernel_size = kernel_size
        self.latent_squeeze = bool(latent_squeeze)
        self.latent_channels = 4 * channels if latent_squeeze else channels
        self.x_flag, self.y_flag = float(x_flag), float(y_flag)

    # -- sides -------------------------------------------------------------------------------
    def side(self, flag: float | None) -> LatentView:
        """``g`` at ``flag`` as an invertible module on (optionally squeezed) latents."""
        return LatentView(self.g, flag, self.latent_squeeze)

    def view(self, side: str) -> LatentView:
        """``g_x`` (``side='x'``) or ``g_y`` as an invertible module on latents."""
        return self.side(self.x_flag if side == "x" else self.y_flag)

    @property
    def same_sides(self) -> bool:
        return self.x_flag == self.y_flag

    @property
    def space_y(self) -> InducedSpace:
        """The induced space of ``g_y``, where mixtures of styles are linear combinations."""
        return InducedSpace(self.view("y"))

    def encode(self, x: Tensor, flag: float | None = None) -> Tensor:
        """The latent of ``x`` at ``flag``; ``flag=None`` is the input side, ``g_x(x)``."""
        self.check_images(x)
        if self.latent_squeeze and (x.shape[2] % 4 or x.shape[3] % 4):
            raise LinearizerError(f"latent_squeeze needs H and W divisible by 4, got {x.shape}")
        return self.side(self.x_flag if flag is None else flag)(x)

    def decode(self, z: Tensor, flag: float | None = None) -> Tensor:
        """The image of latent ``z`` at ``flag``; ``flag=None`` is the output side, ``g_y^-1``."""
        return self.side(self.y_flag if flag is None else flag).inverse(z)

    def style_index(self, style: int | str) -> int:
        if isinstance(style, str):
            if style not in self.styles:
                raise LinearizerError(f"unknown style {style!r}; this model has {self.styles}")
            return self.styles.index(style)
        index = int(style)
        if not 0 <= index < len(self.styles):
            raise LinearizerError(f"style index {index} out of range 0..{len(self.styles) - 1}")
        return index

    def _style_tensor(self, style: int | str | Tensor, batch: int, ref: Tensor) -> Tensor:
        if isinstance(style, Tensor):
            style = style.to(device=ref.device, dtype=torch.long).reshape(-1)
            if style.shape[0] != batch or bool(((style < 0) | (style >= len(self.styles))).any()):
                raise LinearizerError(
                    f"style indices must be [{batch}] in 0..{len(self.styles) - 1}"
                )
            return style
        return torch.full((batch,), self.style_index(style), dtype=torch.long, device=ref.device)

    def stylise(self, x: Tensor, style: int | str | Tensor) -> Tensor:  # pragma: no cover
        raise NotImplementedError

    def forward(self, x: Tensor, style: int | str | Tensor) -> Tensor:
        return self.stylise(x, style)

    def _frames(self, x: Tensor, n: int) -> Tensor:
        """The ``a`` values ``0 ... 1`` of an ``n``-frame interpolation of one image ``x``."""
        if n < 2:
            raise LinearizerError(f"an interpolation needs n >= 2 frames, got {n}")
        if x.dim() != 4 or x.shape[0] != 1:
            raise LinearizerError(f"interpolate takes one image [1, C, H, W], got {list(x.shape)}")
        return torch.linspace(0, 1, n, dtype=x.dtype, device=x.device)
