"""The one Markdown table every report and results file uses.

>>> print(markdown_table(["set", "FID"], [["train", "8.1"], ["a|b", "9"]]))
| set | FID |
|---|---|
| train | 8.1 |
| a\\|b | 9 |
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def cell(value: object) -> str:
    """A table cell: pipes escaped and line breaks folded, so a cell never breaks the row."""
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(header: Sequence[object], rows: Iterable[Sequence[object]]) -> str:
    """Header, separator and one line per row (no trailing newline)."""
    lines = ["| " + " | ".join(cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)
