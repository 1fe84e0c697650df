#!/usr/bin/env bash
# The main job on a fresh machine: set up, fetch MNIST, train the `cpu` preset (5,600 steps) and
# measure the paper's claims on it (30 min on a 2-core AMD EPYC that trains 4.5 steps/s, 40 to
# 46 min on ones that train 3.1 to 2.8, install included: README.md and BENCHMARKS.md give the
# measurements).
# Prints this machine's expected time before training, and the claims table at the end.
# Usage: bash scripts/main.sh [OUT_DIR]   (default runs/repro-cpu; on a GPU: PRESET=paper)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
OUT=${1:-runs/repro-cpu}
PRESET=${PRESET:-cpu}
.venv/bin/linearizer data fetch --dataset mnist
.venv/bin/linearizer repro "$PRESET" --out "$OUT" --dry-run
.venv/bin/linearizer repro "$PRESET" --out "$OUT"
