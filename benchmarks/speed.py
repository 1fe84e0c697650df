"""Speed and memory of our one-step flow matching against the authors' algorithms, same process.

    python benchmarks/speed.py [--quick] [--arch paper|cpu|both] [--out FILE.json] [--threads N]

What is measured, per architecture (``paper``: the authors' MNIST model, 4 blocks of U-Net
couplings, rank-8 LoRA hypernetworks, D = 1024; ``cpu``: our CPU preset's small-CNN network with
the same rank-8 operator, as one generator), with randomly initialised weights (ActNorms
data-initialised; speed does not depend on training):

* one training step (loss, backward, Adam) at batch 32 and 128: ours, ours with memory-saving
  backprop, and the reference (:mod:`reference`);
* building the one-step matrix B for T = 100 and 1000, Euler and RK4: ours (``solvers.collapse``,
  float64 and float32), our earlier step-by-step collapse (the identity basis pushed through
  ``solvers.integrate``, float64) and the
  reference's dense products (float32; its 'rk' is the Simpson-averaged generator, not RK4);
* multi-step sampling (T = 100) and one-step sampling (B built beforehand) at batch 256;
* one g pass forward and inverse at batch 256 (the one-step floor is their sum);
* a torch.profiler table of where the time goes (g passes, and one training step).

Time: the median over repeats after one warm-up call; a case whose warm-up alone exceeds half
its time budget is timed by that single call (``n = 1``).

Peak memory: every case runs in a fresh subprocess; the figure is the process's peak resident
set size (``getrusage`` ``ru_maxrss``) after the first measured call minus its resident size just
before it. Training cases first take one step at batch 2, so the model, the Adam state and the
allocator are warm; the figure is what the step itself adds. ``--quick`` runs everything in
one process with tiny shapes and reports no memory (a smoke test, not a measurement).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from reference import Reference, parity  # noqa: E402

from linearizer.flow import solvers  # noqa: E402
from linearizer.flow.build import build_flow  # noqa: E402
from linearizer.flow.config import CPU, PAPER  # noqa: E402
from linearizer.flow.model import DATA, NOISE  # noqa: E402
from linearizer.flow.objective import draw_noise, flow_loss  # noqa: E402
from linearizer.flow.spec import SamplerSpec  # noqa: E402
from linearizer.invertible.dropout import set_dropout_seed  # noqa: E402
from linearizer.io import write_json  # noqa: E402

QUICK_NET = dict(img_size=8, blocks=1, hidden=8, unet_attn=(4,))
QUICK = dict(lora_emb=16, lora_hidden=32, rank=2)
REF_METHOD = {"euler": "euler", "rk4": "rk"}


# --- one measurement ---------------------------------------------------------------------------
def build(arch: str, quick: bool, memory_saving: bool = False):
    cfg = {"paper": PAPER, "cpu": CPU}[arch]
    # The reference implements the authors' model: one generator, one ActNorm per block, no
    # data-side logit, no fully connected blocks, a noise side that is neither odd nor shifted,
    # and a rank-8 operator with plain hypernetwork heads. The published table was measured so,
    # whatever the presets have become since.
    net = replace(
        cfg.network,
        flag_actnorm=False,
        logit=0.0,
        dense_blocks=0,
        odd_noise=False,
        noise_mean=False,
    )
    cfg = replace(cfg, network=net, rank=8, lora_basis=0, components=1)
    if quick:
        cfg = replace(cfg, network=replace(cfg.network, **QUICK_NET), **QUICK)
    torch.manual_seed(0)
    model = build_flow(replace(cfg, network=replace(cfg.network, memory_saving=memory_saving)))
    with torch.no_grad():  # data-dependent ActNorm start on a noise batch, as in training
        model.train().encode(torch.randn(8, *model.image_shape), NOISE)
    return model, cfg


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _maxrss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _time_calls(fn, repeats: int, budget: float, quick: bool) -> dict:
    """Warm-up (which also gives the memory figure), then timed repeats; median seconds."""
    rss0 = _rss_mib()
    start = time.perf_counter()
    fn()
    first = time.perf_counter() - start
    mem = None if quick else _maxrss_mib() - rss0
    times = []
    if first > budget / 2:
        times = [first]
    else:
        spent = first
        while len(times) < repeats and (spent < budget or not times):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
            spent += times[-1]
    return {"seconds": statistics.median(times), "n": len(times), "peak_mib": mem}


def measure(case: dict) -> dict:
    torch.set_num_threads(case["threads"])
    quick, task, impl = case["quick"], case["task"], case["impl"]
    model, cfg = build(case["arch"], quick, memory_saving=impl == "ours-memsave")
    ref = Reference(model)
    gen = torch.Generator().manual_seed(0)
    shape = model.image_shape
    budget, repeats = case["budget"], case["repeats"]
    if task == "train":
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)
        counter = [0]

        def step(batch: int) -> None:
            x1 = torch.rand(batch, *shape, generator=gen)
            draws = draw_noise(x1, gen)
            counter[0] += 1
            set_dropout_seed(model, counter[0])
            if impl == "reference":
                loss, _ = ref.loss(x1, draws, cfg.noise_level)
            else:
                loss, _ = flow_loss(model, x1, draws, noise_level=cfg.noise_level)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        model.train()
        step(2)  # model, Adam state and allocator warm before the memory baseline
        return _time_calls(lambda: step(case["batch"]), repeats, budget, quick)

    if task == "parity":
        return {"parity": parity(model.double(), batch=3, steps=8)}
    model.eval()
    with torch.no_grad():
        if task == "collapse":
            steps, method = case["steps"], case["method"]
            dtype = getattr(torch, case.get("dtype", "float64"))
            if impl == "reference":
                fn = lambda: ref.sampling_matrix(steps, REF_METHOD[method])  # noqa: E731
            else:
                how = _stepwise_collapse if impl == "ours-stepwise" else solvers.collapse
                kw = dict(steps=steps, method=method, final="skip", dtype=dtype)
                fn = lambda: how(model.op, **kw)  # noqa: E731
            return _time_calls(fn, repeats, budget, quick)
        x0 = torch.randn(case["batch"], *shape, generator=gen)
        if task == "multistep":
            steps, method = case["steps"], case["method"]
            if impl == "reference":
                fn = lambda: ref.sample(x0, steps, REF_METHOD[method])  # noqa: E731
            else:
                kw = dict(steps=steps, method=method, final="skip", dtype=x0.dtype, one_step=False)
                fn = lambda: model.sample(x0, **kw)  # noqa: E731
            return _time_calls(fn, repeats, budget, quick)
        if task == "onestep":
            steps = case["steps"]
            if impl == "reference":
                b_row = ref.sampling_matrix(steps, "euler")
                fn = lambda: ref.sample_one_step(x0, b_row)  # noqa: E731
            else:
                spec = SamplerSpec(steps=steps, final="skip", dtype="float32")
                model.one_step_matrix(spec)  # cached, as in use
                fn = lambda: model.sample(x0, spec)  # noqa: E731
            return _time_calls(fn, repeats, budget, quick)
        if task in ("g", "g_inverse"):
            owner = ref if impl == "reference" else model
            enc, dec = owner.encode, owner.decode
            z = enc(x0, DATA)
            fn = (lambda: enc(x0, NOISE)) if task == "g" else (lambda: dec(z, DATA))  # noqa: E731
            out = _time_calls(fn, repeats, budget, quick)
            out["per_s"] = case["batch"] / out["seconds"]
            return out
    if task == "profile":
        return {"profile": profile(model, cfg, case["batch"], case["train_batch"])}
    raise ValueError(f"unknown case {case}")


def profile(model, cfg, batch: int, train_batch: int) -> dict:
    """Top operators by self CPU time: g forward + inverse, and one training step."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as prof

    gen = torch.Generator().manual_seed(0)
    x0 = torch.randn(batch, *model.image_shape, generator=gen)
    out = {}
    model.eval()
    with torch.no_grad(), prof(activities=[ProfilerActivity.CPU]) as p:
        model.decode(model.encode(x0, NOISE), DATA)
    out["g_forward_inverse"] = _top(p)
    model.train()
    x1 = torch.rand(train_batch, *model.image_shape, generator=gen)
    with prof(activities=[ProfilerActivity.CPU]) as p:
        loss, _ = flow_loss(model, x1, draw_noise(x1, gen), noise_level=cfg.noise_level)
        loss.backward()
    out["train_step"] = _top(p)
    return out


