"""The authors' algorithms for one-step flow matching, re-implemented over *our* model's weights.

Written from the specification (../shared/reference/official/ARCHITECTURE.md §1-5 and
../shared/research/paper-notes.md §2b), not from the authors' code. It computes the same
function as :class:`linearizer.flow.model.OneStepFlow` (checked by :func:`parity`), the way the
official implementation computes it:

* **A(t) per sample, dense.** ``get_lin_t(t)`` builds the stack of ``D x D`` matrices
  ``A1(t_b) A2(t_b)^T`` (row-vector convention) and the operator is applied with a batched
  matrix product. In the samplers ``t`` is broadcast over the batch, so every step evaluates the
  hypernetworks and builds one dense matrix per sample.
* **Separate g passes.** ``g_y(x0)`` and ``g_x(x1)`` are two network calls; the three inverses of
  the loss are three more.
* **Explicit inverse of every 1x1 convolution, per call** (``torch.linalg.inv``).
* **The EDM-style conditioner:** attention through two einsums with the softmax in float32,
  resampling through a depthwise (transposed) convolution with the constant [1, 1] filter, and
  ordinary ``dropout`` (so train mode is stochastic, as theirs).
* **Dense collapse.** ``B = M_0 M_1 ... M_{T-2}`` accumulated as ``B <- M_i B`` with one
  ``D x D x D`` product per step; ``rk`` is their Simpson-averaged generator (not RK4).

Conventions: latents are flattened row vectors ``z``; the reference B acts as ``z @ B``, so it is
the *transpose* of our (column-convention) B.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from linearizer.flow.model import DATA, NOISE, OneStepFlow
from linearizer.invertible.coupling import AffineCoupling, clamp_log_scale
from linearizer.invertible.unet import SKIP_SCALE, PaperUNet, ResBlock


class Reference:
    """The official algorithms over ``model``'s parameters (shared, not copied)."""

    def __init__(self, model: OneStepFlow) -> None:
        self.model = model
        self.net = model.net
        self.op = model.op
        self.shape = model.image_shape
        self.dim = model.dim

    # --- the invertible network G(x; tau) ---------------------------------------------------
    def g(self, x: Tensor, tau: float) -> Tensor:
        """``G(x; tau)`` on images; returns images."""
        cond = torch.full((x.shape[0],), float(tau), dtype=x.dtype, device=x.device)
        squeeze = self.net.squeeze
        h = squeeze(x) if squeeze is not None else x
        for block in self.net.blocks:
            h = (h + block.actnorm.bias) * torch.exp(block.actnorm.log_scale)
            h = _coupling(block.F, h, cond, inverse=False)
            h = _coupling(block.G, h, cond, inverse=False)
            h = F.conv2d(h, block.mix.weight().to(h.dtype)[:, :, None, None])
        return squeeze.inverse(h) if squeeze is not None else h

    def g_inv(self, z: Tensor, tau: float) -> Tensor:
        cond = torch.full((z.shape[0],), float(tau), dtype=z.dtype, device=z.device)
        squeeze = self.net.squeeze
        h = squeeze(z) if squeeze is not None else z
        for block in reversed(self.net.blocks):
            w_inv = torch.linalg.inv(block.mix.weight())  # formed again on every call
            h = F.conv2d(h, w_inv.to(h.dtype)[:, :, None, None])
            h = _coupling(block.G, h, cond, inverse=True)
            h = _coupling(block.F, h, cond, inverse=True)
            h = h * torch.exp(-block.actnorm.log_scale) - block.actnorm.bias
        return squeeze.inverse(h) if squeeze is not None else h

    def encode(self, x: Tensor, tau: float) -> Tensor:
        return self.g(x, tau).reshape(x.shape[0], -1)

    def decode(self, z: Tensor, tau: float) -> Tensor:
        return self.g_inv(z.reshape(z.shape[0], *self.shape), tau)

    # --- the operator ----------------------------------------------------------------------
    def get_lin_t(self, t: Tensor) -> Tensor:
        """``[len(t), D, D]``: the dense row-convention matrices ``A1(t_b) A2(t_b)^T``."""
        u, v = self.op.factors(t.reshape(-1))
        if u.dim() == 2:  # one time comes back unbatched
            u, v = u[None], v[None]
        # Our column A = U V^T, so their row matrix (z @ A_row = (A z)^T) is V U^T.
        return torch.bmm(v, u.transpose(1, 2))

    def apply(self, z: Tensor, t: Tensor) -> Tensor:
        """``z_b @ A_row(t_b)`` for every row, through the dense per-sample matrices."""
        return torch.bmm(z[:, None, :], self.get_lin_t(t).to(z.dtype))[:, 0]

    # --- training objective ----------------------------------------------------------------
    def loss(
        self, x1: Tensor, draws: dict[str, Tensor], noise_level: float = 0.3, distance=F.mse_loss
    ) -> tuple[Tensor, dict[str, float]]:
        t, x0, n0, n1 = draws["t"], draws["x0"], draws["n0"], draws["n1"]
        n = x1.shape[0]
        a = self.encode(x0, NOISE)  # g_y(x0)
        b = self.encode(x1, DATA)  # g_x(x1): a second, separate pass
        tt = t[:, None]
        p = self.apply((1 - tt) * a + tt * b, t)
        s = noise_level
        terms = {
            "latent": F.mse_loss(p, b),
            "x0_rec": F.mse_loss(self.decode(a + s * n0.reshape(n, -1), NOISE), x0),
            "x1_rec": distance(self.decode(b + s * n1.reshape(n, -1), DATA), x1),
            "x1_pred_rec": distance(self.decode(p, DATA), x1),
        }
        return sum(terms.values()), {k: float(v.detach()) for k, v in terms.items()}

    # --- sampling --------------------------------------------------------------------------
    def sampling_matrix(self, steps: int, method: str = "euler") -> Tensor:
        """Their one-step matrix (row convention, the operator's dtype): one dense product/step."""
        ref = self.op.u_net[1].weight
        eye = torch.eye(self.dim, dtype=ref.dtype, device=ref.device)
        h = 1.0 / steps

        def lin(s: float) -> Tensor:
            return self.get_lin_t(torch.tensor([s], dtype=ref.dtype, device=ref.device))[0]

        b = eye.clone()
        for i in reversed(range(steps - 1)):
            t = i * h
            if method == "euler":
                m = eye + (h / (1.0 - t)) * (lin(t) - eye)
            elif method == "rk":
                k1, k2, k4 = ((h / (1.0 - s)) * (lin(s) - eye) for s in (t, t + h / 2, t + h))
                m = eye + (k1 + 4.0 * k2 + k4) / 6.0
            else:
                raise ValueError(f"reference methods are 'euler' and 'rk', not {method!r}")
            b = m @ b
        return b

    def _velocity(self, z: Tensor, t: float) -> Tensor:
        tt = torch.full((z.shape[0],), t, dtype=z.dtype, device=z.device)
        return (self.apply(z, tt) - z) / (1.0 - t)

    def sample(self, x0: Tensor, steps: int = 100, method: str = "euler") -> Tensor:
        """Their multi-step sampler: dense per-sample A at every stage; ``rk`` is true RK4 here."""
        z = self.encode(x0, NOISE)
        h = 1.0 / steps
        for i in range(steps - 1):
            t = i * h
            if method == "euler":
                z = z + h * self._velocity(z, t)
                continue
            k1 = self._velocity(z, t)
            k2 = self._velocity(z + (h / 2) * k1, t + h / 2)
            k3 = self._velocity(z + (h / 2) * k2, t + h / 2)
            k4 = self._velocity(z + h * k3, t + h)
            z = z + h * (k1 + 2 * k2 + 2 * k3 + k4) / 6
        return self.decode(z, DATA)

    def sample_one_step(self, x0: Tensor, b_row: Tensor) -> Tensor:
        z = self.encode(x0, NOISE)
        return self.decode(z @ b_row.to(z.dtype), DATA)


