"""Migration lines: an application's own tables, versioned beside the queue's schema, on each engine.

The throwaway line ``notes`` lives in ``tests/lines_fixture/``: ``one/`` holds
its version 1, ``two/`` versions 1 and 2. Neither file may run twice, so a
line that ran one again would fail, not pass quietly.
"""

from __future__ import annotations

import pytest

from queue_core import StorageError, Store, WrongPath, ledger
from queue_core import engines
from queue_core.engines import MigrationLine, register_line

FIXTURE = "tests.lines_fixture"


def notes(folder: str) -> MigrationLine:
    return MigrationLine("notes", FIXTURE, {"sqlite": folder, "postgresql": folder}, frozenset({"notes"}))


NOTES_1, NOTES_2 = notes("one"), notes("two")


def install(store: Store, line: MigrationLine) -> None:
    with store.transaction() as tx:
        tx.engine.install(tx.conn, line)


def version(store: Store, name: str = "notes") -> int:
    return store.read(lambda view: view.ops.line_version(view.conn, name))


def test_a_line_runs_each_of_its_files_once_and_records_its_version(store: Store, engine: str) -> None:
    assert NOTES_1.newest(engine) == 1 and NOTES_2.newest(engine) == 2
    assert version(store) == 0  # never installed
    install(store, NOTES_1)
    assert version(store) == 1
    install(store, NOTES_1)  # a no-op: its one file would fail if it ran again
    assert version(store) == 1
    install(store, NOTES_2)  # only the second file runs
    assert version(store) == 2
    install(store, NOTES_2)
    assert version(store) == 2
    assert store.read(lambda view: view.ops.table_exists(view.conn, "notes"))
    # the ledger's line is a line of its own, at its own version
    assert version(store, "ledger") == 1 and ledger.LINE.newest(engine) == 1


def test_running_a_file_of_the_line_again_fails_so_the_no_op_is_the_engines(store: Store, engine: str) -> None:
    # Negative control: what install twice would do if it ignored the recorded version.
    install(store, NOTES_1)
    with pytest.raises(StorageError):
        with store.transaction() as tx:
            tx.engine.run_script(tx.conn, NOTES_1.migrations(engine)[1])
    assert version(store) == 1


def test_a_line_installs_inside_the_callers_transaction(store: Store) -> None:
    with pytest.raises(RuntimeError, match="undo"):
        with store.transaction() as tx:
            tx.engine.install(tx.conn, NOTES_2)
            raise RuntimeError("undo")
    assert version(store) == 0
    assert not store.read(lambda view: view.ops.table_exists(view.conn, "notes"))


def test_a_line_newer_than_its_files_is_refused_and_nothing_changes(store: Store) -> None:
    install(store, NOTES_2)
    with pytest.raises(WrongPath) as refused:
        install(store, NOTES_1)  # an older copy of the line's files
    assert refused.value.code == "line_too_new"
    assert "migration line notes has version 2" in refused.value.message
    assert "up to 1" in refused.value.message
    assert version(store) == 2


def test_the_ledger_refuses_a_database_where_its_line_is_newer(store: Store) -> None:
    with store.transaction() as tx:
        tx.ops.set_line_version(tx.conn, "ledger", 2)
    assert not store.read(ledger.current_tx)  # so install writes, and refuses
    with pytest.raises(WrongPath) as refused:
        ledger.install(store)
    assert refused.value.code == "line_too_new" and "ledger" in refused.value.message
    assert version(store, "ledger") == 2


def test_a_table_made_before_lines_existed_is_adopted_at_version_1(store: Store) -> None:
    store.enqueue('{"event_id": "E0001", "payload": {"category": "book", "amount_cents": 100}}\n')
    with store.transaction() as tx:
        tx.execute("INSERT INTO effects (event_id, category, amount_cents) VALUES ('E0001', 'book', 100)")
        tx.execute("DELETE FROM migration_lines")  # as a database from before version 6
    assert version(store, "ledger") == 0 and ledger.installed(store)
    ledger.install(store)  # CREATE TABLE IF NOT EXISTS: the table and its rows stay
    assert version(store, "ledger") == 1
    assert ledger.effects(store) == [("E0001", "book", 100)]


def test_a_line_without_files_for_the_engine_is_refused(store: Store, engine: str) -> None:
    other = "postgresql" if engine == "sqlite" else "sqlite"
    elsewhere = MigrationLine("notes", FIXTURE, {other: "one"}, frozenset({"notes"}))
    with pytest.raises(StorageError) as refused:
        install(store, elsewhere)
    assert refused.value.code == "storage_error" and f"no migrations for {engine}" in refused.value.message
    assert version(store) == 0


@pytest.mark.one_engine
def test_registering_a_line_again_is_a_no_op_and_a_clash_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engines, "LINES", dict(engines.LINES))
    assert register_line(NOTES_1) is NOTES_1
    assert register_line(notes("one")) is not None  # equal: the same line again
    with pytest.raises(ValueError, match="another migration line is registered as notes"):
        register_line(NOTES_2)
    with pytest.raises(ValueError, match="belong to line ledger"):
        register_line(MigrationLine("shop", FIXTURE, {"sqlite": "one"}, frozenset({"effects"})))
    assert engines.LINES["ledger"] is ledger.LINE  # registered on import of queue_core.app.ledger


@pytest.mark.one_engine
def test_the_line_files_must_be_numbered_from_1_without_a_gap() -> None:
    assert list(NOTES_2.migrations("sqlite")) == [1, 2]
    gap = MigrationLine("gap", FIXTURE, {"sqlite": "gap"}, frozenset())  # version 2 alone
    with pytest.raises(ValueError, match="not numbered 1, 2"):
        gap.migrations("sqlite")
