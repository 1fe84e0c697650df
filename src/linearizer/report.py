"""What every report shares: the Markdown page and its tables, and matplotlib figures without
pyplot's global state, written atomically as PNG.

>>> print(render_report("Run", "Two sets.", section("FID", markdown_table(["set", "FID"],
...     [["train", "8.1"], ["a|b", "9"]]))), end="")
# Run
<BLANKLINE>
Two sets.
<BLANKLINE>
## FID
<BLANKLINE>
| set | FID |
|---|---|
| train | 8.1 |
| a\\|b | 9 |
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from .io import write_bytes

# A report's block: a paragraph or table as one string, or its lines; None or empty: left out.
Block = str | Sequence[str] | None


def _text(block: Block) -> str:
    return block if isinstance(block, str) else "\n".join(block or ())


def section(heading: str, *blocks: Block, level: int = 2) -> str:
    """``## heading`` (``level`` hashes) and its blocks, as one block."""
    return render_report(heading, *blocks, level=level).rstrip("\n")


def render_report(title: str, *blocks: Block, level: int = 1) -> str:
    """The Markdown of every ``REPORT.md``: ``# title``, then the non-empty blocks, one blank
    line between each, and one final newline."""
    parts = ["#" * level + " " + title, *(t.strip("\n") for t in map(_text, blocks) if t.strip())]
    return "\n\n".join(parts) + "\n"


def cell(value: object) -> str:
    """A table cell: pipes escaped and line breaks folded, so a cell never breaks the row."""
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(header: Sequence[object], rows: Iterable[Sequence[object]]) -> str:
    """Header, separator and one line per row (no trailing newline)."""
    lines = ["| " + " | ".join(cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def new_figure(width: float, height: float, dpi: int = 110) -> Any:
    """A matplotlib ``Figure`` of ``width`` x ``height`` inches on its own Agg canvas (no pyplot:
    nothing global to close, safe in threads)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=dpi)
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig: Any, path: str | Path) -> Path:
    """Write ``fig`` as PNG (cropped to its content, captions included), atomically."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return write_bytes(Path(path), buf.getvalue())
