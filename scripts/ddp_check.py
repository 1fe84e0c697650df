"""Train the toy task in 1 process and in N torchrun processes; compare weights and speed.

    .venv/bin/python scripts/ddp_check.py --nproc 2 --set dim=256 width=1024 batch_size=256
    .venv/bin/python scripts/ddp_check.py --nproc 8 --set device=cuda   # on a GPU machine

Prints the steps/s of each run (training loop only, startup excluded) and the largest weight
difference between them; exits 1 if it exceeds --tolerance.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from linearizer.training.checkpoint import latest_checkpoint, read_checkpoint

TOY = Path(__file__).resolve().parents[1] / "tests" / "toy_task.py"  # the toy task fixture
DEFAULTS = [
    "max_steps=100",
    "ckpt_every=0",
    "progress=false",
    "threads=1",
    "ema_decay=0",
    "log_every=50",
]


def run(out: Path, nproc: int, overrides: list[str]) -> float:
    toy = [str(TOY), str(out), "--set", *DEFAULTS, *overrides]
    if nproc == 1:
        cmd = [sys.executable, *toy]
    else:
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            str(nproc),
            *toy,
        ]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    return json.loads((out / "run.json").read_text())["seconds"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--tolerance", type=float, default=1e-5)
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    steps = int(dict(s.split("=", 1) for s in DEFAULTS + args.set)["max_steps"])
    with tempfile.TemporaryDirectory() as tmp:
        one, many = Path(tmp) / "one", Path(tmp) / "many"
        t1 = run(one, 1, args.set)
        tn = run(many, args.nproc, args.set)
        _, a = read_checkpoint(latest_checkpoint(one))
        _, b = read_checkpoint(latest_checkpoint(many))
    worst = max(
        (a[k].double() - b[k].double()).abs().max().item() for k in a if k.startswith("model.")
    )
    print(f"1 process : {steps / t1:8.2f} steps/s")
    print(f"{args.nproc} processes: {steps / tn:8.2f} steps/s  (x{t1 / tn:.2f})")
    print(f"max |w1 - w{args.nproc}| = {worst:.3g} (tolerance {args.tolerance:g})")
    return 0 if worst <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
