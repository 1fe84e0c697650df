"""The couplings' conditioners in a lower precision, while training.

A coupling inverts exactly whatever its conditioner computes, because the conditioner reads the
kept half, which passes through unchanged; lowering the conditioner's precision rounds only the
shifts and log-scales. On CPUs with bfloat16 dot products (AVX512-BF16, AMX) and on GPUs, the
conditioners' convolutions and matrix products dominate a training step. Everything else (the
couplings' affine maps, ActNorm, the 1x1 mixes, the operator and the loss) stays in the input's
precision. It buys more steps in the same time, but the samples it gave were worse
(docs/flow/ablation.md has the measurement), so no preset uses it.

A *stack* of couplings inverts only to about bfloat16's precision this way: float32 rounding in
one coupling's inverse can move a kept value across a bfloat16 rounding boundary of the next
conditioner. So only training lowers the conditioners; a trained model runs them in its own
precision, where its round trips and the exactness checks are measured.

>>> import torch
>>> from linearizer.invertible import cpu_network
>>> g = cpu_network(1, num_blocks=1, hidden=8)
>>> x = torch.randn(2, 1, 8, 8)
>>> with conditioners_in("bfloat16"):
...     y = g(x)
...     back = g.inverse(y)
>>> bool(torch.allclose(back, x, rtol=1e-2, atol=1e-2))
True
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import torch
from torch import Tensor

from ..errors import LinearizerError

PRECISIONS = ("float32", "bfloat16")
_DTYPE: ContextVar[torch.dtype | None] = ContextVar("conditioner_dtype", default=None)


def _lowered_dtype(precision: str) -> torch.dtype | None:
    """The autocast dtype of ``precision`` (None: no lowering); unknown names are errors."""
    if precision not in PRECISIONS:
        raise LinearizerError(
            f"unknown conditioner precision {precision!r}; choose one of {PRECISIONS}"
        )
    return None if precision == "float32" else getattr(torch, precision)


@contextmanager
def conditioners_in(precision: str) -> Iterator[None]:
    """Within the block, conditioners fed float32 run under autocast to ``precision``."""
    token = _DTYPE.set(_lowered_dtype(precision))
    try:
        yield
    finally:
        _DTYPE.reset(token)


def run_conditioner(net: Callable[..., Tensor], kept: Tensor, flag: Tensor | None) -> Tensor:
    """``net(kept, flag)``, under autocast inside :func:`conditioners_in`, in ``kept``'s dtype.

    Only float32 inputs are lowered: a float64 pass (the exactness checks) stays float64.
    """
    dtype = _DTYPE.get()
    if dtype is None or kept.dtype != torch.float32:
        return net(kept, flag)
    with torch.autocast(kept.device.type, dtype=dtype):
        out = net(kept, flag)
    return out.to(kept.dtype)


def resolve_precision(precision: str, device: torch.device) -> str:
    """``auto``: bfloat16 where ``device`` computes it natively, else float32; others as given.

    Native means a CUDA device with bfloat16 support, or a CPU whose oneDNN has bfloat16
    kernels (AVX512-BF16 or AMX). Elsewhere bfloat16 is emulated and slower than float32.
    """
    if precision == "auto":
        return "bfloat16" if native_bfloat16(device) else "float32"
    _lowered_dtype(precision)
    return precision


def native_bfloat16(device: torch.device) -> bool:
    """Whether ``device`` has bfloat16 arithmetic in hardware (see :func:`resolve_precision`)."""
    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    return device.type == "cpu" and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
