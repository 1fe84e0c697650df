"""Where a flow run's sample quality comes from: the trained map, or the post-hoc latent maps.

Each row draws ``--n`` images, three seeds, and measures them against the MNIST test images on
two classifiers: our LeNet (FID (LeNet), the metric every setting was chosen on) and the
held-out judge (FID (judge), never used to choose anything). Rows:

* ``method``: the trained map alone, ``g_data^-1(B g_noise(x0))`` (the run's sampler);
* ``calibration``: with the latent calibration K; ``transport``: with K and the transport;
* ``bypass``: the transport's flow ``F`` on plain ``N(0, I)`` in B's range,
  ``g_data^-1(Q (m_d + F(e) C^1/2))``, with ``g_noise``, ``B`` and ``K`` bypassed;
* ``pca-transport``: the same fit (same flow size and steps) in the training latents' top-k
  principal subspace instead of B's range (the latents' mean fills the rest);
* diagnostics in B's range ``Q``: training latents projected onto it (``train-projected``),
  one Gaussian with the data's mean and covariance there (``gaussian-in-range``), and ten,
  one per digit class (``class-gaussians``: uses labels, a diagnostic only).

It also reports the excess kurtosis of the coordinates along the data's six leading directions
in ``Q`` (the samples' against the data's), and the copy check: the pixel distance of each
image to its nearest training image (1st / 5th / 50th percentile).

    python benchmarks/controls.py --run pretrained:mnist --out docs/flow/controls

writes ``controls.json`` and ``controls.md`` there. Needs the MNIST cache.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import torch
from torch import Tensor

import linearizer.pretrained  # noqa: F401  (registers pretrained:NAME)
from linearizer.data import load_mnist
from linearizer.flow.calibration import FitOptions, calibration_info
from linearizer.flow.evaluate import EvalOptions, Reference
from linearizer.flow.transport import fit_transport
from linearizer.io import write_json, write_text
from linearizer.metrics.classifier import load_classifier
from linearizer.training.runs import load_run

F64 = torch.float64
SEEDS = (0, 1, 2)


def decode(model, z: Tensor, batch: int = 500) -> Tensor:
    with torch.no_grad():
        return torch.cat([model.decode(c.float(), 1.0).float() for c in z.split(batch)])


def encode(model, x: Tensor, batch: int = 1000) -> Tensor:
    with torch.no_grad():
        return torch.cat([model.encode(c, 1.0).to(F64) for c in x.split(batch)])


def sample(model, spec, n: int, seed: int) -> Tensor:
    noise = spec.noise(n, model.image_shape, torch.Generator().manual_seed(seed))
    with torch.no_grad():
        return torch.cat([model.sample(c, spec).float() for c in noise.split(500)])


def transport_draw(transport, e: Tensor, rest: Tensor) -> Tensor:
    """``rest + Q (m_d + F(e) C^1/2)``: the transport's flow on whitened coordinates ``e``."""
    with torch.no_grad():
        c = transport.dst_mean + transport.flow(e.to(F64)) @ transport.dst_colour
    return rest + c @ transport.basis.T


def kurtosis(coords: Tensor) -> list[float]:
    c = coords - coords.mean(0)
    return [float((c[:, i] ** 4).mean() / (c[:, i] ** 2).mean() ** 2) for i in range(c.shape[1])]


