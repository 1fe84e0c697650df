"""Latent calibration: a linear map on the generator's output latents, fitted to the training
images so the one-step samples spread like the data, while the generator stays linear.

A one-step flow trained with the authors' objective comes out under-dispersed: its output
latents ``z1 = B g_noise(x0)`` vary less, and in other proportions, than the training images'
latents ``g_data(x1)``. The calibration is the symmetric map ``K = I + Q (M - I) Q^T`` where

* ``Q [D, k]`` is an orthonormal basis of the range of the collapsed sampler B (its top ``k``
  left singular vectors, ``k`` at most the rank of the operator A(t)), where the samples live
  (all of them with ``final="predict"``, all but B's ``1/T`` identity part with ``"skip"``), and
* ``M [k, k]`` is the linear optimal-transport (Monge) map between two centred Gaussians in
  those coordinates, ``M = S^-1/2 (S^1/2 C S^1/2)^1/2 S^-1/2``: ``S`` the covariance of the
  samples' coordinates ``Q^T z1`` at ``x0 ~ N(0, tau^2 I)``, ``C`` that of the training images'
  coordinates ``Q^T g_data(x1)``. ``M S M = C``: calibrated samples have the data's covariance in
  the sampler's range, and among all linear maps that achieve it, ``M`` moves them least.

The generator becomes ``g_data^-1(K B g_noise(.))``: still one matrix, so every exactness claim
(linearity, one-step = multi-step, SVD) holds unchanged. The fit uses training images only:
never the test images, and never the classifier behind FID (LeNet).
:class:`~linearizer.flow.model.OneStepFlow` applies ``model.calibration`` in the sampler it
was fitted for (by default the one of ``linearizer sample``: Euler, T = 1000, the jump to the
prediction), one-step and multi-step alike; a run keeps it in ``RUN/calibration.safetensors``
(:func:`save_calibration`), which :func:`~linearizer.training.runs.load_run` attaches.

>>> import torch
>>> from linearizer.flow.build import build_flow
>>> from linearizer.flow.config import SMOKE
>>> from linearizer.flow.spec import SamplerSpec
>>> model = build_flow(SMOKE, channels=1).double()
>>> cal = fit_calibration(model, torch.rand(256, 1, 8, 8), n=256,
...                       sampler=SamplerSpec(steps=10))
>>> cal.basis.shape, cal.core.shape
(torch.Size([64, 2]), torch.Size([2, 2]))
>>> bool(torch.allclose(cal.core, cal.core.T))
True
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ..config import Config, option
from ..errors import LinearizerError
from ..io import load_tensors, read_json, save_tensors, write_json
from . import factored
from .spec import SamplerSpec
from .transport import (
    STATS,
    LatentTransport,
    TransportOptions,
    VectorFlow,
    fit_transport,
    sym_power,
)

F64 = torch.float64
FILE, META = "calibration.safetensors", "calibration.json"
FORMAT = "linearizer.calibration/1"


@dataclass(frozen=True)
class FitOptions(Config):
    """What a calibration is fitted on: ``n`` noise draws from ``sampler`` (its schedule and
    temperature) and ``n`` training images (or all, if fewer); the transport's size and steps
    (:class:`~linearizer.flow.transport.TransportOptions`)."""

    sampler: SamplerSpec = option(SamplerSpec(), "the sampler whose latents are calibrated")
    n: int = option(10_000, "noise draws and training images")
    seed: int = option(0, "seed of the noise and image draw")
    batch: int = option(1000, "images per network pass")
    transport_steps: int = option(0, "Adam steps of the latent transport fitted after K (0: none)")
    transport_blocks: int = option(12, "the transport's affine couplings")
    transport_hidden: int = option(192, "width of the transport's conditioners")
    transport_mixing: bool = option(True, "a learned mixing after each transport coupling")

    def validate(self) -> None:
        if self.n < 2 or self.batch < 1:
            raise LinearizerError(
                f"a calibration needs n >= 2 and batch >= 1, got {self.n} and {self.batch}"
            )
        if self.transport_steps < 0:
            raise LinearizerError(f"transport steps must be >= 0, got {self.transport_steps}")

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> FitOptions:
        """The options a ``calibration.json`` records. A record without ``transport_mixing``
        predates the transport's :class:`~linearizer.flow.transport.Mixing` layers; one with
        flat ``steps``/``method``/``final``/``temperature`` predates :class:`SamplerSpec`."""
        record = {"transport_mixing": False, **record}
        flat = {
            k: record.pop(k) for k in ("steps", "method", "final", "temperature") if k in record
        }
        sampler = SamplerSpec.from_dict({**record.pop("sampler", {}), **flat})
        return cls(sampler=sampler, **record)

    def transport(self) -> TransportOptions | None:
        """The latent transport's options (:mod:`linearizer.flow.transport`); None: no transport."""
        if self.transport_steps <= 0:
            return None
        return TransportOptions(
            steps=self.transport_steps,
            blocks=self.transport_blocks,
            hidden=self.transport_hidden,
            mixing=self.transport_mixing,
            seed=self.seed,
        )


