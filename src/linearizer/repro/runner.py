"""``run_repro``: train (or load) a one-step flow model, measure every claim, write the outputs.

Outputs in ``out``: ``figures/*.png``, ``REPORT.md`` and, last, ``results.json`` (all written
atomically). Figures are rendered into a staging folder and moved into place only once every
claim is measured, so an interrupted or failed run leaves the previous outputs untouched and
never a mix of old results and new figures.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import torch

from ..errors import LinearizerError
from ..io import read_json, write_json, write_text
from ..training.checkpoint import latest_checkpoint
from ..training.config import preset_names
from . import figures as figs
from .claims import CLAIMS, claim_generation
from .context import Context
from .options import ReproOptions
from .report import claims_report, environment, terminal_table
from .svd import induced_svd, render_svd

Log = Callable[[str], None]


def locate(target: str, out: Path) -> tuple[Path, str | None]:
    """``(run folder, preset or None)``: an existing folder is a run; a preset name trains into
    ``out/run``. Anything else is one clear error."""
    from ..training.runs import run_folder

    path = run_folder(target)  # pretrained:NAME resolves to its materialised run folder
    if path.exists():
        check_flow_run(path)
        return path, None
    presets = preset_names("flow")
    if target in presets:
        return out / "run", target
    raise LinearizerError(
        f"{target!r} is neither a run folder nor a flow preset ({', '.join(presets)})"
    )


def check_flow_run(run: Path) -> None:
    """Raise a one-line error unless ``run`` is a flow run folder with a usable checkpoint."""
    from ..flow.task import run_config

    if not run.is_dir():
        raise LinearizerError(f"{run} is not a run folder")
    if not (run / "config.json").is_file():
        raise LinearizerError(f"{run} is not a flow run folder (no config.json)")
    run_config(run)  # refuses other kinds and configs that are not flow configs
    if latest_checkpoint(run) is None:
        raise LinearizerError(f"{run} holds no usable checkpoint (train it first)")


def train_preset(preset: str, run: Path, log: Log) -> float:
    """Train ``preset`` into ``run`` (resuming an unfinished one); returns the seconds spent."""
    from ..flow.config import FlowConfig
    from ..flow.task import FlowTask
    from ..training.config import resolve
    from ..training.resume import resume_config
    from ..training.trainer import train

    start = time.perf_counter()
    status = read_json(run / "run.json") if (run / "run.json").is_file() else {}
    if latest_checkpoint(run) is not None:
        if status.get("status") in ("finished", "stopped"):
            log(
                f"[repro] {run} is already trained ({status.get('status')} at step "
                f"{status.get('step')}); evaluating it"
            )
            return 0.0
        log(f"[repro] resuming the unfinished run {run}")
        train(FlowTask(), resume_config(run, FlowConfig), run, resume=True)
    else:
        log(f"[repro] training preset {preset!r} into {run}")
        train(FlowTask(), resolve("flow", preset), run)
    return time.perf_counter() - start


# The claims and figures of the cpu preset's main job (docs/repro/, 10,000 samples per FID set,
# every one of the twenty mixture components measured) took 472 s on the machine that trained
# it at 3.08 steps/s, and the linearity claim's conditioning record 164 s more; elsewhere they
# are scaled by the step rate.
CLAIMS_S, CLAIMS_RATE = {"cpu": 636.0}, 3.08


def expected_time(preset: str) -> str:
    """How long training ``preset`` from scratch takes here, from a few of its steps timed now."""
    from ..flow.task import FlowTask
    from ..training.config import apply_overrides, resolve
    from ..training.steprate import measure_step_rate

    cfg = resolve("flow", preset)
    rate = measure_step_rate(
        FlowTask(), apply_overrides(cfg, ["calibration_samples=0", "transport_steps=0"])
    )
    steps_s, cap_s = cfg.max_steps / rate, cfg.step_seconds()
    text = (
        f"[repro] this machine: {rate:.2f} steps/s (timed now): {cfg.max_steps:,} steps take "
        f"{steps_s / 60:.1f} min"
    )
    if cap_s and steps_s > cap_s:
        return (
            text + f", over the {cap_s / 60:g}-minute cap of max_minutes: training will stop "
            f"near step {int(rate * cap_s):,} of {cfg.max_steps:,}, a weaker model than the "
            "preset's (use a faster or idle machine, or raise max_minutes)"
        )
    total = steps_s + cfg.finish_minutes * 60
    if cfg.finish_minutes:
        text += f", then up to {cfg.finish_minutes:g} min for the fit after them"
    if preset in CLAIMS_S:
        claims_s = CLAIMS_S[preset] * CLAIMS_RATE / rate
        total += claims_s
        text += f", then about {claims_s / 60:.1f} min of claims: about {total / 60:.0f} min"
    return text


def _timed(timings: dict[str, float], name: str, log: Log, fn, *args):
    log(f"[repro] {name} ...")
    start = time.perf_counter()
    value = fn(*args)
    timings[name] = time.perf_counter() - start
    log(f"[repro] {name} done in {timings[name]:.1f} s")
    return value


def run_repro(
    target: str,
    out: str | Path,
    opts: ReproOptions | None = None,
    *,
    no_train: bool = False,
    dry_run: bool = False,
    device: str = "cpu",
    command: str = "",
    log: Log = print,
) -> dict | None:
    """Measure the paper's claims on ``target`` (a flow run folder or a preset name).

    Returns the results dict (None for ``dry_run``). ``no_train`` refuses to train: a preset
    then needs an existing ``out/run``.
    """
    out = Path(out)
    opts = (opts or ReproOptions()).resolved()
    run, preset = locate(target, out)
    if preset and no_train:
        check_flow_run(run)
    if dry_run:
        action = f"train preset {preset!r} into {run}, then " if preset else ""
        log(f"[repro] would {action}evaluate {run} into {out} with {opts.to_dict()}")
        if preset and latest_checkpoint(run) is None:
            log(expected_time(preset))
        return None
    start = time.perf_counter()
    train_s = train_preset(preset, run, log) if preset else 0.0
    check_flow_run(run)

    from ..flow.task import load_images
    from ..training.runs import load_run

    loaded = load_run(run, expect="flow")
    model, cfg, step = loaded.model, loaded.config, loaded.step
    ctx = Context(model, cfg, step, run, opts, load_images(cfg, "test"), device)
    timings: dict[str, float] = {}
    claims: dict[str, dict] = {}
    with torch.no_grad():
        for name, fn in CLAIMS.items():
            train_images = (load_images(cfg, "train")[0],) if fn is claim_generation else ()
            result = _timed(timings, name, log, fn, ctx, *train_images)
            claims[name] = {**result, "wall_s": timings[name]}
            log(f"[repro] {name}: {result['measured']} -> {result['verdict']}")
        staging = out / ".figures.partial"
        shutil.rmtree(staging, ignore_errors=True)
        try:
            staged = _timed(timings, "figures", log, _figures, ctx, staging)
            figures = _publish(staged, staging, out / "figures")
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    results = {
        "format": "linearizer.repro/1",
        "run": _run_name(target, run)[0],
        "step": step,
        "ema": _weights(run, loaded.weights) == "EMA",
        "config": cfg.to_dict(),
        "options": opts.to_dict(),
        # the samplers every claim is measured with: the authors' grid, the trained map alone
        "samplers": [ctx.spec(t).to_dict() for t in (opts.steps, opts.long_steps)],
        "environment": environment(),
        "claims": claims,
        "figures": {k: str(Path(v).relative_to(out)) for k, v in figures.items()},
        "timings": timings,
        "train_s": train_s,
        "run_seconds": read_json(run / "run.json").get("seconds")
        if (run / "run.json").is_file()
        else None,
        "commands": _commands(command, target, run, preset, out),
        "wall_s": time.perf_counter() - start,
    }
    write_text(out / "REPORT.md", claims_report(results))
    write_json(out / "results.json", results)  # last: its presence means the run completed
    log("")
    log(f"claims of {run} (step {step}); results in {out}/results.json, report {out}/REPORT.md")
    log(terminal_table(claims))
    log(f"total wall time {results['wall_s']:.0f} s")
    return results


def _publish(staged: dict[str, Path], staging: Path, folder: Path) -> dict[str, Path]:
    """Move the staged figure files into ``folder`` (each move atomic); their new paths."""
    folder.mkdir(parents=True, exist_ok=True)
    for path in staging.iterdir():
        os.replace(path, folder / path.name)
    return {k: folder / Path(v).name for k, v in staged.items()}


def _figures(ctx: Context, folder: Path) -> dict[str, Path]:
    paths = {
        "collapse": figs.collapse_figure(ctx, folder / "collapse.png"),
        "inversion": figs.inversion_figure(ctx, folder / "inversion.png"),
        "interpolation": figs.interpolation_figure(ctx, folder / "interpolation.png"),
        "samples": figs.samples_figure(ctx, folder / "samples.png"),
    }
    s, sl, k = ctx.opts.steps, ctx.opts.long_steps, ctx.first  # a mixture: its component 0
    extra = {
        f"euler T={sl}": torch.linalg.svdvals(ctx.B(sl, "euler", component=k)).cpu(),
        f"rk4 T={s}": torch.linalg.svdvals(ctx.B(s, "rk4", component=k)).cpu(),
        f"authors' rk T={s}": torch.linalg.svdvals(ctx.B(s, "rk4-authors", component=k)).cpu(),
    }
    result = induced_svd(
        ctx.model,
        ctx.spec(s, component=k),
        k=min(ctx.opts.svd_k, ctx.model.dim),
        seed=ctx.opts.seed,
    )
    svd = render_svd(result, folder, extra)
    paths["spectrum"], paths["svd_directions"] = svd["spectrum"], svd["directions"]
    curves = figs.training_figure(ctx.run_dir, folder / "training_curves.png")
    if curves is not None:
        paths["training_curves"] = curves
    return paths


def _weights(run: Path, section: str) -> str:
    """The name of the weights the load took ("EMA" or "raw", from its checkpoint
    ``section``); a shipped model's folder stores whichever it ships under "model", so there
    its description says which they are."""
    from ..training.weights import weights_label

    status = read_json(run / "run.json") if (run / "run.json").is_file() else {}
    if status.get("pretrained"):
        from ..pretrained import info

        return str(info(status["pretrained"]).get("weights", weights_label(section)))
    return weights_label(section)


def _commands(command: str, target: str, run: Path, preset: str | None, out: Path) -> list[str]:
    lines = []
    if preset:
        lines.append(f"linearizer repro {preset} --out {out}   # trains into {run}, then evaluates")
    else:
        name, made_in = _run_name(target, run)
        how = train_command(read_json(run / "config.json"), made_in)
        lines += [f"{how}   # how {name} was made", f"linearizer repro {name} --out {out}"]
    if command:
        lines.append(f"# this report: {command}")
    return lines


def _run_name(target: str, run: Path) -> tuple[str, Path]:
    """How the report names the run, and the folder its training command writes: a pretrained
    model by its name, not by the cache folder it unpacks to."""
    from ..pretrained import PRETRAINED

    if target.startswith(PRETRAINED):
        return target, Path("runs") / target[len(PRETRAINED) :]
    return str(run), run


def train_command(saved: dict, run: Path) -> str:
    """The ``train flow`` command that recreates a run's config: the closest preset plus
    ``--set`` for every key that differs from it."""
    from ..training.config import get_preset

    diffs = {}
    for name in preset_names("flow"):
        ref = get_preset("flow", name).to_dict()
        diffs[name] = [f"{k}={_cli_value(v)}" for k, v in saved.items() if ref.get(k) != v]
    name = min(diffs, key=lambda n: len(diffs[n]))
    sets = "".join(f" --set {d}" for d in diffs[name])
    return f"linearizer train flow --preset {name}{sets} --out {run}"


def _cli_value(value) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return ",".join(map(str, value))
    return str(value)
