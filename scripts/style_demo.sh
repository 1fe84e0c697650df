#!/usr/bin/env bash
# Modular style transfer, end to end on CPU: offline stylised targets (4 styles from
# scikit-image's bundled photos), a 4-style operator bank, the authors' index-hypernetwork model
# trained the same way, then measurements (results.json) and interpolation strips.
# About 7 minutes on 2 CPU cores (measured: 402 s; the budget is 30 minutes).
#
# Usage: bash scripts/style_demo.sh [OUT_DIR] [RESULTS_DIR]
#   OUT_DIR      runs and targets (default runs/style-demo; must not exist yet)
#   RESULTS_DIR  results.json and PNGs (default OUT_DIR/results; the committed copy: docs/style)
# Environment: STEPS (training steps per model, default 1200), THREADS (default 2),
#              IMAGE_FORMAT (png or jpg), LINEARIZER (the command, default
#              .venv/bin/linearizer, else linearizer on PATH).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/style-demo}
RESULTS=${2:-$OUT/results}
STEPS=${STEPS:-1200}
THREADS=${THREADS:-2}
if [ -z "${LINEARIZER:-}" ]; then
    if [ -x .venv/bin/linearizer ]; then LINEARIZER=.venv/bin/linearizer; else LINEARIZER=linearizer; fi
fi
PY=$(dirname "$(command -v "$LINEARIZER")")/python
if [ -e "$OUT" ]; then
    echo "style_demo: $OUT already exists; pass another folder" >&2
    exit 2
fi
if ! "$PY" -c "import skimage" 2>/dev/null; then
    echo "style_demo: scikit-image is missing (its bundled photos are the content and styles);" \
         "install it with: pip install 'linearizer[style]'" >&2
    exit 2
fi
now() { date +%s; }
t0=$(now)
"$LINEARIZER" style targets --content skimage:chelsea --out "$OUT/targets" --threads "$THREADS"
t1=$(now)
common=(--content skimage:chelsea --styles "$OUT/targets" --set "max_steps=$STEPS"
        --set "threads=$THREADS" --set max_minutes=25 --set progress=false)
"$LINEARIZER" train style "${common[@]}" --out "$OUT/bank"
"$LINEARIZER" train style "${common[@]}" --set bank=index --out "$OUT/index"
t2=$(now)
targets=$((t1 - t0))
before=$((t2 - t0))
"$LINEARIZER" style evaluate "$OUT/bank" --index-run "$OUT/index" --out "$RESULTS" \
    --threads "$THREADS" --image-format "${IMAGE_FORMAT:-png}" \
    --wall-time "targets=$targets" --wall-time "before_evaluate=$before"
echo "style_demo: results in $RESULTS (results.json, REPORT.md, compare_*, mix_grid, strength)"
