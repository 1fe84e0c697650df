"""Figures of the restoration report: labelled strips and residual curves (matplotlib, no
pyplot state, written atomically)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from torch import Tensor

from ..report import new_figure, save_figure


def _row(images: Tensor, pad: int = 1) -> np.ndarray:
    """Images ``[n, 1, S, S]`` side by side (clamped to [0, 1]), white gaps between them."""
    x = images.detach().float().clamp(0, 1).cpu().numpy()[:, 0]
    n, s, _ = x.shape
    out = np.ones((s, n * (s + pad) - pad), dtype=np.float32)
    for i in range(n):
        out[:, i * (s + pad) : i * (s + pad) + s] = x[i]
    return out


def save_strip_figure(rows: dict[str, Tensor], path: str | Path, title: str = "") -> Path:
    """One labelled row per entry of ``rows`` (e.g. truth, observed, each method)."""
    fig = new_figure(7.5, 0.85 * len(rows) + 0.3, dpi=100)
    axes = fig.subplots(len(rows), 1, squeeze=False, gridspec_kw={"hspace": 0.08})[:, 0]
    for ax, (label, images) in zip(axes, rows.items(), strict=True):
        ax.imshow(_row(images), cmap="gray", vmin=0, vmax=1, interpolation="nearest")
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_ylabel(label, rotation=0, ha="right", va="center", fontsize=9)
    if title:
        axes[0].set_title(title, fontsize=10)
    return save_figure(fig, path)


def save_residuals(tasks: dict[str, dict[str, Any]], path: str | Path) -> Path:
    """Per task: consistency of P's iterate, distance of the consistent iterate from the
    fixed-point set, and P's idempotence error, against the iteration (log scale)."""
    fig = new_figure(11, 3.2, dpi=100)
    axes = fig.subplots(1, 3)
    keys = (
        ("consistency", "‖H p_k − y‖ / ‖y‖ (mean)"),
        ("distance", "‖P(x_k) − x_k‖ / ‖x_k‖ (mean)"),
        ("idempotence_max", "‖P(p_k) − p_k‖ / ‖p_k‖ (max)"),
    )
    for ax, (key, label) in zip(axes, keys, strict=True):
        for task, res in tasks.items():
            hist = res.get("history") or {}
            values = hist.get(key)
            if values:
                ax.semilogy(range(1, len(values) + 1), np.maximum(values, 1e-12), label=task)
        ax.set_xlabel("iteration k")
        ax.set_title(label, fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=7)
    return save_figure(fig, path)
