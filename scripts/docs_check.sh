#!/usr/bin/env bash
# Build the guides and API reference site (mkdocs.yml) with warnings as errors: a broken link,
# a nav entry without its page or a docstring the reference cannot render fails it. Then check
# every href/src of the built HTML (scripts/check_site_links.py): mkdocs leaves a root-absolute
# link such as /BENCHMARKS.md as is, and it 404s on the site.
# Installs the pinned [docs] extra into .venv (scripts/setup.sh makes .venv). The site goes to
# a temporary folder, removed at exit; `mkdocs serve` previews it while writing.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ! -x .venv/bin/python ]]; then
  echo "error: .venv is missing: run bash scripts/setup.sh" >&2
  exit 1
fi
.venv/bin/python -m pip install -q -c constraints/cpu.txt -e ".[docs]"
if .venv/bin/python -m pip show torchvision >/dev/null 2>&1; then
  echo "error: torchvision is installed in .venv; it breaks imports beside torch 2.13.0" >&2
  exit 1
fi
SITE=$(mktemp -d "${TMPDIR:-/tmp}/linearizer-site.XXXXXX")
trap 'rm -rf "$SITE"' EXIT
# Material for MkDocs prints a banner about MkDocs 2.0 on every build; it is not a warning
export NO_MKDOCS_2_WARNING=1
.venv/bin/mkdocs build --strict --site-dir "$SITE"
.venv/bin/python scripts/check_site_links.py "$SITE"
echo "docs site built: $(find "$SITE" -name '*.html' | wc -l) HTML pages, $(du -sh "$SITE" | cut -f1)"
