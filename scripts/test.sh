#!/usr/bin/env bash
# The project's test command: set up the environment, lint, check the formatting (ruff format),
# type-check the public modules, then run the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check src tests benchmarks scripts
.venv/bin/ruff format --check src tests benchmarks scripts
bash scripts/typecheck.sh
.venv/bin/python -m pytest "$@"
