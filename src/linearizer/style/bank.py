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

:class:`IndexStyleNet` is the authors' variant kept for comparison: one hypernetwork maps a
scalar style *index* ``t`` to the operator's parameters, and in-between styles come from
in-between indices, which obey no algebra.

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

from ..algebra import InducedSpace, Linearizer
from ..errors import LinearizerError
from ..image_model import ImageModel
from ..operators.base import LinearOperator
from ..operators.conv import apply_depthwise
from ..operators.lora import SinusoidalEmbedding

OPERATORS = ("depthwise", "channelmix")
Weights = Mapping[str, float] | Sequence[float] | Tensor  # {name: w}, one per style, [S]/[B, S]


# ----------------------------------------------------------------------------- latent views


class LatentView(nn.Module):
    """``g`` at one conditioning flag, with the latent optionally squeezed 2x2 to 4C channels.

    An invertible module in its own right (``forward``/``inverse``), so it can define an
    :class:`InducedSpace` or serve as ``g_x``/``g_y`` of a :class:`Linearizer`.
    """

    def __init__(self, g: nn.Module, flag: float, squeeze: bool) -> None:
        super().__init__()
        self.g, self.flag, self.squeeze = g, float(flag), bool(squeeze)

    def forward(self, x: Tensor) -> Tensor:
        z = self.g(x, self.flag)
        if self.squeeze:
            b, c, h, w = z.shape
            z = z.reshape(b, c, h // 2, 2, w // 2, 2).permute(0, 1, 3, 5, 2, 4)
            z = z.reshape(b, 4 * c, h // 2, w // 2)
        return z

    def inverse(self, z: Tensor) -> Tensor:
        if self.squeeze:
            b, c4, h, w = z.shape
            z = z.reshape(b, c4 // 4, 2, 2, h, w).permute(0, 1, 4, 2, 5, 3)
            z = z.reshape(b, c4 // 4, 2 * h, 2 * w)
        return self.g.inverse(z, self.flag)


# ----------------------------------------------------------------------------- operators


def apply_operator(z: Tensor, kernel: Tensor, mix: Tensor | None = None) -> Tensor:
    """``A z = K (M z)`` per sample: ``z [B, C, H, W]``, ``kernel [B, C, k, k]`` or
    ``[C, k, k]``, ``mix [B, C, C]`` / ``[C, C]`` or ``None`` (depthwise only)."""
    if mix is not None:
        pattern = "oc,bchw->bohw" if mix.dim() == 2 else "boc,bchw->bohw"
        z = torch.einsum(pattern, mix, z)
    return apply_depthwise(z, kernel, tuple(z.shape[1:]))


def apply_operator_transpose(y: Tensor, kernel: Tensor, mix: Tensor | None = None) -> Tensor:
    """``A^T y = M^T (K^T y)`` with the same argument conventions as :func:`apply_operator`."""
    y = apply_depthwise(y, kernel, tuple(y.shape[1:]), transpose=True)
    if mix is not None:
        pattern = "oc,bohw->bchw" if mix.dim() == 2 else "boc,bohw->bchw"
        y = torch.einsum(pattern, mix, y)
    return y


def identity_kernel(channels: int, size: int, like: Tensor | None = None) -> Tensor:
    """``[C, k, k]`` with a 1 at the centre tap of 'same' padding: the identity operator."""
    kernel = torch.zeros(channels, size, size)
    kernel[:, (size - 1) // 2, (size - 1) // 2] = 1.0
    return kernel if like is None else kernel.to(like)


class WeightedStyleOperator(LinearOperator):
    """``A = sum_i w_i K_i M_i + w_0 I`` on flattened latents of shape ``latent_shape``.

    Built by :meth:`StyleBank.operator`; holds copies, so it is a fixed operator (for
    :class:`Linearizer`'s pseudo-inverse, transpose, SVD on small images).
    """

    def __init__(
        self,
        kernels: Tensor,
        mixes: Tensor | None,
        weights: Tensor,
        identity: float,
        latent_shape: tuple[int, int, int],
    ) -> None:
        super().__init__()
        self.register_buffer("kernels", kernels.detach().clone())
        self.register_buffer("mixes", None if mixes is None else mixes.detach().clone())
        self.register_buffer("weights", weights.detach().clone())
        self.identity = float(identity)
        self.latent_shape = tuple(latent_shape)
        self.in_features = self.out_features = int(torch.tensor(latent_shape).prod())

    # not `_apply`: that name is nn.Module's hook behind .to(), .double() and .cuda()
    def _act(self, z: Tensor, transpose: bool) -> Tensor:
        if z.dim() != 2 or z.shape[1] != self.in_features:
            raise LinearizerError(f"expected latents [B, {self.in_features}], got {list(z.shape)}")
        x = z.reshape(z.shape[0], *self.latent_shape)
        fn = apply_operator_transpose if transpose else apply_operator
        if self.mixes is None:
            kernel = torch.einsum("s,sckl->ckl", self.weights.to(x), self.kernels.to(x))
            out = fn(x, kernel)
        else:
            out = torch.zeros_like(x)
            for w, k, m in zip(self.weights.tolist(), self.kernels, self.mixes):
                if w != 0.0:
                    out = out + w * fn(x, k.to(x), m.to(x))
        return (out + self.identity * x).reshape(z.shape)

    def forward(self, z: Tensor, t: Any = None) -> Tensor:
        return self._act(z, transpose=False)

    def transpose_apply(self, y: Tensor, t: Any = None) -> Tensor:
        return self._act(y, transpose=True)


# ----------------------------------------------------------------------------- models


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

    def encode(self, x: Tensor) -> Tensor:
        self.check_images(x)
        if self.latent_squeeze and (x.shape[2] % 4 or x.shape[3] % 4):
            raise LinearizerError(f"latent_squeeze needs H and W divisible by 4, got {x.shape}")
        return self.view("x")(x)

    def decode(self, z: Tensor) -> Tensor:
        return self.view("y").inverse(z)

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
        self.mixes = (
            nn.Parameter(torch.eye(c).expand(s, c, c).clone())
            if self.operator_kind == "channelmix"
            else None
        )

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

    def linearizer(
        self, weights: Weights | str, image_size: tuple[int, int], identity: float = 0.0
    ) -> Linearizer:
        """The style (or mixture) as a :class:`Linearizer` (pseudo-inverse, transpose, SVD ...)."""
        if isinstance(weights, str):
            weights = {weights: 1.0}
        op = self.operator(weights, identity, image_size)
        return self.linearizer_of(op, self.x_flag, self.y_flag, latent_shape=op.latent_shape)


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


def build_style_model(cfg: Any, styles: Sequence[str], channels: int = 3) -> StyleModel:
    """The model a :class:`~linearizer.style.config.StyleConfig` describes (freshly initialised)."""
    from ..invertible.factory import build_network

    g = build_network(cfg.network, channels)
    common = dict(
        channels=channels,
        operator=cfg.operator,
        kernel_size=cfg.kernel_size,
        latent_squeeze=cfg.latent_squeeze,
        x_flag=1.0,
        y_flag=1.0 if cfg.flags == "shared" else 0.0,
    )
    if cfg.bank == "index":
        return IndexStyleNet(
            g,
            styles,
            emb_dim=cfg.index_emb,
            hidden=cfg.index_hidden,
            depth=cfg.index_depth,
            **common,
        )
    return StyleBank(g, styles, **common)
