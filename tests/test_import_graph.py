"""The package's shape, with no blind spot: every module of queue_core/ (each
``__init__.py`` and ``app/*`` included) is in a layer of ``LAYERS``
(docs_support/imports.py, the one place the rules are written), and imports
only its own layer or the layers below it.

What breaks the rules today is listed in ``KNOWN_VIOLATIONS``, each with its
reason; the test fails on a violation not listed, and on a listed one that no
longer occurs (remove it then: the list cannot go stale).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from docs_support.imports import (
    LAYERS,
    cycles,
    import_graph,
    layer_of,
    rules_table,
    violations,
)

GRAPH = import_graph()
PACKAGE = Path(__file__).resolve().parent.parent / "queue_core"

# (module, what it imports, why it is still so). One line each; remove a line
# when the import is gone.
KNOWN_VIOLATIONS: tuple[tuple[str, str, str], ...] = (
    ("queue_core.app.crash_child", "queue_core.testing.faults",
     "the reference application's crashing child injects the testing kit's FaultPlan and Tracer"),
    ("queue_core.engines.sqlite", "queue_core.engines",
     "shares the seam's Connection, APPLICATION_ID and migrations, defined in engines/__init__.py"),
    ("queue_core.engines.postgres", "queue_core.engines",
     "shares the seam's Connection, APPLICATION_ID and migrations, defined in engines/__init__.py"),
    ("queue_core.engines.queries", "queue_core.engines",
     "types its statements with the seam's Connection, defined in engines/__init__.py"),
    ("queue_core.engines.sqlite_turn", "queue_core.engines",
     "reads the seam's THREADS flag, defined in engines/__init__.py"),
)


def _known() -> set[tuple[str, str]]:
    return {(module, target) for module, target, _ in KNOWN_VIOLATIONS}


# ------------------------------------------------------------- the real package

def test_the_graph_is_read_from_every_module_of_the_package() -> None:
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(GRAPH) == len(files)  # every file, each __init__.py included
    assert {"queue_core", "queue_core.engines", "queue_core.app", "queue_core.testing", "queue_core.store",
            "queue_core.engines.sqlite", "queue_core.engines.postgres", "queue_core.app.ledger",
            "queue_core.app.demo", "queue_core.receipts", "queue_core.worker", "queue_core.cli",
            "queue_core.testing.faults"} <= set(GRAPH)
    assert "queue_core.store" in GRAPH["queue_core.app.ledger"] and "queue_core.store" in GRAPH["queue_core.receipts"]
    assert "queue_core.engines" in GRAPH["queue_core.store"]  # an __init__.py is an import like any other


def test_every_module_is_in_a_layer() -> None:
    unclassified = [str(v) for v in violations(GRAPH) if v.target == "-"]
    assert unclassified == [], "\n".join(unclassified)


def test_every_import_keeps_to_the_layers_or_is_a_known_violation() -> None:
    found = {(v.module, v.target): str(v) for v in violations(GRAPH) if v.target != "-"}
    new = [text for edge, text in sorted(found.items()) if edge not in _known()]
    assert new == [], "imports against the layers of LAYERS (docs_support/imports.py):\n" + "\n".join(new)


def test_every_known_violation_still_occurs() -> None:
    found = {(v.module, v.target) for v in violations(GRAPH)}
    gone = sorted(edge for edge in _known() if edge not in found)
    assert gone == [], f"no longer a violation, remove it from KNOWN_VIOLATIONS: {gone}"


def test_every_circle_goes_through_a_known_violation() -> None:
    # within the layers no circle is possible but inside one layer; a circle
    # that climbs must climb by a listed violation
    for circle in cycles(GRAPH):
        edges = set(zip(circle, circle[1:]))
        assert edges & _known(), f"an import circle: {' -> '.join(circle)}"


def test_the_proof_machinery_is_not_in_the_package() -> None:
    assert not (PACKAGE / "testing" / "matrix.py").exists() and (PACKAGE.parent / "proof" / "matrix.py").exists()


def test_the_layers_are_one_table_with_the_testing_kit_beside_the_product() -> None:
    names = [layer.name for layer in LAYERS]
    assert len(set(names)) == len(names)
    product = [layer for layer in LAYERS if layer.name != "testing"]
    for index, layer in enumerate(product):  # its own layer and every one below it, nothing above
        assert layer.may_import == tuple(below.name for below in product[index:]), layer.name
    assert not any("testing" in layer.may_import for layer in product)
    assert "app" not in next(layer for layer in LAYERS if layer.name == "testing").may_import
    assert all(f"| {layer.name} |" in rules_table() for layer in LAYERS)


# ------------------------------------------------------------- negative controls

@pytest.mark.parametrize("graph, expected", [
    ({"queue_core.store": {"queue_core.app.ledger"}, "queue_core.app.ledger": set()},
     "queue_core.store -> queue_core.app.ledger: protocol may not import app"),
    ({"queue_core.engines.sqlite": {"queue_core.store"}, "queue_core.store": set()},
     "queue_core.engines.sqlite -> queue_core.store: engines may not import protocol"),
    ({"queue_core.engines.newdb": {"queue_core.transactions"}, "queue_core.transactions": set()},
     "queue_core.engines.newdb -> queue_core.transactions: engines may not import protocol"),
    ({"queue_core.store": {"queue_core.receipts"}, "queue_core.receipts": set()},
     "queue_core.store -> queue_core.receipts: protocol may not import built on the store"),
    ({"queue_core.cli": {"queue_core.testing.faults"}, "queue_core.testing.faults": set()},
     "queue_core.cli -> queue_core.testing.faults: face may not import testing"),
    ({"queue_core.testing.faults": {"queue_core.cli"}, "queue_core.cli": set()},
     "queue_core.testing.faults -> queue_core.cli: testing may not import face"),
    ({"queue_core": {"proof"}}, "queue_core -> proof: proof is never imported by queue_core"),
    ({"queue_core.store": {"docs_support"}}, "queue_core.store -> docs_support: docs_support is never imported by queue_core"),
])
def test_a_crafted_violation_is_reported(graph: dict[str, set[str]], expected: str) -> None:
    assert [str(v) for v in violations(graph)] == [expected]


def test_an_unclassified_module_is_reported_with_the_entry_to_add() -> None:
    [found] = violations({"queue_core.scheduler": set()})
    assert found.module == "queue_core.scheduler" and found.target == "-"
    assert "add 'queue_core.scheduler'" in found.reason and "LAYERS, docs_support/imports.py" in found.reason
    # a new engine module needs no entry: the pattern engines.* classifies it
    assert layer_of("queue_core.engines.duckdb") is not None and layer_of("queue_core.engines.duckdb").name == "engines"
    assert layer_of("queue_core.app.reports") is not None and layer_of("queue_core.app.reports").name == "app"


def test_imports_are_read_everywhere_and_resolved(tmp_path: Path) -> None:
    # A crafted package: __init__ files, relative imports at every level, "from . import x",
    # an import inside a function and one under TYPE_CHECKING, and a module named in a string.
    package = tmp_path / "queue_core"
    (package / "engines").mkdir(parents=True)
    (package / "app").mkdir()
    (package / "__init__.py").write_text("from . import store\nfrom .app import ledger\n")
    (package / "store.py").write_text("from .engines import engine_for\nfrom . import errors\n")
    (package / "errors.py").write_text("")
    (package / "engines" / "__init__.py").write_text("def engine_for():\n    from .sqlite import SQLite\n")
    (package / "engines" / "sqlite.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..store import Store\n"
        "import queue_core.errors\n")
    (package / "app" / "__init__.py").write_text("")
    (package / "app" / "ledger.py").write_text(
        "import importlib\nfrom .. import store\nimportlib.import_module('queue_core.engines.sqlite')\n"
        "import proof.matrix\n")
    graph = import_graph(package)
    assert graph == {
        "queue_core": {"queue_core.store", "queue_core.app.ledger"},
        "queue_core.store": {"queue_core.engines", "queue_core.errors"},
        "queue_core.errors": set(),
        "queue_core.engines": {"queue_core.engines.sqlite"},
        "queue_core.engines.sqlite": {"queue_core.store", "queue_core.errors"},
        "queue_core.app": set(),
        "queue_core.app.ledger": {"queue_core.store", "queue_core.engines.sqlite", "proof"},
    }
    assert sorted(map(str, violations(graph))) == [
        "queue_core.app.ledger -> proof: proof is never imported by queue_core",
        "queue_core.engines.sqlite -> queue_core.store: engines may not import protocol",
    ]
    # the engine's import of the store closes a circle through the seam
    assert any(("queue_core.engines.sqlite", "queue_core.store") in zip(c, c[1:]) for c in cycles(graph))


def test_cycles_are_found_when_there_is_one(tmp_path: Path) -> None:
    # A negative control: a two-module circle in a throwaway package is reported.
    package = tmp_path / "queue_core"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from .b import thing\n")
    (package / "b.py").write_text("from . import a\nthing = 1\n")
    graph = import_graph(package)
    assert graph == {"queue_core": set(), "queue_core.a": {"queue_core.b"}, "queue_core.b": {"queue_core.a"}}
    assert cycles(graph) == [["queue_core.a", "queue_core.b", "queue_core.a"]]


# ------------------------------------------------- the protocol asks no engine

# Modules under engines/ that name no engine: the operations every engine
# loads its named statements into.
ENGINE_NEUTRAL = ("engines.queries",)


def engine_tests(source: str) -> list[str]:
    """What in ``source`` asks which engine it runs on: a driver imported, a URL or an
    engine's name compared, an isinstance on a connection."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] + ([node.module] if isinstance(node, ast.ImportFrom)
                                                     and node.module else [])
            for name in names:
                if name in ENGINE_NEUTRAL:
                    continue
                if name.split(".")[0] in {"sqlite3", "psycopg"} or name.startswith(("engines.", "sqlite",
                                                                                    "postgres")):
                    found.append(f"imports {name}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value in {"sqlite", "postgresql"} or node.value.startswith(("postgresql://", "postgres://")):
                found.append(f"names {node.value!r}")
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance":
            if "Connection" in ast.unparse(node.args[1]):
                found.append(f"isinstance on {ast.unparse(node.args[1])}")
    return found


PROTOCOL = sorted(name for name in GRAPH if getattr(layer_of(name), "name", None) == "protocol")


@pytest.mark.parametrize("name", PROTOCOL)
def test_the_protocol_never_asks_which_engine_it_runs_on(name: str) -> None:
    path = PACKAGE.joinpath(*name.split(".")[1:]).with_suffix(".py")
    assert engine_tests(path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("source", [
    "import sqlite3", "from .engines.postgres import PostgresConnection", "import psycopg",
    "from .engines.sqlite_turn import Turn", "from .engines.duckdb import Duck",
    "if tx.engine.name == 'postgresql': pass", "if url.startswith('postgresql://'): pass",
    "isinstance(conn, sqlite3.Connection)",
])
def test_an_engine_test_is_found_where_there_is_one(source: str) -> None:  # negative control
    assert engine_tests(source)


def test_no_type_ignore_and_no_module_over_600_lines_in_the_package() -> None:
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        assert "type: ignore" not in text, path
        assert len(text.splitlines()) <= 600, (path, len(text.splitlines()))
