"""Older schema versions are migrated to the current one on open, in one transaction.

A version-1 database is built by hand, exactly as the v1 code made it
(``docs_support/old_versions.py``: v1's schema copied verbatim; v1 created the
receipts table lazily with the first receipt), filled with rows in every
state, and then opened with ``Store(...)``. Real SQLite files in ``tmp_path``.
"""

from __future__ import annotations

import os
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from queue_core import (
    Handler,
    Lease,
    ModelClock,
    Outcome,
    ReceiptHandler,
    StorageError,
    Store,
    WrongPath,
    ledger,
    receipts,
)
from queue_core import engines
from queue_core.engines import sqlite as sqlite_engine

from .support import line

from docs_support.old_versions import (
    V1_EFFECTS,
    V1_MESSAGES,
    V1_RECEIPT_ROWS,
    make_v1,
    make_v2,
    v1_connect,
)

V3_COLUMNS = ["enqueued_at", "done_at", "expired_leases", "payload_sha256"]
UNKNOWN_TIMES = ("SELECT count(*) FROM messages WHERE enqueued_at IS NULL AND done_at IS NULL"
                 " AND expired_leases = 0 AND payload_sha256 IS NULL")


def select(path: Path, sql: str) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(path)) as conn:
        return conn.execute(sql).fetchall()


def header_version(path: Path) -> int:
    return int.from_bytes(path.read_bytes()[60:64], "big")


def columns(path: Path, table: str) -> list[str]:
    return [r[1] for r in select(path, f"PRAGMA table_info({table})")]


def fingerprint(path: Path) -> tuple[bytes, int, list[str]]:
    """Bytes and mtime of the file, and what lies beside it (no -wal, -shm or -journal left)."""
    return path.read_bytes(), path.stat().st_mtime_ns, sorted(p.name for p in path.parent.iterdir())


MESSAGE_COLUMNS = "event_id, payload, state, attempts, generation, available_at, lease_until, last_error"


@pytest.fixture
def v1(tmp_path: Path) -> Path:
    return make_v1(tmp_path / "v1.sqlite3")


# ------------------------------------------------------------- the fixture

def test_the_hand_built_file_is_a_version_1_queue(v1: Path) -> None:
    assert header_version(v1) == 1
    assert select(v1, "PRAGMA application_id") == [(sqlite_engine.APPLICATION_ID,)]
    assert select(v1, "PRAGMA journal_mode") == [("wal",)]
    assert "last_detail" not in columns(v1, "messages")
    assert {state for (_, _, state, *_) in V1_MESSAGES} == {"ready", "leased", "done", "dead"}
    assert select(v1, f"SELECT {MESSAGE_COLUMNS} FROM messages ORDER BY event_id") == V1_MESSAGES
    assert not v1.with_name(v1.name + "-wal").exists()  # closed cleanly, as v1 left it


# --------------------------------------------------------------- migration