def _top(p, rows: int = 12) -> list[dict]:
    events = sorted(p.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in events) or 1.0
    return [
        {
            "op": e.key,
            "self_ms": e.self_cpu_time_total / 1e3,
            "share": e.self_cpu_time_total / total,
            "calls": e.count,
        }
        for e in events[:rows]
    ]


def _stepwise_collapse(op, *, steps: int, method: str, final: str, dtype: torch.dtype):
    """Our first collapse: the identity basis pushed through the multi-step sampler."""
    eye = torch.eye(op.in_features, dtype=dtype, device=next(op.parameters()).device)
    return solvers.integrate(op, eye, steps=steps, method=method, final=final).T


# --- the plan ----------------------------------------------------------------------------------
def plan(arch: str, quick: bool, threads: int) -> list[dict]:
    big = not quick
    base = {
        "arch": arch,
        "quick": quick,
        "threads": threads,
        "repeats": 3 if big else 1,
        "budget": 45.0 if big else 1.0,
    }
    cases = [{**base, "task": "parity", "impl": "both"}]
    for batch in (32, 128) if big else (4,):
        for impl in ("ours", "ours-memsave", "reference"):
            cases.append({**base, "task": "train", "impl": impl, "batch": batch})
    # B and the latent sampler cost the same at both architectures (same D and rank), so the
    # long ones (T = 1000, RK4 multi-step) run at the paper's only.
    long = big and arch == "paper"
    for steps in ((100, 1000) if long else (100,)) if big else (10,):
        for method in ("euler", "rk4"):
            for impl, dtype in (
                ("ours", "float64"),
                ("ours", "float32"),
                ("ours-stepwise", "float64"),
                ("reference", "float32"),
            ):
                cases.append(
                    {
                        **base,
                        "task": "collapse",
                        "impl": impl,
                        "steps": steps,
                        "method": method,
                        "dtype": dtype,
                    }
                )
    sample = 256 if big else 8
    for method in ("euler", "rk4") if long or not big else ("euler",):
        for impl in ("ours", "reference"):
            cases.append(
                {
                    **base,
                    "task": "multistep",
                    "impl": impl,
                    "batch": sample,
                    "steps": 100 if big else 10,
                    "method": method,
                }
            )
    for impl in ("ours", "reference"):
        cases.append(
            {**base, "task": "onestep", "impl": impl, "batch": sample, "steps": 100 if big else 10}
        )
        for task in ("g", "g_inverse"):
            cases.append({**base, "task": task, "impl": impl, "batch": sample})
    cases.append(
        {
            **base,
            "task": "profile",
            "impl": "ours",
            "batch": sample,
            "train_batch": 32 if big else 4,
        }
    )
    return cases


