"""One explorer per loaded run: the handlers of the tabs that apply to it, built once.

>>> ex = Explorer(open_run("runs/flow-cpu"))  # doctest: +SKIP
>>> ex.tabs  # doctest: +SKIP
['Generate', 'Walk', 'Invert & edit']
>>> out = ex.flow.generate(seed=0, count=4, steps=100, method="euler")  # doctest: +SKIP
>>> one_step, multi_step, text = out  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import LinearizerError
from .flow_views import FlowViews
from .images import drawing_array, read_upload
from .loading import kind_of
from .projective_views import ProjectiveViews
from .style_views import StyleViews

FLOW_TABS = ["Generate", "Walk", "Invert & edit"]
PROJECT_TAB = "Project / restore"
STYLE_TAB = "Style"


class Explorer:
    """The tabs' handlers for ``run`` (any object with ``kind``, ``model``, ``config``,
    ``step`` and ``path``). Flow runs compute ``B`` and its SVD here, once. ``index``: a style
    run of the index model (``bank=index``) shown beside a style bank's mixtures. ``name``: what
    the page calls the run (default: its folder)."""

    def __init__(
        self, run: Any, *, k: int = 6, spec: Any = None, index: Any = None, name: str | None = None
    ) -> None:
        self.run = run
        self.name = str(name or run.path)
        self.kind = kind_of(run)
        self.flow: FlowViews | None = None
        self.projective: ProjectiveViews | None = None
        self.style: StyleViews | None = None
        cfg, model = run.config, run.model
        if self.kind == "flow":
            self.flow = FlowViews(model, spec or cfg.sampler, k=k)
        elif self.kind in ("projective", "ign"):
            size = _img_size(cfg)
            self.projective = ProjectiveViews(model, (_channels(model), size, size))
        elif self.kind == "style":
            content = getattr(cfg, "content", []) or []
            index_model = None if index is None else index.model
            self.style = StyleViews(model, _img_size(cfg), content, index_model)
        else:
            raise LinearizerError(f"{run.path}: a {self.kind} run has no explorer view")
        if index is not None and self.style is None:
            raise LinearizerError("an index model (--index) goes with a style bank run")

    @property
    def tabs(self) -> list[str]:
        """Names of the tabs that apply to this run (the others are hidden)."""
        return [
            *(FLOW_TABS if self.flow else []),
            *([PROJECT_TAB] if self.projective else []),
            *([STYLE_TAB] if self.style else []),
        ]

    def describe(self) -> str:
        """One Markdown paragraph about the run."""
        run = self.run
        text = f"**{self.name}**: a {self.kind} run at step {run.step}."
        if self.flow:
            f = self.flow
            cond = float(f.sigma[0] / f.sigma[-1])
            component, w = f.first.spec.condition
            which = f" of {f.noun} {component}" + (f", guidance {w:g}" if w else "")
            text += (
                f" One-step generator f = g_data⁻¹ B g_noise with B = {f.method} T={f.steps}"
                f"{which if f.components else ''} "
                f"({f.b.shape[0]}×{f.b.shape[1]}, condition number {cond:.3g}), images "
                f"{'×'.join(map(str, f.shape))}."
            )
            if f.guided:
                text += (
                    f" Class-conditional: {f.components} classes, one exact generator per class "
                    f"c and guidance w (B collapses (1 + w) A(t, c) − w A(t, ∅)); the mixture "
                    f"draws classes by the training frequencies."
                )
            elif f.components:
                text += (
                    f" A mixture of {f.components} components found without labels, one exact "
                    f"generator B_k per component; the mixture draws components by their "
                    f"learned weights."
                )
        return text


def pick_picture(upload: Any, drawing: Any) -> np.ndarray | None:
    """The picture a tab works on: an uploaded file first, else the drawing (``None``: neither)."""
    if upload:
        return read_upload(upload if isinstance(upload, str) else getattr(upload, "name", upload))
    return drawing_array(drawing)


def _img_size(cfg: Any) -> int:
    net = getattr(cfg, "network", None)  # nested NetworkConfig in newer configs
    return int(getattr(net, "img_size", None) or cfg.img_size)


def _channels(model: Any) -> int:
    shape = getattr(model, "image_shape", None)
    return int(shape[0]) if shape else int(getattr(model, "channels", 1))