def test_opening_a_version_1_file_migrates_it_keeping_every_row(v1: Path) -> None:
    index_sql = select(v1, "SELECT sql FROM sqlite_master WHERE name = 'messages_claimable'")
    with Store(v1, clock=ModelClock(1000)):
        # The migration is checkpointed at once: the new version is in the file itself
        # while the store is still open, not only in its WAL.
        assert header_version(v1) == sqlite_engine.SCHEMA_VERSION
    assert header_version(v1) == sqlite_engine.SCHEMA_VERSION
    assert select(v1, "PRAGMA user_version") == [(sqlite_engine.SCHEMA_VERSION,)]
    assert select(v1, "PRAGMA application_id") == [(sqlite_engine.APPLICATION_ID,)]
    assert columns(v1, "messages") == [*MESSAGE_COLUMNS.split(", "), "last_detail", *V3_COLUMNS, "queue",
                                      "lease_token", "retries", "priority"]
    # every message from before belongs to the default queue
    assert select(v1, "SELECT DISTINCT queue FROM messages") == [("default",)]
    # Every row keeps its meaning: the same values, and no detail was invented.
    assert select(v1, f"SELECT {MESSAGE_COLUMNS} FROM messages ORDER BY event_id") == V1_MESSAGES
    assert select(v1, "SELECT count(*) FROM messages WHERE last_detail IS NOT NULL") == [(0,)]
    # Nor a time: a row from before version 3 has none (metrics leave it out), and no expired lease counted.
    assert select(v1, UNKNOWN_TIMES) == [(len(V1_MESSAGES),)]
    assert select(v1, "SELECT event_id, category, amount_cents FROM effects ORDER BY event_id") == V1_EFFECTS
    assert select(v1, "SELECT tenant, operation, payload, effect FROM receipts") == V1_RECEIPT_ROWS
    # The claim index leads with the queue, then the priority, and claim reads
    # through it without a sort.
    new_index = select(v1, "SELECT sql FROM sqlite_master WHERE name = 'messages_claimable'")
    assert index_sql != [] and new_index != index_sql and "(queue, priority DESC, available_at, event_id)" in new_index[0][0]
    claim = sqlite_engine.OPERATIONS.sql("claim_messages")
    for name, value in (("queue", "'default'"), ("now", "5"), ("until", "35"), ("wanted", "5"),
                        ("max_attempts", "3"), ("token", "1"), ("lease_expired", "'lease_expired'")):
        claim = claim.replace(f":{name}", value)
    plan = " ".join(r[3] for r in select(v1, "EXPLAIN QUERY PLAN " + claim))
    assert "messages_claimable" in plan and "TEMP B-TREE" not in plan
    assert select(v1, "PRAGMA integrity_check") == [("ok",)]
    assert select(v1, "PRAGMA foreign_key_check") == []
    assert select(v1, "PRAGMA journal_mode") == [("wal",)]
    assert not v1.with_name(v1.name + "-wal").exists()  # the store was closed: so was every connection


def test_the_migrated_file_works_as_a_version_2_queue(v1: Path) -> None:
    clock = ModelClock(1000)
    store = Store(v1, clock=clock)
    assert store.status().messages == {"ready": 3, "leased": 2, "done": 2, "dead": 2}
    assert ledger.totals(store).to_dict() == {"count": 2, "total_cents": 10900, "by_category": {"book": 10900}}
    assert [(r.tenant, r.operation, r.effect) for r in receipts.stored(store)] == [("north", "op-7", "E0007")]
    # A lease handed out by v1 is still fenced by its generation and deadline.
    assert store.complete(Lease("E0003", 1, 1, 1002), Handler()).outcome is Outcome.DONE
    # Claim order and backoff survive: E0005 is due now, E0002 at 1001, E0008 at 1500.
    lease = store.claim()
    assert (lease.event_id, lease.generation, lease.attempt) == ("E0005", 1, 1)
    failed = store.fail(lease, "flaky", detail="written into the new column")
    assert store.message("E0005").last_detail == failed.detail == "written into the new column"
    # The receipts table of v1 works under ReceiptHandler: a repeat of op-7 writes no second effect.
    store.enqueue(line("E0010", "book", 900, operation="op-7", tenant="north"))
    clock.set(1001)
    done = []
    while (lease := store.claim()) is not None:
        handler = ReceiptHandler(Handler()) if lease.event_id == "E0010" else Handler()
        done.append((lease.event_id, lease.attempt, store.complete(lease, handler).outcome))
    # By available_at, then event id: E0010 (1000), then E0002 and E0005 (both due at 1001).
    assert done == [("E0010", 1, Outcome.DONE), ("E0002", 2, Outcome.DONE), ("E0005", 2, Outcome.DONE)]
    assert ledger.totals(store).to_dict() == {  # E0010 reused E0007's effect
        "count": 5, "total_cents": 10000 + 900 + 5000 + 2000 + 700,
        "by_category": {"bag": 700, "book": 15900, "pen": 2000}}
    assert [r.effect for r in receipts.stored(store)] == ["E0007"]
    # The new column's rule holds in the migrated table too: a detail needs its code.
    with closing(sqlite3.connect(v1)) as conn, pytest.raises(sqlite3.IntegrityError):
        conn.execute("UPDATE messages SET last_detail = 'why' WHERE event_id = 'E0001'")