# --- pieces of the network, the authors' way -------------------------------------------------
def _coupling(c: AffineCoupling, x: Tensor, cond: Tensor, inverse: bool) -> Tensor:
    half = x.shape[1] // 2
    a, b = x[:, :half], x[:, half:]
    changed, kept = (a, b) if c.update == "first" else (b, a)
    h = _conditioner(c.cond, kept, cond)
    width = changed.shape[1]
    shift, log_scale = h[:, :width], clamp_log_scale(h[:, width:], c.clamp, c.clamp_mode)
    if inverse:
        changed = changed * torch.exp(-log_scale) - shift
    else:
        changed = (changed + shift) * torch.exp(log_scale)
    pair = (changed, kept) if c.update == "first" else (kept, changed)
    return torch.cat(pair, dim=1)


def _conditioner(module, u: Tensor, cond: Tensor) -> Tensor:
    if isinstance(module, PaperUNet):
        return _unet(module, u, cond)
    return module(u, cond)  # other conditioners (the cpu preset's SmallCNN) as they are


def _unet(net: PaperUNet, u: Tensor, cond: Tensor) -> Tensor:
    emb = net.embed_time(cond, u.shape[0], u)
    x, skips = u, []
    for layer, (role, _, _) in zip(net.encoder, net.encoder_roles):
        x = layer(x) if role == "conv" else _block(layer, x, emb)
        skips.append(x)
    for layer, (role, _, _) in zip(net.decoder, net.decoder_roles):
        if role == "block":
            x = torch.cat([x, skips.pop()], dim=1)
        x = _block(layer, x, emb)
    return net.out_conv(F.silu(net.out_norm(x)))


