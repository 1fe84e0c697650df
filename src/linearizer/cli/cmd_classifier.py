"""``linearizer classifier train|eval``: the MNIST classifiers behind the metrics.

``--model lenet`` (default) is the LeNet behind FID (LeNet) and sample accuracy; ``--model
judge`` is the held-out judge behind FID (judge), which only reports and never chooses.
"""

from __future__ import annotations

import argparse
import datetime
import shlex
import sys
from pathlib import Path

import torch

from ..errors import LinearizerError
from .common import check_min, set_threads

DEFAULT_OUT = "runs/classifier/{model}_mnist.safetensors"
DEFAULT_SEEDS = {"lenet": 0, "judge": 1}
DEFAULT_EPOCHS = {"lenet": 12, "judge": 5}


def run_train(args: argparse.Namespace) -> int:
    from ..data import MNIST, load_mnist
    from ..metrics.classifier import describe, save_classifier, train_classifier
    from ..metrics.judge import save_judge, train_judge

    seed = getattr(args, "seed", DEFAULT_SEEDS[args.model])
    epochs = getattr(args, "epochs", DEFAULT_EPOCHS[args.model])
    out = Path(getattr(args, "out", DEFAULT_OUT.format(model=args.model)))
    if out.suffix != ".safetensors":
        raise LinearizerError(f"--out must end in .safetensors, got {out}")
    check_min("--epochs", epochs, 1)
    set_threads(args)
    lenet = args.model == "lenet"
    name = "LeNet" if lenet else "the judge"
    plan = (
        f"train {name} on MNIST (seed {seed}, {epochs} epochs, "
        f"{torch.get_num_threads()} threads) -> {out} + {out.with_suffix('.json')}"
    )
    if args.dry_run:
        print(f"dry run: would {plan}")
        return 0
    print(plan)
    train = load_mnist("train", args.root)
    test = load_mnist("test", args.root)
    fit, save = (train_classifier, save_classifier) if lenet else (train_judge, save_judge)
    result = fit(train, test, seed=seed, epochs=epochs)
    data = {f.name: f.raw_sha256 for f in MNIST.files.values()}
    command = "linearizer " + shlex.join(sys.argv[1:]) if sys.argv[1:] else f"train {args.model}"
    info = describe(result, seed, epochs, command, data)
    save(result.model, out, {**info, "date": datetime.date.today().isoformat()})
    print(f"test accuracy {result.test_accuracy:.4%} ({result.train_seconds:.0f} s); wrote {out}")
    return 0


def run_eval(args: argparse.Namespace) -> int:
    from ..data import load_mnist
    from ..metrics.classifier import accuracy, load_classifier
    from ..metrics.judge import load_judge

    model = (load_classifier if args.model == "lenet" else load_judge)(args.weights)
    images, labels = load_mnist("test", args.root)
    print(
        f"test accuracy {accuracy(model, images, labels):.4%} "
        f"({args.model}, {args.weights or 'committed weights'})"
    )
    return 0


MODEL_HELP = "lenet: the LeNet behind FID (LeNet); judge: the held-out judge behind FID (judge)"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("classifier", help="train or evaluate the MNIST classifier used by metrics")
    csub = p.add_subparsers(dest="classifier_command", metavar="ACTION", required=True)

    t = csub.add_parser("train", help="train a classifier on MNIST and print its test accuracy")
    t.add_argument("--model", choices=["lenet", "judge"], default="lenet", help=MODEL_HELP)
    # defaults that depend on --model are left out of the namespace (SUPPRESS) and filled in by
    # run_train; their help states them, as the formatter would print "(default: None)"
    per_model = {"default": argparse.SUPPRESS}
    t.add_argument(
        "--seed", type=int, help="random seed (default: 0 for lenet, 1 for judge)", **per_model
    )
    t.add_argument(
        "--epochs", type=int, help="epochs (default: 12 for lenet, 5 for judge)", **per_model
    )
    out_help = "weights file (.safetensors); the JSON record goes beside it (default: {})"
    t.add_argument(
        "--out", help=out_help.format(DEFAULT_OUT.replace("{model}", "MODEL")), **per_model
    )
    t.add_argument("--root", default=None, help="folder with the MNIST IDX files (optional)")
    t.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    t.add_argument("--dry-run", action="store_true", help="print the plan and stop")
    t.set_defaults(func=run_train)

    e = csub.add_parser("eval", help="print a classifier's MNIST test accuracy")
    e.add_argument("--model", choices=["lenet", "judge"], default="lenet", help=MODEL_HELP)
    e.add_argument("--weights", default=None, help="weights file (default: the committed ones)")
    e.add_argument("--root", default=None, help="folder with the MNIST IDX files (optional)")
    e.set_defaults(func=run_eval)
