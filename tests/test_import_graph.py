"""The package's shape: no import circle, and the protocol knows no application."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from docs_support.imports import cycles, import_graph, layers

GRAPH = import_graph()

# The protocol: the store and the modules it is made of. What they may lean on,
# and nothing else: no handler, no ledger, no receipts, no proof machinery, and
# no engine in particular (the engines package's interface is not a module of
# the graph; engines.sqlite and engines.postgres are).
PROTOCOL = ("store", "enqueues", "completion", "reads", "transactions", "rules", "statements", "queues")
PROTOCOL_MAY_IMPORT = {"clock", "envelope", "errors", "heartbeat", "turn", "values", *PROTOCOL}
PACKAGE = Path(__file__).resolve().parent.parent / "queue_core"


def test_the_graph_is_read_from_the_real_package() -> None:
    assert {"store", "engines.sqlite", "engines.postgres", "app.ledger", "receipts", "worker", "cli",
            "testing.child"} <= set(GRAPH)
    assert "store" in GRAPH["app.ledger"] and "store" in GRAPH["receipts"]


def test_no_module_imports_itself_back() -> None:
    assert cycles(GRAPH) == []


def test_cycles_are_found_when_there_is_one(tmp_path: Path) -> None:
    # A negative control: a two-module circle in a throwaway package is reported.
    package = tmp_path / "queue_core"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from .b import thing\n")
    (package / "b.py").write_text("from . import a\nthing = 1\n")
    graph = import_graph(package)
    assert graph == {"a": {"b"}, "b": {"a"}}
    assert cycles(graph) == [["a", "b", "a"]]


def test_the_store_knows_no_business() -> None:
    for name in PROTOCOL:
        assert GRAPH[name] <= PROTOCOL_MAY_IMPORT, (name, GRAPH[name] - PROTOCOL_MAY_IMPORT)
    # an engine knows its driver, its statements and its files: no protocol, no business
    assert GRAPH["engines.sqlite"] <= {"errors", "statements", "turn"}
    assert GRAPH["engines.postgres"] <= {"errors", "statements"}
    assert GRAPH["statements"] == set()  # the named statements are plain text
    assert GRAPH["turn"] <= {"errors"}  # the writer turn is about files and locks, nothing else
    assert GRAPH["values"] == set()  # plain data: imports nothing of the package
    assert GRAPH["heartbeat"] <= {"errors", "values"}  # beats through any store that extends


def test_nothing_in_the_core_imports_the_proof_machinery() -> None:
    core = {*PROTOCOL, "values", "heartbeat", "engines.sqlite", "engines.postgres", "turn", "envelope",
            "errors", "clock", "app.ledger", "receipts", "worker"}
    for name in core:
        assert not any(t.startswith("testing") for t in GRAPH[name]), (name, GRAPH[name])
    # and the proof machinery is not in the package at all
    assert not (PACKAGE / "testing" / "matrix.py").exists() and (PACKAGE.parent / "proof" / "matrix.py").exists()


# ------------------------------------------------- the protocol asks no engine

def engine_tests(source: str) -> list[str]:
    """What in ``source`` asks which engine it runs on: a driver imported, a URL or an
    engine's name compared, an isinstance on a connection."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] + ([node.module] if isinstance(node, ast.ImportFrom)
                                                     and node.module else [])
            for name in names:
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


@pytest.mark.parametrize("name", [n for n in PROTOCOL if n != "statements"])  # it holds the dialects
def test_the_protocol_never_asks_which_engine_it_runs_on(name: str) -> None:
    assert engine_tests((PACKAGE / f"{name}.py").read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("source", [
    "import sqlite3", "from .engines.postgres import PostgresConnection", "import psycopg",
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


def test_applications_sit_above_the_protocol() -> None:
    height = layers(GRAPH)
    for application in ("app.ledger", "app.demo", "app.lab", "receipts", "worker"):
        assert height[application] > height["store"]
    assert height["cli"] == max(h for name, h in height.items() if name != "__main__")


def test_the_reference_application_is_a_subpackage_the_library_never_imports() -> None:
    app = {name for name in GRAPH if name.startswith("app.")}
    assert app == {"app.ledger", "app.demo", "app.lab"}
    # only the command line (its demo, lab and default handler, and the help that
    # describes them) and the crashing child (whose completions use the ledger's
    # handler) reach into it
    users = {name for name, targets in GRAPH.items() if targets & app and not name.startswith("app.")}
    assert users == {"cli", "cli_parser", "cli_output", "testing.child"}, users