def test_a_version_1_file_that_never_had_a_receipt_gets_the_receipts_table(tmp_path: Path) -> None:
    path = make_v1(tmp_path / "plain.sqlite3", with_receipts=False)
    assert select(path, "SELECT name FROM sqlite_master WHERE name = 'receipts'") == []
    store = Store(path, clock=ModelClock(1000))
    assert select(path, "SELECT strict FROM pragma_table_list WHERE name = 'receipts'") == [(1,)]
    assert receipts.stored(store) == []
    assert select(path, f"SELECT {MESSAGE_COLUMNS} FROM messages ORDER BY event_id") == V1_MESSAGES
    # The migrated tables are the ones a new file gets.
    fresh = tmp_path / "fresh.sqlite3"
    Store(fresh)
    for table in ("messages", "receipts"):
        assert select(path, f"PRAGMA table_info({table})") == select(fresh, f"PRAGMA table_info({table})"), table
        assert select(path, f"PRAGMA index_list({table})") == select(fresh, f"PRAGMA index_list({table})"), table
    strict = "SELECT name, strict FROM pragma_table_list WHERE name IN ('messages', 'receipts') ORDER BY name"
    assert select(path, strict) == select(fresh, strict) == [("messages", 1), ("receipts", 1)]


def test_an_empty_version_1_file_migrates(tmp_path: Path) -> None:
    path = make_v1(tmp_path / "empty.sqlite3", with_receipts=False, rows=False)
    store = Store(path, clock=ModelClock(1000), create=False)  # migration is not creation
    assert header_version(path) == sqlite_engine.SCHEMA_VERSION
    assert store.status().messages == {"ready": 0, "leased": 0, "done": 0, "dead": 0}
    store.enqueue(line("E0001"))
    assert store.complete(store.claim(), Handler()).outcome is Outcome.DONE  # v1's effects table is the ledger's
    assert ledger.effects(store) == [("E0001", "book", 100)]


def test_opening_the_migrated_file_again_is_a_no_op(v1: Path) -> None:
    Store(v1, clock=ModelClock(1000)).close()  # closed: its commits are in the file, not a WAL
    before = fingerprint(v1)
    with Store(v1, clock=ModelClock(1000)), Store(v1, clock=ModelClock(2000), create=False):
        assert fingerprint(v1) == before  # opening writes nothing, not even a -lock file
    assert fingerprint(v1) == before
    assert header_version(v1) == sqlite_engine.SCHEMA_VERSION


def test_ledger_install_on_a_migrated_file_keeps_the_v1_effects(v1: Path) -> None:
    store = Store(v1, clock=ModelClock(1000))
    ledger.install(store)  # CREATE TABLE IF NOT EXISTS: the v1 table is kept
    assert ledger.effects(store) == V1_EFFECTS


def test_a_version_2_file_migrates_to_version_3_and_no_row_changes_meaning(tmp_path: Path) -> None:
    path = make_v2(tmp_path / "v2.sqlite3")
    assert header_version(path) == 2 and "enqueued_at" not in columns(path, "messages")
    old = f"{MESSAGE_COLUMNS}, last_detail"
    before = select(path, f"SELECT {old} FROM messages ORDER BY event_id")
    with Store(path, clock=ModelClock(1200)) as store:
        assert header_version(path) == sqlite_engine.SCHEMA_VERSION
        assert columns(path, "messages") == [*old.split(", "), *V3_COLUMNS, "queue", "lease_token",
                                                 "retries", "priority"]
        assert select(path, f"SELECT {old} FROM messages ORDER BY event_id") == before  # the same values
        assert select(path, UNKNOWN_TIMES) == [(len(before),)]  # no time guessed, no expiry invented
        metrics = store.metrics()
        # Counted by state; left out of the ages and the latency, since their times are unknown.
        assert metrics.messages == {"ready": 3, "leased": 2, "done": 2, "dead": 2}
        assert (metrics.oldest_ready_age, metrics.enqueue_to_done.count, metrics.expired_leases) == (None, 0, 0)
        # prune cannot age them: it removes nothing and says how many it could not age.
        assert store.prune(0).to_dict() == {"pruned": 0, "unknown_age": 2}
        # New work gets its times.
        store.enqueue(line("E0011", "book", 100))
        done = None
        while (lease := store.claim()) is not None:
            completion = store.complete(lease, Handler())
            if lease.event_id == "E0011":
                done = completion
        assert done is not None and done.outcome is Outcome.DONE
        stored = store.message("E0011")
        assert (stored.enqueued_at, stored.done_at) == (1200, 1200)
    assert select(path, "PRAGMA integrity_check") == [("ok",)]


