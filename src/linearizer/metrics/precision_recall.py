"""Improved precision and recall of a generated set (Kynkäänniemi et al., NeurIPS 2019).

Each set of features is turned into a manifold estimate: the union of balls around its points,
each ball's radius the distance to that point's ``k``-th nearest neighbour within the same set
(the point itself not counted). Then

* **precision** = the share of generated points inside the *real* manifold (are the samples
  realistic?),
* **recall** = the share of real points inside the *generated* manifold (is the data covered?).

The paper uses ``k = 3`` on VGG-16 features; we use it on the 84-d LeNet features
(:mod:`linearizer.metrics.classifier`), so the values compare with each other, not with papers.
A point lies inside a ball when its distance is ``<=`` the radius. Distances are computed in
float64, in row chunks, so 10k x 10k sets need ~80 MB at a time, never the full matrix.

>>> import torch
>>> real = torch.randn(400, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
>>> p, r = precision_recall(real, real)
>>> p, r
(1.0, 1.0)
>>> p, r = precision_recall(real, real + 100.0)   # far away: nothing realistic, nothing covered
>>> p, r
(0.0, 0.0)
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..errors import LinearizerError


def _as_features(x, what: str) -> Tensor:
    t = torch.as_tensor(x).detach().to("cpu", torch.float64)
    if t.dim() != 2 or len(t) < 2:
        raise LinearizerError(f"{what}: expected features [N >= 2, D], got {tuple(t.shape)}")
    if not torch.isfinite(t).all():
        raise LinearizerError(f"{what}: features contain NaN or inf")
    return t


def knn_radii(features, k: int = 3, chunk: int = 1000) -> Tensor:
    """Distance of each row to its ``k``-th nearest other row (float64 ``[N]``)."""
    f = _as_features(features, "knn_radii")
    if not 1 <= k < len(f):
        raise LinearizerError(f"k must be in [1, {len(f) - 1}] for {len(f)} points, got {k}")
    out = []
    for start in range(0, len(f), chunk):
        d = torch.cdist(f[start : start + chunk], f)
        # the point itself is at distance 0 and comes first; the k-th other point is index k
        out.append(d.topk(k + 1, dim=1, largest=False).values[:, k])
    return torch.cat(out)


def coverage_share(points, centres, radii: Tensor, chunk: int = 1000) -> float:
    """Share of ``points`` within ``radii[j]`` of some ``centres[j]``."""
    p = _as_features(points, "points")
    c = _as_features(centres, "centres")
    if p.shape[1] != c.shape[1]:
        raise LinearizerError(f"feature sizes differ: {p.shape[1]} vs {c.shape[1]}")
    inside = 0
    for start in range(0, len(p), chunk):
        d = torch.cdist(p[start : start + chunk], c)
        inside += int((d <= radii[None, :]).any(dim=1).sum())
    return inside / len(p)


def precision_recall(real, fake, k: int = 3, chunk: int = 1000) -> tuple[float, float]:
    """``(precision, recall)`` of ``fake`` against ``real`` (features ``[N, D]`` each)."""
    real_t = _as_features(real, "real features")
    fake_t = _as_features(fake, "generated features")
    precision = coverage_share(fake_t, real_t, knn_radii(real_t, k, chunk), chunk)
    recall = coverage_share(real_t, fake_t, knn_radii(fake_t, k, chunk), chunk)
    return precision, recall