@dataclass(frozen=True)
class LatentCalibration:
    """``K = I + Q (M - I) Q^T``: ``basis`` Q ``[D, k]`` orthonormal, ``core`` M ``[k, k]``
    symmetric positive definite (float64), fitted for ``sampler`` (its schedule and noise
    temperature); ``transport``: an optional :class:`~linearizer.flow.transport.LatentTransport`
    applied after K (the samples' shape, not only their covariance).

    K belongs to that sampler's schedule: its B decides where the samples lie, and the
    directions K stretches most are those B nearly discards. A spec that asks for the maps with
    another schedule is refused (:meth:`check_spec`).
    """

    basis: Tensor
    core: Tensor
    sampler: SamplerSpec = field(default_factory=SamplerSpec)
    transport: LatentTransport | None = None

    def __post_init__(self) -> None:
        q, m = self.basis, self.core
        if q.dim() != 2 or m.shape != (q.shape[1], q.shape[1]):
            raise LinearizerError(
                f"calibration basis [D, k] and core [k, k] disagree: {list(q.shape)}, "
                f"{list(m.shape)}"
            )
        if not (torch.isfinite(q).all() and torch.isfinite(m).all()):
            raise LinearizerError("the calibration holds NaN or infinite values")
        if self.transport is not None and self.transport.dim != q.shape[0]:
            raise LinearizerError("the latent transport and the calibration disagree in size")

    @property
    def dim(self) -> int:
        return self.basis.shape[0]

    def describe(self) -> str:
        """What the sampler applies: ``latent calibration`` (K) or ``... and transport``."""
        return "latent calibration" + ("" if self.transport is None else " and transport")

    def applies_to(self, spec: SamplerSpec) -> bool:
        """Whether ``spec`` has the schedule K was fitted for."""
        return spec.schedule == self.sampler.schedule

    def check_spec(self, spec: SamplerSpec) -> None:
        """One line when ``spec`` asks for maps this calibration cannot give."""
        fitted = self.sampler
        if not self.applies_to(spec):
            raise LinearizerError(
                f"the latent maps were fitted for {fitted.method} T = {fitted.steps}, final "
                f"{fitted.final}, not {spec.method} T = {spec.steps}, final {spec.final}: "
                f"sample with those settings, --maps none, or refit (linearizer calibrate RUN "
                f"--steps {spec.steps} --method {spec.method} --final {spec.final})"
            )
        if spec.maps == "transport" and self.transport is None:
            raise LinearizerError(
                "the run's latent calibration has no transport: --maps "
                "calibration, or refit with linearizer calibrate RUN "
                "--transport-steps N"
            )

    def _parts(self, like: Tensor) -> tuple[Tensor, Tensor]:
        q = self.basis.to(like.dtype).to(like.device)
        m = self.core.to(like.dtype).to(like.device)
        return q, m - torch.eye(m.shape[0], dtype=m.dtype, device=m.device)

    def apply_rows(self, z: Tensor) -> Tensor:
        """``K z`` for every row of ``z [N, D]`` (K is symmetric)."""
        q, n = self._parts(z)
        return z + (z @ q) @ n @ q.T

    def matrix(self, dtype: torch.dtype = F64) -> Tensor:
        """``K`` as a dense ``D x D`` matrix."""
        return self.apply_rows(torch.eye(self.dim, dtype=dtype, device=self.basis.device))

    def compose(self, b: Tensor | factored.FactoredMatrix) -> Tensor | factored.FactoredMatrix:
        """``K B`` in B's form: dense, or factored as ``c I + [c Q N, K U] [Q, V]^T`` with
        ``N = M - I`` (so a factored B never becomes ``D x D``)."""
        if isinstance(b, factored.FactoredMatrix):
            q, n = self._parts(b.u)
            u = torch.cat([b.c * (q @ n), self.apply_rows(b.u.T).T], dim=1)
            return factored.FactoredMatrix(b.c, u, torch.cat([q, b.v], dim=1))
        return self.apply_rows(b.T).T

    def spectrum(self) -> tuple[float, float]:
        """The smallest and largest eigenvalue of ``M`` (how far K moves the samples)."""
        e = torch.linalg.eigvalsh(self.core.to(F64))
        return float(e[0]), float(e[-1])


