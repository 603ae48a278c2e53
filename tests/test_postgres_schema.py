"""The PostgreSQL schema (the engine's numbered migrations, the ledger's line) against a real server.

Every test gets a fresh database of the session's throwaway cluster
(tests/postgres_server.py); nothing is mocked. The impossible rows are the
ones the SQLite schema tests use (test_protocol.py, test_receipts.py,
test_migration.py), and each case runs against both engines: SQLite must
refuse it too, so that the two schemas are held to one list. Where PostgreSQL
behaves differently on purpose, a test below says so and pins it.

Without a server or psycopg these tests are skipped with the reason (failed
under QUEUE_CORE_REQUIRE_POSTGRES=1, as in CI).
"""

from __future__ import annotations

import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from typing import Any

import pytest

from queue_core.envelope import canonical_json
from queue_core.engines import sqlite as sqlite_engine

from queue_core.engines import APPLICATION_ID
from queue_core.app.ledger import LINE
from queue_core.engines.postgres import MIGRATIONS, OPERATIONS, SCHEMA_VERSION, PostgresEngine

from .postgres_server import Cluster

# The ledger's migration line on PostgreSQL, its files in order as one text.
LEDGER = "\n".join(LINE.migrations("postgresql").values())
# The SQLite schema: the queue's migrations in order, then the ledger's line.
SQLITE_SCRIPTS = (*sqlite_engine.MIGRATIONS.values(), *LINE.migrations("sqlite").values())


def pg() -> Any:
    """psycopg, imported where it is used: without it the fixture skips (or fails) with the reason."""
    import psycopg as module

    return module


def connect(dsn: str, *, autocommit: bool = True) -> Any:
    return pg().connect(dsn, autocommit=autocommit)


def create_queue(dsn: str) -> None:
    """What Store(url) does to a new database: the engine's migrations, under its lock."""
    engine = PostgresEngine(dsn, busy_timeout_ms=30_000)
    conn = engine.connect()
    try:
        engine.open_queue(lambda: conn, create=True)
    finally:
        conn.close()


def apply(conn: Any, *texts: str, split: bool = False) -> None:
    """Run the texts in one transaction: each whole, or statement by statement like the SQLite files."""
    with conn.transaction():
        for text in texts:
            for statement in sqlite_engine.sql_statements(text) if split else [text]:
                conn.execute(statement)


def install_ledger(dsn: str) -> None:
    """What ledger.install writes: the line through the engine (its turn, its files, its version)."""
    engine = PostgresEngine(dsn, busy_timeout_ms=30_000)
    conn = engine.connect()
    try:
        conn.execute("BEGIN")
        engine.install(conn, LINE)
        conn.execute("COMMIT")
    finally:
        conn.close()


@pytest.fixture
def pg_conn(postgres_dsn: str) -> Iterator[Any]:
    with connect(postgres_dsn) as conn:
        yield conn


def catalog(conn: Any) -> dict[str, Any]:
    """What the schema made: tables and columns, constraints, indexes, functions."""
    return {
        "columns": conn.execute(
            "SELECT table_name, column_name, data_type, is_nullable, column_default FROM information_schema.columns"
            " WHERE table_schema = 'public' ORDER BY table_name, ordinal_position").fetchall(),
        "constraints": conn.execute(
            "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE connamespace = 'public'::regnamespace ORDER BY 1, 2").fetchall(),
        "indexes": conn.execute(
            "SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' ORDER BY 1, 2").fetchall(),
        "functions": conn.execute(
            "SELECT proname FROM pg_proc WHERE pronamespace = 'public'::regnamespace ORDER BY 1").fetchall(),
    }


# ------------------------------------------------------------------ the server

def test_the_server_listens_on_no_tcp_port_and_syncs_to_disk(pg_conn: Any, postgres_cluster: Cluster) -> None:
    def show(setting: str) -> str:
        return str(pg_conn.execute(f"SHOW {setting}").fetchone()[0])

    assert show("listen_addresses") == ""  # no TCP socket at all
    assert show("unix_socket_directories") == str(postgres_cluster.root)
    assert pg_conn.execute("SELECT inet_server_addr()").fetchone()[0] is None  # this connection: a Unix socket
    assert (show("fsync"), show("synchronous_commit"), show("full_page_writes")) == ("on", "on", "on")
    assert show("server_encoding") == "UTF8"
    assert pg_conn.info.server_version >= 130000  # DROP DATABASE ... WITH (FORCE)


@pytest.mark.parametrize("turn", [1, 2])
def test_each_test_gets_a_fresh_empty_database(pg_conn: Any, turn: int) -> None:
    # Run twice: the second CREATE TABLE would fail if the first test's database were reused.
    assert pg_conn.execute("SELECT current_database()").fetchone()[0].startswith("test_")
    assert pg_conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone()[0] == 0
    pg_conn.execute("CREATE TABLE seen (turn integer)")
    pg_conn.execute("INSERT INTO seen VALUES (%s)", (turn,))


