"""The seam between the protocol and its engines (issue #45, item 5).

- Engines are found through a registry keyed by a URL's scheme
  (``engines.register_engine``); a string with no registered scheme is an
  SQLite file's name, as it always was.
- The default ``Operations`` (``queries.NamedQueries``) reads a row by its
  columns' names, never by position: a statement that returns its columns in
  another order gives the same values, and one that lacks a column is refused
  with the column's name.
- The third engine of the conformance suite (tests/conformance/renamed_engine.py)
  is reached through the registry, and its tables really have other names.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from queue_core import ModelClock, StorageError, Store, engines
from queue_core.engines import engine_for, register_engine, scheme_of
from queue_core.engines.queries import NamedQueries, Query
from queue_core.engines.sqlite import OPERATIONS, SQLiteEngine

from .conformance import renamed_engine


def test_a_url_scheme_names_its_engine_and_anything_else_is_a_file(tmp_path: Path) -> None:
    assert scheme_of("postgresql://u@/db") == "postgresql" and scheme_of("Postgres://h/db") == "postgres"
    assert scheme_of(tmp_path / "q.sqlite3") is None and scheme_of("q.sqlite3") is None
    third = engine_for(renamed_engine.url(tmp_path / "q.sqlite3"), busy_timeout_ms=100)
    assert isinstance(third, renamed_engine.RenamedEngine) and third.path == tmp_path / "q.sqlite3"
    # a scheme no engine has: a file's name, as before the registry (a file may contain "://")
    assert isinstance(engine_for(str(tmp_path / "nobody"), busy_timeout_ms=100), SQLiteEngine)


def test_a_scheme_is_taken_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engines, "_REGISTERED", dict(engines._REGISTERED))

    def factory(target: str, *, busy_timeout_ms: int, read_only: bool = False) -> engines.Engine:
        raise AssertionError("not opened here")

    register_engine("Mine", factory)
    register_engine("mine", factory)  # the same factory again: nothing changes
    for scheme, other in (("mine", renamed_engine.RenamedEngine), ("postgresql", factory),
                          (renamed_engine.SCHEME, factory)):
        with pytest.raises(ValueError, match="already has an engine"):
            register_engine(scheme, other)
    with pytest.raises(ValueError, match="not a URL scheme"):
        register_engine("no spaces", factory)


def _shuffled(name: str, sql: str) -> NamedQueries:
    """SQLite's statements, with statement ``name`` replaced by ``sql``."""
    queries = dict(OPERATIONS.queries)
    queries[name] = Query(name, "", sql)
    return NamedQueries(queries)


MESSAGE_REVERSED = """SELECT priority, queue, payload_sha256 IS NOT NULL AS pruned, expired_leases,
  done_at, enqueued_at, last_detail, last_error, lease_until, available_at, generation,
  attempts, state, payload, event_id
FROM messages WHERE queue = :queue AND event_id = :event_id"""


def test_a_row_is_read_by_its_columns_names_not_their_order(tmp_path: Path) -> None:
    with Store(tmp_path / "q.sqlite3", clock=ModelClock(1000)) as store:
        store.enqueue('{"event_id": "E0001", "payload": {"n": 1}}\n', priority=3)
        store.claim(lease_seconds=30)
        expected = store.message("E0001")
    reversed_ops = _shuffled("message", MESSAGE_REVERSED)
    with closing(sqlite3.connect(tmp_path / "q.sqlite3")) as conn:
        assert reversed_ops.message(conn, "default", "E0001") == expected
        # negative control: the same values taken by position are another message
        by_position = conn.execute(MESSAGE_REVERSED, {"queue": "default", "event_id": "E0001"}).fetchone()
        assert by_position[0] != expected.event_id
        missing = _shuffled("message", MESSAGE_REVERSED.replace(", event_id\n", "\n"))
        with pytest.raises(ValueError, match="statement message returns no column event_id"):
            missing.message(conn, "default", "E0001")


def test_the_third_engine_keeps_the_queue_in_tables_of_other_names(tmp_path: Path) -> None:
    path = tmp_path / "q.sqlite3"
    with Store(renamed_engine.url(path), clock=ModelClock(1000)) as store:
        store.enqueue('{"event_id": "E0001", "payload": {"n": 1}}\n')
        assert store.status().messages["ready"] == 1  # its own statement for counts
        store.complete(store.claim(lease_seconds=30), lambda tx, message: None)
        assert store.message("E0001").state == "done"
    with closing(sqlite3.connect(path)) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"messages", "receipts", "qc3_queues", "qc3_counters", "qc3_lines"} <= tables
    assert not tables & {"queues", "queue_counters", "migration_lines"}
    # negative control: the shipped SQLite engine's statements name the tables it does not have
    with Store(path, clock=ModelClock(1000)) as store:
        with pytest.raises(StorageError, match="no such table: queues"):
            store.queues()
