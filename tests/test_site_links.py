"""scripts/check_site_links.py on tiny fake sites: what it passes and what it reports."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


links = _load("check_site_links", ROOT / "scripts" / "check_site_links.py")
hook = _load("root_pages", ROOT / "docs" / "hooks" / "root_pages.py")

GOOD = """<html><head><link href="assets/site.css" rel="stylesheet"></head><body>
<a href="flow/">flow</a> <a href="flow/index.html#top">top</a> <img src="img/a.png?v=2">
<a href="https://example.org/x">out</a> <a href="mailto:a@b.c">mail</a> <a href="#here">here</a>
<a href="//cdn.example.org/x.js">cdn</a>
</body></html>"""


def _site(root: Path, index: str = GOOD) -> Path:
    (root / "flow").mkdir(parents=True)
    (root / "img").mkdir()
    (root / "assets").mkdir()
    (root / "assets" / "site.css").write_text("")
    (root / "img" / "a.png").write_bytes(b"")
    (root / "flow" / "index.html").write_text('<a href="../index.html">up</a>')
    (root / "index.html").write_text(index)
    # served at any URL, so its links are root-absolute on purpose
    (root / "404.html").write_text('<a href="/flow/">home</a>')
    return root


def test_a_clean_site_passes(tmp_path, capsys):
    site = _site(tmp_path / "site")
    assert links.check_site(site) == []
    assert links.main([str(site)]) == 0
    assert "no root-absolute or broken links" in capsys.readouterr().out


def test_a_root_absolute_link_fails(tmp_path, capsys):
    site = _site(
        tmp_path / "site", GOOD.replace("</body>", '<a href="/BENCHMARKS.md">b</a></body>')
    )
    assert links.main([str(site)]) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert out == ["index.html:5: root-absolute href: /BENCHMARKS.md"]


def test_a_root_absolute_link_fails_even_when_the_file_exists(tmp_path):
    site = _site(tmp_path / "site", '<img src="/img/a.png">')
    assert links.check_site(site) == ["index.html:1: root-absolute src: /img/a.png"]


def test_a_broken_relative_link_fails(tmp_path, capsys):
    site = _site(tmp_path / "site")
    (site / "flow" / "index.html").write_text('<a href="../missing/page.html#x">gone</a>')
    assert links.main([str(site)]) == 1
    assert capsys.readouterr().out.strip().splitlines() == [
        "flow/index.html:1: broken href: ../missing/page.html#x"
    ]


def test_a_folder_without_index_and_a_link_out_of_the_site_fail(tmp_path):
    site = _site(tmp_path / "site", '<a href="img/">i</a><a href="../outside.html">o</a>')
    (tmp_path / "outside.html").write_text("")
    assert links.check_site(site) == [
        "index.html:1: broken href: img/",
        "index.html:1: broken href: ../outside.html",
    ]


def test_a_missing_site_folder_is_a_usage_error(tmp_path):
    assert links.main([str(tmp_path / "nope")]) == 2


def test_the_hook_rewrites_root_links_for_the_site():
    text = "[raw](docs/benchmarks/speed.json) [code](src/linearizer/x.py) [out](https://e.org)"
    assert hook.rewrite_links(text) == "[raw](benchmarks/speed.json) code [out](https://e.org)"
    assert hook.ROOT_PAGES == {"benchmarks.md": "BENCHMARKS.md"}
    assert (ROOT / "docs" / "benchmarks.md").is_file()
