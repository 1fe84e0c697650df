"""``linearizer demo``: the algebra of Linearizers on random networks, measured.

Builds one small random invertible network ``G`` (the CPU architecture, every weight perturbed
so it is far from the identity), uses it the paper's way (``g_x = G(., 1)``, ``g_y = G(., 0)``)
and checks each identity the library promises, printing the worst relative error of each.
Runs in a few seconds on a CPU.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
from torch import Tensor

from ..algebra import Linearizer
from ..flow.spec import DTYPES
from ..invertible import Conditioned, cpu_network
from ..operators import Dense, ObliqueProjector, OrthogonalProjector, TimeLoRA

SHAPE = (1, 8, 8)  # D = 64
BATCH = 4


def rel_error(a: Tensor, b: Tensor) -> float:
    """Max-abs difference relative to the max-abs of the reference ``b``."""
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-300))


def _random_network(dtype: torch.dtype) -> torch.nn.Module:
    # the couplings start as the identity: move them away
    net = _perturbed(cpu_network(in_channels=1, num_blocks=2, hidden=16).eval(), dtype, 0.1)
    with torch.no_grad():
        for name, buf in net.named_buffers():
            if name.endswith("initialized"):
                buf.fill_(1)
    return net


def _perturbed(op: torch.nn.Module, dtype: torch.dtype, scale: float = 0.05) -> torch.nn.Module:
    op = op.to(dtype)
    with torch.no_grad():
        for p in op.parameters():
            p.add_(scale * torch.randn_like(p))
    return op


def measure_identities(
    seed: int = 0, dtype: torch.dtype = torch.float64
) -> list[tuple[str, str, float]]:
    """``(identity, where, max relative error)`` for each identity of the algebra."""
    torch.manual_seed(seed)
    d = SHAPE[0] * SHAPE[1] * SHAPE[2]
    G = _random_network(dtype)
    g_x, g_y = Conditioned(G, 1.0), Conditioned(G, 0.0)
    lora = _perturbed(TimeLoRA(d, rank=8, emb_dim=16, hidden=32, v_scale=d**-0.5), dtype)
    f = Linearizer(g_x, lora.at(0.5), g_y)  # the paper's shape: one network, two flags
    x1, x2 = (torch.randn(BATCH, *SHAPE, dtype=dtype) for _ in range(2))
    y = torch.randn(BATCH, *SHAPE, dtype=dtype)
    a = torch.linspace(-1.5, 2.0, BATCH, dtype=dtype)
    sx, sy = f.space_x, f.space_y
    rows: list[tuple[str, str, Callable[[], float]]] = []

    def add(name: str, where: str, check: Callable[[], float]) -> None:
        rows.append((name, where, check))

    add(
        "round trip  g^-1(g(x)) = x",
        "G(.,1), G(.,0)",
        lambda: max(rel_error(g_x.inverse(g_x(x1)), x1), rel_error(g_y.inverse(g_y(y)), y)),
    )
    add(
        "superposition  f(a.x1 + b.x2) = a.f(x1) + b.f(x2)",
        "TimeLoRA(t=.5)",
        lambda: rel_error(
            f(sx.add(sx.scale(a, x1), sx.scale(-0.7, x2))),
            sy.add(sy.scale(a, f(x1)), sy.scale(-0.7, f(x2))),
        ),
    )
    add("pinv  f(f+(f(x))) = f(x)", "TimeLoRA(t=.5)", lambda: rel_error(f(f.pinv(f(x1))), f(x1)))
    add(
        "pinv  f+(f(f+(y))) = f+(y)",
        "TimeLoRA(t=.5)",
        lambda: rel_error(f.pinv(f(f.pinv(y))), f.pinv(y)),
    )
    add(
        "adjoint  <f(x),y>_gy = <x,fT(y)>_gx",
        "TimeLoRA(t=.5)",
        lambda: rel_error(sy.inner(f(x1), y), sx.inner(x1, f.transpose(y))),
    )

    def svd_check() -> float:
        s = f.svd()
        ref = torch.linalg.svdvals(f.A.matrix(dtype=torch.float64).detach())[: s.S.shape[0]]
        return max(rel_error(f(s.V_x), sy.scale(s.S, s.U_y)), rel_error(s.S, ref))

    add("SVD  f(g_x^-1 v_i) = s_i . g_y^-1 u_i", "TimeLoRA(t=.5)", svd_check)
    back = Linearizer(g_y, _perturbed(Dense(torch.randn(d, d) / d**0.5), dtype), g_x)
    add(
        "compose  (b o f)(x) = b(f(x))",
        "Dense after TimeLoRA",
        lambda: rel_error(back.compose(f)(x1), back(f(x1))),
    )
    square = Linearizer(g_x, _perturbed(Dense(torch.randn(d, d) / d**0.5), dtype))
    add(
        "power  f^3(x) = f(f(f(x)))",
        "Dense, g_x = g_y",
        lambda: rel_error(square.power(3)(x1), square(square(square(x1)))),
    )

    def eig_check() -> float:
        e = square.eig()
        if e.V_x.shape[0] == 0:
            return 0.0
        return rel_error(square(e.V_x), square.space_x.scale(e.L_real, e.V_x))

    add("eig  f(g^-1 v) = l . g^-1 v (real pairs)", "Dense, g_x = g_y", eig_check)
    for cls in (OrthogonalProjector, ObliqueProjector):
        p = Linearizer(g_x, _perturbed(cls(d, rank=8), dtype))
        add(
            "idempotence  f(f(x)) = f(x)", f"{cls.__name__}", lambda p=p: rel_error(p(p(x1)), p(x1))
        )
    return [(name, where, check()) for name, where, check in rows]


def run(args: argparse.Namespace) -> int:
    plan = (
        f"random invertible network G ({SHAPE[0]}x{SHAPE[1]}x{SHAPE[2]} images, D = "
        f"{SHAPE[0] * SHAPE[1] * SHAPE[2]}), seed {args.seed}, {args.dtype}"
    )
    if args.dry_run:
        print(f"dry run: would measure the Linearizer identities on a {plan}")
        return 0
    torch.set_num_threads(1)  # tiny tensors: threads only add overhead
    start = time.perf_counter()
    rows = measure_identities(args.seed, DTYPES[args.dtype])
    print(f"Linearizer identities on a {plan}; g_x = G(., 1), g_y = G(., 0)\n")
    width = max(len(r[0]) for r in rows)
    where = max(len(r[1]) for r in rows)
    print(f"{'identity':<{width}}  {'operator':<{where}}  max rel. error")
    print("-" * (width + where + 18))
    for name, op, err in rows:
        print(f"{name:<{width}}  {op:<{where}}  {err:.1e}")
    worst = max(r[2] for r in rows)
    bar = 1e-10 if args.dtype == "float64" else 1e-4
    verdict = "all within" if worst <= bar else "ABOVE"
    print(f"\nworst {worst:.1e}: {verdict} {bar:.0e} ({time.perf_counter() - start:.1f} s)")
    return 0 if worst <= bar else 1


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="measure the Linearizer identities on random networks")
    p.add_argument("--seed", type=int, default=0, help="random seed for networks and inputs")
    p.add_argument("--dtype", default="float64", choices=sorted(DTYPES), help="arithmetic")
    p.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    p.set_defaults(func=run)
