"""``linearizer classifier train|eval``: the MNIST LeNet behind FID (LeNet) and sample accuracy."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

import torch

from ..errors import LinearizerError

DEFAULT_OUT = "runs/classifier/lenet_mnist.safetensors"


def run_train(args: argparse.Namespace) -> int:
    from ..data import MNIST, load_mnist
    from ..metrics.classifier import describe, save_classifier, train_classifier

    out = Path(args.out)
    if out.suffix != ".safetensors":
        raise LinearizerError(f"--out must end in .safetensors, got {out}")
    if args.epochs < 1:
        raise LinearizerError(f"--epochs must be >= 1, got {args.epochs}")
    if args.threads:
        torch.set_num_threads(args.threads)
    plan = (
        f"train LeNet on MNIST (seed {args.seed}, {args.epochs} epochs, "
        f"{torch.get_num_threads()} threads) -> {out} + {out.with_suffix('.json')}"
    )
    if args.dry_run:
        print(f"dry run: would {plan}")
        return 0
    print(plan)
    train = load_mnist("train", args.root)
    test = load_mnist("test", args.root)
    result = train_classifier(train, test, seed=args.seed, epochs=args.epochs)
    data = {f.name: f.raw_sha256 for f in MNIST.files.values()}
    command = "linearizer " + shlex.join(sys.argv[1:]) if sys.argv[1:] else "train_classifier"
    save_classifier(result.model, out, describe(result, args.seed, args.epochs, command, data))
    print(f"test accuracy {result.test_accuracy:.4%} ({result.train_seconds:.0f} s); wrote {out}")
    return 0


def run_eval(args: argparse.Namespace) -> int:
    from ..data import load_mnist
    from ..metrics.classifier import accuracy, load_classifier

    model = load_classifier(args.weights)
    images, labels = load_mnist("test", args.root)
    print(
        f"test accuracy {accuracy(model, images, labels):.4%} "
        f"({args.weights or 'committed weights'})"
    )
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("classifier", help="train or evaluate the MNIST classifier used by metrics")
    csub = p.add_subparsers(dest="classifier_command", metavar="ACTION", required=True)

    t = csub.add_parser(
        "train",
        help="train LeNet on MNIST and print its test accuracy",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--epochs", type=int, default=12)
    t.add_argument(
        "--out",
        default=DEFAULT_OUT,
        help="weights file (.safetensors); the JSON record goes beside it",
    )
    t.add_argument("--root", default=None, help="folder with the MNIST IDX files (optional)")
    t.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    t.add_argument("--dry-run", action="store_true", help="print the plan and stop")
    t.set_defaults(func=run_train)

    e = csub.add_parser("eval", help="print a classifier's MNIST test accuracy")
    e.add_argument("--weights", default=None, help="weights file (default: the committed ones)")
    e.add_argument("--root", default=None, help="folder with the MNIST IDX files (optional)")
    e.set_defaults(func=run_eval)