def _mem_available_mib() -> float:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    return float("inf")


def _too_big(case: dict, done: list[dict]) -> str | None:
    """Skip a batch-128 training case whose batch-32 peak scaled by 4 would not fit."""
    if case["task"] != "train" or case["batch"] != 128 or case["quick"]:
        return None
    key = {"task": "train", "batch": 32, "impl": case["impl"], "arch": case["arch"]}
    small = [d for d in done if all(d["case"].get(k) == v for k, v in key.items())]
    if not small or small[0].get("peak_mib") is None:
        return None
    estimate = 4 * small[0]["peak_mib"]
    available = _mem_available_mib()
    if estimate > 0.6 * available:
        return (
            f"estimated {estimate / 1024:.1f} GiB (4x batch 32) > 60% of "
            f"{available / 1024:.1f} GiB free"
        )
    return None


def run_case(case: dict, inprocess: bool) -> dict:
    if inprocess:
        return measure(case)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(case)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return {"error": (proc.stderr or proc.stdout)[-2000:]}


# --- summary -----------------------------------------------------------------------------------
def _find(results: list[dict], **match) -> dict | None:
    for r in results:
        if all(r["case"].get(k) == v for k, v in match.items()) and "seconds" in r:
            return r
    return None


def summarize(results: list[dict], arch: str, quick: bool) -> tuple[list[list[str]], dict]:
    """Markdown rows (measurement, ours, ours variant, reference, ratio) and the target checks."""
    rows, checks = [], {}

    def fmt(r: dict | None, key: str = "seconds") -> str:
        if r is None or r.get(key) is None:
            return "-"
        return f"{r[key]:.3g}" if key != "peak_mib" else f"{r[key]:.0f}"

    def ratio(a: dict | None, b: dict | None, key: str = "seconds") -> float | None:
        if a is None or b is None or not a.get(key) or not b.get(key):
            return None
        return b[key] / a[key]

    a = dict(arch=arch)
    for batch in (32, 128) if not quick else (4,):
        ours, mem, ref = (
            _find(results, task="train", impl=i, batch=batch, **a)
            for i in ("ours", "ours-memsave", "reference")
        )
        best = min((r for r in (ours, mem) if r), key=lambda r: r["seconds"], default=None)
        t_ratio = ratio(best, ref)
        m_ratio = ratio(mem, ref, "peak_mib")
        rows.append([f"train step, batch {batch} (s)", fmt(ours), fmt(mem), fmt(ref), _x(t_ratio)])
        rows.append(
            [
                f"train step, batch {batch}, peak MiB",
                fmt(ours, "peak_mib"),
                fmt(mem, "peak_mib"),
                fmt(ref, "peak_mib"),
                _x(m_ratio),
            ]
        )
        if batch == 32:
            checks["train_time_5x"] = t_ratio
            checks["train_memory_5x"] = m_ratio
    for steps in (100, 1000) if not quick else (10,):
        for method in ("euler", "rk4"):
            m = dict(task="collapse", steps=steps, method=method, **a)
            ours = _find(results, impl="ours", dtype="float64", **m)
            o32 = _find(results, impl="ours", dtype="float32", **m)
            old = _find(results, impl="ours-stepwise", dtype="float64", **m)
            ref = _find(results, impl="reference", **m)
            if not any((ours, o32, old, ref)):
                continue
            label = f"B, T={steps}, {method} (s)" + (" [ref: 'rk']" if method == "rk4" else "")
            variant = f"f32 {fmt(o32)} / stepwise f64 {fmt(old)}"
            rows.append(
                [
                    label,
                    fmt(ours),
                    variant,
                    fmt(ref),
                    f"{_x(ratio(ours, ref))}; f32 {_x(ratio(o32, ref))}",
                ]
            )
            if steps == 1000 and method == "euler":
                checks["B_T1000_20x"] = ratio(ours, ref)
                checks["B_T1000_20x_f32"] = ratio(o32, ref)
    for method in ("euler", "rk4"):
        m = dict(task="multistep", method=method, **a)
        ours, ref = _find(results, impl="ours", **m), _find(results, impl="reference", **m)
        if not (ours or ref):
            continue
        steps = ours["case"]["steps"] if ours else "?"
        rows.append(
            [f"multi-step {method}, T={steps} (s)", fmt(ours), "", fmt(ref), _x(ratio(ours, ref))]
        )
        if method == "euler":
            checks["multistep_10x"] = ratio(ours, ref)
    one, gf, gi = (_find(results, task=t, impl="ours", **a) for t in ("onestep", "g", "g_inverse"))
    ref, rf, ri = (
        _find(results, task=t, impl="reference", **a) for t in ("onestep", "g", "g_inverse")
    )
    floor = gf["seconds"] + gi["seconds"] if gf and gi else None
    rows.append(
        [
            "one-step sample (s)",
            fmt(one),
            f"floor {floor:.3g}" if floor else "",
            fmt(ref),
            _x(ratio(one, ref)),
        ]
    )
    rows.append(
        ["g forward (images/s)", fmt(gf, "per_s"), "", fmt(rf, "per_s"), _x(ratio(rf, gf, "per_s"))]
    )
    rows.append(
        ["g inverse (images/s)", fmt(gi, "per_s"), "", fmt(ri, "per_s"), _x(ratio(ri, gi, "per_s"))]
    )
    if one and floor:
        checks["onestep_over_floor"] = one["seconds"] / floor
    return rows, checks


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def table(rows: list[list[str]]) -> str:
    head = ["measurement", "ours", "ours: memsave / f32, stepwise", "reference"]
    head.append("reference / ours")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def environment(threads: int, note: str) -> dict:
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu": platform.processor() or platform.machine(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cores": os.cpu_count(),
        "threads": threads,
        "note": note,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny shapes, one process (smoke test)")
    p.add_argument("--arch", choices=["paper", "cpu", "both"], default="both")
    p.add_argument("--out", help="write all results as JSON here")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--only", help="comma-separated tasks to run (e.g. train,collapse)")
    p.add_argument("--note", default="", help="free text stored with the results (e.g. load)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        print("RESULT " + json.dumps(measure(json.loads(args.worker))), flush=True)
        return 0
    threads = 1 if args.quick else args.threads
    archs = ["paper", "cpu"] if args.arch == "both" else [args.arch]
    results, report = [], {"environment": environment(threads, args.note), "quick": args.quick}
    for arch in archs:
        for case in plan(arch, args.quick, threads):
            if args.only and case["task"] not in args.only.split(",") + ["parity"]:
                continue
            skip = _too_big(case, results)
            start = time.perf_counter()
            out = {"skipped": skip} if skip else run_case(case, args.quick)
            out["case"] = case
            out["wall_s"] = time.perf_counter() - start
            results.append(out)
            brief = {k: v for k, v in out.items() if k not in ("case", "profile", "parity")}
            what = {k: v for k, v in case.items() if k not in ("quick", "threads", "budget")}
            print(json.dumps({**what, **brief}), file=sys.stderr, flush=True)
    report["results"] = results
    report["summary"] = {}
    for arch in archs:
        rows, checks = summarize(results, arch, args.quick)
        report["summary"][arch] = {"rows": rows, "checks": checks}
        par = next(
            (
                r.get("parity")
                for r in results
                if r["case"]["arch"] == arch and r["case"]["task"] == "parity"
            ),
            None,
        )
        report["summary"][arch]["parity"] = par
        print(f"\n## {arch}\n\n{table(rows)}\n\nchecks: {json.dumps(checks)}")
        print(f"parity (float64, max |reference - ours|): {json.dumps(par)}")
    errors = [r for r in results if "error" in r]
    for r in errors:
        print(f"ERROR in {r['case']}: {r['error']}", file=sys.stderr)
    if args.out:
        write_json(args.out, report)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
