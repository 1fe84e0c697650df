"""A mixture of exact linear generators: one operator ``A(t, k)`` per component, one shared ``g``.

:class:`MixtureFlow` is the variant of :class:`~linearizer.flow.model.OneStepFlow` whose operator
has ``K`` components. Component ``k`` collapses into its own matrix ``B_k``, so its sampler
``g_data^-1(B_k g_noise(.))`` is a :class:`~linearizer.algebra.Linearizer` with the whole algebra;
the mixture draws ``k`` from the component weights, then samples through ``B_k``. Components are
either a dataset's classes (``conditional=true``: class-conditional generation, with a null class
for exact classifier-free guidance) or found without labels (``components=K``: see
:func:`find_components`). This is the deep counterpart of a mixture of probabilistic PCA
(Tipping and Bishop, 1999): each component is one Gaussian pushed through an exact linear map,
here in the induced space.

The variant overrides what picks the operator and what draws the rows' components; everything
else (B's collapse, its cache, inversion, the Linearizer) is the base class's, per component.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from ..errors import LinearizerError
from ..operators.base import LinearOperator
from . import factored, solvers
from .model import DATA, NOISE, OneStepFlow
from .spec import SamplerSpec, sample_spec

# the state of a one-component model lacks exactly these: it loads as every component at the
# shared operator (the component embeddings start at zero)
_MIXTURE_KEYS = ("op.u_class.weight", "op.v_class.weight", "mixture_weights")


class MixtureFlow(OneStepFlow):
    """``K`` exact linear generators over one shared invertible network.

    ``labelled``: the components are the training set's classes (the operator also holds a null
    class for guidance); otherwise they were found without labels and guidance is undefined.
    ``mixture_weights``: each component's share of the training images, the mixture's weights.
    """

    def __init__(
        self,
        net: nn.Module,
        op: LinearOperator,
        image_shape: tuple[int, int, int],
        *,
        labelled: bool,
    ) -> None:
        super().__init__(net, op, image_shape)
        self.components = int(getattr(op, "classes", 0))
        if self.components < 2:
            raise LinearizerError(f"a mixture needs >= 2 components, got {self.components}")
        self.labelled = bool(labelled)
        self.register_buffer("mixture_weights", torch.full((self.components,), 1 / self.components))
        self._register_load_state_dict_pre_hook(_upgrade_state, with_module=True)

    @property
    def classes(self) -> int:  # type: ignore[override]
        """The number of classes of a class-conditional model (0 for an unlabelled mixture)."""
        return self.components if self.labelled else 0

    @property
    def class_prior(self) -> Tensor:
        """The class weights of a class-conditional model (its mixture weights)."""
        return self.mixture_weights

    def what(self) -> str:
        kind = "classes" if self.labelled else "components learned without labels"
        return f"a mixture of {self.components} exact linear generators ({kind})"

    def operator(self, spec: SamplerSpec) -> LinearOperator:
        """``A(t, k)`` of the spec's component ``k``, or for a class-conditional model
        ``(1 + w) A(t, k) - w A(t, null)`` with the spec's guidance ``w``."""
        k, w = spec.condition
        noun = "class (--class" if self.labelled else "component (--component"
        if k is None:
            raise LinearizerError(
                f"this model is {self.what()}: give one {noun} 0..{self.components - 1}) "
                "for one linear generator"
            )
        if k >= self.components:
            raise LinearizerError(
                f"{noun.split(' ')[0]} {k} is out of range: the model has 0..{self.components - 1}"
            )
        if w and not self.labelled:
            raise LinearizerError(
                "--guidance needs a class-conditional model: an unlabelled mixture has no null "
                "class to guide against"
            )
        return self.op.given(k, w)

    def draw_components(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        """``n`` components drawn from the mixture weights."""
        weights = self.mixture_weights.detach().double().cpu()
        return torch.multinomial(weights, n, replacement=True, generator=generator)

    draw_labels = draw_components

    @torch.no_grad()
    def sample(
        self,
        x0: Tensor,
        spec: SamplerSpec | None = None,
        *,
        labels: Tensor | None = None,
        **changes: Any,
    ) -> Tensor:
        """With ``spec.component`` None, the mixture: each row's component from ``labels`` (default:
        drawn from the mixture weights), each row then through its component's exact generator.
        With a component given, that component's generator (:meth:`OneStepFlow.sample`)."""
        options = {k: changes.pop(k) for k in ("one_step", "callback", "form") if k in changes}
        spec = sample_spec(spec, **changes)
        if spec.component is not None:
            return super().sample(x0, spec, **options)
        self.check_images(x0, "noise")
        labels = self.draw_components(len(x0)) if labels is None else labels.reshape(-1).cpu()
        if len(labels) != len(x0):
            raise LinearizerError(f"{len(labels)} components for {len(x0)} noise images")
        out = torch.empty_like(x0)
        rows = {int(k): (labels == k).nonzero().squeeze(1).to(x0.device) for k in labels.unique()}
        one_step, form = options.get("one_step", True), options.get("form", "auto")
        solve = [k for k in rows if not self.through_b(spec.replace(component=k), one_step, form)]
        if solve and options.get("callback") is None:  # the solver's components in one pass
            for k, x in zip(solve, self._solve_each([x0[rows[k]] for k in solve], solve, spec)):
                out[rows.pop(k)] = x
        for k, r in rows.items():
            out[r] = super().sample(x0[r], spec.replace(component=k), **options)
        return out

    def _solve_each(self, x0s: list[Tensor], ks: list[int], spec: SamplerSpec) -> list[Tensor]:
        """Each noise batch ``x0s[i]`` through component ``ks[i]`` by the multi-step solver, all
        components in one batched run (:func:`~linearizer.flow.solvers.integrate_each`)."""
        specs = [spec.replace(component=k) for k in ks]
        z0s = [self.encode(x, NOISE) for x in x0s]
        ops = [self.operator(s) for s in specs]
        zs = [z.to(spec.torch_dtype) for z in z0s]
        z1s = solvers.integrate_each(ops, zs, **spec.solver_args)
        return [
            self.finish(self.calibrate(z1, s), z0.dtype, s) for z1, z0, s in zip(z1s, z0s, specs)
        ]

    def swap(self, x1: Tensor, spec: SamplerSpec, to: int) -> Tensor:
        """The exact swap: images ``x1`` of component ``spec.component`` to their noise under its
        generator, ``z0 = B_k^-1 g_data(x1)``, then to component ``to`` with the same noise,
        ``g_data^-1(B_to z0)``. Both B use ``spec.invertible()`` (the last interval skipped), so
        swapping back returns ``x1`` to rounding."""
        spec = spec.invertible()
        if spec.component is None:
            raise LinearizerError("swap needs the images' class (--from)")
        if spec.maps != "none":
            raise LinearizerError("swap applies the trained map alone: use --maps none")
        b_to = self.one_step_operator(spec.replace(component=int(to)))
        z1 = self.encode(x1, DATA).to(spec.torch_dtype)
        z0 = factored.solve_rows(self.one_step_operator(spec), z1)
        return self.decode(factored.apply_rows(b_to, z0).to(x1.dtype), DATA)

    @torch.no_grad()
    def likeliest(self, x1: Tensor, spec: SamplerSpec) -> tuple[Tensor, Tensor]:
        """Each image's most likely component under ``spec.invertible()``, and the scores.

        Component ``k`` draws ``x = g_data^-1(B_k w)`` with ``w = g_noise(x0)``, so its density
        at ``x`` is ``p_w(B_k^-1 g_data(x)) |det B_k|^-1 |det J_data(x)|``. The data side's
        Jacobian is the same for every component and cancels; the score is
        ``log pi_k + log N(x0_k; 0, tau^2 I) - log |det B_k|`` with ``x0_k`` the exact noise of
        ``x`` under component ``k``, which treats the noise side's Jacobian as equal across
        components (the one approximation: the noise network has no log-determinant; with
        ``network.noise_side=shift`` that Jacobian is the identity and the score is exact).
        Returns ``(components [N], scores [N, K])``.
        """
        spec = spec.invertible()
        z1 = self.encode(x1, DATA).to(spec.torch_dtype)
        scores = torch.empty(len(x1), self.components, dtype=torch.float64)
        log_w = self.mixture_weights.double().clamp_min(1e-300).log()
        tau = spec.temperature
        for k in range(self.components):
            b = self.one_step_operator(spec.replace(component=k), form="dense")
            w = torch.linalg.solve(b, z1.T).T
            x0 = self.decode(w.to(x1.dtype), NOISE).reshape(len(x1), -1).double()
            logdet = torch.linalg.slogdet(b.double())[1]
            gauss = -0.5 * (x0 / tau).square().sum(1) - x0.shape[1] * math.log(tau)
            scores[:, k] = log_w[k] + gauss.cpu() - float(logdet)
        return scores.argmax(1), scores


def _upgrade_state(module: MixtureFlow, state: dict, prefix: str, *args: Any) -> None:
    """Older class-conditional files name the weights ``class_prior``; a one-component model's
    state lacks every mixture key and starts all components at its operator."""
    old = prefix + "class_prior"
    if old in state:
        state[prefix + "mixture_weights"] = state.pop(old)
    missing = [prefix + key for key in _MIXTURE_KEYS if prefix + key not in state]
    if len(missing) == len(_MIXTURE_KEYS):
        own = module.state_dict()
        for key in _MIXTURE_KEYS:
            state[prefix + key] = own[key].clone()