# ---------------------------------------------------------- applying the schema

def test_a_queue_opened_again_and_the_ledger_applied_again_change_nothing(postgres_dsn: str,
                                                                          pg_conn: Any) -> None:
    create_queue(postgres_dsn)
    apply(pg_conn, LEDGER)
    first = catalog(pg_conn)
    create_queue(postgres_dsn)
    apply(pg_conn, LEDGER, split=True)  # again, statement by statement (sqlite_engine.sql_statements)
    apply(pg_conn, LEDGER)
    assert catalog(pg_conn) == first
    assert {row[0] for row in first["columns"]} == {"messages", "receipts", "effects", "queues", "queue_core_schema",
                                                    "migration_lines", "queue_counters"}
    assert pg_conn.execute("SELECT count(*) FROM queue_core_schema").fetchone()[0] == 1


def test_the_queue_schema_alone_has_no_ledger(postgres_dsn: str, pg_conn: Any) -> None:
    # As on SQLite: the effects table is the reference application's, installed separately.
    create_queue(postgres_dsn)
    tables = {r[0] for r in pg_conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
    assert tables == {"messages", "receipts", "queues", "queue_core_schema", "migration_lines",
                      "queue_counters"}


def test_the_schema_version_row_says_the_package_s_version(postgres_dsn: str, pg_conn: Any) -> None:
    create_queue(postgres_dsn)
    assert SCHEMA_VERSION == sqlite_engine.SCHEMA_VERSION == max(MIGRATIONS)
    assert pg_conn.execute("SELECT application_id, version FROM queue_core_schema").fetchall() == [
        (APPLICATION_ID, SCHEMA_VERSION)]
    # One row, never two; and no other application's id.
    for sql in ("INSERT INTO queue_core_schema (application_id, version) VALUES (1363373938, 3)",
                "INSERT INTO queue_core_schema (singleton, application_id, version) VALUES (false, 1363373938, 3)",
                "UPDATE queue_core_schema SET application_id = 1"):
        with pytest.raises(pg().errors.IntegrityError):
            with pg_conn.transaction():
                pg_conn.execute(sql)
    # A line's install takes the one advisory lock whose key is the application id;
    # the engine takes it around the migrations (the files themselves take none).
    assert re.findall(r"pg_advisory_xact_lock\((\d+)\)", OPERATIONS.sql("line_turn")) == [str(APPLICATION_ID)]
    assert not any("pg_advisory" in text for text in [*MIGRATIONS.values(), LEDGER])


def _in_thread(work: Callable[[], None]) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 (handed to the test)
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, errors


def _new_backend(observer: Any, before: set[int]) -> int:
    """The pid of the one backend that connected after ``before`` was read."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        new = {row[0] for row in observer.execute("SELECT pid FROM pg_stat_activity WHERE backend_type = "
                                                  "'client backend'")} - before
        if new:
            return int(new.pop())
        time.sleep(0.02)
    raise AssertionError("the second creator never connected")


def _wait_until_blocked(observer: Any, pid: int, wait_event: str | None = None) -> str:
    """Wait until backend ``pid`` waits for a lock; return which kind (e.g. 'advisory', 'transactionid')."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        row = observer.execute("SELECT wait_event_type, wait_event FROM pg_stat_activity WHERE pid = %s",
                               (pid,)).fetchone()
        if row is not None and row[0] == "Lock" and (wait_event is None or row[1] == wait_event):
            return str(row[1])
        time.sleep(0.02)
    raise AssertionError(f"backend {pid} never waited for a lock")


