"""``linearizer project RUN``: use a trained projective model (or the IGN baseline) as a
projector; ``linearizer project-report``: measure ours against IGN (results.json, REPORT.md).

``project`` feeds one input family through ``f`` and ``f`` again and saves strips (rows:
[clean,] input, f(input), f(f(input))) plus the tensors; for our model it also prints the rank
k and saves the induced SVD directions ``g^-1(q_i)`` of the projector (a grid and tensors).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from ..errors import LinearizerError
from .common import check_min, read_image_batch

INPUTS = ("noise", "test", "corrupted", "fashion")


def _inputs(args: argparse.Namespace, cfg) -> tuple[dict[str, torch.Tensor], torch.Tensor | None]:
    """``{name: inputs}`` and the clean digits they came from (for corrupted inputs)."""
    from ..projective.corrupt import CORRUPTIONS, corrupt
    from ..projective.evaluate import ood_images, source_noise
    from ..projective.task import load_images

    n = args.n
    if args.input == "noise":
        return {"noise": source_noise(cfg, n, args.seed)}, None
    if args.input == "fashion":
        return {"fashion": ood_images(cfg, n, args.seed)}, None
    if args.input in ("test", "corrupted"):
        test = load_images(cfg, "test")[0][:n]
        if args.input == "test":
            return {"test": test}, None
        return {f"corrupt_{c}": corrupt(test, c, args.seed) for c in CORRUPTIONS}, test
    path, size = Path(args.input), cfg.network.img_size
    shape = (cfg.data.channels, size, size)
    return {path.stem: read_image_batch(path, shape, "input file")[:n]}, None


def _save_svd(model, out: Path) -> None:
    from ..data import save_grid
    from ..io import save_tensors

    svd = model.generator().svd()
    v = svd.V_x.detach().float()
    flat = v.flatten(1)
    lo, hi = flat.min(1).values, flat.max(1).values
    shown = (flat - lo[:, None]) / (hi - lo).clamp_min(1e-12)[:, None]
    save_grid(shown.view_as(v), out / "svd_directions.png", nrow=8, scale=2)
    save_tensors(
        out / "svd.safetensors",
        {"S": svd.S, "V_x": svd.V_x, "U_y": svd.U_y, "V_lat": svd.V_lat, "U_lat": svd.U_lat},
    )
    values = f"{float(svd.S.min()):.6g}..{float(svd.S.max()):.6g}"
    where = out / "svd_directions.png"
    print(f"induced SVD: {len(svd.S)} directions g^-1(q_i), singular values {values} -> {where}")


def run_project(args: argparse.Namespace) -> int:
    from ..data import save_grid
    from ..io import save_tensors, write_json
    from ..projective.evaluate import apply, relative_errors
    from ..projective.task import run_config
    from ..training.runs import load_run

    check_min("--n", args.n, 1)
    if args.input not in INPUTS and not Path(args.input).exists():
        raise LinearizerError(
            f"--input {args.input}: no such file, and not one of {', '.join(INPUTS)}"
        )
    cfg = run_config(args.run)
    out = Path(args.out)
    if args.dry_run:
        size = cfg.network.img_size
        print(f"run {args.run}: model {cfg.model}, dataset {cfg.data.dataset}, {size}px")
        print(f"input {args.input}, n = {args.n}, output folder {out}")
        return 0
    run = load_run(args.run, expect="projective")
    model, cfg, step = run.model, run.config, run.step
    inputs, clean = _inputs(args, cfg)
    summary = {"run": str(args.run), "step": step, "model": cfg.model, "input": args.input}
    if hasattr(model, "rank"):
        print(f"rank k = {model.rank} of D = {model.dim}")
        summary["rank"] = model.rank
        _save_svd(model, out)
    for name, x in inputs.items():
        fx = apply(model, x)
        ffx = apply(model, fx)
        err = relative_errors(fx, ffx)
        rows = [x[:8], fx[:8], ffx[:8]]
        if clean is not None:
            rows.insert(0, clean[:8])
        if name == "noise":
            rows[0] = rows[0] / (3 * rows[0].std()) + 0.5
        save_grid(
            torch.cat(rows).clamp(0, 1), out / f"strip_{name}.png", nrow=len(rows[0]), scale=2
        )
        save_tensors(out / f"{name}.safetensors", {"input": x, "f": fx, "ff": ffx})
        summary[f"idempotence.{name}"] = float(err.max())
        print(
            f"{name}: {len(x)} inputs, max |f(f(x)) - f(x)| / |f(x)| = {float(err.max()):.2e}"
            f" -> {out / f'strip_{name}.png'}"
        )
    write_json(out / "project.json", summary)
    return 0


def run_report(args: argparse.Namespace) -> int:
    from ..projective.evaluate import project_report

    runs = {k: v for k, v in (("ours", args.ours), ("ign", args.ign)) if v}
    check_min("--n", args.n, 2)
    if not runs:
        raise LinearizerError("give --ours RUN and/or --ign RUN")
    if args.dry_run:
        print(f"would evaluate {runs} on n = {args.n} inputs per family into {args.out}")
        return 0
    res = project_report(runs, args.out, n=args.n, seed=args.seed)
    print(Path(args.out) / "REPORT.md")
    for key in sorted(k for k in res if k.startswith(("idempotence.", "fid_lenet.", "psnr.rec"))):
        print(f"{key}: {res[key]}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("project", help="project inputs with a trained projective model")
    p.add_argument("run", help="run folder of `linearizer train projective`")
    choices = " | ".join(INPUTS)
    p.add_argument(
        "--input", default="noise", help=f"{choices} | FILE.npy (images [N, H, W] or [N, 1, H, W])"
    )
    p.add_argument("--out", required=True, help="output folder (strips, tensors, SVD)")
    p.add_argument("--n", type=int, default=16, help="number of inputs")
    p.add_argument("--seed", type=int, default=0, help="seed of noise and corruptions")
    p.add_argument("--dry-run", action="store_true", help="check the arguments and exit")
    p.set_defaults(func=run_project)

    r = sub.add_parser("project-report", help="measure ours against IGN: results.json, REPORT.md")
    r.add_argument("--ours", default=None, help="run folder of our model")
    r.add_argument("--ign", default=None, help="run folder of the IGN baseline")
    r.add_argument("--out", required=True, help="output folder")
    r.add_argument("--n", type=int, default=2000, help="inputs per family")
    r.add_argument("--seed", type=int, default=0, help="seed of noise and corruptions")
    r.add_argument("--dry-run", action="store_true", help="check the arguments and exit")
    r.set_defaults(func=run_report)
