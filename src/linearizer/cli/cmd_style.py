"""``linearizer style targets|apply|mix|strength|interpolate|evaluate``: modular style transfer.

Examples::

    linearizer style targets --content skimage:chelsea --out runs/style-targets
    linearizer train style --content skimage:chelsea --styles runs/style-targets --out runs/bank
    linearizer style apply runs/bank --style stain --out stain.png
    linearizer style mix runs/bank --weights stain=0.5,retina=0.5 --out mix.png
    linearizer style interpolate runs/bank --from stain --to gravel --n 9 --out strip.png
    linearizer style evaluate runs/bank --index-run runs/bank-index --out docs/style
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from ..errors import LinearizerError
from .common import check_min, set_threads


def _load_style(spec: str):
    from ..training.runs import load_run

    run = load_run(spec, expect="style")
    return run.model, run.config


def _load_bank(run: str):
    from ..style.bank import StyleBank

    model, cfg = _load_style(run)
    if not isinstance(model, StyleBank):
        raise LinearizerError(
            f"{run} is an index model (bank=index); apply/mix/strength need an operator bank "
            "(interpolate works on both)"
        )
    return model, cfg


def _input(args: argparse.Namespace, cfg) -> torch.Tensor:
    from ..style.images import load_image

    spec = args.input or (cfg.content[0] if cfg.content else None)
    if spec is None:
        raise LinearizerError("no --input image and the run records no content image")
    size = args.size or cfg.network.img_size
    if size % 4:
        raise LinearizerError(f"--size must be a multiple of 4, got {size}")
    return load_image(spec, size).unsqueeze(0)


def _parse_weights(text: str) -> dict[str, float]:
    weights: dict[str, float] = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, sep, value = item.partition("=")
        try:
            if not sep or not name.strip():
                raise ValueError
            weights[name.strip()] = float(value)
        except ValueError:
            raise LinearizerError(
                f"--weights expects NAME=NUMBER pairs separated by commas, got {item!r}"
            ) from None
    if not weights:
        raise LinearizerError("--weights is empty; e.g. --weights stain=0.5,retina=0.5")
    return weights


def _parse_styles(items: list[str]) -> dict[str, str]:
    from ..style.targets import DEFAULT_STYLES

    if not items:
        return dict(DEFAULT_STYLES)
    styles: dict[str, str] = {}
    for item in items:
        name, sep, spec = item.partition("=")
        if not sep or not name or not spec:
            raise LinearizerError(
                f"--style-image expects NAME=IMAGE (file or skimage:NAME), got {item!r}"
            )
        styles[name] = spec
    return styles


def _dry(args: argparse.Namespace, what: str) -> bool:
    """With ``--dry-run``: say what would be written (the inputs are checked) and stop."""
    if args.dry_run:
        print(f"would write {what} -> {args.out}")
    return bool(args.dry_run)


def _save(image: torch.Tensor, out: str) -> None:
    from ..style.images import save_image

    save_image(image.clamp(0, 1), out)
    print(f"wrote {out}")


def cmd_targets(args: argparse.Namespace) -> int:
    from ..style.images import has_skimage
    from ..style.targets import DEFAULT_CONTENT, GatysSettings, make_targets

    contents = args.content or [DEFAULT_CONTENT]
    styles = _parse_styles(args.style_image)
    specs = [*contents, *styles.values()]
    if any(s.startswith("skimage:") for s in specs) and not has_skimage():
        from ..style.images import SKIMAGE_MISSING

        raise LinearizerError(SKIMAGE_MISSING)
    set_threads(args)
    fields = ("steps", "lr", "content_weight", "tv_weight", "style_size")
    settings = GatysSettings(**{f: getattr(args, f) for f in fields})
    if args.dry_run:
        print(f"targets for {contents} x {list(styles)} -> {args.out} ({settings})")
        return 0
    manifest = make_targets(
        contents,
        styles,
        args.out,
        size=args.size,
        settings=settings,
        features=args.features,
        seed=args.seed,
        log=print,
    )
    print(
        f"wrote {len(contents) * len(styles)} targets to {args.out} in {manifest['seconds']:.0f} s"
    )
    return 0


def cmd_apply(args: argparse.Namespace) -> int:
    bank, cfg = _load_bank(args.run)
    x = _input(args, cfg)
    if _dry(args, f"the input in style {args.style!r} at strength {args.strength:g}"):
        return 0
    with torch.no_grad():
        y = bank.strength(x, args.style, args.strength)
    _save(y[0], args.out)
    return 0


def cmd_mix(args: argparse.Namespace) -> int:
    bank, cfg = _load_bank(args.run)
    weights = _parse_weights(args.weights)
    x = _input(args, cfg)
    vec = bank.weight_vector(weights)
    if _dry(args, f"the input mixed {weights}"):
        return 0
    with torch.no_grad():
        y = bank.apply_weights(x, vec, args.identity)
    _save(y[0], args.out)
    return 0


def cmd_strength(args: argparse.Namespace) -> int:
    from ..data import save_strip

    bank, cfg = _load_bank(args.run)
    check_min("--n", args.n, 2)
    x = _input(args, cfg)
    if _dry(args, f"a strip of {args.style!r} at {args.n} strengths 0 ... {args.max:g}"):
        return 0
    alphas = torch.linspace(0.0, args.max, args.n)
    with torch.no_grad():
        y = bank.strength(x.expand(args.n, -1, -1, -1), args.style, alphas)
    save_strip(y.clamp(0, 1), args.out)
    print(f"wrote {args.out} (strength 0 ... {args.max:g}, {args.n} frames)")
    return 0


def cmd_interpolate(args: argparse.Namespace) -> int:
    from ..data import save_grid

    check_min("--n", args.n, 2)
    model, cfg = _load_style(args.run)
    x = _input(args, cfg)
    if _dry(args, f"a strip {args.start} -> {args.end} of {args.n} frames"):
        return 0
    with torch.no_grad():
        frames, _ = model.interpolate(x, args.start, args.end, args.n)
        rows = [frames]
        if args.compare:
            other, _ = _load_style(args.compare)
            if other.styles != model.styles:
                raise LinearizerError(
                    f"--compare run has styles {other.styles}, this run {model.styles}"
                )
            rows.append(other.interpolate(x, args.start, args.end, args.n)[0])
    save_grid(torch.cat(rows).clamp(0, 1), args.out, nrow=args.n)
    print(
        f"wrote {args.out} ({args.start} -> {args.end}, {args.n} frames"
        f"{', second row: ' + args.compare if args.compare else ''})"
    )
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from ..style.evaluate import evaluate_bank, run_seconds
    from ..style.index_net import IndexStyleNet
    from ..style.task import load_style_data

    set_threads(args)
    bank, cfg = _load_bank(args.run)
    index = None
    wall = {"train_bank": run_seconds(args.run)}
    if args.index_run:
        index, icfg = _load_style(args.index_run)
        if not isinstance(index, IndexStyleNet):
            raise LinearizerError(
                f"--index-run {args.index_run} is not an index model (bank=index)"
            )
        if index.styles != bank.styles:
            raise LinearizerError(f"--index-run has styles {index.styles}, the bank {bank.styles}")
        wall["train_index"] = run_seconds(args.index_run)
    for item in args.wall_time:
        name, _, value = item.partition("=")
        try:
            wall[name] = float(value)  # no "=": value is "", which float refuses
        except ValueError:
            raise LinearizerError(f"--wall-time expects NAME=SECONDS, got {item!r}") from None
    out = Path(args.out or Path(args.run) / "eval")
    if args.dry_run:
        print(f"would evaluate {args.run} (index run: {args.index_run}) -> {out}")
        return 0
    data = load_style_data(cfg)
    started = time.perf_counter()
    results = evaluate_bank(
        bank,
        data,
        out,
        index=index,
        frames=args.frames,
        wall_time=wall,
        image_format=args.image_format,
        single_strips=args.single_strips,
        extra={
            "runs": {"bank": str(args.run), "index": args.index_run},
            "train_threads": cfg.threads,
        },
    )
    mix = results["mix"]
    print(
        f"mixing rel. error, float32: {mix['rel_err']:.2e} (convex, {mix['cases']} cases), "
        f"{mix['rel_err_general']:.2e} (all {mix['general_cases']}); "
        f"float64: {results['mix_float64']['rel_err_general']:.2e} (all)"
    )
    interp = results["index_interpolation"]
    for who in ("ours", "index"):
        if who in interp:
            m = interp[who]
            print(
                f"{who:>5}: path_dev_g {m['path_dev_g']:.3g}  path_ratio {m['path_ratio']:.3f}  "
                f"step_unevenness {m['step_unevenness']:.2f}  curvature {m['curvature']:.3f}"
            )
    for name, v in results["fidelity"]["bank"].items():
        print(f"{name}: PSNR {v['psnr']:.2f} dB, SSIM {v['ssim']:.3f}")
    print(f"wrote {out / 'results.json'} in {time.perf_counter() - started:.0f} s")
    return 0


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="a style run folder (linearizer train style --out RUN)")
    p.add_argument(
        "--input",
        default=None,
        metavar="IMG",
        help="image to stylise: file or skimage:NAME (default: the run's content)",
    )
    p.add_argument(
        "--size",
        type=int,
        default=0,
        help="resize the input to SIZE x SIZE (default: the run's img_size)",
    )
    p.add_argument("--out", required=True, metavar="PNG", help="output image")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="check the inputs, say what would be written, and exit",
    )


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "style",
        help="style banks: targets, apply, mix, strength, interpolate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    # the actions' help shows no defaults: plain parsers, not the commands' CommandParser
    cmds = p.add_subparsers(
        dest="style_command", metavar="ACTION", required=True, parser_class=argparse.ArgumentParser
    )

    t = cmds.add_parser("targets", help="make stylised targets offline (Gatys, random features)")
    t.add_argument(
        "--content",
        action="append",
        default=[],
        metavar="IMG",
        help="content image: file or skimage:NAME (repeatable; default skimage:chelsea)",
    )
    t.add_argument(
        "--style-image",
        action="append",
        default=[],
        metavar="NAME=IMG",
        help="a style image (repeatable; default: stain, logo, retina, gravel from "
        "scikit-image's bundled photos)",
    )
    t.add_argument("--out", required=True, metavar="DIR", help="targets folder")
    t.add_argument("--size", type=int, default=128, help="content size (pixels)")
    t.add_argument("--style-size", type=int, default=0, help="style image size (0: --size)")
    t.add_argument("--steps", type=int, default=150, help="optimisation steps")
    t.add_argument("--lr", type=float, default=0.01, help="Adam step size on the pixels")
    t.add_argument("--content-weight", type=float, default=0.2, help="content loss weight")
    t.add_argument("--tv-weight", type=float, default=2.0, help="smoothness penalty weight")
    t.add_argument(
        "--features",
        default="random",
        help="random, or vgg19:PATH for VGG-19 weights you have (.safetensors or "
        "torchvision's .pth, read without unpickling)",
    )
    t.add_argument("--seed", type=int, default=0, help="seed of the random features")
    t.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: default)")
    t.add_argument("--dry-run", action="store_true", help="print what would be made and exit")
    t.set_defaults(func=cmd_targets)

    a = cmds.add_parser("apply", help="stylise an image with one style (optionally a strength)")
    _common(a)
    a.add_argument("--style", required=True, help="style name")
    a.add_argument(
        "--strength",
        type=float,
        default=1.0,
        help="alpha in alpha A_s + (1 - alpha) I (0: the input, 1: the style)",
    )
    a.set_defaults(func=cmd_apply)

    m = cmds.add_parser("mix", help="stylise with an exact mixture of styles")
    _common(m)
    m.add_argument(
        "--weights",
        required=True,
        metavar="A=W,B=W",
        help="weights per style, e.g. stain=0.5,retina=0.5 (any reals)",
    )
    m.add_argument(
        "--identity",
        type=float,
        default=0.0,
        help="weight of the identity operator (keeps some of the input)",
    )
    m.set_defaults(func=cmd_mix)

    s = cmds.add_parser("strength", help="a strip of one style at strengths 0 ... MAX")
    _common(s)
    s.add_argument("--style", required=True, help="style name")
    s.add_argument("--n", type=int, default=7, help="frames")
    s.add_argument("--max", type=float, default=1.5, help="largest strength")
    s.set_defaults(func=cmd_strength)

    i = cmds.add_parser("interpolate", help="a strip from one style to another")
    _common(i)
    i.add_argument("--from", dest="start", required=True, help="first style")
    i.add_argument("--to", dest="end", required=True, help="last style")
    i.add_argument("--n", type=int, default=9, help="frames")
    i.add_argument(
        "--compare",
        default=None,
        metavar="RUN",
        help="a second run (e.g. the index model) drawn as a second row",
    )
    i.set_defaults(func=cmd_interpolate)

    e = cmds.add_parser("evaluate", help="measure a bank (results.json) and draw its pictures")
    e.add_argument("run", help="an operator-bank run folder")
    e.add_argument(
        "--index-run",
        default=None,
        metavar="RUN",
        help="an index-model run on the same data, for the comparison",
    )
    e.add_argument("--out", default=None, metavar="DIR", help="output folder (default RUN/eval)")
    e.add_argument("--frames", type=int, default=9, help="frames per interpolation strip")
    e.add_argument(
        "--wall-time",
        action="append",
        default=[],
        metavar="NAME=SECONDS",
        help="extra wall times to record (e.g. targets=95)",
    )
    e.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: default)")
    e.add_argument(
        "--dry-run", action="store_true", help="check the runs, say what would be written, and exit"
    )
    e.add_argument(
        "--image-format",
        choices=["png", "jpg"],
        default="png",
        help="pictures as PNG, or JPEG (much smaller for noisy textures; for committed docs)",
    )
    e.add_argument(
        "--single-strips",
        action="store_true",
        help="also write each model's strips separately (strip_A_B*.png)",
    )
    e.set_defaults(func=cmd_evaluate)