def gaussian_transport(source: Tensor, target: Tensor) -> Tensor:
    """The symmetric ``M`` with ``M source M = target`` (covariances ``[k, k]``, ``source``
    positive definite): the optimal-transport map between the two centred Gaussians.

    >>> s, t = torch.diag(torch.tensor([1.0, 4.0])), torch.diag(torch.tensor([4.0, 1.0]))
    >>> gaussian_transport(s, t).diagonal().tolist()
    [2.0, 0.5]
    """
    e, v = torch.linalg.eigh(source)
    if float(e[0]) <= 0:
        raise LinearizerError(
            "the samples' covariance is singular in the sampler's range; fit on more samples"
        )
    root = (v * e.sqrt()) @ v.T
    inv_root = (v * e.rsqrt()) @ v.T
    m = inv_root @ sym_power(root @ target @ root, 0.5, floor=0.0) @ inv_root
    return (m + m.T) / 2


def _range_basis(b: Tensor | factored.FactoredMatrix, rank: int) -> Tensor:
    """The top left singular vectors of B: at most ``rank`` (the operator's), and only those
    whose singular value is not rounding (above ``D eps`` of the largest)."""
    if isinstance(b, factored.FactoredMatrix):
        u, sv = None, b.singular_values()
    else:
        u, sv, _ = torch.linalg.svd(b)
    floor = float(sv[0]) * b.shape[0] * torch.finfo(F64).eps
    k = min(rank, int((sv > floor).sum()))
    if k == 0:
        raise LinearizerError("the one-step matrix is zero: nothing to calibrate")
    return b.svd(k)[0] if u is None else u[:, :k]


@torch.no_grad()
def fit_calibration(
    model: nn.Module, images: Tensor, opts: FitOptions | None = None, **kw: Any
) -> LatentCalibration:
    """Fit ``K`` for ``model`` (a :class:`~linearizer.flow.model.OneStepFlow`; any
    calibration it holds is ignored) on training ``images``.

    ``opts`` (or its fields as keywords) name the sampler, the temperature and the sample size.
    Work is in float64; the model is left as it was.
    """
    opts = opts or FitOptions(**kw)
    if getattr(model, "components", 1) > 1:
        raise LinearizerError(
            "latent maps are not fitted for class-conditional models or other mixtures: they "
            "sample the trained map alone (--maps none)"
        )
    spec = opts.sampler
    model.check_images(images[:1], "training images")
    param = next(model.parameters())
    b = factored.one_step(model.op, **spec.solver_args, dtype=F64)
    q = _range_basis(b, int(getattr(model.op, "rank", model.dim)))
    gen = torch.Generator().manual_seed(opts.seed)
    noise = spec.temperature * torch.randn(opts.n, *model.image_shape, generator=gen)
    pick = torch.randperm(len(images), generator=gen)[: opts.n]

    def coords(x: Tensor, flag: float, through_b: bool) -> Tensor:
        out = []
        for part in x.split(opts.batch):
            z = model.encode(part.to(param.device, param.dtype), flag).to(F64)
            out.append((factored.apply_rows(b, z) if through_b else z) @ q)
        return torch.cat(out)

    samples = coords(noise, 0.0, True)
    # the transport's flow needs all training images; K's covariance the drawn ones among them
    everything = coords(images, 1.0, False) if opts.transport() is not None else None
    data = coords(images[pick], 1.0, False) if everything is None else everything[pick]
    core = gaussian_transport(torch.cov(samples.T), torch.cov(data.T))
    transport = None
    if everything is not None:
        transport = fit_transport(
            q.cpu(), (samples @ core).cpu(), everything.cpu(), opts.transport()
        )
    return LatentCalibration(q.cpu(), core.cpu(), _fitted_for(spec), transport)


