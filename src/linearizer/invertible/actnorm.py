"""Activation normalisation (Glow) with a data-dependent start that survives checkpoints."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..checks import check_channels
from ..errors import LinearizerError
from .base import InvertibleModule


class _ChannelAffine(nn.Module):
    """What both ActNorms hold: ``rows`` per-channel ``(bias, log_scale)`` pairs of shape
    ``[rows, C, 1, 1]``, zero at first (the identity), and the data-dependent start's flag
    (a mixin beside :class:`InvertibleModule`, not a block of its own)."""

    initialized: Tensor  # buffer: 1 once the data-dependent start has run

    def __init__(self, channels: int, rows: int) -> None:
        super().__init__()
        if channels < 1:
            name = type(self).__name__
            raise LinearizerError(f"{name} needs at least one channel, got {channels}")
        self.channels = channels
        self.bias = nn.Parameter(torch.zeros(rows, channels, 1, 1))
        self.log_scale = nn.Parameter(torch.zeros(rows, channels, 1, 1))
        self.register_buffer("initialized", torch.zeros((), dtype=torch.uint8))


class ActNorm(_ChannelAffine, InvertibleModule):
    """Per-channel affine map ``y = (x + bias) * exp(log_scale)``; inverse ``z * exp(-ls) - bias``.

    The bias is added *before* the scale, as in the authors' code, so their checkpoints load
    as they are. Both parameters have shape ``[1, C, 1, 1]`` and start at zero (the identity).

    Data-dependent start: the first ``forward`` in train mode while ``initialized`` is 0 sets
    ``bias = -mean`` and ``log_scale = -log(std + 1e-6)`` per channel over (B, H, W) (unbiased
    std), so that batch comes out standardised. ``initialized`` is a persistent buffer: it is
    saved in the state dict and a reloaded model never re-initialises. A state dict that holds
    ``bias`` but no ``initialized`` (the authors' checkpoints keep the flag outside) loads as
    initialised. Before the start the parameters are zero, so the inverse is the identity, as
    in the authors' code. Under DDP, initialise (one forward on one batch) before wrapping.

    >>> norm = ActNorm(3)
    >>> x = torch.randn(8, 3, 4, 4) * 5 + 2
    >>> y = norm(x).detach()             # first train-mode call: data-dependent start
    >>> bool(norm.initialized), abs(float(y.mean())) < 1e-6
    (True, True)
    >>> bool(torch.allclose(norm.inverse(y), x, rtol=1e-5, atol=1e-5))
    True
    """

    def __init__(self, channels: int) -> None:
        super().__init__(channels, 1)

    @torch.no_grad()
    def initialize_(self, x: Tensor) -> None:
        """Set bias and log-scale so that ``x`` is standardised per channel; mark initialised."""
        check_channels(x, self.channels, "ActNorm")
        values = x.detach().transpose(0, 1).reshape(self.channels, -1)
        if values.shape[1] < 2:
            raise LinearizerError("ActNorm initialisation needs at least 2 values per channel")
        bias, log_scale = _standardising(values)
        self.bias.copy_(bias.view_as(self.bias))
        self.log_scale.copy_(log_scale.view_as(self.log_scale))
        self.initialized.fill_(1)

    def forward(self, x: Tensor, flag: Tensor | None = None) -> Tensor:
        check_channels(x, self.channels, "ActNorm")
        if self.training and not bool(self.initialized):
            self.initialize_(x)
        return (x + self.bias) * torch.exp(self.log_scale)

    def inverse(self, z: Tensor, flag: Tensor | None = None) -> Tensor:
        check_channels(z, self.channels, "ActNorm")
        return z * torch.exp(-self.log_scale) - self.bias

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:  # noqa: ANN001
        # Loaded parameters mean a trained layer: a flagless (authors') state dict is initialised.
        key = prefix + "initialized"
        if key not in state_dict and prefix + "bias" in state_dict:
            state_dict[key] = torch.ones((), dtype=torch.uint8)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def extra_repr(self) -> str:
        return f"{self.channels}"


class FlagActNorm(_ChannelAffine, InvertibleModule):
    """ActNorm with its own per-channel ``(bias, log_scale)`` for each value of a 0/1 flag.

    The one-step flow shares one network as ``g_noise = G(., 0)`` and ``g_data = G(., 1)``;
    noise and MNIST digits have very different channel statistics, so one shared ActNorm
    standardises neither well. Here flag ``tau`` uses ``(1 - tau) p_0 + tau p_1`` for both
    parameters (exactly ``p_0`` or ``p_1`` at the two flags the flow uses), and the
    data-dependent start initialises each flag's pair from the samples that carry that flag
    (a flag missing from the first batch keeps the identity). ``flag=None`` means flag 0.
    ``odd_flags`` (a tuple of 0 and/or 1, set after construction) holds those flags' biases at
    zero, so the map is odd there (:class:`~linearizer.invertible.coupling.AffineCoupling` has
    the same switch).

    >>> norm = FlagActNorm(2)
    >>> x = torch.cat([torch.randn(64, 2, 4, 4), 0.1 * torch.randn(64, 2, 4, 4) + 3])
    >>> flags = torch.cat([torch.zeros(64), torch.ones(64)])
    >>> y = norm(x, flags).detach()
    >>> [round(float(y[flags == k].mean()), 4) + 0.0 for k in (0, 1)]
    [0.0, 0.0]
    >>> bool(torch.allclose(norm.inverse(y, flags), x, rtol=1e-5, atol=1e-5))
    True
    """

    def __init__(self, channels: int) -> None:
        super().__init__(channels, 2)
        self.odd_flags: tuple[float, ...] = ()  # these flags' biases are held at zero

    def _flags(self, x: Tensor, flag: Tensor | None) -> Tensor:
        if flag is None:
            return torch.zeros(x.shape[0], 1, 1, 1, dtype=x.dtype, device=x.device)
        return flag.to(x).reshape(-1, 1, 1, 1).expand(x.shape[0], 1, 1, 1)

    def _params(self, x: Tensor, flag: Tensor | None) -> tuple[Tensor, Tensor]:
        tau = self._flags(x, flag)
        b0, b1 = self.bias[0], self.bias[1]
        if 0.0 in self.odd_flags:  # no bias at an odd flag: the map is odd there
            b0 = torch.zeros_like(b0)
        if 1.0 in self.odd_flags:
            b1 = torch.zeros_like(b1)
        bias = torch.lerp(b0, b1, tau)
        return bias, torch.lerp(self.log_scale[0], self.log_scale[1], tau)

    @torch.no_grad()
    def initialize_(self, x: Tensor, flag: Tensor | None) -> None:
        """Standardise, per flag, the samples of ``x`` that carry exactly that flag."""
        check_channels(x, self.channels, "FlagActNorm")
        tau = self._flags(x, flag).reshape(-1)
        for k in (0, 1):
            part = x[tau == k]
            values = part.transpose(0, 1).reshape(self.channels, -1)
            if values.shape[1] < 2:
                continue
            bias, log_scale = _standardising(values)
            self.bias[k].copy_(bias.view(-1, 1, 1))
            self.log_scale[k].copy_(log_scale.view(-1, 1, 1))
        self.initialized.fill_(1)

    def forward(self, x: Tensor, flag: Tensor | None = None) -> Tensor:
        check_channels(x, self.channels, "FlagActNorm")
        if self.training and not bool(self.initialized):
            self.initialize_(x, flag)
        bias, log_scale = self._params(x, flag)
        return (x + bias) * torch.exp(log_scale)

    def inverse(self, z: Tensor, flag: Tensor | None = None) -> Tensor:
        check_channels(z, self.channels, "FlagActNorm")
        bias, log_scale = self._params(z, flag)
        return z * torch.exp(-log_scale) - bias

    def extra_repr(self) -> str:
        return f"{self.channels}, flags=2"


def _standardising(values: Tensor) -> tuple[Tensor, Tensor]:
    """Per-row ``(bias, log_scale)`` that map ``values [C, N]`` to zero mean and unit (unbiased)
    standard deviation."""
    std = values.std(dim=1, unbiased=True)
    return -values.mean(dim=1), -torch.log(std + 1e-6)
