#!/usr/bin/env bash
# Create .venv and install the package with dev tools. Idempotent; safe to rerun.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
.venv/bin/python -m pip install -q -c constraints/cpu.txt -e ".[dev]"
if .venv/bin/python -m pip show torchvision >/dev/null 2>&1; then
  echo "error: torchvision is installed in .venv; it breaks imports beside torch 2.13.0" >&2
  exit 1
fi
