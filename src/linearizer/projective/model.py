"""The globally projective generative model ``f(x) = g^-1(A g(x))`` with ``A^2 = A`` exactly.

Why it is a projector everywhere: with one network on both sides (``g_x = g_y = g``),
``f(f(x)) = g^-1(A g(g^-1(A g(x)))) = g^-1(A^2 g(x)) = f(x)`` for *every* input, because
``g(g^-1(w)) = w`` and ``A^2 = A`` hold by construction (an exact projector from
:mod:`linearizer.operators.projector`, whatever its weights). IGN (Shocher et al. 2024) only
*encourages* ``f(f(z)) = f(z)`` with a loss, near the data it was trained on.

What is left to learn: the range of ``f`` is ``g^-1(range A)``, a k-dimensional *induced*
subspace, and a point of it is fixed by its ``k`` coordinates ``c = coords(g(x))`` (``Q^T g(x)``
for ``A = Q Q^T``; ``(V^T U)^-1 V^T g(x)`` for ``A = U (V^T U)^-1 V^T``): ``f(x) =
g^-1(basis @ c)``. Data must lie in that subspace, and noise must land where the data's
coordinates are. The loss (:func:`projective_loss`):

* ``rec_weight * |f(x) - x|_1`` on data (IGN's reconstruction, weight 20): data are fixed
  points. The rank ``k < D`` bounds the range, so this cannot collapse ``f`` to the identity.
* ``match_weight * |f(z_i) - x_j|_1`` on noise (``match="pair"``, weight 20, the default):
  each noise sample is paired with one digit of the batch by an exact optimal assignment
  (Hungarian algorithm) between the noise coordinates ``c_z`` and the data coordinates ``c_x``,
  and its projection is pulled onto its partner in pixels. Minibatch optimal transport makes
  the pairing local (nearby coordinates, nearby digits), so ``f(z)`` is led onto the data rather
  than to the mean digit, and every digit of the batch receives exactly one sample, so the
  noise cannot collapse onto a few modes (a trivial projection). It trains both the noise's
  coordinates and the decoder ``g^-1`` on the part of the range where noise lands; no
  discriminator, no extra network.
* ``match="sliced"`` replaces the pairing by a sliced-Wasserstein distance between the batches
  ``c_z`` and ``c_x`` (divided by the data coordinates' mean square). At k >= 16 it is weaker:
  random 1-D projections of that many coordinates all look Gaussian, so it cannot see the
  digits' clusters; at k = 8 it works and gives the best FID of the CPU runs, so the ``cpu``
  preset uses it (docs/projective/README.md has the numbers).

IGN's other two terms carry no signal here: ``L_idem = D(f_frozen(f(z)), f(z))`` and
``L_tight = -D(f(f_frozen(z)), f_frozen(z))`` vanish identically, because ``f`` fixes its own
range exactly (the tests check it); at a zero residual their (sub)gradients are zero too, so in
floating point they would add only rounding noise. Idempotence is architectural, and so is
IGN's tightness (keep the fixed-point set small): the fixed points of ``f`` are exactly its
k-dimensional range. What IGN's idempotence term does on noise (pull ``f(z)`` onto the data)
is the pairing term's job.

>>> import torch
>>> from linearizer.invertible import cpu_network
>>> from linearizer.operators import OrthogonalProjector
>>> m = ProjectiveModel(cpu_network(1, 1, 8, cond_dim=0), OrthogonalProjector(64, 4), (1, 8, 8))
>>> m = m.double().eval()
>>> x = 10 * torch.randn(3, 1, 8, 8, dtype=torch.float64)
>>> y = m(x)
>>> bool(((m(y) - y).norm() / y.norm()) < 1e-12)
True
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..algebra import Linearizer
from ..errors import LinearizerError, deprecated
from ..image_model import ImageModel
from ..operators.base import LinearOperator


class ProjectiveModel(ImageModel):
    """``f(x) = g^-1(A g(x))``: ``net`` an invertible network on images ``image_shape``, ``A`` an
    exact projector on the flattened latent. ``flag`` is the constant conditioning value handed
    to ``net`` (``None`` for unconditioned networks); the same for every input, so ``g_x = g_y``.

    :meth:`generator` is this map as a :class:`Linearizer` (``model.generator().svd(k)``,
    ``.pinv(y)``, ``.project(x)``), the same method every model of the package has.
    """

    def __init__(
        self,
        net: nn.Module,
        A: LinearOperator,
        image_shape: tuple[int, ...],
        flag: float | None = None,
    ) -> None:
        super().__init__(net, image_shape)
        if not getattr(A, "idempotent", False):
            raise LinearizerError(
                f"the projective model needs an exact projector, got {type(A).__name__}"
            )
        if A.in_features != self.dim:
            raise LinearizerError(
                f"projector acts on {A.in_features} values but images {self.image_shape} "
                f"flatten to {self.dim}"
            )
        self.A = A
        self.flag = flag
        # The projector's range starts at the data's top-k latent directions (set by the
        # first training batch, like ActNorm); saved, so a reloaded model never re-starts.
        self.register_buffer("basis_initialized", torch.zeros((), dtype=torch.uint8))
        self._generator: list[Linearizer] = []  # one cached instance (not a submodule)

    @property
    def rank(self) -> int:
        """k: the dimension of the range of ``f`` (an induced subspace)."""
        return int(self.A.rank)

    @property
    def g(self) -> nn.Module:
        """The one invertible network, seen at its fixed flag (both ``g_x`` and ``g_y``)."""
        return self.side(self.flag)

    def generator(self) -> Linearizer:
        """``f = g^-1(A g(.))`` as a :class:`Linearizer` (``g_x = g_y``): its SVD,
        pseudo-inverse, projections and powers. One instance, so its caches persist."""
        if not self._generator:
            self._generator.append(self.linearizer_of(self.A, self.flag, self.flag))
        return self._generator[0]

    def as_linearizer(self) -> Linearizer:
        """Deprecated alias of :meth:`generator`; warns and returns ``generator()``."""
        deprecated("ProjectiveModel.as_linearizer()", "generator()")
        return self.generator()

    # --- latent side ------------------------------------------------------------------------
    def encode(self, x: Tensor, flag: float | None = None) -> Tensor:
        """``G(x, flag)`` flattened to ``[B, D]``; ``flag=None`` is the model's own flag, so
        ``encode(x)`` is ``g(x)``."""
        self.check_images(x, "inputs")
        return self.encode_at(x, self.flag if flag is None else flag)

    def decode(self, w: Tensor, flag: float | None = None) -> Tensor:
        """``G^-1(w, flag)`` for latents ``[B, D]``, as images; ``flag=None`` is the model's
        own flag, so ``decode(w)`` is ``g^-1(w)``."""
        return self.decode_at(w, self.flag if flag is None else flag)

    def basis(self) -> Tensor:
        """``[D, k]`` basis of ``range A`` in which :meth:`coords` are expressed."""
        return self.A.basis()

    def coords(self, w: Tensor) -> Tensor:
        """Coordinates ``c [B, k]`` of ``A w`` in :meth:`basis`: ``A w = basis @ c``."""
        if hasattr(self.A, "V"):  # oblique: c = (V^T U)^-1 V^T w
            return torch.linalg.solve(self.A.V.T @ self.A.U, (w @ self.A.V).T).T
        return w @ self.A.basis()

    def from_coords(self, c: Tensor) -> Tensor:
        return c @ self.basis().T

    # --- the map ----------------------------------------------------------------------------
    def forward(self, x: Tensor) -> Tensor:
        """``f(x) = g^-1(A g(x))``: the projection of any input onto the learned range."""
        return self.decode(self.A(self.encode(x)))

    f = forward

    def generate(self, z: Tensor) -> Tensor:
        """One-pass generation: ``f`` of source noise ``z``."""
        return self.forward(z)

    @torch.no_grad()
    def init_basis_(self, w: Tensor) -> None:
        """Set the projector's range to the top-k right singular directions of latents ``w``
        (completed with random directions when the batch is smaller than k); mark it done."""
        k = self.rank
        _, _, vh = torch.linalg.svd(w.detach().to(torch.float64), full_matrices=False)
        top = vh[: min(k, vh.shape[0])].T
        if top.shape[1] < k:
            extra = torch.randn(self.dim, k - top.shape[1], dtype=torch.float64, device=w.device)
            top = torch.cat([top, extra], dim=1)
        q, _ = torch.linalg.qr(top)
        q = q.to(self.basis().dtype)
        if hasattr(self.A, "W"):
            self.A.W.copy_(q)
        else:
            self.A.U.copy_(q)
            self.A.V.copy_(q)
        self.basis_initialized.fill_(1)


def sliced_w2(a: Tensor, b: Tensor, directions: Tensor) -> Tensor:
    """Sliced squared 2-Wasserstein distance between equal-size point sets ``a, b [N, k]``:
    the mean over unit ``directions [k, L]`` of the sorted 1-D matching cost.

    >>> a = torch.randn(256, 3)
    >>> float(sliced_w2(a, a[torch.randperm(256)], torch.eye(3)))
    0.0
    """
    if a.shape != b.shape:
        raise LinearizerError(f"sliced_w2 needs equal shapes, got {list(a.shape)}, {list(b.shape)}")
    pa = (a @ directions).sort(dim=0).values
    pb = (b @ directions).sort(dim=0).values
    return (pa - pb).square().mean()


def ot_pairs(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """Indices ``(i, j)`` of the optimal one-to-one matching of rows of ``a`` to rows of ``b``
    under squared Euclidean cost (Hungarian algorithm, no gradient)."""
    from scipy.optimize import linear_sum_assignment

    cost = torch.cdist(a.detach().double(), b.detach().double()).square()
    rows, cols = linear_sum_assignment(cost.cpu().numpy())
    return torch.as_tensor(rows, device=a.device), torch.as_tensor(cols, device=a.device)


def random_directions(k: int, n: int, seed: int, like: Tensor) -> Tensor:
    """``[k, n]`` random unit columns from a generator seeded by ``seed`` (reproducible)."""
    gen = torch.Generator().manual_seed(int(seed))
    d = torch.randn(k, n, generator=gen, dtype=torch.float64)
    return (d / d.norm(dim=0, keepdim=True)).to(like)


def projective_loss(
    model: ProjectiveModel,
    x: Tensor,
    z: Tensor,
    *,
    rec_weight: float = 20.0,
    match: str = "pair",
    match_weight: float = 20.0,
    directions: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """The training loss of the projective model (see the module docstring).

    ``x``: data batch; ``z``: source noise of the same shape; ``directions [k, L]``: unit
    directions, needed by ``match="sliced"`` only. Data is encoded first, so data-dependent
    layers (ActNorm, the projector's range) start from data.
    """
    if match not in ("pair", "sliced"):
        raise LinearizerError(f"match must be 'pair' or 'sliced', got {match!r}")
    if match == "sliced" and directions is None:
        raise LinearizerError("match='sliced' needs directions (see random_directions)")
    wx = model.encode(x)
    if model.training and not bool(model.basis_initialized):
        model.init_basis_(wx)
    cx = model.coords(wx)
    fx = model.decode(model.from_coords(cx))
    rec = (fx - x).abs().mean()
    cz = model.coords(model.encode(z))
    scale = cx.detach().square().mean().clamp_min(1e-12)
    if match == "pair":
        rows, cols = ot_pairs(cz, cx)  # rows = 0..B-1; cols: each noise's digit
        distance = (model.decode(model.from_coords(cz[rows])) - x[cols]).abs().mean()
    else:
        distance = sliced_w2(cz, cx, directions) / scale
    return rec_weight * rec + match_weight * distance, {
        "rec_l1": float(rec.detach()),
        "match": float(distance.detach()),
        "coord_rms_data": float(scale.sqrt()),
        "coord_rms_noise": float(cz.detach().square().mean().sqrt()),
    }
