"""The layout figures docs/architecture.md reports, measured on the tree as it is now.

Run from the repository root (no model, no onnxruntime; a second or two):

    python benchmarks/layout_counts.py            # a table
    python benchmarks/layout_counts.py --json     # the same figures for scripts

It prints the Python files of ``core/onnxlite`` (flat and per package), the largest modules, the
import cycles (imports at module level and inside functions; and again with the imports under
``TYPE_CHECKING``; and between packages, where a package imports another that imports it back at any
depth, each flat module counting as its own package), the core modules that import ``onnxlite.cli``,
and the functions over ten parameters.  ``tests/test_layout.py`` uses the same walk, so the page and the
tests cannot disagree.
"""

from __future__ import annotations

import argparse
import ast
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "core" / "onnxlite"
PLUGINS = ROOT / "plugins" / "onnxlite_plugins"
MAX_LINES = 420   # "about 400": tests/test_layout.py holds every module to it
MAX_PARAMETERS = 10


def module_name(path: Path, top: Path = CORE) -> str:
    parts = list(path.relative_to(top.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(top: Path = CORE) -> dict[str, Path]:
    return {module_name(p, top): p for p in sorted(top.rglob("*.py"))}


def imports(name: str, path: Path, known: dict[str, Path], type_only: bool = False) -> set[str]:
    """Modules of ``known`` that ``name`` imports, at module level or inside functions; those under
    ``if TYPE_CHECKING:`` only with ``type_only``."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test) and not type_only:
                continue
            if isinstance(child, ast.ImportFrom):
                base = package[:len(package) - child.level + 1] if child.level else []
                target = ".".join(base + ([child.module] if child.module else []))
                for alias in child.names:
                    full = f"{target}.{alias.name}"
                    found.add(full if full in known else target)
            elif isinstance(child, ast.Import):
                found.update(alias.name for alias in child.names)
            visit(child)

    visit(ast.parse(path.read_text()))
    return {m for m in found if m in known and m != name}


def import_graph(type_only: bool = False, top: Path = CORE) -> dict[str, set[str]]:
    known = modules(top)
    return {name: imports(name, path, known, type_only) for name, path in known.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def strong(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph[node]:
            if other not in index:
                strong(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] != index[node]:
            return
        component = []
        while True:
            other = stack.pop()
            on_stack.discard(other)
            component.append(other)
            if other == node:
                break
        if len(component) > 1:
            found.append(sorted(component))

    for node in graph:
        if node not in index:
            strong(node)
    return found


def room(name: str) -> str:
    """The package a module belongs to (``onnxlite.search.cache`` -> ``onnxlite.search``); a flat module is
    its own room."""
    parts = name.split(".")
    return ".".join(parts[:2])


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The import graph between rooms: a package imports another when any of its modules does."""
    rooms: dict[str, set[str]] = {}
    for name, deps in graph.items():
        rooms.setdefault(room(name), set()).update(room(d) for d in deps if room(d) != room(name))
    return rooms


def parameter_counts(*tops: Path) -> dict[str, int]:
    """``path:function`` -> how many parameters it takes (self/cls aside; click commands left out)."""
    counts: dict[str, int] = {}
    for top in tops or (CORE, PLUGINS):
        for path in sorted(top.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                if any("click" in ast.unparse(d).split("(")[0] for d in node.decorator_list):
                    continue   # a click command takes one parameter per flag
                names = [a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)]
                if names[:1] in (["self"], ["cls"]):
                    names = names[1:]
                counts[f"{path.relative_to(ROOT)}:{node.name}"] = len(names)
    return counts


def figures() -> dict[str, object]:
    files = sorted(CORE.rglob("*.py"))
    flat = [p for p in files if p.parent == CORE]
    packages = sorted({p.relative_to(CORE).parts[0] for p in files if p.parent != CORE})
    sizes = sorted(((len(p.read_text().splitlines()), str(p.relative_to(ROOT))) for p in files), reverse=True)
    graph = import_graph()
    to_cli = sorted(n for n, deps in graph.items() if not n.startswith("onnxlite.cli") and n != "onnxlite.__main__"
                    and any(d.startswith("onnxlite.cli") for d in deps))
    params = parameter_counts()
    return {
        "core_files": len(files), "flat_files": len(flat), "packages": packages,
        "plugin_files": len(list(PLUGINS.rglob("*.py"))),
        "largest": [{"path": path, "lines": lines} for lines, path in sizes[:3]],
        "over_max_lines": [path for lines, path in sizes if lines > MAX_LINES],
        "import_cycles": cycles(graph), "type_only_import_cycles": cycles(import_graph(type_only=True)),
        "package_cycles": cycles(package_graph(import_graph(type_only=True))),
        "core_modules_importing_cli": to_cli,
        "functions_over_max_parameters": {k: v for k, v in sorted(params.items()) if v > MAX_PARAMETERS},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    found = figures()
    if parser.parse_args().json:
        print(json.dumps(found, indent=2))
        return
    print(f"core/onnxlite: {found['core_files']} Python files, {found['flat_files']} flat, the rest in "
          f"{len(found['packages'])} packages ({', '.join(found['packages'])}); "
          f"plugins/onnxlite_plugins: {found['plugin_files']}")
    largest = ", ".join(f"{e['path']} {e['lines']}" for e in found["largest"])
    print(f"largest modules (lines): {largest}; over {MAX_LINES} lines: {len(found['over_max_lines'])}")
    print(f"import cycles: {len(found['import_cycles'])}; counting TYPE_CHECKING imports: "
          f"{len(found['type_only_import_cycles'])}; between packages (TYPE_CHECKING counted): "
          f"{len(found['package_cycles'])}" + "".join(f"\n  {' <-> '.join(c)}" for c in found["package_cycles"]))
    print(f"core modules importing onnxlite.cli: {len(found['core_modules_importing_cli'])}")
    over = found["functions_over_max_parameters"]
    print(f"functions over {MAX_PARAMETERS} parameters (click commands aside): {len(over)}"
          + "".join(f"\n  {name}: {count}" for name, count in over.items()))


if __name__ == "__main__":
    main()
