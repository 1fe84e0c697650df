"""Check the links of a built documentation site (stdlib only).

Usage: python scripts/check_site_links.py SITE_DIR

Every ``href`` and ``src`` in the site's HTML must resolve inside the site folder. A link that
starts with ``/`` (but not ``//``) is root-absolute: it works on a code host that serves the
repository root and breaks on a site served from a sub-path, so it is a problem even when the
file exists. A relative link must name a file (or a folder with ``index.html``) that exists in
the site. Links with a scheme (``http:``, ``https:``, ``mailto:``, ...), protocol-relative
links (``//host``) and pure ``#anchors`` are not checked; a query or fragment is stripped.
The site's own ``404.html`` is skipped: the server
returns it at any URL, so its links are root-absolute by design.
Prints one line per problem and exits 1 when there is any, 0 otherwise.

>>> classify("https://example.org/x"), classify("#top"), classify("/BENCHMARKS.md")
('external', 'external', 'root-absolute')
>>> classify("../flow/"), classify("img.png?v=1#a")
('relative', 'relative')
"""

from __future__ import annotations

import re
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_ATTRS = ("href", "src")
# The server returns 404.html at whatever URL was asked for, so mkdocs writes that page's links
# root-absolute on purpose: no relative link could work from every depth.
_SERVED_AT_ANY_URL = ("404.html",)


class _LinkParser(HTMLParser):
    """Collects (line, attribute, value) of every href/src in one HTML file."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: list[tuple[int, str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in _ATTRS and value is not None:
                self.links.append((self.getpos()[0], name, value.strip()))

    handle_startendtag = handle_starttag


def classify(link: str) -> str:
    """'external' (not checked), 'root-absolute' (always a problem) or 'relative'."""
    if not link or link.startswith("#") or link.startswith("//") or _SCHEME.match(link):
        return "external"
    if link.startswith("/"):
        return "root-absolute"
    return "relative"


def _target_exists(site: Path, page: Path, link: str) -> bool:
    path = unquote(urlsplit(link).path)
    if not path:  # "?query" or "#fragment" only: the page itself
        return True
    target = (page.parent / path).resolve()
    if target != site and site not in target.parents:
        return False
    if target.is_dir():
        return (target / "index.html").is_file()
    return target.is_file()


def check_page(site: Path, page: Path) -> list[str]:
    """The problems of one HTML page, one line each (path relative to the site)."""
    parser = _LinkParser()
    parser.feed(page.read_text(encoding="utf-8", errors="replace"))
    name = page.relative_to(site).as_posix()
    problems = []
    for line, attr, link in parser.links:
        kind = classify(link)
        if kind == "root-absolute":
            problems.append(f"{name}:{line}: root-absolute {attr}: {link}")
        elif kind == "relative" and not _target_exists(site, page, link):
            problems.append(f"{name}:{line}: broken {attr}: {link}")
    return problems


def check_site(site: Path) -> list[str]:
    """Every problem of every HTML page under ``site``, sorted by page."""
    site = site.resolve()
    problems: list[str] = []
    for page in sorted(site.rglob("*.html")):
        if page.relative_to(site).as_posix() not in _SERVED_AT_ANY_URL:
            problems.extend(check_page(site, page))
    return problems


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: check_site_links.py SITE_DIR (a built site folder)", file=sys.stderr)
        return 2
    problems = check_site(Path(argv[0]))
    for line in problems:
        print(line)
    pages = sum(1 for _ in Path(argv[0]).rglob("*.html"))
    if problems:
        print(f"site links: {len(problems)} problem(s) in {pages} HTML pages", file=sys.stderr)
        return 1
    print(f"site links: {pages} HTML pages, no root-absolute or broken links")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
