"""The authors' style model, kept for comparison: one hypernetwork maps a scalar style *index*
``t`` to the operator's parameters; in-between styles come from in-between indices, which obey
no algebra (unlike :class:`~linearizer.style.bank.StyleBank`'s mixtures)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from ..errors import LinearizerError
from ..operators.lora import SinusoidalEmbedding
from .model import StyleModel
from .operators import apply_operator, identity_kernel


class IndexStyleNet(StyleModel):
    """The authors' design: a hypernetwork from the style index ``t`` to the operator.

    ``t`` (a float; styles sit at 0, 1, ..., S-1) -> sinusoidal embedding -> MLP -> the
    operator's parameters (kernels, plus channel mixes for ``channelmix``), added to the
    identity so training starts at ``f = identity`` like :class:`StyleBank`.
    """

    def __init__(
        self,
        g: nn.Module,
        styles: Sequence[str],
        *,
        emb_dim: int = 64,
        hidden: int = 256,
        depth: int = 2,
        **kwargs: Any,
    ) -> None:
        super().__init__(g, styles, **kwargs)
        if depth < 1 or hidden < 1:
            raise LinearizerError(
                f"hypernetwork depth and hidden must be >= 1, got {depth}, {hidden}"
            )
        c, k = self.latent_channels, self.kernel_size
        self.n_kernel = c * k * k
        self.n_mix = c * c if self.operator_kind == "channelmix" else 0
        layers: list[nn.Module] = [SinusoidalEmbedding(emb_dim)]
        width = emb_dim
        for _ in range(depth):
            layers += [nn.Linear(width, hidden), nn.GELU()]
            width = hidden
        last = nn.Linear(width, self.n_kernel + self.n_mix)
        nn.init.zeros_(last.weight)
        nn.init.zeros_(last.bias)
        self.hyper = nn.Sequential(*layers, last)
        self.register_buffer("base_kernel", identity_kernel(c, k), persistent=False)
        self.register_buffer("base_mix", torch.eye(c), persistent=False)

    def params_at(self, t: Tensor) -> tuple[Tensor, Tensor | None]:
        """Kernels ``[B, C, k, k]`` and mixes ``[B, C, C]`` (or ``None``) at indices ``t [B]``."""
        out = self.hyper(t.reshape(-1).to(self.base_kernel))
        c, k = self.latent_channels, self.kernel_size
        kernel = self.base_kernel + out[:, : self.n_kernel].reshape(-1, c, k, k)
        if not self.n_mix:
            return kernel, None
        return kernel, self.base_mix + out[:, self.n_kernel :].reshape(-1, c, c)

    def at_index(self, x: Tensor, t: float | Tensor) -> Tensor:
        """``g_y^-1(A(t) g_x(x))`` for a real index ``t`` (scalar or ``[B]``)."""
        t = torch.as_tensor(t, dtype=x.dtype, device=x.device).reshape(-1).expand(x.shape[0])
        kernel, mix = self.params_at(t)
        z = self.encode(x)
        return self.decode(apply_operator(z, kernel.to(z), None if mix is None else mix.to(z)))

    def stylise(self, x: Tensor, style: int | str | Tensor) -> Tensor:
        return self.at_index(x, self._style_tensor(style, x.shape[0], x).to(x.dtype))

    def interpolate(
        self, x: Tensor, start: int | str, end: int | str, n: int
    ) -> tuple[Tensor, Tensor]:
        """The authors' interpolation: index ``t = (1 - a) s_start + a s_end``."""
        alphas = self._frames(x, n)
        s0, s1 = self.style_index(start), self.style_index(end)
        return self.at_index(x.expand(n, -1, -1, -1), (1 - alphas) * s0 + alphas * s1), alphas
