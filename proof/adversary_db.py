"""The adversary's databases: a fresh one per example, and a plain reader beside the store.

The adversary (``proof/adversary.py``) attacks the promise with what user
code does, then reads the database back to judge it. It reads through a
connection of its own, never through the store it attacks: a plain
``sqlite3`` connection to the file, or a ``psycopg`` connection to the
PostgreSQL database, each in one snapshot (a read transaction), so that what
the checks see is what any other client would see after the step.

A target makes a fresh database for each example (a new SQLite file in a
temporary folder, or a new database of a throwaway PostgreSQL server) and
removes it after. The user's tables are made here too: two effect tables that
tag each row with the attempt that wrote it, and one with a unique key whose
second insert is the failing statement the user code catches.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from proof.postgres_cluster import PORT, SERVER_USER

__all__ = [
    "EFFECT_TABLES",
    "FAILING_STATEMENTS",
    "USER_TABLES",
    "Database",
    "EffectRow",
    "MessageRow",
    "PostgresTarget",
    "ReceiptRow",
    "RunningServer",
    "Snapshot",
    "SqliteTarget",
    "Target",
]

# Every row an effect writes names the attempt that wrote it: the receipts'
# scope it ran under ('' without receipts), the message (queue, event_id), the
# lease (generation, claim token), the user code that wrote it (kind), which
# of that code's rows it is (part), and the receipt key of its payload.
_TAGS = (
    "scope TEXT NOT NULL, queue TEXT NOT NULL, event_id TEXT NOT NULL, "
    "generation BIGINT NOT NULL, token BIGINT NOT NULL, kind TEXT NOT NULL, "
    "part TEXT NOT NULL, tenant TEXT NOT NULL, operation TEXT NOT NULL"
)
EFFECT_TABLES = ("adv_effect", "adv_other")
USER_TABLES = (
    *(f"CREATE TABLE {table} ({_TAGS})" for table in EFFECT_TABLES),
    "CREATE TABLE adv_unique (k TEXT PRIMARY KEY)",
    "INSERT INTO adv_unique (k) VALUES ('taken')",
)
# Statements that fail on both engines: a unique key taken, a table that is not there.
FAILING_STATEMENTS = (
    "INSERT INTO adv_unique (k) VALUES ('taken')",
    "INSERT INTO adv_missing (k) VALUES ('x')",
)


@dataclass(frozen=True)
class MessageRow:
    """A stored message, as another client reads it."""

    queue: str
    event_id: str
    payload: str
    state: str
    attempts: int
    generation: int
    available_at: int
    lease_until: int | None
    token: int
    digest: str | None = None  # pruned: the SHA-256 of the canonical payload, which is gone


@dataclass(frozen=True, order=True)
class EffectRow:
    """One committed row of an effect table, with the tags of the attempt that wrote it."""

    table: str
    scope: str
    queue: str
    event_id: str
    generation: int
    token: int
    kind: str
    part: str
    tenant: str
    operation: str

    @property
    def attempt(self) -> tuple[str, str, int, int]:
        """The attempt that wrote it: (queue, event_id, generation, token)."""
        return self.queue, self.event_id, self.generation, self.token


@dataclass(frozen=True)
class ReceiptRow:
    """A stored receipt, every column by name (a column added later is kept too)."""

    columns: tuple[tuple[str, Any], ...]

    def get(self, name: str) -> Any:
        return dict(self.columns).get(name)


@dataclass(frozen=True)
class Snapshot:
    """Everything the checks read, from one consistent view of the database."""

    messages: tuple[MessageRow, ...]
    effects: tuple[EffectRow, ...]
    receipts: tuple[ReceiptRow, ...]

    def message(self, queue: str, event_id: str) -> MessageRow | None:
        for row in self.messages:
            if (row.queue, row.event_id) == (queue, event_id):
                return row
        return None


_MESSAGES = (
    "SELECT queue, event_id, payload, state, attempts, generation, available_at, "
    "lease_until, lease_token, payload_sha256 FROM messages ORDER BY queue, event_id"
)


def _effects_sql() -> str:
    return " UNION ALL ".join(
        f"SELECT '{table}', scope, queue, event_id, generation, token, kind, part, "
        f"tenant, operation FROM {table}"
        for table in EFFECT_TABLES
    )


# Runs the statements in one read transaction: each one's column names and rows.
Reading = Callable[[Sequence[str]], list[tuple[list[str], list[Sequence[Any]]]]]


class Database:
    """A plain connection of its own to the database the store works on: it only reads."""

    def __init__(self, read: Reading, close: Callable[[], None]) -> None:
        self._read = read
        self.close = close

    def snapshot(self) -> Snapshot:
        """Messages, effect rows and receipts, read in one snapshot."""
        (_, messages), (_, effects), (names, receipts) = self._read(
            [_MESSAGES, _effects_sql(), "SELECT * FROM receipts"])
        return Snapshot(
            messages=tuple(MessageRow(*row) for row in messages),
            effects=tuple(sorted(EffectRow(*row) for row in effects)),
            receipts=tuple(ReceiptRow(tuple(zip(names, row))) for row in receipts),
        )

    def messages(self) -> Snapshot:
        """The messages alone (what a step reads before it acts), as a snapshot without effects."""
        ((_, messages),) = self._read([_MESSAGES])
        return Snapshot(tuple(MessageRow(*row) for row in messages), (), ())


class Target(Protocol):
    """Where the examples run: a fresh (or emptied) database for each."""

    engine: str

    def open(self) -> tuple[str, Callable[[], Database]]:
        """A database for one example: the store's target (a path or a URL), and its reader."""
        ...

    def remove(self) -> None:
        """The example is over: remove (or leave for emptying) what ``open`` made."""
        ...

    def close(self) -> None:
        """The run is over: remove whatever is left."""
        ...


