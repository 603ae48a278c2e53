"""The package's own import graph, read from the source with ``ast`` (nothing is imported).

The code map on the site draws it and a test checks it: no circle, and the
protocol (``store``) imports nothing of the applications built on it.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

PACKAGE = "queue_core"


def module_name(path: Path, root: Path) -> str:
    """``queue_core/testing/child.py`` -> ``testing.child`` (relative to the package)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph(root: Path | None = None) -> dict[str, set[str]]:
    """For each module of the package (``__init__`` files left out), the package modules it imports."""
    root = root or Path(__file__).resolve().parent.parent / PACKAGE
    modules = {
        module_name(p, root): p
        for p in sorted(root.rglob("*.py"))
        if p.name != "__init__.py"
    }
    packages = {module_name(p, root) for p in root.rglob("__init__.py")} - {""}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        here = name.split(".")[:-1]  # the package this module lives in
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = (
                        here[: len(here) - node.level + 1] if node.level > 1 else here
                    )
                    prefix = ".".join(base + ([node.module] if node.module else []))
                elif node.module and node.module.split(".")[0] == PACKAGE:
                    prefix = node.module[len(PACKAGE) + 1 :]
                else:
                    continue
                for alias in node.names:
                    candidate = f"{prefix}.{alias.name}" if prefix else alias.name
                    if candidate in modules:
                        targets.add(candidate)  # "from . import ledger"
                    elif prefix in modules:
                        targets.add(prefix)  # "from .store import Store"
                    elif prefix in packages or prefix == "":
                        continue  # a name re-exported by a package's __init__
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith(PACKAGE + "."):
                        candidate = alias.name[len(PACKAGE) + 1 :]
                        if candidate in modules:
                            targets.add(candidate)
        targets.discard(name)
        graph[name] = targets
    return graph


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Every circle found by a depth-first search (empty when the graph is a DAG)."""
    found: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                found.append(path[path.index(target) :] + [target])
            elif target not in state:
                visit(target)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return found


def layers(graph: Mapping[str, set[str]]) -> dict[str, int]:
    """Each module's height: 0 imports nothing of the package, else 1 + its highest import."""
    height: dict[str, int] = {}

    def of(node: str) -> int:
        if node not in height:
            height[node] = 1 + max((of(t) for t in graph.get(node, ())), default=-1)
        return height[node]

    for node in graph:
        of(node)
    return height


def mermaid(graph: Mapping[str, set[str]]) -> str:
    """A mermaid flowchart, bottom-up: every arrow points from a module to one it imports."""
    lines = ["flowchart BT"]
    ids = {name: name.replace(".", "_") for name in graph}
    for name in sorted(graph, key=lambda n: (layers(graph)[n], n)):
        lines.append(f'    {ids[name]}["{name}.py"]')
    for name in sorted(graph):
        for target in sorted(graph[name]):
            lines.append(f"    {ids[name]} --> {ids[target]}")
    return "\n".join(lines)