def copy_distance(images: Tensor, train: Tensor) -> list[float]:
    """1st, 5th and 50th percentile of the pixel distance to the nearest training image."""
    flat, pool = images.flatten(1).clamp(0, 1), train.flatten(1)
    best = torch.cat([torch.cdist(part, pool).min(1).values for part in flat.split(250)])
    return [float(torch.quantile(best, q)) for q in (0.01, 0.05, 0.5)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", default="pretrained:mnist", help="flow run with a latent transport")
    p.add_argument("--n", type=int, default=2000, help="images per row and seed")
    p.add_argument("--out", default="docs/flow/controls", help="output folder")
    p.add_argument("--threads", type=int, default=2, help="torch threads")
    p.add_argument(
        "--pca-steps",
        type=int,
        default=0,
        help="Adam steps of the PCA control's fit (0: as the run's transport)",
    )
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    run = load_run(args.run)
    model = run.model
    cal = model.calibration
    if cal is None or cal.transport is None:
        print(f"{args.run} holds no latent transport", file=sys.stderr)
        return 2
    spec = cal.sampler  # the schedule and temperature the maps were fitted for
    tau = cal.transport
    test, _ = load_mnist("test", download=False)
    train, labels = load_mnist("train", download=False)
    ref = Reference(test, load_classifier(), EvalOptions(n=args.n))
    latents = encode(model, train)
    q = tau.basis
    k = q.shape[1]

    # the same fit in the training latents' top-k principal subspace
    mean = latents.mean(0)
    _, _, vh = torch.linalg.svd(latents - mean, full_matrices=False)
    pca = vh[:k].T.contiguous()
    fit = FitOptions.from_record(calibration_info(run.path)["fit"])
    topts = fit.transport()  # the same flow and fit length as the run's transport
    if args.pca_steps:
        topts = dataclasses.replace(topts, steps=args.pca_steps)
    t0 = time.perf_counter()
    gen = torch.Generator().manual_seed(0)
    pca_tau = fit_transport(
        pca, torch.randn(args.n, k, generator=gen, dtype=F64), latents @ pca, topts
    )
    pca_fit_s = time.perf_counter() - t0
    pca_rest = mean - (mean @ pca) @ pca.T

    coords = latents @ q
    # each Gaussian's mean and Cholesky factor, once: all of B's range, then one per class
    chol = torch.linalg.cholesky(torch.cov(coords.T))
    own = [coords[labels == c] for c in range(10)]
    classes = [(o.mean(0), torch.linalg.cholesky(torch.cov(o.T))) for o in own]
    rows: dict[str, list[dict]] = {}

    def add(name: str, images: Tensor) -> None:
        rows.setdefault(name, []).append(ref.measure(images))

    keep: dict[str, Tensor] = {}
    for seed in SEEDS:
        g = torch.Generator().manual_seed(1000 + seed)
        for maps in ("none", "calibration", "transport"):
            x = sample(model, spec.replace(maps=maps), args.n, seed)
            add({"none": "method"}.get(maps, maps), x)
            keep.setdefault(maps, x)
        e = torch.randn(args.n, k, generator=g, dtype=F64)
        add("bypass", decode(model, transport_draw(tau, e, torch.zeros(model.dim, dtype=F64))))
        add("pca-transport", decode(model, transport_draw(pca_tau, e, pca_rest)))
        pick = torch.randperm(len(train), generator=g)[: args.n]
        add("train-projected", decode(model, (coords[pick] @ q.T)))
        gauss = coords.mean(0) + torch.randn(args.n, k, generator=g, dtype=F64) @ chol.T
        add("gaussian-in-range", decode(model, gauss @ q.T))
        cls = labels[pick]
        mix = torch.empty(args.n, k, dtype=F64)
        for c, (centre, ch) in enumerate(classes):
            where = cls == c
            mix[where] = centre + torch.randn(int(where.sum()), k, generator=g, dtype=F64) @ ch.T
        add("class-gaussians", decode(model, mix @ q.T))

    # the samples' coordinates along the data's six leading directions in Q
    _, _, lead = torch.linalg.svd(coords - coords.mean(0), full_matrices=False)
    noise = spec.noise(args.n, model.image_shape, torch.Generator().manual_seed(0))
    b = model.one_step_matrix(spec)  # the trained map alone
    with torch.no_grad():
        z1 = torch.cat([model.encode(c, 0.0).to(F64) @ b.T for c in noise.split(500)])
    six = lead[:6].T
    kurt = {"method samples": kurtosis((z1 @ q) @ six), "training latents": kurtosis(coords @ six)}
    copies = {"test images": copy_distance(test[: args.n], train)}
    for maps, x in keep.items():
        copies[{"none": "method"}.get(maps, maps)] = copy_distance(x, train)

    summary = {}
    for name, per_seed in rows.items():
        summary[name] = {
            key: [r[key] for r in per_seed]
            for key in ("fid_lenet", "fid_judge", "confidence", "precision", "recall")
        }
    result = {
        "run": args.run,
        "step": run.step,
        "n": args.n,
        "seeds": list(SEEDS),
        "spec": spec.to_dict(),
        "latent_range": k,
        "pca_fit_seconds": pca_fit_s,
        "pca_transport": {"steps": topts.steps, "blocks": topts.blocks, "hidden": topts.hidden},
        "rows": summary,
        "kurtosis": kurt,
        "copy_distance_percentiles_1_5_50": copies,
        "seconds": time.perf_counter() - start,
        "torch": torch.__version__,
        "command": "python benchmarks/controls.py " + " ".join(argv or sys.argv[1:]),
    }
    out = Path(args.out)
    write_json(out / "controls.json", result)
    write_text(out / "controls.md", render(result))
    print(render(result))
    return 0


def render(result: dict) -> str:
    def cell(values: list[float], fmt: str) -> str:
        return " / ".join(fmt.format(v) for v in values)

    lines = [
        f"Run `{result['run']}` (step {result['step']}), {result['n']} images per row and "
        f"seed, seeds {result['seeds']}; sampler `{json.dumps(result['spec'])}`.",
        "",
        "| row | FID (LeNet) | FID (judge) | confidence |",
        "|---|---|---|---|",
    ]
    for name, r in result["rows"].items():
        lines.append(
            f"| {name} | {cell(r['fid_lenet'], '{:.1f}')} | "
            f"{cell(r['fid_judge'], '{:.1f}')} | {cell(r['confidence'], '{:.3f}')} |"
        )
    lines += ["", "Kurtosis along the data's six leading directions in B's range (3 is Gaussian):"]
    for name, values in result["kurtosis"].items():
        lines.append(f"- {name}: " + ", ".join(f"{v:.2f}" for v in values))
    lines += ["", "Pixel distance to the nearest training image (1st / 5th / 50th percentile):"]
    for name, values in result["copy_distance_percentiles_1_5_50"].items():
        lines.append(f"- {name}: " + " / ".join(f"{v:.2f}" for v in values))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
