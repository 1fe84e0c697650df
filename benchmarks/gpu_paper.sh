#!/usr/bin/env bash
# The paper's path on one GPU in one command (about 9 minutes on an H200): environment, the
# prepared check (steps/s and peak memory with and without memory-saving backprop), a `paper`
# preset training for a fixed number of minutes, B build times (T = 100/1000, float64/float32),
# one-step and multi-step throughput, FID (LeNet) of one-step samples, then `linearizer repro` on
# the trained run (one-step vs multi-step PSNR, inversion PSNR, linearity, the claims table).
#
#   OUT=gpu-out MINUTES=5 SAMPLES=10000 bash benchmarks/gpu_paper.sh
#   DRY=1 bash benchmarks/gpu_paper.sh       # the same path on the CPU with a tiny network
#
# Run from the repository root with a python3 that has torch (+ numpy, scipy, safetensors, pillow,
# matplotlib, tqdm). MNIST comes from $LINEARIZER_DATA (default .gpu-data/, a folder holding the
# library's mnist.npz cache: `mkdir -p .gpu-data && cp ~/.cache/linearizer/mnist.npz .gpu-data/`).
# At most eight files land in $OUT, none in sub-folders: env.txt, gpu_check.json, gpu_check.log,
# samples.png, metrics.jsonl, repro_results.json, repro_REPORT.md, repro.log.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-gpu-out}"
MINUTES="${MINUTES:-5}"
SAMPLES="${SAMPLES:-10000}"
WORK="${WORK:-$(mktemp -d)}"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
export LINEARIZER_DATA="${LINEARIZER_DATA:-$PWD/.gpu-data}"
PY="${PYTHON:-python3}"
mkdir -p "$OUT"
if [[ ! -f "$LINEARIZER_DATA/mnist.npz" ]]; then
  echo "gpu_paper: no MNIST cache at $LINEARIZER_DATA/mnist.npz (see the header)" >&2
  exit 2
fi

if [[ "${DRY:-0}" == 1 ]]; then
  DEVICE=cpu
  CHECK=(--tiny --steps 3 --minutes 1 --samples 64 --probe-steps 1)
  REPRO=(--quick --fid-n 64)
else
  DEVICE=cuda
  CHECK=(--steps 1000000 --minutes "$MINUTES" --samples "$SAMPLES")
  REPRO=(--fid-n "$SAMPLES")
fi

{
  date -u +"date %Y-%m-%dT%H:%M:%SZ"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version \
    --format=csv,noheader
  "$PY" -c 'import platform, torch; print("python", platform.python_version(), "torch",
torch.__version__, "cuda", torch.version.cuda)'
} 2>&1 | tee "$OUT/env.txt"

start=$(date +%s)
"$PY" benchmarks/gpu_check.py --device "$DEVICE" --out "$WORK/check" --run "$WORK/run" \
  "${CHECK[@]}" 2>&1 | tee "$OUT/gpu_check.log"
for f in gpu_check.json samples.png metrics.jsonl; do
  [[ -f "$WORK/check/$f" ]] && cp "$WORK/check/$f" "$OUT/$f"
done
echo "check + training: $(( $(date +%s) - start )) s" | tee -a "$OUT/gpu_check.log"

start=$(date +%s)
"$PY" -m linearizer.cli.main repro "$WORK/run" --out "$WORK/repro" --device "$DEVICE" \
  "${REPRO[@]}" 2>&1 | tee "$OUT/repro.log"
cp "$WORK/repro/results.json" "$OUT/repro_results.json"
cp "$WORK/repro/REPORT.md" "$OUT/repro_REPORT.md"
echo "repro: $(( $(date +%s) - start )) s" | tee -a "$OUT/repro.log"
