"""Style banks: one shared invertible ``g`` and one linear operator per style.

``f_s(x) = g_y^-1(A_s g_x(x))``. Each ``A_s`` acts on the image-shaped latent of ``g``:

* ``depthwise``: a ``k x k`` convolution per latent channel (the authors' operator, 4x4);
* ``channelmix``: a per-pixel ``C x C`` channel mix followed by a depthwise convolution,
  ``A_s = K_s M_s`` (colour can move between channels inside the operator).

Because ``f`` is linear in ``A`` through ``g_y``, mixing styles is exact operator algebra:
``A_w = sum_i w_i A_i + w_0 I`` gives ``g_y(f_w(x)) = sum_i w_i g_y(f_i(x)) + w_0 g_x(x)``,
i.e. ``f_w(x) = (+)_i w_i (.) f_i(x)`` in the induced space of ``g_y``. Depthwise kernels
combine linearly (``sum_i w_i K_i`` is the kernel of ``sum_i w_i A_i``); channel-mix operators
are products, so their mixture is applied as the sum of the operators' outputs, which is the
same linear map. Style *strength* ``a`` is ``a A_s + (1 - a) I``.

:class:`~linearizer.style.index_net.IndexStyleNet` is the authors' variant kept for comparison:
one hypernetwork maps a scalar style *index* ``t`` to the operator's parameters, and in-between
styles come from in-between indices, which obey no algebra. The operators themselves live in
:mod:`linearizer.style.operators`, the parts every style model shares in
:mod:`linearizer.style.model`.

>>> import torch
>>> from linearizer.invertible import cpu_network
>>> torch.manual_seed(0) and None
>>> bank = StyleBank(cpu_network(3, 1, hidden=8), ["a", "b"], init_scale=0.1).double()
>>> x = torch.rand(1, 3, 8, 8, dtype=torch.float64)
>>> mixed = bank.mix(x, {"a": 0.3, "b": 0.7})
>>> induced = bank.space_y.lincomb([0.3, 0.7], [bank.stylise(x, 0), bank.stylise(x, 1)])
>>> bool(torch.allclose(mixed, induced, rtol=1e-10, atol=1e-10))
True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from ..algebra import Linearizer
from ..errors import LinearizerError, deprecated
from .model import StyleModel
from .operators import WeightedStyleOperator, apply_operator, identity_kernel

Weights = Mapping[str, float] | Sequence[float] | Tensor  # {name: w}, one per style, [S]/[B, S]


class StyleBank(StyleModel):
    """One operator per style over a shared ``g``; exact mixing, strength and interpolation.

    Parameters: ``kernels [S, C, k, k]`` (identity at init, plus ``init_scale`` noise) and, for
    ``channelmix``, ``mixes [S, C, C]`` (identity at init). ``C`` is the latent channel count.
    """

    def __init__(
        self, g: nn.Module, styles: Sequence[str], *, init_scale: float = 0.0, **kwargs: Any
    ) -> None:
        super().__init__(g, styles, **kwargs)
        s, c, k = len(self.styles), self.latent_channels, self.kernel_size
        kernels = identity_kernel(c, k).expand(s, c, k, k).clone()
        if init_scale:
            kernels += init_scale * torch.randn_like(kernels)
        self.kernels = nn.Parameter(kernels)
        self.mixes = None
        if self.operator_kind == "channelmix":
            self.mixes = nn.Parameter(torch.eye(c).expand(s, c, c).clone())

    # -- weights -----------------------------------------------------------------------------
    def weight_vector(self, weights: Weights) -> Tensor:
        """``{name: w}`` (missing styles 0), a length-S sequence, or ``[S]``/``[B, S]``."""
        ref = self.kernels
        if isinstance(weights, Mapping):
            vec = torch.zeros(len(self.styles), dtype=ref.dtype, device=ref.device)
            for name, w in weights.items():
                vec[self.style_index(str(name))] = float(w)
            return vec
        vec = torch.as_tensor(weights, dtype=ref.dtype, device=ref.device)
        if vec.shape[-1] != len(self.styles) or vec.dim() not in (1, 2):
            raise LinearizerError(
                f"weights must have {len(self.styles)} entries per row (one per style), "
                f"got shape {list(vec.shape)}"
            )
        return vec

    # -- latent operators --------------------------------------------------------------------
    def latent_apply(self, z: Tensor, weights: Tensor, identity: float | Tensor = 0.0) -> Tensor:
        """``sum_s w_s A_s z + w_0 z`` per sample; ``weights [S]`` or ``[B, S]``, ``identity``
        a scalar or ``[B]``."""
        b = z.shape[0]
        w = weights.to(z).expand(b, len(self.styles)) if weights.dim() == 1 else weights.to(z)
        ident = torch.as_tensor(identity, dtype=z.dtype, device=z.device).reshape(-1)
        ident = ident.expand(b).reshape(b, 1, 1, 1)
        if self.mixes is None:
            # kernels are linear in the operator: one convolution with the combined kernel
            kernel = torch.einsum("bs,sckl->bckl", w, self.kernels.to(z))
            return apply_operator(z, kernel) + ident * z
        out = ident * z
        for s in range(len(self.styles)):
            ws = w[:, s]
            if bool((ws != 0).any()):
                term = apply_operator(z, self.kernels[s].to(z), self.mixes[s].to(z))
                out = out + ws.reshape(b, 1, 1, 1) * term
        return out

    def latent_style(self, z: Tensor, style: Tensor) -> Tensor:
        """``A_{style_b} z_b``: each sample's own style (training path, one operator each)."""
        kernel = self.kernels.to(z)[style]
        mix = None if self.mixes is None else self.mixes.to(z)[style]
        return apply_operator(z, kernel, mix)

    # -- images ------------------------------------------------------------------------------
    def stylise(self, x: Tensor, style: int | str | Tensor) -> Tensor:
        """``f_s(x)``; ``style`` a name, an index, or a ``[B]`` tensor of indices."""
        z = self.encode(x)
        return self.decode(self.latent_style(z, self._style_tensor(style, x.shape[0], x)))

    def apply_weights(self, x: Tensor, weights: Weights, identity: float | Tensor = 0.0) -> Tensor:
        """``g_y^-1((sum_s w_s A_s + w_0 I) g_x(x))``."""
        return self.decode(self.latent_apply(self.encode(x), self.weight_vector(weights), identity))

    def mix(self, x: Tensor, weights: Weights) -> Tensor:
        """The mixture ``f_w = (+)_s w_s (.) f_s`` (weights need not sum to 1)."""
        return self.apply_weights(x, weights)

    def strength(self, x: Tensor, style: int | str, alpha: float | Tensor) -> Tensor:
        """``alpha A_s + (1 - alpha) I``: 0 is ``g_y^-1(g_x(x))`` (``x`` itself when the sides
        share a flag), 1 the full style, above 1 an exaggeration."""
        vec = torch.zeros(len(self.styles), dtype=self.kernels.dtype, device=x.device)
        vec[self.style_index(style)] = 1.0
        a = torch.as_tensor(alpha, dtype=x.dtype, device=x.device).reshape(-1).expand(x.shape[0])
        return self.apply_weights(x, a[:, None] * vec[None], 1.0 - a)

    def interpolate(
        self, x: Tensor, start: int | str, end: int | str, n: int
    ) -> tuple[Tensor, Tensor]:
        """``n`` frames of ``(1 - a) A_start + a A_end`` for ``a = 0 ... 1`` (``x`` one image);
        returns the frames ``[n, C, H, W]`` and the ``a`` values."""
        alphas = self._frames(x, n)
        w = torch.zeros(n, len(self.styles), dtype=x.dtype, device=x.device)
        w[:, self.style_index(start)] += 1 - alphas
        w[:, self.style_index(end)] += alphas
        z = self.encode(x).expand(n, -1, -1, -1)
        return self.decode(self.latent_apply(z, w)), alphas

    # -- as a Linearizer ---------------------------------------------------------------------
    def operator(
        self, weights: Weights, identity: float, image_size: tuple[int, int]
    ) -> WeightedStyleOperator:
        """The fixed operator ``sum_s w_s A_s + w_0 I`` on latents of ``image_size`` images."""
        vec = self.weight_vector(weights)
        if vec.dim() != 1:
            raise LinearizerError("operator() takes one weight per style ([S]), not a batch")
        r = 2 if self.latent_squeeze else 1
        shape = (self.latent_channels, image_size[0] // r, image_size[1] // r)
        return WeightedStyleOperator(self.kernels, self.mixes, vec, identity, shape)

    def generator(
        self, weights: Weights | str, image_size: tuple[int, int], identity: float = 0.0
    ) -> Linearizer:
        """The style (or mixture) as a :class:`Linearizer` (pseudo-inverse, transpose, SVD ...)."""
        if isinstance(weights, str):
            weights = {weights: 1.0}
        op = self.operator(weights, identity, image_size)
        return self.linearizer_of(op, self.x_flag, self.y_flag, latent_shape=op.latent_shape)

    def linearizer(
        self, weights: Weights | str, image_size: tuple[int, int], identity: float = 0.0
    ) -> Linearizer:
        """Deprecated alias of :meth:`generator`; warns and returns its result."""
        deprecated("StyleBank.linearizer()", "generator()")
        return self.generator(weights, image_size, identity)
