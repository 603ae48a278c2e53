"""The package's own import graph and its layers, read from the source with ``ast``.

Nothing is imported: every module of ``queue_core/`` is parsed, each
package's ``__init__.py`` included (``queue_core/engines/__init__.py`` is the
module ``queue_core.engines``). An import counts wherever it is written: at
the top, inside a function, under ``if TYPE_CHECKING:``; so does a string
that names a module of the package (``importlib.import_module("queue_core.x")``).
Importing ``a.b`` also runs ``a/__init__.py``; that implicit edge is not
drawn, only what a module names.

``LAYERS`` is the one place the layer rules are written: the code map on the
site prints it and draws the graph by it, and ``tests/test_import_graph.py``
checks every module against it.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path

PACKAGE = "queue_core"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE


@dataclass(frozen=True)
class Layer:
    name: str
    modules: tuple[str, ...]  # fnmatch patterns of dotted module names
    what: str  # one line for the code map
    may_import: tuple[str, ...]  # the layers a module of this one may import


# The product's layers, top to bottom: a module may import its own layer and
# the layers below it, never one above. Patterns are matched in this order and
# the first layer that matches wins, so a new module under engines/ is an
# engine without being named here.
_PRODUCT = (
    (
        "face",
        (
            "queue_core",
            "queue_core.__main__",
            "queue_core.cli",
            "queue_core.cli.*",
            "queue_core.prometheus",
        ),
        "what a user calls or reads: the package's names, the command line and its output, "
        "the Prometheus exposition of the metrics",
    ),
    (
        "app",
        ("queue_core.app", "queue_core.app.*"),
        "the reference application built on the queue: ledger, demo, lab",
    ),
    (
        "built on the store",
        (
            "queue_core.receipts",
            "queue_core.worker",
            "queue_core.worker_threads",
            "queue_core.schedules",
            "queue_core.handlers",
        ),
        "what ships with the store and is built on it: receipts, the worker loop and its "
        "threads, the schedules, the handlers' shapes; the store imports none of them",
    ),
    (
        "protocol",
        (
            "queue_core.store",
            "queue_core.scope",
            "queue_core.admin",
            "queue_core.claims",
            "queue_core.enqueues",
            "queue_core.completion",
            "queue_core.reads",
            "queue_core.transactions",
            "queue_core.interrupts",
            "queue_core.rules",
            "queue_core.queues",
            "queue_core.envelope",
            "queue_core.clock",
            "queue_core.heartbeat",
        ),
        "the store and the modules it is made of; it knows no application",
    ),
    (
        "engine seam",
        ("queue_core.engines",),
        "the Engine interface and the choice of an engine: engines/__init__.py",
    ),
    (
        "engines",
        ("queue_core.engines.*",),
        "one engine each (its driver, its statements, its files), and what they share",
    ),
    (
        "words",
        ("queue_core.errors", "queue_core.values"),
        "what every layer speaks: the errors with their codes, plain values",
    ),
)
LAYERS: tuple[Layer, ...] = tuple(
    Layer(name, modules, what, tuple(below for below, _, _ in _PRODUCT[index:]))
    for index, (name, modules, what) in enumerate(_PRODUCT)
) + (
    # Beside the product: what ships for users' own tests. It may use the
    # protocol and what is below it; nothing of the product imports it.
    Layer(
        "testing",
        ("queue_core.testing", "queue_core.testing.*"),
        "what ships for users' own tests: fault plans; imported by "
        "nothing of the product",
        (
            "testing",
            "built on the store",
            "protocol",
            "engine seam",
            "engines",
            "words",
        ),
    ),
)
# Never imported by queue_core: they are not in the wheel.
OUTSIDE = ("proof", "docs_support", "tests", "scripts")


def layer_of(module: str) -> Layer | None:
    """The first layer whose pattern matches ``module`` (None: unclassified)."""
    for layer in LAYERS:
        if any(fnmatchcase(module, pattern) for pattern in layer.modules):
            return layer
    return None


def module_name(path: Path, root: Path) -> str:
    """``queue_core/testing/faults.py`` -> ``queue_core.testing.faults``; an
    ``__init__.py`` is its package: ``queue_core/engines/__init__.py`` -> ``queue_core.engines``.
    """
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _deepest(name: str, modules: Mapping[str, Path]) -> str | None:
    """The module ``name`` is, or the deepest module of the package it lies in."""
    parts = name.split(".")
    while parts:
        if ".".join(parts) in modules:
            return ".".join(parts)
        parts.pop()
    return None


def sources(root: Path | None = None) -> dict[str, Path]:
    """Every module of the package, ``__init__.py`` files included, by dotted name."""
    root = root or ROOT
    return {module_name(p, root): p for p in sorted(root.rglob("*.py"))}


def imported_names(source: str, name: str, is_package: bool = False) -> set[str]:
    """The absolute dotted names the module ``name`` imports: ``from .store import
    Store`` -> ``queue_core.store.Store`` (a name of a module, or a module)."""
    here = name.split(".") if is_package else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            found.update(f"{prefix}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            # importlib.import_module("queue_core.app.ledger")
            if node.value.replace(".", "").replace(
                "_", ""
            ).isalnum() and node.value.startswith(
                tuple(f"{top}." for top in (PACKAGE, *OUTSIDE))
            ):
                found.add(node.value)
    return found


def import_graph(root: Path | None = None) -> dict[str, set[str]]:
    """For each module of the package, what it imports: the package's modules, and
    ``proof``, ``docs_support``, ``tests`` or ``scripts`` by that top-level name.

    ``from . import x`` is the module ``x`` when there is one, else the package
    itself (a name its ``__init__.py`` defines).
    """
    root = root or ROOT
    modules = sources(root)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        source = path.read_text(encoding="utf-8")
        targets: set[str] = set()
        for imported in imported_names(source, name, path.name == "__init__.py"):
            top = imported.split(".")[0]
            if top == root.name:
                target = _deepest(imported, modules)
                if target is not None:
                    targets.add(target)
            elif top in OUTSIDE:
                targets.add(top)
        targets.discard(name)
        graph[name] = targets
    return graph


@dataclass(frozen=True)
class Violation:
    module: str
    target: str
    reason: str

    def __str__(self) -> str:
        return f"{self.module} -> {self.target}: {self.reason}"


def violations(graph: Mapping[str, set[str]]) -> list[Violation]:
    """Every module no layer classifies, and every import the layers forbid."""
    found: list[Violation] = []
    for module in sorted(graph):
        layer = layer_of(module)
        if layer is None:
            found.append(Violation(module, "-", unclassified(module)))
            continue
        for target in sorted(graph[module]):
            if target.split(".")[0] in OUTSIDE:
                found.append(
                    Violation(
                        module, target, f"{target} is never imported by {PACKAGE}"
                    )
                )
                continue
            below = layer_of(target)
            if below is not None and below.name not in layer.may_import:
                found.append(
                    Violation(
                        module, target, f"{layer.name} may not import {below.name}"
                    )
                )
    return found


def unclassified(module: str) -> str:
    parent = module.rsplit(".", 1)[0]
    near = layer_of(parent) if parent != module else None
    hint = f" (its package {parent} is {near.name})" if near else ""
    return (
        f"no layer classifies {module}{hint}: add {module!r} (or a pattern that "
        f"matches it) to the modules of its Layer in LAYERS, docs_support/imports.py"
    )


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


def rules_table() -> str:
    """LAYERS as a Markdown table, top to bottom, for the code map."""
    lines = [
        "| layer | modules | what it is | may import |",
        "| --- | --- | --- | --- |",
    ]
    for layer in LAYERS:
        modules = ", ".join(f"`{pattern}`" for pattern in layer.modules)
        lines.append(
            f"| {layer.name} | {modules} | {layer.what} | "
            f"{', '.join(layer.may_import)} |"
        )
    return "\n".join(lines)


def label(module: str) -> str:
    """The file a module is, relative to the package: ``engines/__init__.py``, ``store.py``."""
    path = sources().get(module)
    return path.relative_to(ROOT).as_posix() if path else module


def _node_id(name: str) -> str:
    return name.replace(".", "_").replace(" ", "_")


def layer_edges(graph: Mapping[str, set[str]]) -> dict[tuple[str, str], int]:
    """(importing layer, imported layer) -> how many imports go that way, between layers."""
    counts: dict[tuple[str, str], int] = {}
    for name in graph:
        layer = layer_of(name)
        for target in graph[name]:
            below = layer_of(target)
            if layer is None or below is None or below is layer:
                continue
            key = (layer.name, below.name)
            counts[key] = counts.get(key, 0) + 1
    return counts


def layers_mermaid(graph: Mapping[str, set[str]]) -> str:
    """The overview: one box per layer (with its number of modules), top to bottom, and an
    arrow from a layer to each layer its modules import."""
    lines = ["flowchart TB"]
    for layer in LAYERS:
        members = [n for n in graph if layer_of(n) is layer]
        if members:
            count = f"{len(members)} module{'s' if len(members) != 1 else ''}"
            lines.append(f'    {_node_id(layer.name)}["{layer.name}<br/>{count}"]')
    for source, target in sorted(layer_edges(graph)):
        lines.append(f"    {_node_id(source)} --> {_node_id(target)}")
    return "\n".join(lines)


def layer_mermaid(graph: Mapping[str, set[str]], layer_name: str) -> str:
    """One layer in detail, top-down: its modules and the imports between them; what a
    module imports from the other layers is written in its box ("uses: words")."""
    layer = next(layer for layer in LAYERS if layer.name == layer_name)
    members = sorted(n for n in graph if layer_of(n) is layer)
    lines = ["flowchart TB"]
    arrows: list[str] = []
    for name in members:
        outside: set[str] = set()
        for target in sorted(graph[name]):
            below = layer_of(target)
            if below is layer:
                arrows.append(f"    {_node_id(name)} --> {_node_id(target)}")
            else:  # another layer, or proof, docs_support, ... named as they are
                outside.add(below.name if below is not None else target)
        uses = f"<br/>uses: {', '.join(sorted(outside))}" if outside else ""
        lines.append(f'    {_node_id(name)}["{label(name)}{uses}"]')
    return "\n".join(lines + arrows)
