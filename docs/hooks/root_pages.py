"""MkDocs hook: pages of the repository root (BENCHMARKS.md) as pages of the site.

``docs/benchmarks.md`` is a one-line stub that points to ``../BENCHMARKS.md``, so the link works
where the repository is browsed as files. On the site, the stub's text is replaced by the root
page's text, with its links rewritten from the repository root to ``docs/``: ``docs/X`` becomes
``X``, and a link to a repository file the site does not hold (source code) keeps its text only.
One file, two places to read it, and every link resolves in both.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

# site page (under docs/) -> the repository file whose text it shows
ROOT_PAGES = {"benchmarks.md": "BENCHMARKS.md"}

_LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def rewrite_links(text: str) -> str:
    """Rewrite a root page's links for its place under docs/.

    >>> rewrite_links("[a](docs/x.json) [b](src/m.py) [c](https://e.org) [d](#s)")
    '[a](x.json) b [c](https://e.org) [d](#s)'
    """

    def one(match: re.Match[str]) -> str:
        bang, label, target = match.groups()
        if target.startswith("#") or _SCHEME.match(target):
            return match.group(0)
        if target.startswith("docs/"):
            return f"{bang}[{label}]({target[len('docs/') :]})"
        return label

    return _LINK.sub(one, text)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    source = ROOT_PAGES.get(page.file.src_uri)
    if source is None:
        return markdown
    root = Path(config.config_file_path).parent
    return rewrite_links((root / source).read_text(encoding="utf-8"))