def test_the_schema_applies_from_two_connections_at_once(postgres_dsn: str) -> None:
    barrier = threading.Barrier(2)

    def create() -> None:
        barrier.wait()
        create_queue(postgres_dsn)
        install_ledger(postgres_dsn)

    runs = [_in_thread(create) for _ in range(2)]
    for thread, _ in runs:
        thread.join(60)
    assert [errors for _, errors in runs] == [[], []]
    with connect(postgres_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM queue_core_schema").fetchone()[0] == 1
        assert conn.execute("SELECT line, version FROM migration_lines").fetchall() == [("ledger", 1)]


def test_the_advisory_lock_makes_a_second_creator_wait_for_the_first(postgres_dsn: str) -> None:
    # Deterministic: A has created everything but not committed; B must wait at
    # the lock (not at some catalog row), then find the schema and succeed.
    with connect(postgres_dsn) as first, connect(postgres_dsn) as second, connect(postgres_dsn) as observer:
        with first.transaction():
            first.execute("SELECT pg_advisory_xact_lock(%s)", (APPLICATION_ID,))
            for text in MIGRATIONS.values():
                first.execute(text)
            first.execute("INSERT INTO queue_core_schema (application_id, version) VALUES (%s, %s)",
                          (APPLICATION_ID, SCHEMA_VERSION))
            before = {row[0] for row in observer.execute("SELECT pid FROM pg_stat_activity")}
            thread, errors = _in_thread(lambda: create_queue(postgres_dsn))
            second_pid = _new_backend(observer, before)
            assert _wait_until_blocked(observer, second_pid) == "advisory"
        thread.join(60)
        assert errors == []
        assert observer.execute("SELECT version FROM queue_core_schema").fetchall() == [(SCHEMA_VERSION,)]


def test_without_the_advisory_lock_a_concurrent_creator_fails(postgres_dsn: str) -> None:
    # The negative control: the same statements without the lock. B waits on
    # A's uncommitted catalog rows, and when A commits B fails on a duplicate.
    unlocked = "\n".join(MIGRATIONS.values())
    assert "pg_advisory" not in unlocked
    with connect(postgres_dsn) as first, connect(postgres_dsn) as second, connect(postgres_dsn) as observer:
        with first.transaction():
            first.execute(unlocked)

            def create() -> None:
                with second.transaction():
                    second.execute(unlocked)

            thread, errors = _in_thread(create)
            assert _wait_until_blocked(observer, second.info.backend_pid) != "advisory"
        thread.join(60)
    assert len(errors) == 1 and isinstance(errors[0], pg().errors.UniqueViolation), errors


# ------------------------------------------------------------ the constraints

# What both engines hold before each case: a done message, its effect, a receipt, a queue, a line.
SETUP = (
    "INSERT INTO messages (event_id, payload, state, attempts, generation, available_at)"
    " VALUES ('E0001', '{\"amount_cents\":100,\"category\":\"book\"}', 'done', 1, 1, 1000)",
    "INSERT INTO effects (event_id, category, amount_cents) VALUES ('E0001', 'book', 100)",
    "INSERT INTO receipts (tenant, operation, payload, effect, scope) VALUES ('north', 'op-1', '{\"cents\":500}', 'E0001', 'default')",
    "INSERT INTO queues (name, id_pattern, max_attempts, lease_seconds, max_payload_bytes) VALUES ('other', '.+', 3, 30, 10000)",  # a queue of your own ids (version 4)
    "INSERT INTO migration_lines VALUES ('ledger', 1)",  # the ledger's line (version 6)
)

MSG = "INSERT INTO messages (event_id, payload, state, available_at"

# (statement, PostgreSQL's error class, the constraint that must refuse it).
IMPOSSIBLE = [
    # The list of test_protocol.py::test_schema_refuses_impossible_rows, in its order.
    (f"{MSG}) VALUES ('E0009', '{{}}', 'lost', 0)", "CheckViolation", "messages_state_known"),
    (f"{MSG}) VALUES ('E0009', '{{}}', 'leased', 0)", "CheckViolation", "messages_lease_until_while_leased"),
    (f"{MSG}, lease_until) VALUES ('E0009', '{{}}', 'ready', 0, 5)", "CheckViolation",
     "messages_lease_until_while_leased"),
    (f"{MSG}) VALUES ('E0009', '{{}}', 'dead', 0)", "CheckViolation", "messages_dead_with_error"),
    (f"{MSG}) VALUES ('X9', '{{}}', 'ready', 0)", "CheckViolation", "messages_event_id_format"),
    (f"{MSG}) VALUES ('E0009', '[1]', 'ready', 0)", "CheckViolation", "messages_payload_object"),
    # STRICT on SQLite; on PostgreSQL the BIGINT column's input refuses it before any CHECK.
    (f"{MSG}) VALUES ('E0009', '{{}}', 'ready', 'ten')", "InvalidTextRepresentation", None),
    # ('E0009', ..., attempts 1.5): SQLite refuses it, PostgreSQL rounds it (see the test of differences).
    (f"{MSG}, last_detail) VALUES ('E0009', '{{}}', 'ready', 0, 'x')", "CheckViolation",
     "messages_last_detail_with_error"),
    ("INSERT INTO effects (event_id, category, amount_cents) VALUES ('E0404', 'book', 1)", "ForeignKeyViolation",
     "effects_event_id_fkey"),
    ("INSERT INTO effects (event_id, category, amount_cents) VALUES ('E0001', 'book', 0)", "CheckViolation",
     "effects_amount_positive"),
    ("INSERT INTO effects (event_id, category, amount_cents) VALUES ('E0001', 'book', 1)", "UniqueViolation",
     "effects_pkey"),  # a second effect for one event
    # test_migration.py: a detail needs its code, also on UPDATE.
    ("UPDATE messages SET last_detail = 'why' WHERE event_id = 'E0001'", "CheckViolation",
     "messages_last_detail_with_error"),
    # test_receipts.py::test_receipts_table_is_strict_with_a_scope_tenant_operation_key (the blob: see differences).
    ("INSERT INTO receipts VALUES ('north', 'op-1', '{}', 'again', 'default', NULL)", "UniqueViolation", "receipts_pkey"),
    ("INSERT INTO receipts VALUES ('', 'op', '{}', 'e', 'default', NULL)", "CheckViolation", "receipts_tenant_length"),
    ("INSERT INTO receipts VALUES ('t', 'op', 'not json', 'e', 'default', NULL)", "CheckViolation", "receipts_payload_json"),
    ("INSERT INTO receipts VALUES ('t', 'op', '{}', '', 'default', NULL)", "CheckViolation", "receipts_effect_nonempty"),
    ("INSERT INTO receipts VALUES ('t', 'op', '{}', 'e', '', NULL)", "CheckViolation", "receipts_scope_length"),
    ("INSERT INTO receipts VALUES ('t', 'op', '{}', 'e', repeat('s', 201), NULL)", "CheckViolation",
     "receipts_scope_length"),
    ("INSERT INTO receipts VALUES ('t', 'op', '{}', 'e', 's', '')", "CheckViolation",
     "receipts_effect_queue_length"),
    # Every other CHECK of the queue's migrations and the ledger's line, each refusing its row.
    (f"{MSG}) VALUES ('E0001', '{{}}', 'ready', 0)", "UniqueViolation", "messages_pkey"),
    (f"{MSG}) VALUES ('E00091', '{{}}', 'ready', 0)", "CheckViolation", "messages_event_id_format"),
    (f"{MSG}) VALUES ('e0009', '{{}}', 'ready', 0)", "CheckViolation", "messages_event_id_format"),
    (f"{MSG}) VALUES ('E009a', '{{}}', 'ready', 0)", "CheckViolation", "messages_event_id_format"),
    (f"{MSG}) VALUES ('E009', '{{}}', 'ready', 0)", "CheckViolation", "messages_event_id_format"),
    (f"{MSG}) VALUES ('E000' || chr(10), '{{}}', 'ready', 0)", "CheckViolation", "messages_event_id_format"),
    (f"{MSG}) VALUES ('E000' || chr(1633), '{{}}', 'ready', 0)", "CheckViolation",
     "messages_event_id_format"),  # U+0661, an Arabic-Indic digit: [0-9] means ASCII digits only
    (f"{MSG}) VALUES (NULL, '{{}}', 'ready', 0)", "NotNullViolation", None),
    (f"{MSG}) VALUES ('E0009', 'not json', 'ready', 0)", "CheckViolation", "messages_payload_object"),
    (f"{MSG}) VALUES ('E0009', '\"text\"', 'ready', 0)", "CheckViolation", "messages_payload_object"),
    (f"{MSG}) VALUES ('E0009', '{{\"a\":}}', 'ready', 0)", "CheckViolation", "messages_payload_object"),
    (f"{MSG}) VALUES ('E0009', NULL, 'ready', 0)", "NotNullViolation", None),
    (f"{MSG}) VALUES ('E0009', '{{}}', NULL, 0)", "NotNullViolation", None),
    (f"{MSG}) VALUES ('E0009', '{{}}', 'ready', NULL)", "NotNullViolation", None),
    (f"{MSG}) VALUES ('E0009', '{{}}', 'ready', -1)", "CheckViolation", "messages_available_at_nonnegative"),
    (f"{MSG}, attempts) VALUES ('E0009', '{{}}', 'ready', 0, -1)", "CheckViolation",
     "messages_attempts_nonnegative"),
    (f"{MSG}, generation) VALUES ('E0009', '{{}}', 'ready', 0, -1)", "CheckViolation",
     "messages_generation_nonnegative"),
    (f"{MSG}, last_error) VALUES ('E0009', '{{}}', 'ready', 0, '')", "CheckViolation",
     "messages_last_error_nonempty"),
    (f"{MSG}, last_error) VALUES ('E0009', '{{}}', 'dead', 0, '')", "CheckViolation",
     "messages_last_error_nonempty"),
    (f"{MSG}, last_error, lease_until) VALUES ('E0009', '{{}}', 'done', 0, 'x', 5)", "CheckViolation",
     "messages_lease_until_while_leased"),
    ("UPDATE messages SET state = 'leased' WHERE event_id = 'E0001'", "CheckViolation",
     "messages_lease_until_while_leased"),
    ("UPDATE messages SET state = 'dead' WHERE event_id = 'E0001'", "CheckViolation", "messages_dead_with_error"),
    ("UPDATE messages SET attempts = attempts - 2 WHERE event_id = 'E0001'", "CheckViolation",
     "messages_attempts_nonnegative"),
    ("DELETE FROM messages WHERE event_id = 'E0001'", "ForeignKeyViolation", "effects_event_id_fkey"),
    ("INSERT INTO effects (event_id, category, amount_cents) VALUES ('E0002', 'book', 1)", "ForeignKeyViolation",
     "effects_event_id_fkey"),
    ("INSERT INTO effects (event_id, category, amount_cents) VALUES ('E0001', '', 1)", "CheckViolation",
     "effects_category_nonempty"),
    ("INSERT INTO effects (event_id, category, amount_cents) VALUES ('E0001', 'book', -5)", "CheckViolation",
     "effects_amount_positive"),
    ("INSERT INTO receipts VALUES (repeat('t', 201), 'op', '{}', 'e', 'default', NULL)", "CheckViolation", "receipts_tenant_length"),
    ("INSERT INTO receipts VALUES ('t', '', '{}', 'e', 'default', NULL)", "CheckViolation", "receipts_operation_length"),
    ("INSERT INTO receipts VALUES ('t', repeat('o', 201), '{}', 'e', 'default', NULL)", "CheckViolation",
     "receipts_operation_length"),
    ("INSERT INTO receipts VALUES ('t', 'op', '{\"a\" 1}', 'e', 'default', NULL)", "CheckViolation", "receipts_payload_json"),
    # Version 3: the metrics' times and counts, and what prune keeps.
    (f"{MSG}, enqueued_at) VALUES ('E0009', '{{}}', 'ready', 0, -1)", "CheckViolation",
     "messages_enqueued_at_nonnegative"),
    (f"{MSG}, done_at) VALUES ('E0009', '{{}}', 'ready', 0, 5)", "CheckViolation", "messages_done_at_when_done"),
    ("UPDATE messages SET expired_leases = -1 WHERE event_id = 'E0001'", "CheckViolation",
     "messages_expired_leases_nonnegative"),
    (f"{MSG}, payload_sha256) VALUES ('E0009', '{{}}', 'ready', 0, repeat('a', 64))", "CheckViolation",
     "messages_pruned_payload"),  # only a done message is pruned
    ("UPDATE messages SET payload_sha256 = repeat('a', 64) WHERE event_id = 'E0001'", "CheckViolation",
     "messages_pruned_payload"),  # a pruned payload is gone: '{}'
    ("UPDATE messages SET payload = '{}', payload_sha256 = 'abc' WHERE event_id = 'E0001'", "CheckViolation",
     "messages_pruned_payload"),  # a SHA-256 in hex has 64 characters
    # Version 5: the lease's random token; 0 is "none".
    ("UPDATE messages SET lease_token = -1 WHERE event_id = 'E0001'", "CheckViolation",
     "messages_lease_token_nonnegative"),
    # Version 9: a priority, -100..100.
    ("UPDATE messages SET priority = 101 WHERE event_id = 'E0001'", "CheckViolation",
     "messages_priority_range"),
    ("UPDATE messages SET priority = -101 WHERE event_id = 'E0001'", "CheckViolation",
     "messages_priority_range"),
    # Version 4: named queues, each with its settings; a message belongs to one.
    ("INSERT INTO queues (name, id_pattern, max_attempts, lease_seconds, max_payload_bytes)"
     " VALUES ('Other', '.+', 3, 30, 10000)", "CheckViolation", "queues_name_format"),
    ("INSERT INTO queues (name, id_pattern, max_attempts, lease_seconds, max_payload_bytes)"
     " VALUES ('o;x', '.+', 3, 30, 10000)", "CheckViolation", "queues_name_format"),
    ("INSERT INTO queues (name, id_pattern, max_attempts, lease_seconds, max_payload_bytes)"
     " VALUES (repeat('o', 64), '.+', 3, 30, 10000)", "CheckViolation", "queues_name_format"),
    ("INSERT INTO queues (name, id_pattern, max_attempts, lease_seconds, max_payload_bytes)"
     " VALUES ('q', '', 3, 30, 10000)", "CheckViolation", "queues_id_pattern_length"),
    ("INSERT INTO queues (name, id_pattern, max_attempts, lease_seconds, max_payload_bytes)"
     " VALUES ('q', '.+', 0, 30, 10000)", "CheckViolation", "queues_max_attempts_range"),
    ("INSERT INTO queues (name, id_pattern, max_attempts, lease_seconds, max_payload_bytes)"
     " VALUES ('q', '.+', 3, 0, 10000)", "CheckViolation", "queues_lease_seconds_range"),
    ("INSERT INTO queues (name, id_pattern, max_attempts, lease_seconds, max_payload_bytes)"
     " VALUES ('q', '.+', 3, 30, 1000001)", "CheckViolation", "queues_max_payload_bytes_range"),
    ("INSERT INTO queues (name, id_pattern, max_attempts, lease_seconds, max_payload_bytes)"
     " VALUES ('other', 'x', 3, 30, 10000)", "UniqueViolation", "queues_pkey"),
    (f"{MSG}, queue) VALUES ('job-1', '{{}}', 'ready', 0, 'nowhere')", "ForeignKeyViolation",
     "messages_queue_fkey"),
    (f"{MSG}, queue) VALUES ('', '{{}}', 'ready', 0, 'other')", "CheckViolation", "messages_event_id_length"),
    (f"{MSG}, queue) VALUES (repeat('j', 201), '{{}}', 'ready', 0, 'other')", "CheckViolation",
     "messages_event_id_length"),
    (f"{MSG}) VALUES ('job-1', '{{}}', 'ready', 0)", "CheckViolation", "messages_event_id_format"),  # default's rule
    # Version 6: one version per migration line, from 1.
    ("INSERT INTO migration_lines VALUES ('ledger', 2)", "UniqueViolation", "migration_lines_pkey"),
    ("INSERT INTO migration_lines VALUES ('', 1)", "CheckViolation", "migration_lines_line_length"),
    ("INSERT INTO migration_lines VALUES (repeat('l', 201), 1)", "CheckViolation", "migration_lines_line_length"),
    ("INSERT INTO migration_lines VALUES ('shop', 0)", "CheckViolation", "migration_lines_version_positive"),
    # Version 7: each queue's retry policy.
    ("INSERT INTO queues VALUES ('q', '.+', 3, 30, 100, 0, 60, 0)", "CheckViolation",
     "queues_backoff_base_seconds_range"),
    ("INSERT INTO queues VALUES ('q', '.+', 3, 30, 100, 90, 60, 0)", "CheckViolation",
     "queues_backoff_max_seconds_range"),  # a cap below the base
    ("INSERT INTO queues VALUES ('q', '.+', 3, 30, 100, 1, 31622401, 0)", "CheckViolation",
     "queues_backoff_max_seconds_range"),
    ("INSERT INTO queues VALUES ('q', '.+', 3, 30, 100, 1, 60, 1.5)", "CheckViolation",
     "queues_backoff_jitter_range"),
    ("UPDATE queues SET backoff_jitter = -0.1 WHERE name = 'other'", "CheckViolation",
     "queues_backoff_jitter_range"),
    # Version 8: the counters of work done, a row's retries and what rows that left no longer show.
    ("UPDATE messages SET retries = -1 WHERE event_id = 'E0001'", "CheckViolation",
     "messages_retries_nonnegative"),
    ("INSERT INTO queue_counters (queue) VALUES ('default'), ('default')", "UniqueViolation",
     "queue_counters_pkey"),
    ("INSERT INTO queue_counters (queue) VALUES ('nowhere')", "ForeignKeyViolation", "queue_counters_queue_fkey"),
    ("INSERT INTO queue_counters (queue, processed) VALUES ('default', -1)", "CheckViolation",
     "queue_counters_processed"),
    ("INSERT INTO queue_counters (queue, retried) VALUES ('default', -1)", "CheckViolation",
     "queue_counters_retried"),
    ("INSERT INTO queue_counters (queue, dead) VALUES ('default', -1)", "CheckViolation", "queue_counters_dead"),
    ("INSERT INTO queue_counters (queue, expired_leases) VALUES ('default', -1)", "CheckViolation",
     "queue_counters_expired_leases"),
]


def sqlite_queue() -> sqlite3.Connection:
    """The SQLite schema (the queue's files and the ledger), as database.py and ledger.py create it."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.execute("PRAGMA foreign_keys = ON")
    for text in SQLITE_SCRIPTS:
        for statement in sqlite_engine.sql_statements(text):
            conn.execute(statement)
    # PostgreSQL's functions that the list uses.
    conn.create_function("repeat", 2, lambda text, n: text * n, deterministic=True)
    conn.create_function("chr", 1, chr, deterministic=True)
    return conn


@pytest.fixture
def queue(pg_conn: Any) -> Any:
    """The PostgreSQL schema with the ledger, holding SETUP's rows."""
    create_queue(pg_conn.info.dsn)
    apply(pg_conn, LEDGER)
    with pg_conn.transaction():
        for statement in SETUP:
            pg_conn.execute(statement)
    return pg_conn


@pytest.mark.parametrize(("sql", "error", "constraint"), IMPOSSIBLE,
                         ids=[f"{n:02d}-{constraint or error}" for n, (_, error, constraint) in enumerate(IMPOSSIBLE, 1)])
def test_the_schema_refuses_each_impossible_row(queue: Any, sql: str, error: str, constraint: str | None) -> None:
    with pytest.raises(getattr(pg().errors, error)) as refused:
        with queue.transaction():
            queue.execute(sql)
    if constraint is not None:  # (NOT NULL and type errors name none; PostgreSQL 18 names NOT NULL ones)
        assert refused.value.diag.constraint_name == constraint, refused.value
    assert queue.execute("SELECT count(*) FROM messages").fetchone()[0] == 1
    # The same row is impossible on SQLite: one list for both schemas.
    with closing(sqlite_queue()) as lite:
        for statement in SETUP:
            lite.execute(statement)
        with pytest.raises(sqlite3.IntegrityError):
            lite.execute(sql)


def test_every_check_of_the_schema_is_exercised(queue: Any) -> None:
    named = {r[0] for r in queue.execute(
        "SELECT conname FROM pg_constraint WHERE connamespace = 'public'::regnamespace AND contype IN ('c', 'f', 'p', 'u')"
        " AND conrelid::regclass::text <> 'queue_core_schema'")}
    assert named == {constraint for _, _, constraint in IMPOSSIBLE if constraint}
    # ... and every CHECK of the SQLite schema has its counterpart (counted in the tables as
    # they stand after every migration, table-level ones too).
    with closing(sqlite_queue()) as lite:
        sqlite_checks = sum(sql.count("CHECK (") for (sql,) in lite.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'table'"))
    pg_checks = queue.execute(
        "SELECT count(*) FROM pg_constraint WHERE contype = 'c' AND connamespace = 'public'::regnamespace"
        " AND conrelid::regclass::text <> 'queue_core_schema'").fetchone()[0]
    assert pg_checks == sqlite_checks


VALID_ROWS = [  # the columns of schema version 3, in order
    ("E0002", '{"a":1}', "ready", 0, 0, 1000, None, None, None, 1000, None, 0, None),
    ("E0003", '{"a":1}', "ready", 1, 1, 1005, None, "flaky", "retry after 5 s", 990, None, 0, None),  # keeps its error
    ("E0004", '{"a":1}', "leased", 2, 3, 1000, 1030, None, None, 900, None, 1, None),  # one lease ran out
    ("E0005", '{"a":1}', "done", 1, 1, 1000, None, None, None, 1000, 1004, 0, None),
    ("E0006", '{"a":1}', "dead", 3, 3, 1000, None, "lease_expired", None, 1000, None, 3, None),
    ("E0007", '{"a":1}', "dead", 1, 1, 1000, None, "handler_error", "IntegrityError: UNIQUE constraint failed",
     None, None, 0, None),  # stored before version 3: no times
    ("E0008", "{}", "done", 1, 1, 1000, None, None, None, 1000, 1002, 0, "a" * 64),  # pruned
    ("E9999", "{}", "ready", 0, 0, 0, None, None, None, 0, None, 0, None),
]


def test_a_valid_row_in_every_state_is_accepted(queue: Any) -> None:
    insert = ("INSERT INTO messages (event_id, payload, state, attempts, generation, available_at, lease_until,"
              " last_error, last_detail, enqueued_at, done_at, expired_leases, payload_sha256)"
              " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)")
    with queue.transaction():
        for row in VALID_ROWS:
            queue.execute(insert, row)
        queue.execute("INSERT INTO effects (event_id, category, amount_cents) VALUES ('E0005', 'pen', 2000)")
        queue.execute("INSERT INTO receipts VALUES ('north', 'op-2', '[1,\"x\"]', 'E0005', 'default', NULL)")  # any JSON
    stored = queue.execute("SELECT * FROM messages WHERE event_id <> 'E0001' ORDER BY event_id").fetchall()
    # version 4: the queue; version 5: the lease's token (0: none); version 8:
    # the retries (0); version 9: the priority (0 by default), last
    assert stored == [(*row, "default", 0, 0, 0) for row in VALID_ROWS]
    assert {r[0] for r in queue.execute("SELECT DISTINCT state FROM messages")} == {"ready", "leased", "done", "dead"}
    # SQLite accepts the same rows.
    with closing(sqlite_queue()) as lite:
        for statement in SETUP:
            lite.execute(statement)
        lite.executemany(insert.replace("%s", "?"), VALID_ROWS)
        assert lite.execute("SELECT * FROM messages WHERE event_id <> 'E0001' ORDER BY event_id").fetchall() \
            == [(*row, "default", 0, 0, 0) for row in VALID_ROWS]


def test_the_payload_text_is_stored_byte_for_byte(queue: Any) -> None:
    # Canonical JSON: keys sorted, no whitespace, non-ASCII as itself, control characters escaped.
    value = {"b": 1, "aa": [1.0, 2, "é", "😀"], "z": {"y": None, "x": True}, "nul": "\x00", "big": 2 ** 70}
    text = canonical_json(value)
    assert text == ('{"aa":[1.0,2,"é","😀"],"b":1,"big":1180591620717411303424,"nul":"\\u0000",'
                    '"z":{"x":true,"y":null}}')
    queue.execute("INSERT INTO messages (event_id, payload, available_at) VALUES ('E0010', %s, 0)", (text,))
    stored, octets = queue.execute(
        "SELECT payload, octet_length(payload) FROM messages WHERE event_id = 'E0010'").fetchone()
    assert stored == text and octets == len(text.encode("utf-8"))
    # jsonb would not keep it: it refuses "\u0000" outright (so a jsonb CHECK would refuse this payload) ...
    with pytest.raises(pg().errors.UntranslatableCharacter):
        queue.execute("SELECT payload::jsonb FROM messages WHERE event_id = 'E0010'")
    # ... and writes its own text: keys by length, then bytes, with spaces.
    queue.execute("UPDATE messages SET payload = %s WHERE event_id = 'E0010'", (canonical_json({"b": 1, "aa": 1.0}),))
    assert queue.execute("SELECT payload, payload::jsonb::text FROM messages WHERE event_id = 'E0010'").fetchone() \
        == ('{"aa":1.0,"b":1}', '{"b": 1, "aa": 1.0}')


def test_postgres_differs_where_it_converts_on_assignment(queue: Any) -> None:
    """Deliberate, pinned differences: PostgreSQL's assignment casts, where SQLite's STRICT refuses.

    Neither stores a value of the wrong type; PostgreSQL converts a numeric
    1.5 to the BIGINT 2 and a bytea to its text form. The protocol only ever
    passes integers and text, so it cannot meet either.
    """
    queue.execute("INSERT INTO messages (event_id, payload, state, attempts, available_at)"
                  " VALUES ('E0009', '{}', 'ready', 1.5, 0)")
    assert queue.execute("SELECT attempts FROM messages WHERE event_id = 'E0009'").fetchone() == (2,)
    queue.execute("INSERT INTO receipts VALUES ('t', '\\x6f70'::bytea, '{}', 'e', 'default', NULL)")
    assert queue.execute("SELECT operation FROM receipts WHERE tenant = 't'").fetchone() == ("\\x6f70",)
    with closing(sqlite_queue()) as lite:
        for sql in ("INSERT INTO messages (event_id, payload, state, attempts, available_at)"
                    " VALUES ('E0009', '{}', 'ready', 1.5, 0)",
                    "INSERT INTO receipts VALUES ('t', X'6f70', '{}', 'e', 'default', NULL)"):
            with pytest.raises(sqlite3.IntegrityError):
                lite.execute(sql)


# ---------------------------------------------------------------- the shape

def test_the_tables_have_the_sqlite_schema_s_columns_in_its_order(queue: Any) -> None:
    types = {"INTEGER": "bigint", "TEXT": "text", "REAL": "double precision"}
    with closing(sqlite_queue()) as lite:
        for table in ("messages", "receipts", "effects", "queues"):
            expected = [(name, types[kind], "NO" if notnull or pk else "YES")
                        for _, name, kind, notnull, _, pk in lite.execute(f"PRAGMA table_info({table})")]
            got = queue.execute("SELECT column_name, data_type, is_nullable FROM information_schema.columns"
                                " WHERE table_name = %s ORDER BY ordinal_position", (table,)).fetchall()
            assert got == expected, table
            lite_key = [r[1] for r in sorted(lite.execute(f"PRAGMA table_info({table})"), key=lambda r: r[5]) if r[5]]
            pg_key = [r[0] for r in queue.execute(
                "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid"
                " AND a.attnum = ANY (i.indkey) WHERE i.indrelid = %s::regclass AND i.indisprimary"
                " ORDER BY array_position(i.indkey::int2[], a.attnum)", (table,))]
            assert pg_key == lite_key, table
    defaults = dict(queue.execute("SELECT column_name, column_default FROM information_schema.columns"
                                  " WHERE table_name = 'messages' AND column_default IS NOT NULL").fetchall())
    assert defaults == {"state": "'ready'::text", "attempts": "0", "generation": "0", "expired_leases": "0",
                        "queue": "'default'::text", "lease_token": "0", "retries": "0",
                        "priority": "0"}


def test_the_claim_index_is_partial_and_serves_the_claim_order(queue: Any) -> None:
    (definition,) = queue.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'messages_claimable'").fetchone()
    assert definition == ("CREATE INDEX messages_claimable ON public.messages USING btree (queue, priority DESC, available_at, event_id)"
                          " WHERE (state = ANY (ARRAY['ready'::text, 'leased'::text]))")
    with queue.transaction():
        queue.execute("INSERT INTO messages (event_id, payload, available_at)"
                      " SELECT 'E' || lpad(n::text, 4, '0'), '{}', n % 7 FROM generate_series(2, 999) AS n")
        queue.execute("UPDATE messages SET state = 'done', attempts = 1, generation = 1 WHERE event_id < 'E0500'")
        queue.execute("ANALYZE messages")
    # The claim's shape (FOR UPDATE SKIP LOCKED comes with the backend): read through the index.
    plan = "\n".join(r[0] for r in queue.execute(
        "EXPLAIN SELECT event_id FROM messages WHERE queue = 'default' AND state IN ('ready', 'leased')"
        " AND available_at <= 3"
        " ORDER BY priority DESC, available_at, event_id LIMIT 1"))
    assert "messages_claimable" in plan, plan
    first = queue.execute("SELECT event_id FROM messages WHERE state IN ('ready', 'leased')"
                          " ORDER BY priority DESC, available_at, event_id LIMIT 3").fetchall()
    assert first == [("E0504",), ("E0511",), ("E0518",)]  # available_at 0 first, then bytewise event id
