"""Where a run's float32 homogeneity error arises: the linearity claim's pairs, with groups of
its stages computed in float64 instead.

    python benchmarks/linearity_stages.py RUN [--out FILE.json] [--dry-run]

The claim compares ``f(a (.) u) = g_data^-1(B g_noise(g_noise^-1(a g_noise(u))))`` with
``a (.) f(u) = g_data^-1(a g_data(g_data^-1(B g_noise(u))))`` per pair (``linearizer repro``'s
pairs, scalars and components; B the float64 one cast to each precision). Each row runs the
named stages with the float64 copy of the model and the rest in float32, and reports the largest
relative error over the pairs with ``a < 0`` and with ``a > 0``. A group whose float64 run
removes most of the error is where the float32 error arises.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from linearizer.errors import LinearizerError
from linearizer.flow.model import DATA, NOISE
from linearizer.repro.claims import _linearity_pairs
from linearizer.repro.context import Context
from linearizer.repro.numbers import F64, rel_errs
from linearizer.repro.options import ReproOptions
from linearizer.training.runs import load_run

NOISE_SIDE = ("noise encode", "noise decode", "noise encode again")
DATA_SIDE = ("data decode", "data decode of f(u)", "data encode", "data decode again")
GROUPS = {
    "all float32": (),
    "noise side float64": NOISE_SIDE,
    "B float64": ("B", "B again"),
    "data side float64": DATA_SIDE,
    "data side's decodes float64": DATA_SIDE[:2] + DATA_SIDE[3:],
    "data side's encode float64": ("data encode",),
    "all but the data side float64": (*NOISE_SIDE, "B", "B again"),
    "all but the noise side float64": (*DATA_SIDE, "B", "B again"),
    "all float64": (*NOISE_SIDE, *DATA_SIDE, "B", "B again"),
}


def homogeneity(ctx: Context, b64: torch.Tensor, u, a, exact: tuple[str, ...]) -> torch.Tensor:
    """Per-pair relative error of ``f(a (.) u)`` against ``a (.) f(u)``, ``exact`` in float64."""

    def model(stage):
        return ctx.model64 if stage in exact else ctx.model

    def enc(stage, x, flag):
        m = model(stage)
        return m.encode(x.to(next(m.parameters()).dtype), flag)

    def dec(stage, z, flag):
        m = model(stage)
        return m.decode(z.to(next(m.parameters()).dtype).reshape(len(z), *ctx.image_shape), flag)

    def times_b(stage, z):
        dtype = F64 if stage in exact else torch.float32
        return z.to(dtype) @ b64.to(dtype).T

    def scale(z):  # a z in z's precision, a rounded to it as the claim does
        return a.to(z.dtype)[:, None] * z

    w = enc("noise encode", u, NOISE)
    left = dec(
        "data decode",
        times_b("B", enc("noise encode again", dec("noise decode", scale(w), NOISE), NOISE)),
        DATA,
    )
    fu = dec("data decode of f(u)", times_b("B again", w), DATA)
    right = dec("data decode again", scale(enc("data encode", fu, DATA)), DATA)
    return rel_errs(left, right)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", help="a flow run folder (the main job's: runs/repro-cpu/run)")
    p.add_argument("--out", type=Path, default=None, help="write the table as JSON here")
    p.add_argument("--dry-run", action="store_true", help="print the groups and stop")
    args = p.parse_args()
    if args.dry_run:
        for name, stages in GROUPS.items():
            print(f"would measure {name}: {', '.join(stages) or 'no stage in float64'}")
        return 0
    try:
        loaded = load_run(args.run, expect="flow")
    except LinearizerError as e:
        raise SystemExit(f"linearity_stages: {e}") from None
    opts = ReproOptions().resolved()
    ctx = Context(
        loaded.model,
        loaded.config,
        loaded.step,
        Path(args.run),
        opts,
        (torch.empty(0), torch.empty(0, dtype=torch.long)),  # the pairs need no test images
    )
    x1, _, a = _linearity_pairs(ctx, F64)
    rows = []
    with torch.no_grad():
        for name, stages in GROUPS.items():
            errs = torch.zeros(opts.n, dtype=F64)
            for k, part in ctx.parts(opts.n):
                b64 = ctx.B(opts.steps, "euler", "float64", k)
                errs[part] = homogeneity(ctx, b64, x1[part], a[part], stages)
            row = {
                "float64": name,
                "stages": list(stages),
                "a_neg": float(errs[a < 0].max()),
                "a_pos": float(errs[a > 0].max()),
            }
            rows.append(row)
            print(f"{name:<32} a < 0 {row['a_neg']:.2e}   a > 0 {row['a_pos']:.2e}")
    report = {
        "run": str(args.run),
        "step": loaded.step,
        "pairs": opts.n,
        "torch": torch.__version__,
        "rows": rows,
    }
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
