"""How well the components found without labels match the digits, per feature space.

    python benchmarks/components_ablation.py [--init-from pretrained:mnist] [--k 10]
                                             [--seeds 0 1] [--threads 1] [--out DIR]

For ``component_features`` = ``pixels`` and ``latent`` (the data side of ``--init-from``), and
each seed, :func:`linearizer.flow.components.find_components` assigns the 60,000 MNIST training
images to ``k`` components, exactly as ``--set components=K`` does before training. The labels
are never used to find them; here they only rate the result:

* purity: the share of images whose component's most common digit is their own;
* NMI: the normalised mutual information between components and digits (arithmetic mean of the
  two entropies; 1 is a relabelling of the digits, 0 is independence);
* the smallest and largest component's share, and the seconds the assignment took.

Writes ``components_ablation.json`` and ``components_ablation.md`` into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from torch import Tensor

from linearizer.data.config import DataConfig, load_images
from linearizer.flow.components import find_components


def purity(parts: Tensor, labels: Tensor, k: int) -> float:
    table = torch.zeros(k, int(labels.max()) + 1, dtype=torch.int64)
    table.index_put_((parts, labels), torch.ones_like(parts), accumulate=True)
    return float(table.max(1).values.sum()) / len(parts)


def nmi(parts: Tensor, labels: Tensor) -> float:
    joint = torch.zeros(int(parts.max()) + 1, int(labels.max()) + 1, dtype=torch.float64)
    joint.index_put_((parts, labels), torch.ones(len(parts), dtype=torch.float64), accumulate=True)
    joint /= joint.sum()
    pa, pb = joint.sum(1), joint.sum(0)

    def entropy(p: Tensor) -> float:
        p = p[p > 0]
        return float(-(p * p.log()).sum())

    nz = joint > 0
    mutual = float((joint[nz] * (joint[nz] / (pa[:, None] * pb[None, :])[nz]).log()).sum())
    return mutual / ((entropy(pa) + entropy(pb)) / 2)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--init-from", default="pretrained:mnist")
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path, default=Path("runs/components_ablation"))
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    images, labels = load_images(DataConfig(dataset="mnist"), 32, "train")
    labels = labels.long()
    rows = []
    for features in ("pixels", "latent"):
        for seed in args.seeds:
            start = time.perf_counter()
            parts = find_components(images, args.k, features, seed, args.init_from)
            seconds = time.perf_counter() - start
            share = torch.bincount(parts, minlength=args.k).double() / len(parts)
            rows.append(
                {
                    "features": features,
                    "seed": seed,
                    "purity": purity(parts, labels, args.k),
                    "nmi": nmi(parts, labels),
                    "min_share": float(share.min()),
                    "max_share": float(share.max()),
                    "seconds": seconds,
                }
            )
            print(rows[-1], flush=True)
    result = {
        "init_from": args.init_from,
        "k": args.k,
        "images": len(images),
        "torch": torch.__version__,
        "threads": args.threads,
        "date": time.strftime("%Y-%m-%d"),
        "rows": rows,
    }
    lines = [
        "| features | seed | purity | NMI | smallest share | largest share | seconds |",
        "|---|---|---|---|---|---|---|",
        *(
            f"| {r['features']} | {r['seed']} | {r['purity']:.3f} | {r['nmi']:.3f} | "
            f"{r['min_share']:.3f} | {r['max_share']:.3f} | {r['seconds']:.1f} |"
            for r in rows
        ),
    ]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "components_ablation.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / "components_ablation.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
