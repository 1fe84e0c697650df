"""The package's imports point down the layer table of docs/architecture.md, with no cycles.

Every ``import`` in ``src/linearizer`` counts, also those inside functions (a lazy import is
still a dependency); ``importlib`` calls by name (presets, run kinds) do not.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "linearizer"

# Lowest first: a module may import its own layer and the layers below it.
LAYERS = [
    {"errors", "io", "checks", "config", "safe_pickle"},
    {"invertible", "operators"},
    {"algebra", "testing", "linearizer"},
    {"image_model", "data", "metrics"},
    {"training"},
    {"flow", "projective", "style", "restore"},
    {"compat", "repro", "explore", "pretrained"},
    {"cli", "__main__"},
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """``{module: modules it imports}`` inside the package (submodules, not their package, for
    ``from . import x``)."""
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in files]
                deps.update(subs if len(subs) == len(node.names) else [target])
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names)
        graph[name] = {_owner(d, files) for d in deps if d.startswith("linearizer")} - {name, ""}
    return graph


def _owner(name: str, files: dict) -> str:
    while name and name not in files:
        name = name.rpartition(".")[0]
    return name


def layer_of(module: str) -> int:
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else "linearizer"
    for i, layer in enumerate(LAYERS):
        if top in layer:
            return i
    raise AssertionError(f"{module}: its package {top!r} is in no layer of the table")


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    top = stack.pop()
                    comp.append(top)
                    if top == node:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_every_import_points_down_the_layer_table():
    graph = import_graph()
    upward = [
        f"{m} (layer {layer_of(m)}) imports {d} (layer {layer_of(d)})"
        for m, deps in sorted(graph.items())
        for d in sorted(deps)
        if layer_of(d) > layer_of(m)
    ]
    assert not upward, "\n".join(upward)


def test_no_import_cycles():
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def package_table() -> str:
    """The Markdown table of docs/architecture.md: each package, its layer, what it imports."""
    deps: dict[str, set[str]] = {}
    for module, imported in import_graph().items():
        top = _top(module)
        deps.setdefault(top, set()).update(_top(d) for d in imported if _top(d) != top)
    rows = ["| layer | package | imports (inside linearizer) |", "|---|---|---|"]
    for top in sorted(deps, key=lambda p: (layer_of(f"linearizer.{p}"), p)):
        names = sorted(deps[top], key=lambda p: (layer_of(f"linearizer.{p}"), p))
        shown = ", ".join(f"`{n}`" for n in names) or "-"
        rows.append(f"| {layer_of(f'linearizer.{top}')} | `{top}` | {shown} |")
    return "\n".join(rows)


def _top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "linearizer"


if __name__ == "__main__":  # python tests/test_layering.py: regenerate the architecture table
    print(package_table())
