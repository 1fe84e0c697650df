"""Options shared by the commands that use a trained flow run (sample, invert, interpolate)."""

from __future__ import annotations

import argparse
import copy
import dataclasses
import sys

import torch

from ..errors import LinearizerError
from .configargs import add_config_options

# --guidance of the commands that take a model's recommended guidance (default_guidance)
GUIDANCE_HELP = (
    "classifier-free guidance w of a class-conditional model: the velocity (1 + w) v(z, t, c) - "
    "w v(z, t, null), still linear in z (default: None: the model's recommended guidance when "
    "--class is given and the model records one, as pretrained:mnist-cond does and linearizer "
    "evaluate does for a run; else the run's, 0.0 unless it records another; --guidance 0 is "
    "the plain conditional)"
)


def add_spec_options(p: argparse.ArgumentParser, recommended: bool = False) -> None:
    """One option per :class:`~linearizer.flow.spec.SamplerSpec` field, from its own help and
    choices; an option left out takes the run's sampler (``sampler`` in its config.json:
    ``SamplerSpec()``'s defaults unless the run records others). ``recommended``: the command
    applies :func:`default_guidance`, and ``--guidance`` says so."""
    from ..flow.spec import SamplerSpec

    add_config_options(
        p, SamplerSpec, flags={"component": ("--class", "--component")}, default_from="the run's"
    )
    if recommended:
        for action in p._actions:
            if action.dest == "guidance":
                action.help = GUIDANCE_HELP


def default_guidance(args: argparse.Namespace, run, classes_given: bool = False) -> float | None:
    """The guidance a command takes when ``--guidance`` is left out: the model's recommended
    one (``run.recommended_guidance``, from the run folder's guidance.json) when ``--class`` is
    given (or the command always names classes: ``classes_given``); None otherwise, and the
    run's sampler stands. An explicit ``--guidance``, 0 included, always wins.

    >>> from types import SimpleNamespace as NS
    >>> run = NS(recommended_guidance=0.75)
    >>> default_guidance(argparse.Namespace(component=3), run)
    0.75
    >>> default_guidance(argparse.Namespace(component=3, guidance=0.0), run) is None
    True
    >>> default_guidance(argparse.Namespace(), run) is None
    True
    """
    if "guidance" in args:
        return None
    if not classes_given and getattr(args, "component", None) is None:
        return None
    return getattr(run, "recommended_guidance", None)


def guidance_note(w: float | None) -> str:
    """What a command's printed line adds when it took the model's recommended guidance."""
    if w is None:
        return ""
    return f"; guidance {w:g}: the model's recommended (--guidance 0 for none)"


def spec_from_args(args: argparse.Namespace, base):
    """The run's spec ``base`` with the spec options the user gave."""
    given = {
        f.name: getattr(args, f.name)
        for f in dataclasses.fields(base)
        if getattr(args, f.name, None) is not None
    }
    return base.replace(**given)


def add_sampler_options(p: argparse.ArgumentParser, recommended: bool = False) -> None:
    p.add_argument("run", help="a flow run folder (trained, or converted from the authors')")
    add_spec_options(p, recommended)
    p.add_argument(
        "--form",
        default="auto",
        choices=["auto", "dense", "factored"],
        help="one-step matrix B: dense D x D, factored c I + U V^T, or auto (factored when "
        "D >= 4096 and U, V are at most half of D x D)",
    )
    p.add_argument("--no-ema", action="store_true", help="use the raw weights, not the EMA")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--dry-run", action="store_true", help="check the inputs and exit")


def note_uncalibrated(run, spec) -> None:
    """One line on stderr when the spec asks for post-hoc maps and the run holds them, but not
    for the weights loaded (training fits the EMA ones only)."""
    from ..flow.calibration import calibration_info
    from ..training.weights import weights_label

    if spec.maps == "none" or run.model.calibration is not None:
        return
    info = calibration_info(run.path)
    if info and info.get("step") == run.step and run.weights not in info.get("sections", []):
        raise LinearizerError(
            f"--maps {spec.maps}: the run's latent maps were fitted for its "
            f"{' and '.join(weights_label(s) for s in info['sections'])} weights, not the "
            f"{weights_label(run.weights)} ones (linearizer calibrate RUN fits both)"
        )


def warn_temperature(model, spec) -> None:
    """One line on stderr when the latent maps were fitted on noise of another temperature
    than the one sampled: they then map other latents than they were fitted to."""
    cal = model.calibration
    if spec.maps == "none" or cal is None:
        return
    fitted = cal.sampler.temperature
    if abs(fitted - spec.temperature) > 1e-9:
        print(
            f"note: the latent maps were fitted at temperature {fitted:g}; sampling at "
            f"{spec.temperature:g} (linearizer calibrate RUN --temperature "
            f"{spec.temperature:g} refits them)",
            file=sys.stderr,
        )


def load_spec_run(args: argparse.Namespace, expect: str = "flow"):
    """``(run, spec)``: the run of ``args.run`` (EMA weights unless ``--no-ema``) and the spec
    its options ask for, checked against the maps the model holds."""
    from ..training.runs import load_run

    run = load_run(args.run, use_ema=not getattr(args, "no_ema", False), expect=expect)
    spec = spec_from_args(args, run.config.sampler)
    note_uncalibrated(run, spec)
    run.model.maps(spec)
    warn_temperature(run.model, spec)
    return run, spec


def invertible_spec(spec):
    """The spec a command that inverts B uses: ``spec`` with the last interval skipped (B is
    then invertible); the transport's inverse is not part of these commands' B."""
    if spec.maps == "transport":
        raise LinearizerError(
            "this command inverts K B; it does not apply the transport's "
            "inverse: use --maps none or --maps calibration"
        )
    return spec.invertible()


def load_model(args: argparse.Namespace):
    """``(model, cfg, step, spec)`` for a command over a flow run; with ``spec.dtype``
    float64 the networks run in float64 too, so nothing rounds to float32."""
    run, spec = load_spec_run(args)
    return _in_dtype(run.model, spec), run.config, run.step, spec


def load_run_model(args: argparse.Namespace, classes_given: bool = False):
    """``(run, model, spec, w)`` for a command that takes the model's recommended guidance:
    :func:`load_model`'s, with ``w`` the :func:`default_guidance` the spec took (None: none)."""
    run, spec = load_spec_run(args)
    w = default_guidance(args, run, classes_given)
    if w is not None:
        spec = spec.replace(guidance=w)
    return run, _in_dtype(run.model, spec), spec, w


def _in_dtype(model, spec):
    return copy.deepcopy(model).double() if spec.torch_dtype == torch.float64 else model


def test_images(cfg, indices: list[int]) -> torch.Tensor:
    from ..flow.task import load_images

    images, _ = load_images(cfg, "test")
    bad = [i for i in indices if not 0 <= i < len(images)]
    if bad:
        raise LinearizerError(f"test indices out of range 0..{len(images) - 1}: {bad}")
    return images[indices]


def parse_indices(text: str) -> list[int]:
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise LinearizerError(f"indices must be comma-separated integers, got {text!r}") from None