def test_a_version_3_rule_holds_in_a_migrated_table(tmp_path: Path) -> None:
    path = make_v2(tmp_path / "v2.sqlite3")
    Store(path, clock=ModelClock(1000)).close()
    with closing(sqlite3.connect(path)) as conn:
        for sql in ("UPDATE messages SET done_at = 5 WHERE state <> 'done'",
                    "UPDATE messages SET expired_leases = -1",
                    "UPDATE messages SET payload_sha256 = 'abc' WHERE state = 'done'"):
            with pytest.raises(sqlite3.IntegrityError, match="CHECK constraint failed"):
                conn.execute(sql)


# ------------------------------------------------------ failure and refusal

def test_a_migration_that_fails_part_way_leaves_the_file_byte_identical(v1: Path) -> None:
    # A conflicting object: an index named like the table the second step creates. The
    # first step (ALTER TABLE messages ADD COLUMN last_detail) succeeds, the second fails.
    first, second = sqlite_engine.sql_statements(sqlite_engine.MIGRATIONS[2])
    assert first.startswith("ALTER TABLE messages ADD COLUMN last_detail")
    assert second.startswith("CREATE TABLE IF NOT EXISTS receipts")
    with closing(v1_connect(v1)) as conn:
        conn.execute("CREATE INDEX receipts_by_effect ON receipts (effect)")
        conn.execute("DROP TABLE receipts")  # drops its index as well
        conn.execute("CREATE INDEX receipts ON messages (state)")
    before = fingerprint(v1)
    with pytest.raises(StorageError) as info:
        Store(v1, clock=ModelClock(1000))
    assert "receipts" in info.value.message
    assert fingerprint(v1) == before
    assert header_version(v1) == 1
    assert "last_detail" not in columns(v1, "messages")  # the first step was rolled back with the rest
    assert select(v1, f"SELECT {MESSAGE_COLUMNS} FROM messages ORDER BY event_id") == V1_MESSAGES
    # Remove the conflict, and the same file migrates.
    with closing(v1_connect(v1)) as conn:
        conn.execute("DROP INDEX receipts")
    Store(v1, clock=ModelClock(1000)).close()
    assert header_version(v1) == sqlite_engine.SCHEMA_VERSION and "last_detail" in columns(v1, "messages")


