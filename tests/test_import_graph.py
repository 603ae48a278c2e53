"""The package's shape: no import circle, and the protocol knows no application."""

from __future__ import annotations

from pathlib import Path

from queue_core.testing.imports import cycles, import_graph, layers

GRAPH = import_graph()

# What the protocol may lean on, and nothing else: no handler, no ledger, no
# receipts, no proof machinery.
# (engine_postgres: what differs on PostgreSQL; it imports psycopg only when a URL is opened.)
STORE_MAY_IMPORT = {"clock", "database", "engine_postgres", "envelope", "errors", "heartbeat", "turn", "values"}


def test_the_graph_is_read_from_the_real_package() -> None:
    assert {"store", "database", "ledger", "receipts", "worker", "cli", "testing.child"} <= set(GRAPH)
    assert "store" in GRAPH["ledger"] and "store" in GRAPH["receipts"]


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
    assert GRAPH["store"] <= STORE_MAY_IMPORT, GRAPH["store"] - STORE_MAY_IMPORT
    assert GRAPH["database"] <= {"errors"}
    assert GRAPH["turn"] <= {"errors"}  # the writer turn is about files and locks, nothing else
    assert GRAPH["engine_postgres"] <= {"errors"}  # the engine knows SQL and connections, no business
    assert GRAPH["values"] == set()  # plain data: imports nothing of the package
    assert GRAPH["heartbeat"] <= {"errors", "values"}  # beats through any store that extends


def test_nothing_in_the_core_imports_the_proof_machinery() -> None:
    core = {"store", "values", "heartbeat", "database", "turn", "envelope", "errors", "clock", "ledger",
            "receipts", "worker"}
    for name in core:
        assert not any(t.startswith("testing") for t in GRAPH[name]), (name, GRAPH[name])


def test_applications_sit_above_the_protocol() -> None:
    height = layers(GRAPH)
    for application in ("ledger", "receipts", "worker"):
        assert height[application] > height["store"]
    assert height["cli"] == max(h for name, h in height.items() if name != "__main__")