def _resample(x: Tensor, mode: str) -> Tensor:
    if mode == "none":
        return x
    c = x.shape[1]
    # The constant [1, 1] filter (outer product, normalised), tiled per call as EDM does.
    filt = torch.full((c, 1, 2, 2), 0.25, dtype=x.dtype, device=x.device)
    if mode == "down":
        return F.conv2d(x, filt, stride=2, groups=c)
    return F.conv_transpose2d(x, filt * 4, stride=2, groups=c)


def _block(b: ResBlock, x: Tensor, emb: Tensor) -> Tensor:
    h = b.conv0(_resample(F.silu(b.norm0(x)), b.mode))
    h = h + b.affine(emb)[:, :, None, None]
    h = F.dropout(F.silu(b.norm1(h)), p=b.dropout.p, training=b.training)
    h = b.conv1(h)
    skip = x if b.skip is None else b.skip(_resample(x, b.mode))
    x = (h + skip) * SKIP_SCALE
    if b.num_heads:
        x = (b.proj(_attention(b, b.norm2(x))) + x) * SKIP_SCALE
    return x


def _attention(b: ResBlock, n: Tensor) -> Tensor:
    batch, c, height, width = n.shape
    heads, ch = b.num_heads, c // b.num_heads
    qkv = b.qkv(n).reshape(batch, 3, heads, ch, height * width)  # our q | k | v channel blocks
    q, k, v = (qkv[:, i].reshape(batch * heads, ch, -1) for i in range(3))
    w = torch.einsum("ncq,nck->nqk", q.float(), (k / math.sqrt(ch)).float()).softmax(dim=2)
    out = torch.einsum("nqk,nck->ncq", w.to(v.dtype), v)
    return out.reshape(batch, c, height, width)


# --- agreement with our implementation ------------------------------------------------------
@torch.no_grad()
def parity(model: OneStepFlow, batch: int = 4, steps: int = 10, seed: int = 0) -> dict[str, float]:
    """Largest differences between the reference and ``model`` (eval mode, no dropout).

    Keys: g / g^-1 passes, the loss, the collapsed B (euler; their 'rk' against our
    'rk4-authors', which must agree), multi-step samples (euler and rk4) and one-step samples.
    Relative errors for B (max |diff| / max |B|); absolute elsewhere.
    """
    from linearizer.flow import solvers
    from linearizer.flow.objective import draw_noise, flow_loss

    was_training = model.training
    model.eval()
    ref = Reference(model)
    gen = torch.Generator().manual_seed(seed)
    dtype = next(model.parameters()).dtype
    x1 = torch.rand(batch, *model.image_shape, generator=gen).to(dtype)
    draws = draw_noise(x1, gen)
    x0 = draws["x0"]
    out: dict[str, float] = {}
    out["g"] = _maxdiff(ref.g(x0, NOISE), model.net(x0, NOISE))
    z = model.net(x1, DATA)
    out["g_inverse"] = _maxdiff(ref.g_inv(z, DATA), model.net.inverse(z, DATA))
    out["loss"] = abs(float(ref.loss(x1, draws)[0]) - float(flow_loss(model, x1, draws)[0]))
    for ours, theirs in (("euler", "euler"), ("rk4-authors", "rk")):
        b_ours = solvers.collapse(
            model.op, steps=steps, method=ours, dtype=torch.float64, final="skip"
        )
        b_ref = ref.sampling_matrix(steps, theirs).double().T
        out[f"B_{ours}_rel"] = float((b_ours - b_ref).abs().max() / b_ours.abs().max())
    for method, theirs in (("euler", "euler"), ("rk4", "rk")):
        ours = model.sample(
            x0, steps=steps, method=method, final="skip", dtype=x0.dtype, one_step=False
        )
        out[f"multistep_{method}"] = _maxdiff(ref.sample(x0, steps, theirs), ours)
    b_row = ref.sampling_matrix(steps, "euler")
    ours = model.sample(x0, steps=steps, method="euler", final="skip", dtype=x0.dtype)
    out["onestep_euler"] = _maxdiff(ref.sample_one_step(x0, b_row), ours)
    model.train(was_training)
    return out


def _maxdiff(a: Tensor, b: Tensor) -> float:
    return float((a.double() - b.double()).abs().max())
