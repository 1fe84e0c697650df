"""Finding a mixture's components without labels: k-means before training.

``components=K`` assigns every training image to one of ``K`` components once, before the first
step, and trains operator ``A(t, k)`` on component ``k``'s images; the mixture weights are the
components' shares. Two feature spaces (``component_features``):

* ``pixels``: the images themselves;
* ``latent``: the data-side latents ``g_data(x)`` of ``init_from``'s network, the space in which
  each component is one exact linear generator.

Either is reduced to its top principal directions first (k-means in 1,024 dimensions is
dominated by noise directions), then clustered by k-means++ and Lloyd iterations in float64,
seeded, so a run finds the same components when it resumes.

>>> x = torch.cat([torch.zeros(20, 1, 4, 4), torch.ones(30, 1, 4, 4)])
>>> parts = kmeans_components(x.flatten(1), 2, seed=0)
>>> sorted(torch.bincount(parts).tolist())
[20, 30]
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..errors import LinearizerError

PCA_DIMS = 32
LLOYD_ITERATIONS = 100


def kmeans_components(features: Tensor, k: int, *, seed: int, dims: int = PCA_DIMS) -> Tensor:
    """Each row's cluster among ``k`` (int64 ``[N]``), by k-means on the rows' top ``dims``
    principal coordinates (float64, k-means++ seeded by ``seed``)."""
    n = len(features)
    if not 2 <= k <= n:
        raise LinearizerError(f"components must lie in 2..{n} (the training images), got {k}")
    x = features.reshape(n, -1).double()
    x = x - x.mean(0)
    q = min(dims, *x.shape)
    # the covariance's eigenvectors: exact for any N, and cheap next to an SVD of the data
    _, vecs = torch.linalg.eigh(x.T @ x)
    y = x @ vecs[:, -q:]
    gen = torch.Generator().manual_seed(seed)
    centres = _plus_plus(y, k, gen)
    parts = _nearest(y, centres)
    for _ in range(LLOYD_ITERATIONS):
        centres = _means(y, parts, centres)
        new = _nearest(y, centres)
        if torch.equal(new, parts):
            break
        parts = new
    return parts


def _plus_plus(y: Tensor, k: int, gen: torch.Generator) -> Tensor:
    """k-means++: each next centre drawn with probability proportional to its squared distance."""
    centres = [y[int(torch.randint(len(y), (1,), generator=gen))]]
    dist = (y - centres[0]).square().sum(1)
    for _ in range(1, k):
        i = int(torch.multinomial(dist / dist.sum(), 1, generator=gen))
        centres.append(y[i])
        dist = torch.minimum(dist, (y - y[i]).square().sum(1))
    return torch.stack(centres)


def _nearest(y: Tensor, centres: Tensor) -> Tensor:
    # |y|^2 is the same for every centre, so it drops out of the argmin
    return (centres.square().sum(1) - 2 * y @ centres.T).argmin(1)


def _means(y: Tensor, parts: Tensor, old: Tensor) -> Tensor:
    """Each cluster's mean (an emptied cluster keeps its centre)."""
    k = len(old)
    sums = torch.zeros_like(old).index_add_(0, parts, y)
    counts = torch.bincount(parts, minlength=k).double()
    return torch.where(counts[:, None] > 0, sums / counts.clamp_min(1)[:, None], old)


@torch.no_grad()
def data_latents(model: nn.Module, images: Tensor, batch: int = 512) -> Tensor:
    """``g_data(x)`` of every image, flattened (float64), in batches."""
    from .model import DATA

    param = next(model.parameters())
    out = []
    for part in images.split(batch):
        z = model.encode(part.to(param.device, param.dtype), DATA)
        out.append(z.double().cpu())
    return torch.cat(out)


def find_components(
    images: Tensor, k: int, features: str, seed: int, init_from: str = ""
) -> Tensor:
    """The component of every training image: k-means on ``features`` (``pixels``, or
    ``latent``: the data side of ``init_from``'s network)."""
    if features == "pixels":
        x = images.flatten(1)
    elif features == "latent":
        from ..training.runs import load_run

        x = data_latents(load_run(init_from, expect="flow").model.eval(), images)
    else:
        raise LinearizerError(f"component_features must be pixels or latent, got {features!r}")
    return kmeans_components(x, k, seed=seed)


def shares(parts: Tensor, k: int) -> Tensor:
    """Each component's share of the rows (float64), the mixture weights.

    >>> shares(torch.tensor([0, 1, 1, 1]), 2).tolist()
    [0.25, 0.75]
    """
    return torch.bincount(parts.reshape(-1), minlength=k).double() / parts.numel()