# --- in a run folder ------------------------------------------------------------------------


def save_calibration(
    run_dir: str | Path, fits: dict[str, LatentCalibration], step: int, opts: FitOptions
) -> Path:
    """Write ``RUN/calibration.safetensors`` (+ ``.json``): one calibration per weights
    section (``"ema"``, ``"model"``), for the checkpoint at ``step``."""
    run_dir = Path(run_dir)
    tensors = {}
    for section, cal in fits.items():
        tensors.update(to_tensors(cal, f"{section}."))
    path = save_tensors(run_dir / FILE, tensors)
    write_json(
        run_dir / META,
        {"format": FORMAT, "step": int(step), "sections": sorted(fits), "fit": asdict(opts)},
    )
    return path


def load_calibration(run_dir: str | Path, step: int, section: str) -> LatentCalibration | None:
    """The run's calibration for the weights ``section`` of the checkpoint at ``step``; None
    when the run has none, or one fitted on other weights (an older step, say)."""
    run_dir = Path(run_dir)
    if not (run_dir / META).is_file():
        return None
    meta = read_json(run_dir / META)
    if meta.get("format") != FORMAT:
        raise LinearizerError(f"{run_dir / META} is not a linearizer calibration")
    if meta.get("step") != step or section not in meta.get("sections", []):
        return None
    tensors = load_tensors(run_dir / FILE)
    try:
        return from_tensors(tensors, f"{section}.", FitOptions.from_record(meta["fit"]))
    except (KeyError, TypeError) as e:
        raise LinearizerError(f"{run_dir / FILE} is incomplete ({e})") from None


TRANSPORT = "transport."


def to_tensors(
    cal: LatentCalibration,
    prefix: str,
    dtype: torch.dtype = F64,
    flow_dtype: torch.dtype = torch.float32,
) -> dict[str, Tensor]:
    """``<prefix>basis``, ``<prefix>core`` (in ``dtype``) and the transport's state, if any,
    as ``<prefix>transport.*`` (its flow's weights in ``flow_dtype``; its basis is Q)."""
    out = {f"{prefix}basis": cal.basis.to(dtype), f"{prefix}core": cal.core.to(dtype)}
    if cal.transport is not None:
        for name, value in cal.transport.state_dict().items():
            if name == "basis":  # the calibration's own Q
                continue
            if value.is_floating_point():  # the flow as fitted, the linear parts as K
                value = value.to(flow_dtype if name.startswith("flow.") else dtype)
            out[f"{prefix}{TRANSPORT}{name}"] = value
    return out


def from_tensors(tensors: dict[str, Tensor], prefix: str, fit: FitOptions) -> LatentCalibration:
    """The calibration stored by :func:`to_tensors` under ``prefix``, fitted with ``fit``."""
    basis, core = tensors[f"{prefix}basis"], tensors[f"{prefix}core"]
    transport = None
    if fit.transport() is not None:
        topts, start = fit.transport(), f"{prefix}{TRANSPORT}"
        state = {k[len(start) :]: v for k, v in tensors.items() if k.startswith(start)}
        flow = VectorFlow(basis.shape[1], topts.blocks, topts.hidden, mixing=topts.mixing)
        transport = LatentTransport(basis, flow, {k: state[k] for k in STATS})
        state["basis"] = transport.basis
        try:
            transport.load_state_dict(state)
        except RuntimeError as e:
            raise LinearizerError(
                f"the stored latent transport does not match its options: "
                f"{str(e).strip().splitlines()[0]}"
            ) from None
        transport.requires_grad_(False).eval()
    return LatentCalibration(basis, core, _fitted_for(fit.sampler), transport)


def _fitted_for(spec: SamplerSpec) -> SamplerSpec:
    """What a calibration records of the spec it was fitted with: its schedule and
    temperature (the dtype and the maps asked for are the caller's)."""
    return SamplerSpec(**spec.solver_args, temperature=spec.temperature)


def calibration_info(run_dir: str | Path) -> dict[str, Any] | None:
    """The run's ``calibration.json`` (step, sections, fit options), or None."""
    path = Path(run_dir) / META
    return read_json(path) if path.is_file() else None
