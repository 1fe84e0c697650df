#!/usr/bin/env bash
# Inverse problems with the projective model as the prior, end to end on CPU: trains our
# projective model and the IGN baseline side by side (one thread each), then a short one-step
# flow (for the noise-optimisation baseline), then measures every method on every task
# (linearizer restore-report: results.json, REPORT.md, strips). Pretrained models are used
# instead of training when given (OURS / IGN / FLOW) or when linearizer.pretrained has them.
# Budget: 30 minutes on 2 CPU cores (training MINUTES + FLOW_MINUTES, then the report).
#
# Usage: bash scripts/restore_demo.sh [OUT_DIR] [RESULTS_DIR]
#   OUT_DIR      runs (default runs/restore-demo; must not exist yet)
#   RESULTS_DIR  the report (default OUT_DIR/report; the committed copy: docs/restore)
# Environment: MINUTES (training budget of ours and of IGN, run in parallel, default 8),
#              FLOW_MINUTES (default 6), N (test digits per task, default 1000),
#              NOISE_STEPS (Adam steps of the noise optimisation, default 50), THREADS (default 2),
#              OURS / IGN / FLOW (run folders or pretrained:NAME to use instead of training),
#              LINEARIZER (the command, default .venv/bin/linearizer, else linearizer on PATH).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/restore-demo}
RESULTS=${2:-$OUT/report}
MINUTES=${MINUTES:-8}
FLOW_MINUTES=${FLOW_MINUTES:-6}
N=${N:-1000}
NOISE_STEPS=${NOISE_STEPS:-50}
THREADS=${THREADS:-2}
if [ -z "${LINEARIZER:-}" ]; then
    if [ -x .venv/bin/linearizer ]; then LINEARIZER=.venv/bin/linearizer; else LINEARIZER=linearizer; fi
fi
PY=$(dirname "$(command -v "$LINEARIZER")")/python
if [ -e "$OUT" ]; then
    echo "restore_demo: $OUT already exists; pass another folder" >&2
    exit 2
fi
mkdir -p "$OUT"

# A pretrained model by name, when the installed version ships one (prints the spec or nothing).
pretrained() {
    "$PY" - "$1" <<'EOF' 2>/dev/null || true
import sys
try:
    from linearizer.pretrained import resolve
    resolve(sys.argv[1])
    print("pretrained:" + sys.argv[1])
except Exception:
    pass
EOF
}
OURS=${OURS:-$(pretrained mnist-projective)}
IGN=${IGN:-$(pretrained mnist-ign)}
FLOW=${FLOW:-$(pretrained mnist)}

t0=$(date +%s)
pids=()
if [ -z "$OURS" ]; then
    OURS=$OUT/projective
    "$LINEARIZER" train projective --preset cpu --out "$OURS" --set "max_minutes=$MINUTES" \
        --set progress=false > "$OUT/train-projective.log" 2>&1 &
    pids+=($!)
fi
if [ -z "$IGN" ]; then
    IGN=$OUT/ign
    "$LINEARIZER" train projective --preset cpu --baseline ign --out "$IGN" \
        --set "max_minutes=$MINUTES" --set progress=false > "$OUT/train-ign.log" 2>&1 &
    pids+=($!)
fi
for p in "${pids[@]}"; do wait "$p"; done
if [ -z "$FLOW" ]; then
    FLOW=$OUT/flow
    "$LINEARIZER" train flow --preset cpu --out "$FLOW" --set "max_minutes=$FLOW_MINUTES" \
        --set finish_minutes=0 \
        --set "threads=$THREADS" --set progress=false > "$OUT/train-flow.log" 2>&1
fi
t1=$(date +%s)
echo "restore_demo: models ready after $((t1 - t0)) s (ours $OURS, IGN $IGN, flow $FLOW)"
OMP_NUM_THREADS=$THREADS "$LINEARIZER" restore-report "$OURS" --ign "$IGN" --flow "$FLOW" \
    --out "$RESULTS" --n "$N" --noise-steps "$NOISE_STEPS"
t2=$(date +%s)
echo "restore_demo: report in $RESULTS after $((t2 - t0)) s in all (training $((t1 - t0)) s)"
