"""Ready invertible networks: the paper's block structure with a pluggable conditioner.

``make_conditioner(c_in, c_out) -> nn.Module`` builds one coupling conditioner reading
``c_in`` channels and returning ``c_out = 2 * (updated channels)`` channels, shifts first
(see :mod:`linearizer.invertible.coupling` for the call signature).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from ..checks import check_channels
from ..errors import LinearizerError
from .actnorm import ActNorm, FlagActNorm
from .base import InvertibleModule, as_flag
from .cnn import SmallCNN
from .conv1x1 import InvConv1x1
from .coupling import AffineCoupling
from .dense import DenseConditioner
from .logit import FlagLogit
from .sequential import run_blocks
from .squeeze import Squeeze

MakeConditioner = Callable[[int, int], nn.Module]


class CouplingBlock(InvertibleModule):
    """ActNorm -> coupling ``F`` (first half given second) -> coupling ``G`` (second half given
    the new first half) -> 1x1 mix. Attribute names match the authors' state-dict keys.
    ``flag_norm``: a :class:`FlagActNorm` (one bias/scale pair per flag) instead of ActNorm.

    >>> import torch
    >>> block = CouplingBlock(4, lambda i, o: SmallCNN(i, o, hidden=8))
    >>> x = torch.randn(2, 4, 6, 6)
    >>> bool(torch.allclose(block.inverse(block(x)), x, rtol=1e-5, atol=1e-5))
    True
    """

    def __init__(
        self,
        channels: int,
        make_conditioner: MakeConditioner,
        clamp: float = 5.0,
        clamp_mode: str = "soft",
        flag_norm: bool = False,
    ) -> None:
        super().__init__()
        if channels < 2:
            raise LinearizerError(f"CouplingBlock needs at least 2 channels, got {channels}")
        first = channels // 2
        second = channels - first
        self.actnorm = FlagActNorm(channels) if flag_norm else ActNorm(channels)
        self.F = AffineCoupling(make_conditioner(second, 2 * first), "first", clamp, clamp_mode)
        self.G = AffineCoupling(make_conditioner(first, 2 * second), "second", clamp, clamp_mode)
        self.mix = InvConv1x1(channels)

    def forward(self, x: Tensor, flag: Tensor | None = None) -> Tensor:
        return self.mix(self.G(self.F(self.actnorm(x, flag), flag), flag))

    def inverse(self, z: Tensor, flag: Tensor | None = None) -> Tensor:
        z = self.F.inverse(self.G.inverse(self.mix.inverse(z), flag), flag)
        return self.actnorm.inverse(z, flag)


class CoarserLevel(InvertibleModule):
    """Squeeze 2x2 -> ``num_blocks`` x :class:`CouplingBlock` (4x the channels) -> un-squeeze.

    A multi-scale level in the manner of RealNVP and Glow, without factoring channels out: at
    half the resolution a 3x3 conditioner sees twice as far, for about the same cost per block.

    >>> import torch
    >>> level = CoarserLevel(4, 1, lambda i, o: SmallCNN(i, o, hidden=8))
    >>> x = torch.randn(2, 4, 8, 8)
    >>> bool(torch.allclose(level.inverse(level(x)), x, rtol=1e-5, atol=1e-5))
    True
    """

    def __init__(
        self,
        channels: int,
        num_blocks: int,
        make_conditioner: MakeConditioner,
        clamp: float = 5.0,
        clamp_mode: str = "soft",
        flag_norm: bool = False,
    ) -> None:
        super().__init__()
        self.squeeze = Squeeze()
        self.blocks = nn.ModuleList(
            CouplingBlock(4 * channels, make_conditioner, clamp, clamp_mode, flag_norm)
            for _ in range(num_blocks)
        )

    def forward(self, x: Tensor, flag: Tensor | None = None) -> Tensor:
        return self.squeeze.inverse(run_blocks(self.blocks, self.squeeze(x), flag))

    def inverse(self, z: Tensor, flag: Tensor | None = None) -> Tensor:
        return self.squeeze.inverse(run_blocks(self.blocks, self.squeeze(z), flag, inverse=True))


class InvertibleNetwork(InvertibleModule):
    """[logit] -> [Squeeze] -> ``num_blocks`` x :class:`CouplingBlock` -> [un-squeeze],
    shape-preserving.

    ``levels > 1`` appends nested :class:`CoarserLevel` s (``num_blocks`` blocks each, at half
    the resolution of the level before), so inputs must be divisible by ``2^levels`` (squeezed)
    or ``2^(levels - 1)``.

    ``squeeze=None`` squeezes exactly when ``in_channels`` is odd (as the authors), so a
    one-channel image gets four channels to split. ``flag`` may be ``None``, a float, a 0-d
    tensor or a ``[B]`` tensor.

    ``tail`` blocks run after all the others, at the top level's resolution (the
    fully connected couplings of :func:`cpu_network`). Out of training mode, a float32 network
    runs its tail in float64 and returns float64 latents, and its inverse takes them: off the
    data, fully connected conditioners extrapolate to latents of 1e4 to 1e5 whose inverse
    amplifies 500-fold, beyond float32's 24 bits (docs/flow/roundtrip.md). In float64 the round
    trip holds to 1e-5 on any input, at about 10 % more time; training keeps the input's dtype.

    ``logit > 0`` starts with a :class:`FlagLogit` of that ``alpha`` and ``logit_tails``:
    data-flag images (pixels in [0, 1]) are mapped to the real line before the first block, so
    the inverse ends in a sigmoid (with straight tails beyond 0 and 1 for ``"linear"``).

    >>> import torch
    >>> g = InvertibleNetwork(1, 2, lambda i, o: SmallCNN(i, o, hidden=8))
    >>> x = torch.randn(2, 1, 8, 8)
    >>> z = g(x, 1.0)
    >>> z.shape, bool(torch.allclose(g.inverse(z, 1.0), x, rtol=1e-5, atol=1e-5))
    (torch.Size([2, 1, 8, 8]), True)
    """

    def __init__(
        self,
        in_channels: int,
        num_blocks: int,
        make_conditioner: MakeConditioner,
        squeeze: bool | None = None,
        clamp: float = 5.0,
        clamp_mode: str = "soft",
        flag_norm: bool = False,
        levels: int = 1,
        logit: float = 0.0,
        tail: Sequence[InvertibleModule] = (),
        logit_tails: str = "sigmoid",
    ) -> None:
        super().__init__()
        if in_channels < 1 or num_blocks < 1 or levels < 1:
            raise LinearizerError(
                f"need in_channels, num_blocks and levels >= 1, got {in_channels}, {num_blocks}, "
                f"{levels}"
            )
        if squeeze is None:
            squeeze = in_channels % 2 == 1
        width = 4 * in_channels if squeeze else in_channels
        if width < 2:
            raise LinearizerError("a one-channel input needs squeeze=True (or None)")
        self.in_channels = in_channels
        self.logit = FlagLogit(logit, logit_tails) if logit else None
        self.squeeze = Squeeze() if squeeze else None
        blocks: list[InvertibleModule] = [
            CouplingBlock(width, make_conditioner, clamp, clamp_mode, flag_norm)
            for _ in range(num_blocks)
        ]
        host: list | nn.ModuleList = blocks
        for level in range(1, levels):
            coarse = CoarserLevel(
                width * 4 ** (level - 1), num_blocks, make_conditioner, clamp, clamp_mode, flag_norm
            )
            host.append(coarse)  # nested: each level runs at half the resolution of its host
            host = coarse.blocks
        self.blocks = nn.ModuleList([*blocks, *tail])
        self.tail_start = len(blocks)
        self._wide: dict[str, tuple] = {}  # the tail's float64 copy, per weights version
        self.levels = levels
        self.divisor = 2 ** (levels - 1 + (1 if squeeze else 0))

    def _prepare(self, x: Tensor, flag: float | Tensor | None) -> Tensor | None:
        check_channels(x, self.in_channels, type(self).__name__)
        if x.shape[2] % self.divisor or x.shape[3] % self.divisor:
            raise LinearizerError(
                f"{type(self).__name__} squeezes 2x2 and needs height and width divisible by "
                f"{self.divisor}, got {x.shape[2]}x{x.shape[3]}"
            )
        flag = as_flag(flag, x.shape[0], x)
        if flag is not None and tuple(flag.shape) != (x.shape[0],):
            raise LinearizerError(f"flag must have shape [{x.shape[0]}], got {tuple(flag.shape)}")
        return flag

    def _wide_tail(self, like: Tensor) -> nn.ModuleList | None:
        """The tail's cached float64 copy, when ``like`` is to run through it: out of training
        mode, on a float32 network that has a tail; else None."""
        if not self._widens(like):
            return None
        own = self.blocks[self.tail_start :]
        version = tuple((p.data_ptr(), p._version) for p in own.parameters())
        hit = self._wide.get("tail")
        if hit is None or hit[0] != version:
            hit = self._wide["tail"] = (version, copy.deepcopy(own).double().requires_grad_(False))
        return hit[1]

    def _widens(self, like: Tensor) -> bool:
        """Whether ``like`` runs through the tail's float64 copy (and its latent is float64)."""
        has_tail = len(self.blocks) > self.tail_start
        return not self.training and has_tail and like.dtype == torch.float32

    shift_flag: float | None = None  # the flag whose side is a shift (see shift_side)

    def shift_side(self, flag: float, image_shape: tuple[int, int, int]) -> None:
        """Make the side at ``flag`` the shift ``x -> x + mu`` (``mu`` learned, image-shaped,
        zero at first) instead of the blocks: an affine side has condition number 1 at every
        input, so the induced space's operations (``a g(x)`` for any sign of ``a``, sums) cost
        one rounding there, and not being odd it keeps a mean that a mixture's components can
        map apart (docs/flow/roundtrip.md §11)."""
        self.shift_flag = float(flag)
        self.shift = nn.Parameter(torch.zeros(image_shape, dtype=self._dtype()))

    def _by_side(
        self, x: Tensor, flag: Tensor | None, run: Callable[..., Tensor], sign: float
    ) -> Tensor:
        """``run(x, flag)`` on every row, except rows at ``shift_flag``: ``x + sign * mu``
        there, in the dtype ``run`` returns (float64 latents out of training mode)."""
        if self.shift_flag is None or flag is None:
            return run(x, flag)
        rows = flag == self.shift_flag
        if not bool(rows.any()):
            return run(x, flag)
        if sign > 0 and self._widens(x):
            dtype = torch.float64  # as the blocks' latents
        else:
            dtype = x.dtype if sign > 0 else self._dtype()
        work = torch.promote_types(x.dtype, dtype)  # one rounding, into the wider dtype
        shifted = (x[rows].to(work) + sign * self.shift.to(work)).to(dtype)
        if bool(rows.all()):
            return shifted
        rest = run(x[~rows], flag[~rows])
        out = rest.new_empty((x.shape[0], *rest.shape[1:]))
        out[rows], out[~rows] = shifted.to(rest.dtype), rest
        return out

    mean_flag: float | None = None  # the flag whose side adds a learned mean (see mean_side)

    def mean_side(self, flag: float, image_shape: tuple[int, int, int]) -> None:
        """Add a learned mean to the latents of the side at ``flag``: ``g(x) = h(x) + mu`` with
        ``h`` the blocks and ``mu`` image-shaped, zero at first. With an odd ``h`` the side is odd
        about ``mu``: ``a g(x)`` reaches ``h`` at ``a h(x) + (a - 1) mu``, mirrored into where
        training was for either sign of ``a`` while ``mu`` stays small against ``h``'s spread,
        and a mixture's components keep the means ``B_k mu`` (docs/flow/roundtrip.md §12)."""
        self.mean_flag = float(flag)
        self.latent_mean = nn.Parameter(torch.zeros(image_shape, dtype=self._dtype()))

    def offset(self, z: Tensor, flag: Tensor | None, sign: float) -> Tensor:
        """``z + sign * mu`` on the rows at ``mean_flag`` (one rounding, in ``z``'s dtype);
        ``z`` itself when the network has no mean or no flag is given."""
        if self.mean_flag is None or flag is None:
            return z
        rows = (flag == self.mean_flag).to(z.dtype).reshape(-1, *([1] * (z.dim() - 1)))
        return z + rows * (sign * self.latent_mean.to(z.dtype))

    def forward(self, x: Tensor, flag: float | Tensor | None = None) -> Tensor:
        flag = self._prepare(x, flag)
        return self.offset(self._by_side(x, flag, self._forward, 1.0), flag, 1.0)

    def inverse(self, z: Tensor, flag: float | Tensor | None = None) -> Tensor:
        flag = self._prepare(z, flag)
        return self._by_side(self.offset(z, flag, -1.0), flag, self._inverse, -1.0)

    def _forward(self, x: Tensor, flag: Tensor | None) -> Tensor:
        if self.logit is not None:
            x = self.logit(x, flag)
        if self.squeeze is not None:
            x = self.squeeze(x)
        x = run_blocks(self.blocks[: self.tail_start], x, flag)
        tail = self._wide_tail(x)
        if tail is None:
            tail = self.blocks[self.tail_start :]
        else:
            x, flag = x.double(), None if flag is None else flag.double()
        x = run_blocks(tail, x, flag)
        return x if self.squeeze is None else self.squeeze.inverse(x)

    def _inverse(self, z: Tensor, flag: Tensor | None) -> Tensor:
        dtype = self._dtype()
        if self.squeeze is not None:
            z = self.squeeze(z)
        wide = self._wide_tail(z.to(dtype))
        if wide is None:
            z = run_blocks(self.blocks[self.tail_start :], z, flag, inverse=True)
        else:
            flag = None if flag is None else flag.double()
            z = run_blocks(wide, z.double(), flag, inverse=True).to(dtype)
        z = run_blocks(self.blocks[: self.tail_start], z, flag, inverse=True)
        if self.squeeze is not None:
            z = self.squeeze.inverse(z)
        return z if self.logit is None else self.logit.inverse(z, flag)

    def _dtype(self) -> torch.dtype:
        param = next(self.parameters(), None)
        return torch.float32 if param is None else param.dtype