def test_a_migration_on_a_read_only_connection_leaves_the_file_byte_identical(
    v1: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The file cannot be made read-only for root by its mode bits, so the store's
    # connection is opened read-only by SQLite itself (mode=ro): a real refusal to write.
    opened: list[str] = []

    def read_only(path: Path, *, busy_timeout_ms: int, check_same_thread: bool = True) -> sqlite3.Connection:
        opened.append(str(path))
        conn = sqlite3.connect(f"{Path(path).absolute().as_uri()}?mode=ro", uri=True, isolation_level=None,
                               timeout=busy_timeout_ms / 1000, check_same_thread=check_same_thread)
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        return conn

    before = v1.read_bytes(), v1.stat().st_mtime_ns
    monkeypatch.setattr(sqlite_engine, "connect", read_only)
    with pytest.raises(StorageError) as info:
        Store(v1, clock=ModelClock(1000))
    monkeypatch.undo()
    assert opened, "the migration did not go through sqlite_engine.connect"
    assert info.value.code == "read_only", info.value
    assert (v1.read_bytes(), v1.stat().st_mtime_ns) == before
    # A read-only connection to a WAL file leaves SQLite's -wal/-shm beside it; the WAL holds no frame.
    wal = v1.with_name(v1.name + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    assert header_version(v1) == 1
    Store(v1, clock=ModelClock(1000)).close()  # with a writable connection, the same file migrates
    assert header_version(v1) == sqlite_engine.SCHEMA_VERSION


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="mode bits do not stop root")
def test_a_read_only_file_is_not_migrated_and_left_byte_identical(v1: Path) -> None:
    v1.chmod(0o444)
    try:
        before = fingerprint(v1)
        with pytest.raises(StorageError):
            Store(v1, clock=ModelClock(1000))
        assert fingerprint(v1) == before
    finally:
        v1.chmod(0o644)


def bump_version(path: Path, version: int) -> None:
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("PRAGMA journal_mode = DELETE")  # so that the header on disk says it
        conn.execute(f"PRAGMA user_version = {version}")


@pytest.mark.parametrize("start", ["v1", "v2"])
def test_a_newer_schema_version_is_refused_and_the_file_untouched(tmp_path: Path, start: str) -> None:
    path = tmp_path / "newer.sqlite3"
    if start == "v1":
        make_v1(path)
    else:
        with Store(path, clock=ModelClock(1000)) as store:  # closed before the file is changed and compared
            store.enqueue(line("E0001"))
    newer = sqlite_engine.SCHEMA_VERSION + 1
    bump_version(path, newer)
    before = fingerprint(path)
    for create in (True, False):
        with pytest.raises(WrongPath) as info:
            Store(path, clock=ModelClock(1000), create=create)
        assert info.value.code == "schema_too_new"
        assert str(newer) in info.value.message and str(path) in info.value.message
        assert fingerprint(path) == before


def test_a_newer_version_still_only_in_the_wal_is_refused(tmp_path: Path) -> None:
    # Another client (a newer queue_core) has committed its upgrade, but only to the WAL.
    path = tmp_path / "q.sqlite3"
    with Store(path, clock=ModelClock(1000)) as store:  # closed: its commits are in the main file
        store.enqueue(line("E0001"))
    main_before = path.read_bytes()
    with closing(sqlite3.connect(path, isolation_level=None)) as holder:
        holder.execute("PRAGMA wal_autocheckpoint = 0")
        holder.execute(f"PRAGMA user_version = {sqlite_engine.SCHEMA_VERSION + 1}")
        assert header_version(path) == sqlite_engine.SCHEMA_VERSION  # the header on disk is stale
        with pytest.raises(WrongPath) as info:
            Store(path, clock=ModelClock(1000))
        assert info.value.code == "schema_too_new"
        assert path.read_bytes() == main_before


def test_prepare_checks_the_version_again_under_the_write_lock(tmp_path: Path) -> None:
    # Between inspect() and prepare() another process may have moved the file on.
    path = make_v1(tmp_path / "raced.sqlite3")
    bump_version(path, sqlite_engine.SCHEMA_VERSION + 1)
    before = fingerprint(path)
    conn = sqlite_engine.connect(path, busy_timeout_ms=2000)
    try:
        with pytest.raises(WrongPath) as info:
            sqlite_engine.migrate(conn, path)
        assert info.value.code == "schema_too_new"
        assert not conn.in_transaction
    finally:
        conn.close()
    assert fingerprint(path) == before


# ------------------------------------------------------- version 4: named queues

def make_v3(path: Path) -> Path:
    """A version-3 file: the v2 file moved forward by migration 3 alone."""
    make_v2(path)
    with closing(v1_connect(path)) as conn:
        conn.execute("BEGIN IMMEDIATE")
        for statement in sqlite_engine.sql_statements(sqlite_engine.MIGRATIONS[3]):
            conn.execute(statement)
        conn.execute("PRAGMA user_version = 3")
        conn.execute("COMMIT")
    return path


def test_a_version_3_file_moves_to_named_queues_keeping_every_row(tmp_path: Path) -> None:
    path = make_v3(tmp_path / "v3.sqlite3")
    every = "SELECT * FROM messages ORDER BY event_id"
    before, effects = select(path, every), select(path, "SELECT * FROM effects ORDER BY event_id")
    assert header_version(path) == 3 and before and effects
    with Store(path, clock=ModelClock(1200)) as store:
        assert header_version(path) == sqlite_engine.SCHEMA_VERSION
        # every row as it was, in the default queue, which keeps the teaching rule
        # (and, claimed before version 5, with no lease token; no retry counted
        # before version 8; from before version 9, at priority 0)
        assert select(path, every) == [(*row, "default", 0, 0, 0) for row in before]
        assert select(path, "SELECT event_id, category, amount_cents FROM effects ORDER BY event_id") == effects
        assert select(path, "SELECT queue FROM effects GROUP BY queue") == [("default",)]
        keys = select(path, "SELECT \"from\", \"to\" FROM pragma_foreign_key_list('effects') ORDER BY seq")
        assert keys == [("queue", "queue"), ("event_id", "event_id")]
        assert select(path, "PRAGMA integrity_check") == [("ok",)]
        assert select(path, "PRAGMA foreign_key_check") == []
        assert store.queue_settings("default") == store.settings
        # the migrated file works: a second queue beside the first, and the ledger in both
        store.create_queue("orders", id_pattern=r"o-[0-9]+")
        with Store(path, clock=ModelClock(1200), queue="orders") as orders:
            orders.send("o-1", {"category": "book", "amount_cents": 5})
            assert orders.complete(orders.claim(), Handler()).outcome is Outcome.DONE
        assert ("o-1", "book", 5) in ledger.effects(store)
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:  # the teaching rule holds against raw SQL
        with pytest.raises(sqlite3.IntegrityError, match="CHECK constraint failed"):
            conn.execute("INSERT INTO messages (event_id, payload, available_at) VALUES ('order-1', '{}', 0)")
        conn.execute("PRAGMA foreign_keys = ON")
        with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
            conn.execute("INSERT INTO messages (event_id, payload, available_at, queue) "
                         "VALUES ('x', '{}', 0, 'nowhere')")


def test_a_table_of_yours_keyed_on_the_old_id_stops_the_migration_untouched(tmp_path: Path) -> None:
    path = make_v3(tmp_path / "v3.sqlite3")
    with closing(v1_connect(path)) as conn:
        conn.execute("CREATE TABLE orders (event_id TEXT PRIMARY KEY REFERENCES messages (event_id))")
    before = fingerprint(path)
    with pytest.raises(WrongPath) as blocked:
        Store(path, clock=ModelClock(1000))
    assert blocked.value.code == "migration_blocked"
    assert "orders" in blocked.value.message and "(queue, event_id)" in blocked.value.message
    assert fingerprint(path)[:2] == before[:2] and header_version(path) == 3
    # moved by its owner as the message says, the file migrates
    with closing(v1_connect(path)) as conn:
        conn.execute("DROP TABLE orders")
    Store(path, clock=ModelClock(1000)).close()
    assert header_version(path) == sqlite_engine.SCHEMA_VERSION


def test_the_ledgers_effects_move_only_because_its_line_is_registered(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The engine knows no ledger: with no line registered, its effects is a table
    # like any other that references messages, and stops the migration.
    path = make_v3(tmp_path / "v3.sqlite3")
    before = fingerprint(path)
    monkeypatch.setattr(engines, "LINES", {})
    with pytest.raises(WrongPath) as blocked:
        Store(path, clock=ModelClock(1000))
    assert blocked.value.code == "migration_blocked" and "table effects" in blocked.value.message
    assert fingerprint(path)[:2] == before[:2] and header_version(path) == 3
    # registered again (as importing queue_core.app.ledger does), the file migrates
    engines.register_line(ledger.LINE)
    with Store(path, clock=ModelClock(1000)) as store:
        assert header_version(path) == sqlite_engine.SCHEMA_VERSION
        assert ledger.effects(store) == select(path, "SELECT event_id, category, amount_cents FROM effects")
        # the core step moved the table; install then adopts it at the line's version 1
        assert store.read(lambda view: view.ops.line_version(view.conn, "ledger")) == 0
        ledger.install(store)
        assert store.read(lambda view: view.ops.line_version(view.conn, "ledger")) == 1


# ------------------------------------------------------- version 5: lease tokens

def make_v4(path: Path, clock: ModelClock) -> tuple[Path, Lease]:
    """A version-4 file with E0001 leased by a version-4 claim (no token), E0002 ready."""
    make_v3(path)
    with closing(v1_connect(path)) as conn:
        # the ledger's effects move with the engine's own step of migration 4; here
        # the ledger starts anew on the version-5 file
        conn.execute("DROP TABLE effects")
        conn.execute("BEGIN IMMEDIATE")
        for statement in sqlite_engine.sql_statements(sqlite_engine.MIGRATIONS[4]):
            conn.execute(statement)
        conn.execute("PRAGMA user_version = 4")
        conn.execute("COMMIT")
        conn.execute("DELETE FROM messages")
        for event_id in ("E0001", "E0002"):
            conn.execute("INSERT INTO messages (event_id, payload, available_at) VALUES (?, ?, 0)",
                         (event_id, '{"category": "book", "amount_cents": 100}'))
        # a version-4 claim: the generation and the deadline, nothing else
        conn.execute("UPDATE messages SET state = 'leased', attempts = 1, generation = 1, "
                     "lease_until = ? WHERE event_id = 'E0001'", (clock.now() + 30,))
    return path, Lease("E0001", 1, 1, clock.now() + 30)


def test_a_version_4_file_gets_lease_tokens_and_its_leases_still_complete(tmp_path: Path) -> None:
    clock = ModelClock(1000)
    path, old_lease = make_v4(tmp_path / "v4.sqlite3", clock)
    before = select(path, "SELECT * FROM messages ORDER BY event_id")
    assert header_version(path) == 4 and "lease_token" not in columns(path, "messages")
    with Store(path, clock=clock) as store:
        ledger.install(store)
        assert header_version(path) == sqlite_engine.SCHEMA_VERSION
        assert columns(path, "messages")[-3:] == ["lease_token", "retries", "priority"]
        assert select(path, "SELECT * FROM messages ORDER BY event_id") == [(*row, 0, 0, 0) for row in before]
        # a lease a version-4 worker holds (token 0, as the row's) still completes
        assert old_lease.token == 0
        assert store.complete(old_lease, Handler()).outcome is Outcome.DONE
        # a new claim draws a token, stores it, and only it completes the claim
        fresh = store.claim()
        assert fresh is not None and fresh.token != 0
        assert select(path, "SELECT lease_token FROM messages WHERE event_id = 'E0002'") == [(fresh.token,)]
        assert store.complete(fresh, Handler()).outcome is Outcome.DONE
        assert select(path, "PRAGMA integrity_check") == [("ok",)]
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        with pytest.raises(sqlite3.IntegrityError, match="CHECK constraint failed"):
            conn.execute("UPDATE messages SET lease_token = -1")


def test_the_receipts_table_of_another_database_is_migration_10s() -> None:
    """receipts.create_table runs the engine's receipts_create: the very table migration 10 makes."""
    created = [s for s in sqlite_engine.sql_statements(sqlite_engine.MIGRATIONS[10])
               if "CREATE TABLE receipts_scoped" in s]
    assert len(created) == 1
    def words(sql: str) -> list[str]:
        return " ".join(line.split("--")[0].strip() for line in sql.strip().rstrip(";").splitlines()).split()
    assert words(created[0].replace("receipts_scoped", "receipts")) == words(
        sqlite_engine.OPERATIONS.sql("receipts_create").replace("IF NOT EXISTS ", ""))