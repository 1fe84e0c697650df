"""The package's imports point down the layer table of docs/architecture.md, with no cycles.

Every ``import`` in ``src/linearizer`` counts, also those inside functions (a lazy import is
still a dependency), and so does every import by a name written in the source:
``importlib.import_module("linearizer.x")``, ``__import__("linearizer.x")``, or either called
with a module-level constant holding that name. A name computed at run time cannot be followed:
:func:`lookups` lists those calls (the registry's, which finds a preset, run kind, source or
command by the module name its table declares), and a test pins the list, so a new one is a
decision, not an accident.

``python tests/test_layering.py [PACKAGE_DIR]`` prints the layer table, the circles and the
lookups of ``src/linearizer`` or of another copy of the package (an older checkout, say).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "linearizer"

# Lowest first: a module may import its own layer and the layers below it.
LAYERS = [
    {"errors", "io", "checks", "config", "safe_pickle", "report", "registry"},
    {"invertible", "operators"},
    {"algebra", "testing", "linearizer"},
    {"image_model", "data", "metrics"},
    {"training"},
    {"flow", "projective", "style", "restore"},
    {"compat", "repro", "explore", "pretrained"},
    {"cli", "__main__"},
]


IMPORTERS = {"import_module", "__import__"}  # importlib.import_module or a bare name


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _sources(package: Path) -> dict[str, tuple[Path, ast.Module]]:
    return {
        module_name(p, package): (p, ast.parse(p.read_text(encoding="utf-8")))
        for p in sorted(package.rglob("*.py"))
    }


def _import_calls(tree: ast.Module) -> list[ast.Call]:
    """``import_module(...)`` / ``importlib.import_module(...)`` / ``__import__(...)`` calls."""
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and node.args]
    return [c for c in calls if getattr(c.func, "id", getattr(c.func, "attr", "")) in IMPORTERS]


def _constants(tree: ast.Module) -> dict[str, str]:
    """Module-level ``NAME = "text"`` assignments."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name) and isinstance(node.value.value, str):
                    out[target.id] = node.value.value
    return out


def _named_import(call: ast.Call, constants: dict[str, str]) -> str | None:
    """The module a dynamic import names in the source, or None when it is computed."""
    arg = call.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.Name):
        return constants.get(arg.id)
    return None


def lookups(package: Path = PACKAGE) -> list[str]:
    """``module: call`` for each dynamic import whose module name is computed at run time."""
    found = []
    for name, (_, tree) in _sources(package).items():
        constants = _constants(tree)
        for call in _import_calls(tree):
            if _named_import(call, constants) is None:
                found.append(f"{name}: {ast.unparse(call)}")
    return found


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """``{module: modules it imports}`` inside the package (submodules, not their package, for
    ``from . import x``), dynamic imports by a written name included."""
    sources = _sources(package)
    files = {name: path for name, (path, _) in sources.items()}
    root = package.name
    graph: dict[str, set[str]] = {}
    for name, (path, tree) in sources.items():
        package_of = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps: set[str] = set()
        constants = _constants(tree)
        deps.update(filter(None, (_named_import(c, constants) for c in _import_calls(tree))))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package_of.split(".")[: len(package_of.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in files]
                deps.update(subs if len(subs) == len(node.names) else [target])
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names)
        inside = {d for d in deps if d == root or d.startswith(root + ".")}
        graph[name] = {_owner(d, files) for d in inside} - {name, ""}
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


def _write_package(root: Path, files: dict[str, str]) -> Path:
    package = root / "pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    for name, text in files.items():
        (package / f"{name}.py").write_text(text)
    return package


def test_a_circle_through_a_dynamic_import_is_found(tmp_path):
    """``runs`` reaching ``pretrained`` by name while ``pretrained`` imports ``runs`` (the
    circle of this package's first redesign), in each way a name can be written."""
    lazy = "import importlib\n\n\ndef up():\n    return importlib.import_module({})\n"
    for i, call in enumerate(['"pkg.pretrained"', "HOME", "name"]):
        package = _write_package(
            tmp_path / str(i),
            {
                "runs": f'HOME = "pkg.pretrained"\nname = HOME\n{lazy.format(call)}',
                "pretrained": "from .runs import up\n",
            },
        )
        found = cycles(import_graph(package))
        if call == "name":  # computed at run time: not followed, but listed
            assert found == [] and lookups(package) == ["pkg.runs: importlib.import_module(name)"]
        else:
            assert found == [["pkg.pretrained", "pkg.runs"]], call
    bare = {"a": '__import__("pkg.b")\n', "b": "import pkg.a\n"}
    package = _write_package(tmp_path / "bare", bare)
    assert cycles(import_graph(package)) == [["pkg.a", "pkg.b"]]


def test_the_dynamic_imports_that_cannot_be_followed_are_the_known_lookups():
    """Only the registry imports by a computed name: presets, run kinds, sources and commands
    are each declared in a table of module names and looked up through it."""
    assert lookups() == ["linearizer.registry: importlib.import_module(module)"]


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


def report(package: Path = PACKAGE) -> str:
    """The layer table (for the package itself), then its circles and its unfollowed lookups."""
    found = cycles(import_graph(package))
    lines = [package_table(), ""] if package == PACKAGE else []
    lines.append(f"{len(found)} circle(s), dynamic imports by a written name followed")
    lines += ["  " + " <-> ".join(c) for c in found]
    lines.append("dynamic imports by a computed name (not followed):")
    lines += ["  " + entry for entry in lookups(package)]
    return "\n".join(lines)


if __name__ == "__main__":  # python tests/test_layering.py [PACKAGE_DIR]
    print(report(Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else PACKAGE))


def test_the_docs_import_table_is_the_generated_one():
    """docs/architecture.md shows what the source imports (regenerate it from package_table())."""
    docs = (PACKAGE.parents[1] / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert package_table() in docs, "docs/architecture.md's import table is out of date"
