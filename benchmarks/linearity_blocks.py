"""Which float32 module of the data side carries a run's float32 homogeneity error: the
linearity claim's pairs with one module of ``g_data`` at a time computed in float64.

    python benchmarks/linearity_blocks.py RUN [--out FILE.json]

A float32 network out of training mode already runs its fully connected tail in float64
(docs/flow/roundtrip.md §6), so the float32 modules of ``g_data`` are the logit and the blocks
before the tail. Each row runs every pass of the claim (``benchmarks/linearity_stages.py``
spells them out) with the named modules in float64 on data-flag batches and everything else as
the claim runs it, and reports the largest relative error over the pairs with ``a < 0`` and
with ``a > 0``, and the five worst ``a < 0`` pairs of the all-float32 row.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import torch
from linearity_stages import homogeneity
from torch import Tensor, nn

from linearizer.errors import LinearizerError
from linearizer.flow.model import DATA
from linearizer.io import write_json
from linearizer.repro.claims import _linearity_pairs
from linearizer.repro.context import Context
from linearizer.repro.numbers import F64
from linearizer.repro.options import ReproOptions
from linearizer.training.runs import load_run


class Wide(nn.Module):
    """``module`` computed by a float64 copy on batches at the data flag, as given otherwise."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module, self.wide = module, copy.deepcopy(module).double()

    @staticmethod
    def _data(flag: Tensor | None) -> bool:
        return flag is not None and bool((flag == DATA).all())

    def forward(self, x: Tensor, flag: Tensor | None = None) -> Tensor:
        if not self._data(flag):
            return self.module(x, flag)
        return self.wide(x.double(), flag.double()).to(x.dtype)

    def inverse(self, z: Tensor, flag: Tensor | None = None) -> Tensor:
        if not self._data(flag):
            return self.module.inverse(z, flag)
        return self.wide.inverse(z.double(), flag.double()).to(z.dtype)


def errors(ctx: Context, x1: Tensor, a: Tensor) -> Tensor:
    """The claim's per-pair float32 homogeneity errors (B float64, cast as the claim casts it)."""
    out = torch.zeros(ctx.opts.n, dtype=F64)
    for k, part in ctx.parts(ctx.opts.n):
        b64 = ctx.B(ctx.opts.steps, "euler", "float64", k)
        out[part] = homogeneity(ctx, b64, x1[part], a[part], ())
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", help="a flow run folder (the main job's: runs/repro-cpu/run)")
    p.add_argument("--out", type=Path, default=None, help="write the table as JSON here")
    args = p.parse_args()
    try:
        loaded = load_run(args.run, expect="flow")
    except LinearizerError as e:
        raise SystemExit(f"linearity_blocks: {e}") from None
    opts = ReproOptions().resolved()
    empty = (torch.empty(0), torch.empty(0, dtype=torch.long))  # the pairs need no test images
    ctx = Context(loaded.model, loaded.config, loaded.step, Path(args.run), opts, empty)
    net = ctx.model.network
    if net.logit is None:
        raise SystemExit("linearity_blocks: the network has no logit (not a cpu network)")
    x1, _, a = _linearity_pairs(ctx, F64)
    names = ["logit"] + [f"block {i}" for i in range(net.tail_start)]
    rows, worst = [], None
    with torch.no_grad():
        for wide in [[], *[[n] for n in names], names]:
            keep = (net.logit, list(net.blocks))
            if "logit" in wide:
                net.logit = Wide(net.logit)
            for i in range(net.tail_start):
                if f"block {i}" in wide:
                    net.blocks[i] = Wide(net.blocks[i])
            try:
                errs = errors(ctx, x1, a)
            finally:
                net.logit = keep[0]
                for i, block in enumerate(keep[1]):
                    net.blocks[i] = block
            if worst is None:
                worst = torch.where(a < 0, errs, -1.0).argsort(descending=True)[:5]
            row = {
                "name": ", ".join(wide) or "none",
                "float64": wide,
                "a_neg": float(errs[a < 0].max()),
                "a_pos": float(errs[a > 0].max()),
                "worst_a_neg_pairs": errs[worst].tolist(),
            }
            rows.append(row)
            print(f"{row['name']:<28} a < 0 {row['a_neg']:.2e}   a > 0 {row['a_pos']:.2e}")
    report = {
        "run": str(args.run),
        "step": loaded.step,
        "pairs": opts.n,
        "torch": torch.__version__,
        "float32_modules": names,
        "tail_blocks_float64": len(net.blocks) - net.tail_start,
        "worst_a_neg_pairs": worst.tolist(),
        "rows": rows,
    }
    if args.out:
        write_json(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
