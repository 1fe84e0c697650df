"""One training step, measured against this machine's limit and against another tree.

    python benchmarks/step.py [--against COMMIT|PATH] [--rounds 3] [--seconds 20]
                              [--threads 2] [--out FILE.json] [--quick]

Two architectures, each at the batch its issue names:

* ``cpu``: the ``cpu`` preset as it trains (batch 128; its network, operator and loss; a
  mixture preset's rows carry uniformly drawn component labels, as its training rows carry
  theirs);
* ``paper``: the authors' MNIST architecture (batch 32), in the form the authors' algorithms
  take (one ActNorm per block, no data-side logit, no fully connected blocks, rank-8 operator),
  beside those algorithms themselves (``benchmarks/reference.py`` over the same weights, as in
  BENCHMARKS §1).

A step is what the trainer does: draw the noise, group the times in the preset's
``time_groups`` runs, the loss (``flow_loss``), backward, gradient clipping (where the preset
clips), Adam, and an EMA of the weights. Inputs are uniform random
images: the speed of a step does not depend on the data.

Every case runs in its own process (so its peak memory is its own), and the cases of the trees
alternate round by round, so a ratio compares measurements taken minutes apart on one machine.
``--against`` names a second tree: a commit of this repository (its ``src`` is exported with
``git archive``) or a path to a checkout; the tree's ``linearizer`` is imported instead of this
one. Per case:

* steps/s and samples/s (the median step time of a round, then the median over rounds);
* the minor page faults per step (memory the allocator returned to the system and takes
  back, zeroed, on the next step);
* the peak resident memory the steps add (``ru_maxrss`` after the steps minus the resident size
  before them; a warm-up step at batch 2 comes first);
* GFLOP per step: the matrix products and convolutions that ``torch.profiler`` counts
  (``with_flops``), plus backward convolutions estimated as twice their forward (the profiler
  gives them no count);
* achieved GFLOP/s, and its share of a 4096 x 4096 float32 matrix product timed in the same
  process (this machine's sgemm);
* where a profiled step's time goes, by the self time of its operators: matrix products and
  convolutions, attention, normalisation, other elementwise work and reductions, copies and
  allocation, and the rest of the wall time (Python, autograd and the optimizer's bookkeeping).
  The profiler slows small operators, so the split is a proportion, not a timing.

``--quick`` uses tiny shapes and one round: a smoke test of the script, not a measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CASES = (("cpu", "ours", 128), ("paper", "ours", 32), ("paper", "reference", 32))

GEMM = ("mm", "addmm", "bmm", "baddbmm", "addbmm", "matmul", "linear", "conv", "mkldnn")
ATTENTION = ("attention", "softmax")
NORM = ("group_norm", "layer_norm", "batch_norm")
COPIES = (
    "copy_",
    "fill_",
    "zero_",
    "empty",
    "cat",
    "clone",
    "contiguous",
    "_to_copy",
    "stack",
    "index",
    "new_zeros",
    "zeros",
    "ones",
    "full",
    "resize_",
    "scatter",
    "constant_pad",
)
# Levers tried on this tree's step without changing its code (--variants): each is measured as
# one more tree beside this one.
VARIANTS = {
    "compile": "torch.compile (inductor) on every coupling conditioner",
    "compile-loss": "torch.compile (inductor) on the whole loss (flow_loss)",
    "fused-adam": "Adam(fused=True): one kernel for the update of every parameter",
    "foreach-ema": "the EMA update as one torch._foreach_lerp_",
    "unbounded": "the cpu network without its bounded shifts and linear logit tails (shift_bound "
    "0, sigmoid tails: the network before 2026-12-04)",
}


# --- the child: one case, in the tree on sys.path ----------------------------------------------
def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _maxrss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _config(arch: str, quick: bool):
    from dataclasses import replace

    from linearizer.flow.config import CPU, PAPER

    if arch == "cpu":
        cfg = CPU
    else:  # the authors' model, as benchmarks/speed.py and the reference take it
        net = replace(PAPER.network, flag_actnorm=False, logit=0.0, dense_blocks=0)
        cfg = replace(PAPER, network=net, rank=8, lora_basis=0)
    if quick:
        cfg = replace(cfg, network=replace(cfg.network, img_size=8, hidden=8, blocks=1))
    return cfg


def _compile_conditioners(model) -> int:
    count = 0
    for module in model.modules():
        if type(module).__name__ in ("SmallCNN", "DenseConditioner", "PaperUNet"):
            module.compile(dynamic=False)
            count += 1
    return count


def _stepper(arch: str, impl: str, quick: bool, variant: str = ""):
    """A function ``step(batch)`` that takes one training step, as the trainer does."""
    import torch

    from linearizer.flow.build import build_flow
    from linearizer.flow.model import NOISE
    from linearizer.flow.objective import draw_noise, flow_loss, group_times

    levers = set(filter(None, variant.split("+")))
    if levers - set(VARIANTS):
        raise SystemExit(f"error: unknown variant {variant!r}; choose from {sorted(VARIANTS)}")
    cfg = _config(arch, quick)
    if "unbounded" in levers:
        from dataclasses import replace

        net = replace(cfg.network, shift_bound=0.0, logit_tails="sigmoid")
        cfg = replace(cfg, network=net)
    torch.manual_seed(0)
    model = build_flow(cfg)
    with torch.no_grad():  # data-dependent ActNorm start, as in training
        model.train().encode(torch.randn(8, *model.image_shape), NOISE)
    ref = None
    if impl == "reference":
        sys.path.insert(0, str(HERE))
        from reference import Reference

        ref = Reference(model)
    if "compile" in levers:
        _compile_conditioners(model)
    loss_fn = torch.compile(flow_loss, dynamic=False) if "compile-loss" in levers else flow_loss
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=1e-4, fused="fused-adam" in levers)
    shadow = [p.detach().clone() for p in params]
    gen = torch.Generator().manual_seed(0)
    # a tree from before mixtures has no components field: one generator
    parts = getattr(cfg, "components", 1)

    def step(batch: int) -> None:
        x1 = torch.rand(batch, *model.image_shape, generator=gen)
        labels = torch.randint(parts, (batch,), generator=gen) if parts > 1 else None
        draws = draw_noise(x1, gen)
        # as the trainer: rows share their time in time_groups runs, so the operator's factors
        # are built once per run (without this the cpu step builds 128 [D, r] pairs, not 16)
        draws["t"] = group_times(draws["t"], cfg.time_groups)
        if ref is not None:
            loss, _ = ref.loss(x1, draws, cfg.noise_level)
        else:
            kw = {} if labels is None else {"labels": labels}
            loss, _ = loss_fn(model, x1, draws, noise_level=cfg.noise_level, **kw)
        loss.backward()
        if cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        with torch.no_grad():
            if "foreach-ema" in levers:
                torch._foreach_lerp_(shadow, params, 0.01)
            else:
                for s, p in zip(shadow, params):
                    s.lerp_(p, 0.01)

    model.train()
    return step


def _tree_label(src: Path) -> str:
    """``src`` as the results name it: this checkout's or an exported commit's, no machine path."""
    return "this checkout" if src.resolve() == (ROOT / "src").resolve() else "the other tree"


def _sgemm_gflops(n: int = 4096) -> float:
    import torch

    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e9


def _category(name: str) -> str | None:
    if not name.startswith(("aten::", "mkldnn", "onednn")):
        return None
    op = name.split("::", 1)[-1]
    for label, keys in (
        ("attention", ATTENTION),
        ("gemm_conv", GEMM),
        ("normalisation", NORM),
        ("copies_alloc", COPIES),
    ):
        if any(k in op for k in keys):
            return label
    if op in (
        "view",
        "reshape",
        "expand",
        "permute",
        "transpose",
        "t",
        "slice",
        "select",
        "split",
        "narrow",
        "as_strided",
        "unsqueeze",
        "squeeze",
        "flatten",
        "chunk",
        "detach",
        "alias",
        "unbind",
        "split_with_sizes",
        "unflatten",
        "_unsafe_view",
    ):
        return "copies_alloc"  # views allocate no data but each is an allocator-sized call
    return "elementwise"


def _profile(step, batch: int) -> dict:
    from torch.profiler import ProfilerActivity, profile

    # the timed steps before this one have warmed the model, the allocator and any compile
    with profile(activities=[ProfilerActivity.CPU], with_flops=True) as p:
        start = time.perf_counter()
        step(batch)
        wall = time.perf_counter() - start
    flops, conv_fwd = 0.0, 0.0
    split = {
        "gemm_conv": 0.0,
        "attention": 0.0,
        "normalisation": 0.0,
        "elementwise": 0.0,
        "copies_alloc": 0.0,
    }
    for e in p.key_averages():
        if e.flops and any(k in e.key for k in GEMM):
            flops += e.flops
            if "conv" in e.key:
                conv_fwd += e.flops
        label = _category(e.key)
        if label is not None:
            split[label] += e.self_cpu_time_total / 1e6
    split["python_autograd_other"] = max(wall - sum(split.values()), 0.0)
    total = sum(split.values())
    return {
        "gflop": (flops + 2 * conv_fwd) / 1e9,
        "profiled_seconds": wall,
        "split": {k: v / total for k, v in split.items()},
    }


def child(
    arch: str, impl: str, batch: int, seconds: float, threads: int, quick: bool, variant: str
) -> dict:
    import torch

    import linearizer

    torch.set_num_threads(threads)
    # the trainer's allocator setting, where the tree has one (in trainer.py in older trees)
    try:
        from linearizer.training import allocator as home
    except ImportError:
        from linearizer.training import trainer as home
    keep = getattr(home, "keep_freed_memory", None)
    kept = bool(keep()) if keep is not None else False
    step = _stepper(arch, impl, quick, variant)
    step(2)  # model, Adam state and allocator warm before the memory baseline
    rss0 = _rss_mib()
    faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    times: list[float] = []
    spent = 0.0
    while len(times) < 2 or (spent < seconds and len(times) < 50):
        start = time.perf_counter()
        step(batch)
        times.append(time.perf_counter() - start)
        spent += times[-1]
    peak = _maxrss_mib() - rss0
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0) / len(times)
    median = statistics.median(times[1:])  # the first full-size step warms the allocator
    out = {
        "arch": arch,
        "impl": impl,
        "variant": variant,
        "batch": batch,
        "step_seconds": median,
        "steps": len(times) - 1,
        "peak_mib": peak,
        "page_faults_per_step": faults,
        "keeps_freed_memory": kept,
        "tree": _tree_label(Path(linearizer.__file__).parents[1]),
        "sgemm_gflops": _sgemm_gflops(256 if quick else 4096),
    }
    out.update(_profile(step, batch))
    if "compile" in variant:  # compiled kernels report no FLOPs to the profiler
        out["gflop"] = None
    return out


# --- the parent: trees, rounds, tables ---------------------------------------------------------
def export_tree(against: str, into: Path) -> Path:
    """A ``src`` folder for ``against``: a checkout's own, or a commit's exported one."""
    path = Path(against)
    if (path / "src" / "linearizer").is_dir():
        return (path / "src").resolve()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", against, "src"], capture_output=True, check=False
    )
    if archive.returncode != 0:
        raise SystemExit(f"error: --against {against!r} is neither a checkout nor a commit here")
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into / "src"


def run_child(src: Path, variant: str, arch: str, impl: str, batch: int, args) -> dict:
    env = dict(os.environ, PYTHONPATH=str(src), OMP_NUM_THREADS=str(args.threads))
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        arch,
        impl,
        str(batch),
        "--seconds",
        str(args.seconds),
        "--threads",
        str(args.threads),
        "--variant",
        variant,
    ]
    if args.quick:
        cmd.append("--quick")
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"error: {arch}/{impl} in {src} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def summarise(rows: list[dict]) -> dict:
    """Median over rounds of each case's median step, and the figures that follow from it."""
    seconds = statistics.median(r["step_seconds"] for r in rows)
    first = rows[0]
    gflop = first["gflop"]
    sgemm = statistics.median(r["sgemm_gflops"] for r in rows)
    rate = None if gflop is None else gflop / seconds
    return {
        "step_seconds": seconds,
        "steps_per_s": 1 / seconds,
        "samples_per_s": first["batch"] / seconds,
        "gflop_per_step": gflop,
        "gflops": rate,
        "sgemm_gflops": sgemm,
        "percent_of_sgemm": None if rate is None else 100 * rate / sgemm,
        "peak_mib": max(r["peak_mib"] for r in rows),
        "page_faults_per_step": statistics.median(r["page_faults_per_step"] for r in rows),
        "split": first["split"],
        "rounds": [r["step_seconds"] for r in rows],
    }