class SqliteTarget:
    """A new SQLite file per example, in a folder of its own under ``parent``."""

    engine = "sqlite"

    def __init__(self, parent: str | Path | None = None) -> None:
        self.parent = None if parent is None else str(parent)
        self._folder: str | None = None

    def open(self) -> tuple[str, Callable[[], Database]]:
        self._folder = tempfile.mkdtemp(prefix="qc-adversary-", dir=self.parent)
        path = str(Path(self._folder) / "queue.sqlite3")

        def reader() -> Database:
            conn = sqlite3.connect(path, isolation_level=None, timeout=30)

            def read(sqls: Sequence[str]) -> list[tuple[list[str], list[Sequence[Any]]]]:
                conn.execute("BEGIN")  # a deferred read: one snapshot for all of them
                try:
                    found = []
                    for sql in sqls:
                        cursor = conn.execute(sql)
                        found.append(([d[0] for d in cursor.description], cursor.fetchall()))
                    return found
                finally:
                    conn.execute("ROLLBACK")

            return Database(read, conn.close)

        return path, reader

    def remove(self) -> None:
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None

    def close(self) -> None:
        self.remove()


# Emptying keeps what says which schema and queues the database holds (the
# queues' settings are the same in every example); every other table of
# queue_core is emptied, and the user's tables are dropped, to be made again.
_KEPT = frozenset({"queue_core_schema", "migration_lines", "queues"})


class Server(Protocol):
    """A running throwaway PostgreSQL server (``proof.postgres_cluster.Cluster``): its folder
    holds its socket; it makes and drops databases."""

    @property
    def root(self) -> Path: ...

    def conninfo(self, dbname: str = "postgres") -> str: ...

    def create_database(self) -> str: ...

    def drop_database(self, name: str) -> None: ...


@dataclass(frozen=True)
class RunningServer:
    """A throwaway server another process started and stops (the tests' own), by its folder."""

    root: Path

    def conninfo(self, dbname: str = "postgres") -> str:
        return f"host={self.root} port={PORT} dbname={dbname} user={SERVER_USER} connect_timeout=10"

    def create_database(self) -> str:
        import psycopg

        name = f"adversary_{os.getpid()}"  # one run per process: a name made here, never input
        with psycopg.connect(self.conninfo(), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)".encode())
            conn.execute(f"CREATE DATABASE {name}".encode())
        return name

    def drop_database(self, name: str) -> None:
        import psycopg

        with psycopg.connect(self.conninfo(), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)".encode())


class PostgresTarget:
    """One new database of ``cluster`` (a running throwaway server) per run, emptied between examples.

    Creating a database, migrating it and dropping it takes most of a second
    on a busy machine; emptying one takes milliseconds.
    """

    engine = "postgresql"

    def __init__(self, cluster: Server) -> None:
        self.cluster = cluster
        self._name: str | None = None

    def open(self) -> tuple[str, Callable[[], Database]]:
        if self._name is None:
            self._name = self.cluster.create_database()
        else:
            self._empty(self._name)
        name = self._name

        def reader() -> Database:
            import psycopg

            conn = psycopg.connect(self.cluster.conninfo(name))
            conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ

            def read(sqls: Sequence[str]) -> list[tuple[list[str], list[Sequence[Any]]]]:
                try:  # one REPEATABLE READ transaction: one snapshot for all of them
                    found = []
                    for sql in sqls:
                        cursor = conn.execute(sql.encode())
                        names = [d.name for d in cursor.description or ()]
                        rows: list[Sequence[Any]] = list(cursor.fetchall())
                        found.append((names, rows))
                    return found
                finally:
                    conn.rollback()

            return Database(read, conn.close)

        return f"postgresql://{SERVER_USER}@/{name}?host={self.cluster.root}&port={PORT}", reader

    def _empty(self, name: str) -> None:
        import psycopg

        with psycopg.connect(self.cluster.conninfo(name), autocommit=True) as conn:
            tables = [row[0] for row in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")]
            with conn.transaction():
                for table in tables:
                    if table in _KEPT:
                        continue
                    # names read from the catalogue, quoted: never input
                    verb = "DROP TABLE" if table.startswith("adv_") else "DELETE FROM"
                    conn.execute(f'{verb} "{table}"'.encode())

    def remove(self) -> None:
        pass  # emptied by the next open, dropped by close

    def close(self) -> None:
        if self._name is not None:
            self.cluster.drop_database(self._name)
            self._name = None
