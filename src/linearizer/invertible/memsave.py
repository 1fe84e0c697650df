"""Memory-saving backpropagation through invertible networks (i-RevNet / MemCNN style).

Ordinary backpropagation keeps every intermediate activation of every conditioner until the
backward pass: for the paper's network that is ~2.5 MiB per sample per U-Net call, ~100 MiB per
sample in one training step of the flow objective. An invertible network does not need them: a
piece's input can be recomputed *from its output* with the exact inverse. :func:`forward` and
:func:`inverse` run the network as one autograd node that stores only the final output. Its
backward walks the pieces in reverse; for each piece it

1. reconstructs the piece's input from its output with the piece's inverse (no graph),
2. re-runs the piece with gradients on and back-propagates through that one piece,

so the peak memory is one piece's graph (one coupling: one conditioner call) instead of the whole
network's. The price is recomputation in the backward pass: for a coupling one extra conditioner
call (its kept half is the same on both sides, so a single call with gradients yields both the
reconstructed input and the graph to back-propagate through); for ActNorm and the 1x1 mix an
extra inverse and forward, which are cheap.

The pieces are the finest invertible parts: a :class:`~linearizer.invertible.network.CouplingBlock`
is split into its ActNorm, its two couplings and its 1x1 mix. Requirements, all met by this
package's networks: every piece is exactly invertible and deterministic between the forward and
the backward pass (:class:`~linearizer.invertible.dropout.SharedDropout` redraws the same mask; an
``nn.Dropout`` would not), and ``flag`` needs no gradient. A train-mode ActNorm that is not yet
initialised would initialise itself inside the backward pass, so such networks (and calls without
gradients) take the ordinary path.

The gradients equal ordinary backpropagation up to the rounding of the reconstruction (tested in
float64 to 1e-10).

>>> import torch
>>> from linearizer.invertible import cpu_network
>>> g = cpu_network(hidden=8).double()
>>> x = torch.randn(2, 1, 8, 8, dtype=torch.float64)
>>> bool(torch.equal(forward(g, x, 1.0).detach(), g(x, 1.0).detach()))
True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import torch
from torch import Tensor, nn

from .actnorm import ActNorm, FlagActNorm
from .base import InvertibleModule, as_flag
from .coupling import AffineCoupling, _affine
from .network import CouplingBlock, InvertibleNetwork
from .sequential import InvertibleSequential


def pieces(net: nn.Module) -> list[nn.Module]:
    """The chain of invertible pieces ``net``'s blocks apply, in forward order.

    A :class:`CouplingBlock` contributes ``[actnorm, F, G, mix]``; an
    :class:`InvertibleNetwork` or :class:`InvertibleSequential` its blocks' pieces; any other
    invertible module is one piece. (The squeeze of an ``InvertibleNetwork`` is not a piece:
    it stores nothing and runs outside. Its elementwise logit, which the network applies
    before squeezing, is the chain's first piece: on single pixels the order does not matter.)
    """
    if isinstance(net, CouplingBlock):
        return [net.actnorm, net.F, net.G, net.mix]
    if isinstance(net, (InvertibleNetwork, InvertibleSequential)):
        head = [net.logit] if isinstance(net, InvertibleNetwork) and net.logit is not None else []
        return head + [p for block in net.blocks for p in pieces(block)]
    return [net]


def forward(net: nn.Module, x: Tensor, flag: float | Tensor | None = None) -> Tensor:
    """``net(x, flag)`` with memory-saving backpropagation (same value, same gradients)."""
    return _run(net, x, flag, inverse=False)


def inverse(net: nn.Module, z: Tensor, flag: float | Tensor | None = None) -> Tensor:
    """``net.inverse(z, flag)`` with memory-saving backpropagation."""
    return _run(net, z, flag, inverse=True)


def _needs_plain_path(chain: Sequence[nn.Module], x: Tensor, flag) -> bool:
    if not torch.is_grad_enabled() or (isinstance(flag, Tensor) and flag.requires_grad):
        return True
    for piece in chain:
        for m in piece.modules():
            if isinstance(m, (ActNorm, FlagActNorm)) and m.training and not bool(m.initialized):
                return True
    return not (x.requires_grad or any(p.requires_grad for c in chain for p in c.parameters()))


def _run(net: nn.Module, x: Tensor, flag, inverse: bool) -> Tensor:
    if isinstance(net, InvertibleNetwork) and net.mean_flag is not None:
        # the mean is added after the blocks (subtracted before them): plain autograd, one add
        if _needs_plain_path(pieces(net), x, flag):
            return _step(net, x, flag, inverse)  # the network adds its own mean
        prepared = net._prepare(x, flag)
        if inverse:
            return _run_blocks(net, net.offset(x, prepared, -1.0), prepared, inverse)
        return net.offset(_run_blocks(net, x, prepared, inverse), prepared, 1.0)
    if isinstance(net, InvertibleNetwork) and net.shift_flag is not None:
        # rows at the shift side skip the blocks; the others run through them memory-saving
        def blocks(x: Tensor, flag) -> Tensor:  # noqa: ANN001
            return _run_blocks(net, x, flag, inverse)

        return net._by_side(x, net._prepare(x, flag), blocks, -1.0 if inverse else 1.0)
    return _run_blocks(net, x, flag, inverse)


def _run_blocks(net: nn.Module, x: Tensor, flag, inverse: bool) -> Tensor:
    chain = pieces(net)
    if _needs_plain_path(chain, x, flag):
        return _step(net, x, flag, inverse)
    if isinstance(net, InvertibleNetwork):
        # The network's own checks and flag broadcasting, then its (cheap, stateless) squeeze.
        flag, squeeze = net._prepare(x, flag), net.squeeze
    else:
        flag, squeeze = as_flag(flag, x.shape[0], x), None
    if squeeze is not None:
        x = squeeze(x)
    order = list(reversed(chain)) if inverse else chain
    params = _unique_params(order)
    y = _MemorySaving.apply(order, inverse, flag, x, *params)
    return y if squeeze is None else squeeze.inverse(y)


def _unique_params(chain: Sequence[nn.Module]) -> list[nn.Parameter]:
    unique = {id(p): p for piece in chain for p in piece.parameters() if p.requires_grad}
    return list(unique.values())


def _step(piece: nn.Module, x: Tensor, flag, inverse: bool) -> Tensor:
    return cast(InvertibleModule, piece).inverse(x, flag) if inverse else piece(x, flag)


def _coupling_backward(c: AffineCoupling, y: Tensor, grad: Tensor, flag, inverse: bool, own):
    """Input, input gradient and parameter gradients of one coupling, from its output.

    The kept half is the same on both sides, so one conditioner call (with gradients) gives the
    shift and log-scale for both the reconstruction and the recomputation: one call fewer than
    a generic inverse-then-forward.
    """
    changed_y, kept = c._halves(y)
    with torch.enable_grad():
        kept_in = kept.detach().requires_grad_(True)
        shift, log_scale = c.shift_log_scale(kept_in, changed_y.shape[1], flag)
        # the piece ran as y = x exp(-l) - s (inverse) or y = (x + s) exp(l) (forward)
        with torch.no_grad():
            changed_x = _affine(changed_y, shift, log_scale, not inverse)
        cx = changed_x.detach().requires_grad_(True)
        out = _affine(cx, shift, log_scale, inverse)
        found = torch.autograd.grad(
            c._join(out, kept_in), [cx, kept_in, *own], grad, allow_unused=True
        )
    return c._join(changed_x, kept), c._join(found[0], found[1]), found[2:]


class _MemorySaving(torch.autograd.Function):
    """One autograd node for a chain of invertible pieces; stores only the chain's output."""

    @staticmethod
    def forward(ctx, order, inverse, flag, x, *params):  # noqa: ANN001, ANN205
        with torch.no_grad():
            y = x
            for piece in order:
                y = _step(piece, y, flag, inverse)
        if y is x:  # an empty chain: the output must be a new tensor
            y = x.clone()
        ctx.order, ctx.inverse, ctx.flag, ctx.params = order, inverse, flag, params
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad_y):  # noqa: ANN001, ANN205
        (y,) = ctx.saved_tensors
        slot = {id(p): i for i, p in enumerate(ctx.params)}
        grads: list[Tensor | None] = [None] * len(ctx.params)
        y, grad = y.detach(), grad_y
        for piece in reversed(ctx.order):
            own = [p for p in piece.parameters() if id(p) in slot]
            if isinstance(piece, AffineCoupling):
                x, grad, found = _coupling_backward(piece, y, grad, ctx.flag, ctx.inverse, own)
            else:
                with torch.no_grad():  # the piece's input, from its output by the exact inverse
                    x = _step(piece, y, ctx.flag, not ctx.inverse)
                with torch.enable_grad():
                    x_in = x.detach().requires_grad_(True)
                    out = _step(piece, x_in, ctx.flag, ctx.inverse)
                    found = torch.autograd.grad(out, [x_in, *own], grad, allow_unused=True)
                grad, found = found[0], found[1:]
            for p, g in zip(own, found):
                if g is not None:
                    k = slot[id(p)]
                    grads[k] = g if grads[k] is None else grads[k] + g
            y = x
        grad_x = grad if ctx.needs_input_grad[3] else None
        return (None, None, None, grad_x, *grads)


__all__ = ["forward", "inverse", "pieces"]
