"""Exponential moving average of a model's weights, for evaluation and sampling.

After each optimizer step, ``ema.update(model)`` moves every floating-point entry of the
shadow toward the model's (``s <- s + (1 - d) (p - s)``); integer buffers (ActNorm's
``initialized`` flag, counters) are copied. The decay ramps linearly from 0 to ``decay`` over
``warmup`` updates, so the shadow starts as an exact copy of the (possibly data-initialised)
weights instead of remembering the random initialisation.

>>> import torch
>>> net = torch.nn.Linear(2, 1)
>>> ema = EMA(net, decay=0.9)
>>> with torch.no_grad():
...     _ = net.weight.add_(1.0)
>>> ema.update(net)
>>> with ema.applied(net):  # evaluate with the averaged weights, then swap back
...     averaged = net.weight.clone()
>>> bool(torch.allclose(averaged, net.weight - 0.9, rtol=1e-6, atol=1e-6))
True
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from ..errors import LinearizerError


def model_tensors(model: nn.Module) -> dict[str, Tensor]:
    """Parameters and buffers by name, each shared tensor once (a network used as both g_x and
    g_y appears under one name), as views on the live storage."""
    out = {name: p.data for name, p in model.named_parameters()}
    out.update({name: b for name, b in model.named_buffers() if b is not None})
    return out


class EMA:
    """Shadow copy of the model's parameters and buffers, averaged over optimizer steps."""

    def __init__(self, model: nn.Module, decay: float = 0.999, warmup: int = 0) -> None:
        if not 0.0 <= decay < 1.0:
            raise LinearizerError(f"EMA decay must be in [0, 1), got {decay}")
        if warmup < 0:
            raise LinearizerError(f"EMA warmup must be >= 0, got {warmup}")
        self.decay = float(decay)
        self.warmup = int(warmup)
        self.num_updates = 0
        self.shadow: dict[str, Tensor] = {
            k: v.detach().clone() for k, v in model_tensors(model).items()
        }

    def current_decay(self) -> float:
        """Decay used by the next update: ``decay * min(1, num_updates / warmup)``."""
        if self.warmup == 0:
            return self.decay
        return self.decay * min(1.0, self.num_updates / self.warmup)

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        d = self.current_decay()
        for s, p in self._pairs(model):
            if s.is_floating_point() or s.is_complex():
                s.lerp_(p.detach().to(s.dtype), 1.0 - d)
            else:
                s.copy_(p.detach())
        self.num_updates += 1

    def _pairs(self, model: nn.Module) -> list[tuple[Tensor, Tensor]]:
        """``(shadow, live)`` tensor pairs, once the model is checked to hold the same entries."""
        state = model_tensors(model)
        if state.keys() != self.shadow.keys():
            extra = sorted(set(state) ^ set(self.shadow))[:3]
            raise LinearizerError(f"EMA and model disagree on state entries: {extra}")
        return [(s, state[name]) for name, s in self.shadow.items()]

    @torch.no_grad()
    def swap(self, model: nn.Module) -> None:
        """Exchange model and shadow weights in place (calling it twice restores both)."""
        for s, p in self._pairs(model):
            tmp = p.detach().clone()
            p.copy_(s)
            s.copy_(tmp)

    @contextmanager
    def applied(self, model: nn.Module) -> Iterator[nn.Module]:
        """Run a block with the averaged weights in ``model``; the training weights come back
        bit-for-bit afterwards, even if the block raises."""
        self.swap(model)
        try:
            yield model
        finally:
            self.swap(model)

    def state_dict(self) -> dict:
        """``{"shadow": {name: tensor}, "num_updates", "decay", "warmup"}``."""
        return {
            "shadow": dict(self.shadow),
            "num_updates": self.num_updates,
            "decay": self.decay,
            "warmup": self.warmup,
        }

    @torch.no_grad()
    def load_state_dict(self, state: dict) -> None:
        shadow = state["shadow"]
        if shadow.keys() != self.shadow.keys():
            extra = sorted(set(shadow) ^ set(self.shadow))[:3]
            raise LinearizerError(f"EMA state does not match the model: {extra}")
        for name, s in self.shadow.items():
            src = shadow[name]
            if src.shape != s.shape:
                raise LinearizerError(
                    f"EMA entry {name}: shape {tuple(src.shape)} != {tuple(s.shape)}"
                )
            s.copy_(src)
        self.num_updates = int(state["num_updates"])
        self.decay = float(state["decay"])
        self.warmup = int(state["warmup"])