def table(results: dict, trees: list[str]) -> str:
    head = (
        "| case | tree | steps/s | samples/s | GFLOP/step | GFLOP/s | % of sgemm | peak MiB "
        "| page faults/step | GEMM+conv | attention | norm | elementwise | copies | Python/other |"
    )
    lines = [head, "|" + "---|" * 15]
    for key, by_tree in results.items():
        for tree in trees:
            s = by_tree.get(tree)
            if s is None:
                continue
            sp = s["split"]
            lines.append(
                f"| {key} | {tree} | {s['steps_per_s']:.2f} | {s['samples_per_s']:.0f} "
                f"| {_num(s['gflop_per_step'])} | {_num(s['gflops'])} "
                f"| {_num(s['percent_of_sgemm'])} "
                f"| {s['peak_mib']:.0f} | {s['page_faults_per_step']:.0f} "
                f"| {100 * sp['gemm_conv']:.0f} % "
                f"| {100 * sp['attention']:.0f} % | {100 * sp['normalisation']:.0f} % "
                f"| {100 * sp['elementwise']:.0f} % | {100 * sp['copies_alloc']:.0f} % "
                f"| {100 * sp['python_autograd_other']:.0f} % |"
            )
    return "\n".join(lines)


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def ratios(results: dict, trees: list[str]) -> list[str]:
    out = []
    for key, by_tree in results.items():
        for name in trees[1:]:
            if name in by_tree and trees[0] in by_tree:
                r = by_tree[name]["step_seconds"] / by_tree[trees[0]]["step_seconds"]
                out.append(f"{key}: this tree makes {r:.2f}x the steps/s of {name}")
    paper, ref = results.get("paper/ours@32"), results.get("paper/reference@32")
    if paper and ref and trees[0] in paper and trees[0] in ref:
        r = ref[trees[0]]["step_seconds"] / paper[trees[0]]["step_seconds"]
        out.append(f"paper, batch 32: {r:.2f}x the steps/s of the authors' algorithms")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--against", default=None, help="a commit or a checkout to compare with")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    p.add_argument(
        "--seconds", type=float, default=20.0, help="timed seconds per case and round (default 20)"
    )
    p.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    p.add_argument("--cases", default="cpu,paper", help="architectures (default cpu,paper)")
    p.add_argument("--out", type=Path, default=None, help="write the results as JSON")
    p.add_argument("--quick", action="store_true", help="tiny shapes, one round (smoke test)")
    p.add_argument(
        "--variants",
        default="",
        help="levers to measure as extra trees, comma-separated, '+' to combine: "
        + ", ".join(f"{k} ({v})" for k, v in VARIANTS.items()),
    )
    p.add_argument("--variant", default="", help=argparse.SUPPRESS)
    p.add_argument("--child", nargs=3, metavar=("ARCH", "IMPL", "BATCH"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        arch, impl, batch = args.child
        row = child(arch, impl, int(batch), args.seconds, args.threads, args.quick, args.variant)
        print(json.dumps(row))
        return 0
    if args.quick:
        args.rounds, args.seconds = 1, 0.0
    arches = [a.strip() for a in args.cases.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"this": (ROOT / "src", "")}
        for variant in filter(None, args.variants.split(",")):
            trees[f"this+{variant}"] = (ROOT / "src", variant)
        if args.against:
            trees[args.against] = (export_tree(args.against, Path(tmp)), "")
        raw: dict[str, dict[str, list[dict]]] = {}
        for r in range(args.rounds):
            for arch, impl, batch in CASES:
                if arch not in arches:
                    continue
                names = list(trees) if impl == "ours" else ["this"]
                for name in names if r % 2 == 0 else names[::-1]:
                    row = run_child(*trees[name], arch, impl, batch, args)
                    key = f"{arch}/{impl}@{batch}"
                    raw.setdefault(key, {}).setdefault(name, []).append(row)
                    print(
                        f"round {r + 1}: {key} [{name}] {row['step_seconds']:.3f} s/step",
                        file=sys.stderr,
                        flush=True,
                    )
    results = {k: {t: summarise(rows) for t, rows in v.items()} for k, v in raw.items()}
    names = list(trees)
    print(table(results, names))
    for line in ratios(results, names):
        print(line)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        meta = {
            "threads": args.threads,
            "rounds": args.rounds,
            "seconds": args.seconds,
            "torch": version("torch"),
            "date": time.strftime("%Y-%m-%d"),
            "trees": {
                k: f"{args.against if k == args.against else 'this checkout'} {v[1]}".strip()
                for k, v in trees.items()
            },
        }
        args.out.write_text(json.dumps({"meta": meta, "results": results, "raw": raw}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
