#!/usr/bin/env bash
# Type-check the public API modules with mypy (the modules and settings: [tool.mypy] in
# pyproject.toml; mypy comes pinned with the [dev] extra that scripts/setup.sh installs).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ! -x .venv/bin/mypy ]]; then
  echo "error: .venv/bin/mypy is missing: run bash scripts/setup.sh" >&2
  exit 1
fi
.venv/bin/mypy "$@"
