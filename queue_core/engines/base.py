"""What every engine is made of: a connection's shape, how a transaction ends, the marks of a queue.

The lowest module of ``engines/``: each engine (``sqlite.py``,
``postgres.py``) and the seam above them (``__init__.py``) import it, and it
imports none of them. ``Rows`` and ``Connection`` are a driver's objects as
the store uses them (sqlite3's shape). ``SqlTransactions`` is how a
transaction ends and how the queue's own savepoints are taken, in the SQL
both engines speak: the only place where those statements are written, so
that the protocol asks its engine and never writes them itself.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from importlib import resources
from typing import Any, Final, Protocol

from ..errors import StorageError, WrongPath

# Pyodide's CPython (sys.platform "emscripten") has the threading module but
# starts no thread: Thread.start raises RuntimeError. Then there is one process
# and one thread: no writers' turn, no heartbeat thread.
THREADS: Final = sys.platform != "emscripten"

# An engine's own wait for a lock, per attempt: SQLite's busy_timeout (PRAGMA on
# each connection, for another connection's write lock), PostgreSQL's
# lock_timeout; then the store backs off and retries until its
# busy_retry_seconds. A store's default (Store(busy_timeout_ms=...)).
BUSY_TIMEOUT_MS: Final = 2_000

# Marks a database as queue_core's: SQLite's application_id, PostgreSQL's
# queue_core_schema row, and the key of PostgreSQL's schema lock ("QCor").
APPLICATION_ID: Final = 0x51436F72


class Rows(Protocol):
    """What a statement returns: its rows, their columns' names, and how many rows it changed."""

    @property
    def rowcount(self) -> int: ...

    @property
    def description(self) -> Any:
        """One entry per column, its name first (DB-API); None for a statement without rows."""
        ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Connection(Protocol):
    """One connection of an engine, as the store uses it (sqlite3's shape)."""

    def execute(self, sql: str, parameters: Any = ..., /) -> Rows: ...

    def executemany(self, sql: str, parameters: Iterable[Any], /) -> Any: ...

    @property
    def in_transaction(self) -> bool: ...

    def close(self) -> None: ...


class SqlTransactions:
    """How a transaction ends, and the queue's own savepoints, in standard SQL.

    Each engine's class takes these (both speak this SQL); an engine whose
    driver ends transactions otherwise writes its own. A savepoint's name is
    the queue's own (``completion.py``), never a caller's text.
    """

    def commit(self, conn: Connection) -> None:
        """End the open transaction, keeping what it wrote."""
        conn.execute("COMMIT")

    def rollback(self, conn: Connection) -> None:
        """End the open transaction (a write's or a read's), undoing what it wrote."""
        conn.execute("ROLLBACK")

    def savepoint(self, conn: Connection, name: str) -> None:
        """Open the savepoint ``name`` inside the open transaction."""
        conn.execute(f"SAVEPOINT {name}")

    def rollback_to(self, conn: Connection, name: str) -> None:
        """Undo everything after savepoint ``name``; it stays open."""
        conn.execute(f"ROLLBACK TO {name}")

    def release_savepoint(self, conn: Connection, name: str) -> None:
        """Close savepoint ``name``, keeping what came after it."""
        conn.execute(f"RELEASE {name}")


def needs_migration(where: str, found: int, newest: int) -> StorageError:
    """A store opened read-only on a schema older than this queue_core's."""
    return StorageError(
        f"{where} has schema version {found} and this queue_core reads version "
        f"{newest}; a store opened read-only cannot migrate it: open it once with "
        "write access (any queue-core command run by its owner)",
        code="needs_migration",
    )


def schema_too_new(where: object, found: int, newest: int) -> WrongPath:
    """A database of a newer queue_core than this one."""
    return WrongPath(
        f"{where} has schema version {found}; this queue_core knows up to {newest}",
        code="schema_too_new",
    )


def refuse_write(where: str) -> StorageError:
    """A write transaction on a store opened read-only."""
    return StorageError(
        f"{where}: the store was opened read-only; it cannot write", code="read_only"
    )


def migrations(folder: str) -> dict[int, str]:
    """The numbered migration files of one engine: version -> the file's SQL.

    ``0003_metrics_and_prune.sql`` moves a database from version 2 to 3.
    """
    found: dict[int, str] = {}
    for entry in resources.files(__package__).joinpath(folder).iterdir():
        if entry.name.endswith(".sql"):
            found[int(entry.name.split("_", 1)[0])] = entry.read_text(encoding="utf-8")
    return dict(sorted(found.items()))
