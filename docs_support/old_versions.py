"""Queue files as older versions of queue_core left them, built by hand.

The migration tests open them with ``Store(...)`` and check that every row
keeps its meaning; the operating chapter opens a version-2 file on the page.
Each builder writes exactly what that version's code wrote (its schema is
copied verbatim below), with rows in every state.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from queue_core.engines import sqlite

# queue_core/schema.sql of version 1, verbatim.
V1_SCHEMA = """\
-- queue_core schema, version 1 (PRAGMA user_version = 1).
-- STRICT tables: SQLite refuses a value of the wrong type instead of storing it.
-- The CHECKs make impossible states unstorable, even for a client that
-- bypasses the protocol with raw SQL.

CREATE TABLE messages (
    event_id     TEXT    PRIMARY KEY
                 CHECK (length(event_id) = 5 AND event_id GLOB 'E[0-9][0-9][0-9][0-9]'),
    payload      TEXT    NOT NULL CHECK (json_valid(payload) AND json_type(payload) = 'object'),
    state        TEXT    NOT NULL DEFAULT 'ready'
                 CHECK (state IN ('ready', 'leased', 'done', 'dead')),
    attempts     INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    generation   INTEGER NOT NULL DEFAULT 0 CHECK (generation >= 0),
    available_at INTEGER NOT NULL CHECK (available_at >= 0),
    -- A lease deadline exists exactly while the message is leased.
    lease_until  INTEGER CHECK ((state = 'leased') = (lease_until IS NOT NULL)),
    last_error   TEXT    CHECK (last_error IS NULL OR length(last_error) > 0),
    -- A dead message always says why.
    CHECK (state <> 'dead' OR last_error IS NOT NULL)
) STRICT;

-- Claim reads only ready and leased rows, in claim order; done and dead rows
-- (which stay forever for deduplication) are not in this index at all.
CREATE INDEX messages_claimable
    ON messages (available_at, event_id)
    WHERE state IN ('ready', 'leased');

CREATE TABLE effects (
    event_id     TEXT    PRIMARY KEY REFERENCES messages (event_id),
    category     TEXT    NOT NULL CHECK (length(category) > 0),
    amount_cents INTEGER NOT NULL CHECK (amount_cents > 0)
) STRICT;
"""

# receipts.SQL_CREATE of version 1, run inside the transaction of the first receipts.record.
V1_RECEIPTS = """
CREATE TABLE IF NOT EXISTS receipts (
    tenant    TEXT NOT NULL CHECK (length(tenant) BETWEEN 1 AND 200),
    operation TEXT NOT NULL CHECK (length(operation) BETWEEN 1 AND 200),
    payload   TEXT NOT NULL CHECK (json_valid(payload)),
    effect    TEXT NOT NULL CHECK (length(effect) > 0),
    PRIMARY KEY (tenant, operation)
) STRICT
"""

V1_APPLICATION_ID = 0x51436F72

# (event_id, payload, state, attempts, generation, available_at, lease_until, last_error):
# every state, and each way of reaching it, as v1 stored them (canonical payloads).
V1_MESSAGES = [
    (
        "E0001",
        '{"amount_cents":10000,"category":"book"}',
        "done",
        1,
        1,
        1000,
        None,
        None,
    ),
    (
        "E0002",
        '{"amount_cents":2000,"category":"pen"}',
        "ready",
        1,
        1,
        1001,
        None,
        "downstream_unavailable",
    ),
    (
        "E0003",
        '{"amount_cents":5000,"category":"book"}',
        "leased",
        1,
        1,
        1000,
        1002,
        None,
    ),
    (
        "E0004",
        '{"amount_cents":3000,"category":"toy"}',
        "dead",
        1,
        1,
        1000,
        None,
        "invalid_payload",
    ),
    ("E0005", '{"amount_cents":700,"category":"bag"}', "ready", 0, 0, 1000, None, None),
    (
        "E0006",
        '{"amount_cents":800,"category":"pen"}',
        "dead",
        3,
        3,
        1000,
        None,
        "lease_expired",
    ),
    (
        "E0007",
        '{"amount_cents":900,"category":"book","operation":"op-7","tenant":"north"}',
        "done",
        1,
        1,
        1000,
        None,
        None,
    ),
    # redriven
    (
        "E0008",
        '{"amount_cents":400,"category":"toy"}',
        "ready",
        0,
        2,
        1500,
        None,
        "invalid_payload",
    ),
    # retried, claimed
    (
        "E0009",
        '{"amount_cents":300,"category":"pen"}',
        "leased",
        2,
        2,
        1001,
        1031,
        "timeout",
    ),
]
V1_EFFECTS = [("E0001", "book", 10000), ("E0007", "book", 900)]
V1_RECEIPT_ROWS = [
    (
        "north",
        "op-7",
        '{"amount_cents":900,"category":"book","operation":"op-7","tenant":"north"}',
        "E0007",
    )
]


def v1_statements(text: str) -> list[str]:
    """Split like v1's ``_schema_statements`` (executescript would COMMIT first)."""
    statements, current = [], ""
    for part in text.splitlines(keepends=True):
        if part.lstrip().startswith("--") and not current.strip():
            continue
        current += part
        if sqlite3.complete_statement(current):
            statements.append(current.strip())
            current = ""
    return statements


def v1_connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=2, isolation_level=None)
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("PRAGMA busy_timeout = 2000")
    conn.execute("PRAGMA synchronous = FULL")
    return conn


def make_v1(path: Path, *, with_receipts: bool = True, rows: bool = True) -> Path:
    """A version-1 queue file, created as v1's ``Store._initialise`` did, then used as v1 did."""
    with closing(v1_connect(path)) as conn:
        conn.execute("BEGIN IMMEDIATE")
        for statement in v1_statements(V1_SCHEMA):
            conn.execute(statement)
        conn.execute(f"PRAGMA application_id = {V1_APPLICATION_ID}")
        conn.execute("PRAGMA user_version = 1")
        conn.execute("COMMIT")
        conn.execute("PRAGMA journal_mode = WAL")
        if rows:
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(
                "INSERT INTO messages VALUES (?, ?, ?, ?, ?, ?, ?, ?)", V1_MESSAGES
            )
            conn.executemany("INSERT INTO effects VALUES (?, ?, ?)", V1_EFFECTS)
            conn.execute("COMMIT")
        if with_receipts:
            # v1: the first receipts.record created the table lazily
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(V1_RECEIPTS)
            conn.executemany(
                "INSERT INTO receipts VALUES (?, ?, ?, ?)", V1_RECEIPT_ROWS
            )
            conn.execute("COMMIT")
    return path


def make_v2(path: Path) -> Path:
    """A version-2 file: the v1 file moved forward by migration 2 alone, as version 2 of queue_core left it."""
    make_v1(path)
    with closing(v1_connect(path)) as conn:
        conn.execute("BEGIN IMMEDIATE")
        for statement in sqlite.sql_statements(sqlite.MIGRATIONS[2]):
            conn.execute(statement)
        conn.execute(
            "UPDATE messages SET last_detail = 'retry after 1 s' WHERE event_id = 'E0002'"
        )
        conn.execute("PRAGMA user_version = 2")
        conn.execute("COMMIT")
    return path