def cpu_network(
    in_channels: int = 1,
    num_blocks: int = 2,
    hidden: int = 32,
    clamp_mode: str = "soft",
    clamp: float = 2.0,
    cond_dim: int = 4,
    dropout: float = 0.0,
    flag_norm: bool = False,
    levels: int = 1,
    logit: float = 0.0,
    dense_blocks: int = 0,
    dense_hidden: int = 256,
    img_size: int | None = None,
    shift_bound: float = 0.0,
    logit_tails: str = "sigmoid",
    odd_flag: float | None = None,
    shift_flag: float | None = None,
    mean_flag: float | None = None,
    odd_data: bool = False,
) -> InvertibleNetwork:
    """The network of the CPU presets: :class:`SmallCNN` conditioners, zero-initialised.

    Defaults follow ../shared/research/cpu-calibration.md: 2 blocks and 32 hidden channels
    were best for ~30 min on 2 cores, with the log-scale soft-clamped as ``2 tanh(l / 2)``.

    >>> import torch
    >>> g = cpu_network()
    >>> x = torch.randn(2, 1, 32, 32)
    >>> bool(g(x, 1.0).eq(g(x, 0.0)).all())   # couplings start as the identity
    True

    ``dense_blocks`` appends coupling blocks whose conditioners are fully connected
    (:class:`DenseConditioner`, ``dense_hidden`` wide) and so see the whole image; they fix the
    input size, ``img_size`` x ``img_size``. ``shift_bound`` soft-bounds every coupling's
    shifts (:class:`AffineCoupling`); ``logit_tails`` is the data-side logit's
    (:class:`FlagLogit`). ``odd_flag`` (0 or 1; needs ``flag_norm``) makes the network odd at
    that flag, ``g(-x) = -g(x)``: every coupling and every ActNorm is odd there, and the logit
    acts on flag 1 only, so 0 is the flag it can take beside a logit. ``odd_data`` (with
    ``odd_flag=0``, a logit and ``img_size``) makes the blocks odd at flag 1 too, after the
    logit centred on the data's mean logit image ``c`` (:meth:`FlagLogit.centre_`): a negated
    data latent decodes to the image whose logit is ``2c - logit(x)``, by the mirrored
    computation of ``x``. ``shift_flag`` (0 or 1;
    needs ``img_size``) makes that flag's side the learned shift ``x + mu`` instead of the
    blocks (:meth:`InvertibleNetwork.shift_side`); ``mean_flag`` (0 or 1; needs ``img_size``)
    adds a learned mean to that side's latents (:meth:`InvertibleNetwork.mean_side`).
    """
    make = functools.partial(SmallCNN, hidden=hidden, cond_dim=cond_dim, dropout=dropout)
    tail: list[InvertibleModule] = []
    if dense_blocks:
        if img_size is None or img_size % 2:
            raise LinearizerError(f"dense blocks need an even img_size, got {img_size}")
        squeezed = in_channels % 2 == 1
        side = img_size // 2 if squeezed else img_size
        make_dense = functools.partial(
            DenseConditioner, height=side, width=side, hidden=dense_hidden, cond_dim=cond_dim
        )
        width = 4 * in_channels if squeezed else in_channels
        tail = [
            CouplingBlock(width, make_dense, clamp, clamp_mode, flag_norm)
            for _ in range(dense_blocks)
        ]
    net = InvertibleNetwork(
        in_channels,
        num_blocks,
        make,
        clamp=clamp,
        clamp_mode=clamp_mode,
        flag_norm=flag_norm,
        levels=levels,
        logit=logit,
        tail=tail,
        logit_tails=logit_tails,
    )
    if shift_bound < 0:
        raise LinearizerError(f"shift_bound must be >= 0 (0: unbounded), got {shift_bound}")
    if odd_flag is not None and (odd_flag not in (0.0, 1.0) or not flag_norm or dropout):
        raise LinearizerError(
            f"odd_flag must be 0 or 1 and needs flag_norm=True and no dropout, got {odd_flag}"
        )
    if odd_flag == 1.0 and logit:
        raise LinearizerError("odd_flag=1 conflicts with the logit on flag-1 rows")
    if odd_data and (odd_flag != 0.0 or not logit or img_size is None):
        raise LinearizerError("odd_data needs odd_flag=0, a logit and img_size")
    if odd_data and net.logit is not None and img_size is not None:  # about the mean image
        net.logit.centre_((in_channels, img_size, img_size))
    if shift_flag is not None:
        if img_size is None or odd_flag is not None or shift_flag not in (0.0, 1.0):
            raise LinearizerError(
                f"shift_flag must be 0 or 1 and needs img_size and no odd_flag, got {shift_flag}"
            )
        if shift_flag == 1.0 and logit:
            raise LinearizerError("shift_flag=1 conflicts with the logit on flag-1 rows")
        net.shift_side(shift_flag, (in_channels, img_size, img_size))
    if mean_flag is not None:
        if img_size is None or shift_flag is not None or mean_flag not in (0.0, 1.0):
            raise LinearizerError(
                f"mean_flag must be 0 or 1 and needs img_size and no shift_flag, got {mean_flag}"
            )
        net.mean_side(mean_flag, (in_channels, img_size, img_size))
    for module in net.modules():
        if isinstance(module, AffineCoupling):
            module.shift_bound = float(shift_bound)
        if isinstance(module, (AffineCoupling, FlagActNorm)):
            module.odd_flags = () if odd_flag is None else (odd_flag, 1.0)[: 1 + odd_data]
    return net
