"""The one-step matrix at CelebA size: dense B vs factored ``c I + U V^T`` vs the authors' way.

    python benchmarks/factored.py [--quick] [--dim 12288] [--threads 2] [--out FILE.json]

The operator is the authors' CelebA ``TimeDependentLoRALinearLayer`` shape (D = 3 x 64 x 64 =
12,288, rank 8, sinusoidal embedding 128, two hidden layers of 512), randomly initialised (cost
does not depend on training). Cases, each in a fresh subprocess (peak memory is the process's
peak resident set size during the first measured call minus its size just before it, as in
``speed.py``):

* **build** B for T = 100 and 1000 (Euler) and T = 100 (RK4): ours dense (``solvers.collapse``,
  float64), ours factored (``factored.collapse_factored``, float64), and the authors' dense
  accumulation ``B <- M_i B`` (float32, one ``D x D x D`` product per step; too slow to finish
  here, so one step is measured and the total is that step's time x (T - 1), marked ``est``);
* **apply** B to a batch of 256 latents (the one-step sampler's only D-sized work): dense
  ``z B^T`` vs factored, float64 and float32;
* **invert** 8 latents: dense LU solve vs Woodbury (float64; the Woodbury time includes its
  ``K x K`` factorisation); the authors use ``torch.pinverse(B)``, an SVD of B, timed at a
  smaller D (``--pinv-dim``) and scaled by ``(D / pinv_dim)^3`` (marked ``est``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from speed import _time_calls, environment  # noqa: E402

from linearizer.flow import factored, solvers  # noqa: E402
from linearizer.io import write_json  # noqa: E402
from linearizer.operators.lora import TimeLoRA  # noqa: E402

CELEBA = dict(emb_dim=128, hidden=512, depth=2)
QUICK = dict(emb_dim=16, hidden=32, depth=2)
F64 = torch.float64


def make_op(dim: int, rank: int, quick: bool) -> TimeLoRA:
    torch.manual_seed(0)
    # v_scale 1: the authors' operator (no 1/sqrt(D) on V).
    return TimeLoRA(dim, rank, v_scale=1.0, **(QUICK if quick else CELEBA)).eval()


def measure(case: dict) -> dict:
    torch.set_num_threads(case["threads"])
    quick, task, impl = case["quick"], case["task"], case["impl"]
    op = make_op(case["dim"], case["rank"], quick)
    steps, method = case["steps"], case.get("method", "euler")
    budget, repeats = case["budget"], case["repeats"]
    with torch.no_grad():
        if task == "build":
            if impl == "authors":
                return _authors_build(op, steps, quick, budget)
            kw = dict(steps=steps, method=method, final="skip", dtype=F64)
            how = solvers.collapse if impl == "dense" else factored.collapse_factored
            out = _time_calls(lambda: how(op, **kw), repeats, budget, quick)
            b = how(op, **kw) if impl == "factored" else None
            out["bytes"] = b.nbytes if b is not None else case["dim"] ** 2 * 8
            if b is not None:
                out["width"] = b.width
            return out
        dtype = getattr(torch, case["dtype"])
        b = factored.one_step(op, steps=steps, method=method, dtype=F64, form=impl, final="skip")
        if impl == "dense":
            b = b.to(dtype)
        elif dtype != F64:
            b = b.to(dtype)
        gen = torch.Generator().manual_seed(1)
        z = torch.randn(case["batch"], case["dim"], generator=gen, dtype=dtype)
        if task == "apply":
            return _time_calls(lambda: factored.apply_rows(b, z), repeats, budget, quick)
        if task == "invert":

            def solve():
                if isinstance(b, factored.FactoredMatrix):
                    b._core = None  # include the K x K factorisation in every timed call
                return factored.solve_rows(b, z)

            out = _time_calls(solve, repeats, budget, quick)
            x = factored.solve_rows(b, z)
            resid = (factored.apply_rows(b, x) - z).norm() / z.norm()
            out["relative_residual"] = float(resid)
            return out
    raise ValueError(f"unknown case {case}")


def _authors_build(op: TimeLoRA, steps: int, quick: bool, budget: float) -> dict:
    """The authors' accumulation, ``B <- (I + h/(1-t) (A_row(t) - I)) B`` from the last step
    down, float32 dense; at full size only the first (last-in-time) step is timed."""
    d = op.in_features
    eye = torch.eye(d)
    h = 1.0 / steps
    todo = list(reversed(range(steps - 1)))
    measured = todo if quick else todo[:1]

    def run() -> None:
        b = eye.clone()
        for i in measured:
            t = i * h
            u, v = op.factors(torch.tensor([t]))
            lin = v[0] @ u[0].T  # their row-convention A(t): dense D x D
            m = eye + (h / (1.0 - t)) * (lin - eye)
            b = m @ b

    out = _time_calls(run, 1, budget, quick)
    per_step = out["seconds"] / len(measured)
    out["per_step_seconds"] = per_step
    out["seconds"] = per_step * (steps - 1)
    out["estimated"] = len(measured) < steps - 1
    out["bytes"] = d * d * 4
    return out


def _authors_pinverse(dim: int, quick: bool) -> dict:
    """``torch.pinverse`` of a well-conditioned ``dim x dim`` float32 matrix (the cost of an SVD
    does not depend on the entries much)."""
    gen = torch.Generator().manual_seed(2)
    b = torch.eye(dim) + torch.randn(dim, dim, generator=gen) / dim**0.5
    start = time.perf_counter()
    torch.pinverse(b)
    return {"seconds": time.perf_counter() - start, "n": 1}


def plan(dim: int, quick: bool, threads: int, pinv_dim: int) -> list[dict]:
    base = {
        "quick": quick,
        "threads": threads,
        "dim": dim,
        "rank": 8 if not quick else 2,
        "repeats": 1 if quick else 3,
        "budget": 1.0 if quick else 30.0,
    }
    t_short, t_long = (10, 40) if quick else (100, 1000)
    cases = []
    for steps, method in ((t_short, "euler"), (t_long, "euler"), (t_short, "rk4")):
        for impl in ("dense", "factored", "authors"):
            if impl == "authors" and method != "euler":
                continue
            cases.append({**base, "task": "build", "impl": impl, "steps": steps, "method": method})
    for dtype in ("float64", "float32"):
        for impl in ("dense", "factored"):
            cases.append(
                {
                    **base,
                    "task": "apply",
                    "impl": impl,
                    "steps": t_short,
                    "dtype": dtype,
                    "batch": 256 if not quick else 8,
                }
            )
    for impl in ("dense", "factored"):
        cases.append(
            {
                **base,
                "task": "invert",
                "impl": impl,
                "steps": t_short,
                "dtype": "float64",
                "batch": 8,
            }
        )
    cases.append({**base, "task": "pinverse", "impl": "authors", "pinv_dim": pinv_dim})
    return cases


def run_case(case: dict) -> dict:
    if case["task"] == "pinverse":
        torch.set_num_threads(case["threads"])
        out = _authors_pinverse(case["pinv_dim"], case["quick"])
        out["seconds_at_dim"] = out["seconds"] * (case["dim"] / case["pinv_dim"]) ** 3
        return out
    if case["quick"]:
        return measure(case)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(case)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return {"error": (proc.stderr or proc.stdout)[-2000:]}


def summarize(results: list[dict]) -> list[str]:
    """Markdown table rows: measurement | dense | factored | authors | dense / factored."""

    def find(**m) -> dict | None:
        return next(
            (
                r
                for r in results
                if all(r["case"].get(k) == v for k, v in m.items()) and "seconds" in r
            ),
            None,
        )

    def sec(r: dict | None) -> str:
        if r is None:
            return "-"
        return f"{r['seconds']:.3g}" + (" (est)" if r.get("estimated") else "")

    def mib(r: dict | None, key: str) -> str:
        if r is None or r.get(key) is None:
            return "-"
        return f"{r[key] / (2**20 if key == 'bytes' else 1):.0f}"

    def ratio(a: dict | None, b: dict | None, key: str = "seconds") -> str:
        if a is None or b is None or not a.get(key) or not b.get(key):
            return "-"
        return f"{a[key] / b[key]:.1f}x"

    rows = []
    for steps, method in sorted(
        {
            (r["case"]["steps"], r["case"].get("method", "euler"))
            for r in results
            if r["case"]["task"] == "build"
        }
    ):
        d, f, a = (
            find(task="build", impl=i, steps=steps, method=method)
            for i in ("dense", "factored", "authors")
        )
        k = f"K = {f['width']}" if f else ""
        rows.append(
            f"| build B, T = {steps}, {method} (s) | {sec(d)} | {sec(f)} | {sec(a)} | "
            f"{ratio(d, f)} |"
        )
        held = (mib(d, "bytes"), mib(f, "bytes"), mib(a, "bytes"), ratio(d, f, "bytes"))
        rows.append(f"| B held, T = {steps}, {method} (MiB; {k}) | " + " | ".join(held) + " |")
        rows.append(
            f"| build B, T = {steps}, {method}: peak MiB | {mib(d, 'peak_mib')} | "
            f"{mib(f, 'peak_mib')} | {mib(a, 'peak_mib')} | "
            f"{ratio(d, f, 'peak_mib')} |"
        )
    for task in ("apply", "invert"):
        for dtype in ("float64", "float32"):
            d, f = (find(task=task, impl=i, dtype=dtype) for i in ("dense", "factored"))
            if not (d or f):
                continue
            batch = (d or f)["case"]["batch"]
            a = find(task="pinverse") if task == "invert" else None
            theirs = "-"
            if a:
                theirs = (
                    f"{a['seconds_at_dim']:.3g} (est; {a['seconds']:.3g} at D = "
                    f"{a['case']['pinv_dim']})"
                )
            what = "B z" if task == "apply" else "B^-1 z"
            rows.append(
                f"| {what}, {batch} latents, {dtype} (s) | {sec(d)} | {sec(f)} | "
                f"{theirs} | {ratio(d, f)} |"
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny shapes, one process (smoke test)")
    p.add_argument("--dim", type=int, default=12288, help="latent size D (CelebA 64x64x3)")
    p.add_argument("--pinv-dim", type=int, default=2048, help="D at which pinverse is timed")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", help="write all results as JSON here")
    p.add_argument("--only", help="comma-separated tasks (build,apply,invert,pinverse)")
    p.add_argument("--note", default="", help="free text stored with the results")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        print("RESULT " + json.dumps(measure(json.loads(args.worker))), flush=True)
        return 0
    dim = 64 if args.quick else args.dim
    pinv_dim = 32 if args.quick else args.pinv_dim
    results = []
    for case in plan(dim, args.quick, args.threads, pinv_dim):
        if args.only and case["task"] not in args.only.split(","):
            continue
        start = time.perf_counter()
        out = run_case(case)
        out["case"], out["wall_s"] = case, time.perf_counter() - start
        results.append(out)
        brief = {k: v for k, v in out.items() if k != "case"}
        what = {k: v for k, v in case.items() if k not in ("quick", "threads", "budget")}
        print(json.dumps({**what, **brief}), file=sys.stderr, flush=True)
    head = "| measurement | ours dense | ours factored | authors | dense / factored |"
    rows = [head, "|---|---|---|---|---|", *summarize(results)]
    print("\n".join(rows))
    errors = [r for r in results if "error" in r]
    for r in errors:
        print(f"ERROR in {r['case']}: {r['error']}", file=sys.stderr)
    if args.out:
        write_json(
            args.out,
            {
                "environment": environment(args.threads, args.note),
                "results": results,
                "table": rows,
            },
        )
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
