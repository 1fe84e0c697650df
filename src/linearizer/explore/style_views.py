"""What the explorer computes for a style run: exact mixtures of a bank, or the index model.

A :class:`~linearizer.style.bank.StyleBank` mixes in the induced space,
``g_y^-1((a sum_s w_s A_s + (1 - a) I) g_x(x))``: weights ``w`` and strength ``a`` are sliders.
An :class:`~linearizer.style.index_net.IndexStyleNet` (the authors' design) takes a real style index
``t`` instead; both show every pure style of the run beside the result.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from ..errors import LinearizerError
from ..style.bank import StyleBank
from ..style.images import image_name, load_image
from ..style.index_net import IndexStyleNet
from ..style.model import StyleModel
from .images import in_range, picture, to_model_image


class StyleViews:
    """Handlers of the Style tab; ``contents`` are the run's content images by name."""

    def __init__(
        self,
        model: StyleModel,
        image_size: int,
        content: Sequence[str] = (),
        index_model: IndexStyleNet | None = None,
    ) -> None:
        if index_model is not None and (
            not isinstance(index_model, IndexStyleNet) or list(index_model.styles) != model.styles
        ):
            raise LinearizerError(
                f"the index model must be a bank=index run with the styles {list(model.styles)}"
            )
        self.model = model
        self.index_model = index_model
        self.size = int(image_size)
        self.styles = list(model.styles)
        self.param = next(model.parameters())
        self.is_bank = isinstance(model, StyleBank)
        self.contents: dict[str, Tensor] = {}
        for spec in content:
            try:
                self.contents[image_name(spec)] = load_image(spec, self.size)[None]
            except LinearizerError:  # a moved file or a missing optional package
                continue
        if not self.contents:  # a flat grey square still shows what each operator does
            self.contents["grey"] = torch.full((1, model.channels, self.size, self.size), 0.5)

    def content(self, name: str | None, array: np.ndarray | None = None) -> Tensor:
        """An uploaded picture, else the run's content image ``name``."""
        if array is not None:
            shape = (self.model.channels, self.size, self.size)
            return to_model_image(array, shape, digit=False).to(self.param)
        if name not in self.contents:
            raise LinearizerError(f"unknown content image {name!r}; have {list(self.contents)}")
        return self.contents[name].to(self.param)

    @torch.no_grad()
    def pure_styles(self, x: Tensor) -> np.ndarray:
        """``f_s(x)`` for every style, in the run's order."""
        n = len(self.styles)
        out = self.model.stylise(x.expand(n, -1, -1, -1), torch.arange(n))
        return picture(out, nrow=n, min_side=96)

    @torch.no_grad()
    def mix(
        self, x: Tensor, weights: Sequence[float], strength: float = 1.0
    ) -> tuple[np.ndarray, np.ndarray, str]:
        """The bank's mixture at ``strength``; returns (content, result, formula)."""
        if not isinstance(self.model, StyleBank):
            raise LinearizerError("mixing weights need a style bank (bank=operators) run")
        w = torch.as_tensor([float(v) for v in weights], dtype=torch.float64)
        if w.numel() != len(self.styles) or not torch.isfinite(w).all():
            raise LinearizerError(f"give {len(self.styles)} finite weights, one per style")
        a = float(strength)
        out = self.model.apply_weights(x, (a * w).to(x), 1.0 - a)
        terms = " + ".join(f"{float(v):.2f}·A[{s}]" for v, s in zip(w, self.styles))
        text = (
            f"f(x) = g_y^-1(({a:.2f}·({terms}) + {1 - a:.2f}·I) g_x(x)); "
            f"weights sum to {float(w.sum()):.2f}."
        )
        return picture(x, min_side=192), picture(out, min_side=192), text

    @torch.no_grad()
    def index_beside(self, x: Tensor, weights: Sequence[float]) -> tuple[np.ndarray, str]:
        """The index model at the weights' mean index ``t = sum_s w_s s / sum_s w_s`` (styles at
        0..S-1): the authors' way to blend, next to the bank's exact mixture."""
        if self.index_model is None:
            raise LinearizerError("no index model to compare with (linearizer explore --index RUN)")
        w = torch.as_tensor([float(v) for v in weights], dtype=torch.float64)
        if float(w.sum()) <= 0 or bool((w < 0).any()):
            raise LinearizerError("the index model needs non-negative weights with a positive sum")
        t = float((w * torch.arange(len(w), dtype=torch.float64)).sum() / w.sum())
        out = self.index_model.at_index(x.to(next(self.index_model.parameters())), t)
        return picture(out, min_side=192), f"index model at t = {t:.2f}"

    @torch.no_grad()
    def at_index(self, x: Tensor, t: float) -> tuple[np.ndarray, np.ndarray, str]:
        """The index model at a real index ``t`` (styles sit at 0, 1, ..., S-1)."""
        if not isinstance(self.model, IndexStyleNet):
            raise LinearizerError("a style index needs an index-model (bank=index) run")
        t = float(t)
        in_range("the index", t, 0, len(self.styles) - 1)
        out = self.model.at_index(x, t)
        text = (
            f"f(x) = g_y^-1(A(t) g_x(x)) at t = {t:.2f} (styles at {dict(enumerate(self.styles))})"
        )
        return picture(x, min_side=192), picture(out, min_side=192), text
