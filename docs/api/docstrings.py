"""Griffe extension of the API reference: the package's docstrings, written for doctest and in
Sphinx's inline style, read as Markdown.

* A doctest block (a ``>>>`` line, its ``...`` continuations and the expected output, up to the
  next blank line) becomes a fenced ``pycon`` code block, without its ``# doctest:`` flags;
  Markdown would otherwise read the ``>>>`` prompts as nested block quotes.
* A Sphinx cross-reference role (``:class:`X```, ``:func:`~a.b.X```, ...) becomes inline code
  with the name it displays.

mkdocs.yml loads it for mkdocstrings (``extensions: [docs/api/docstrings.py]``); it changes only
the text the reference renders, never the package.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

DOCTEST_FLAG = re.compile(r"\s*#\s*doctest:.*$")
ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|obj|data|exc|const|term):`([^`]+)`")


def _role(match: re.Match[str]) -> str:
    target = match.group(1)
    if target.startswith("~"):  # Sphinx's short form: the last component only
        target = target[1:].rsplit(".", 1)[-1]
    return f"`{target}`"


def to_markdown(text: str) -> str:
    """``text`` with its doctest blocks fenced and its Sphinx roles as inline code."""
    lines = text.split("\n")
    out: list[str] = []
    in_fence = False
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.lstrip()
        if stripped.startswith("```"):
            in_fence = not in_fence
        elif not in_fence and stripped.startswith(">>>"):
            indent = line[: len(line) - len(stripped)]
            block = []
            while i < len(lines) and lines[i].strip():
                code = lines[i][len(indent) :] if lines[i].startswith(indent) else lines[i]
                block.append(DOCTEST_FLAG.sub("", code))
                i += 1
            if out and out[-1].strip():
                out.append("")
            out += [f"{indent}```pycon", *(indent + b for b in block), f"{indent}```", ""]
            continue
        out.append(line if in_fence else ROLE.sub(_role, line))
        i += 1
    return "\n".join(out)


class MarkdownDocstrings(griffe.Extension):
    """Rewrites every docstring with :func:`to_markdown` when griffe reads it."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = to_markdown(obj.docstring.value)
