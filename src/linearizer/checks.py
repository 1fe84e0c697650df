"""Shape and value checks of user-supplied tensors, shared by every model and command.

>>> import torch
>>> check_image_batch(torch.zeros(2, 1, 8, 8), (1, 8, 8), "images")
>>> try:
...     check_image_batch(torch.zeros(2, 8, 8), (1, 8, 8), "noise")
... except LinearizerError as e:
...     print(e)
noise must have shape [N, 1, 8, 8], got [2, 8, 8]
"""

from __future__ import annotations

from torch import Tensor

from .errors import LinearizerError


def check_image_batch(x: Tensor, shape: tuple[int, ...], what: str) -> None:
    """Raise :class:`LinearizerError` unless ``x`` is a batch ``[N, *shape]``."""
    if not isinstance(x, Tensor) or x.dim() != 4 or tuple(x.shape[1:]) != tuple(shape):
        got = list(x.shape) if isinstance(x, Tensor) else type(x).__name__
        dims = ", ".join(map(str, shape))
        raise LinearizerError(f"{what} must have shape [N, {dims}], got {got}")


def check_channels(x: Tensor, channels: int | None, what: str) -> None:
    """Raise :class:`LinearizerError` unless ``x`` is ``[B, channels, H, W]`` (any channel count
    when ``channels`` is None): the check of every invertible block."""
    if not isinstance(x, Tensor) or x.dim() != 4:
        shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise LinearizerError(f"{what} expects images [B, C, H, W], got {shape}")
    if channels is not None and x.shape[1] != channels:
        raise LinearizerError(f"{what} expects {channels} channels, got {x.shape[1]}")
