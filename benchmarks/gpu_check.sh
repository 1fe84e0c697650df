#!/usr/bin/env bash
# The prepared GPU check (<= 10 minutes on one GPU): trains the `paper` preset for a fixed number
# of steps and reports steps/s, peak memory (with and without memory-saving backprop), one-step
# sampling throughput and a quick FID (LeNet). Results go to $OUT (or ./gpu-check-out).
#
# On a machine whose python3 already has torch (+ numpy, scipy, safetensors, pillow, matplotlib,
# tqdm), from the repository root. MNIST comes from $LINEARIZER_DATA (a folder holding the
# library's mnist.npz cache; by default .gpu-data/, which you can fill here with
#   mkdir -p .gpu-data && cp ~/.cache/linearizer/mnist.npz .gpu-data/
# and carry along; .gitignore lists it).
#
#   bash benchmarks/gpu_check.sh [extra gpu_check.py options, e.g. --steps 300]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/gpu-check-out}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
export LINEARIZER_DATA="${LINEARIZER_DATA:-$PWD/.gpu-data}"
PY="${PYTHON:-python3}"
"$PY" - <<'PYEOF' 2>&1 | tee "$OUT/env.txt"
import platform, torch
print("python", platform.python_version(), "torch", torch.__version__,
      "cuda", torch.version.cuda, "gpu", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
PYEOF
timeout 570 "$PY" benchmarks/gpu_check.py --out "$OUT" "$@" 2>&1 | tee "$OUT/gpu_check.log"

# ----------------------------------------------------------------------------------------------
# Colour step (separate from the MNIST check above): the `celeba` preset (64x64x3, D = 12,288;
# the authors' CelebA configuration) on CelebA when $CELEBA_ROOT holds img_align_celeba/ and
# list_eval_partition.txt, else on synthetic colour images of the same size: steps/s and peak
# memory (with and without memory-saving backprop), B at T = 100 dense vs factored, one-step
# throughput, a sample grid. Writes $OUT/celeba/ and $OUT/gpu_celeba.log. Skip: CELEBA_STEP=0.
if [[ "${CELEBA_STEP:-1}" != 0 ]]; then
  timeout 300 "$PY" benchmarks/gpu_celeba.py --out "$OUT/celeba" 2>&1 | tee "$OUT/gpu_celeba.log"
fi
