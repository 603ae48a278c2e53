"""The engines behind one interface: a ``Store`` chooses one, once, from its target.

What differs between SQLite and PostgreSQL is an ``Engine``: how it
connects, how a write and a read transaction begin, whether writers take
turns, its clock, its operations (``queries.Operations`` on its own ``.sql``
file of named statements), how its errors become ``StorageError`` codes, and
its schema as numbered migrations.
The protocol (``store.py``) and the transaction runner (``transactions.py``)
call these and never ask which engine they run on.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

from ..errors import StorageError, WrongPath

if TYPE_CHECKING:
    from .queries import Operations

# Pyodide's CPython (sys.platform "emscripten") has the threading module but
# starts no thread: Thread.start raises RuntimeError. Then there is one process
# and one thread: no writers' turn, no heartbeat thread.
THREADS: Final = sys.platform != "emscripten"

# Marks a database as queue_core's: SQLite's application_id, PostgreSQL's
# queue_core_schema row, and the key of PostgreSQL's schema lock ("QCor").
APPLICATION_ID: Final = 0x51436F72
POSTGRES_SCHEMES: Final = ("postgresql://", "postgres://")


class Rows(Protocol):
    """What a statement returns: its rows, and how many rows it changed."""

    @property
    def rowcount(self) -> int: ...

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


class Engine(Protocol):
    """What one engine does for a store; one instance per store."""

    @property
    def name(self) -> str:
        """ "sqlite" or "postgresql": for reports and pages, never for branching."""
        ...

    @property
    def target(self) -> str | Path:
        """The SQLite file, or the postgresql:// URL: what ``Store()`` was given."""
        ...

    @property
    def where(self) -> str:
        """The file, or the URL without its password: for messages."""
        ...

    @property
    def ops(self) -> Operations:
        """The protocol's operations, on its own named statements."""
        ...

    @property
    def has_clock(self) -> bool:
        """Whether the database has a clock of its own (``ops.server_time``)."""
        ...

    def open_queue(self, connection: Callable[[], Connection], *, create: bool) -> None:
        """Check the target; create the queue, or migrate it forward, if it must.

        ``connection()`` gives the store's connection, once the target has been
        checked (connecting may create an SQLite file).
        """
        ...

    def connect(self) -> Connection:
        """A new connection, configured; the store closes it with ``close``."""
        ...

    def close(self, conn: Connection, *, quiet: bool = False) -> None:
        """Close ``conn``; with ``quiet``, a failure to close is ignored."""
        ...

    def begin_write(self, conn: Connection) -> None:
        """Begin a write transaction, before its first read."""
        ...

    def begin_read(self, conn: Connection) -> None:
        """Begin a read transaction: one consistent view for all its statements."""
        ...

    def writer_turn(self, wait_seconds: float) -> AbstractContextManager[None]:
        """Wait for this writer's turn across processes (or do nothing)."""
        ...

    def storage_error(self, exc: BaseException) -> StorageError | None:
        """The ``StorageError`` that the driver's ``exc`` means; None if not its own."""
        ...

    def caller_sql(self, sql: str) -> str:
        """A caller's statement, written with ``?`` placeholders, for this driver."""
        ...

    def run_script(self, conn: Connection, text: str) -> None:
        """Run every statement of an SQL script inside the open transaction."""
        ...

    def install(self, conn: Connection, schema: AppSchema) -> None:
        """Run this engine's file of an application's schema inside the open transaction."""
        ...

    def together(self, conn: Connection) -> AbstractContextManager[None]:
        """Statements of the block may go out together, unanswered until needed.

        A result read inside the block waits for what was sent before it; the
        block's end waits for all, and raises the first ``StorageError`` of
        them. Where a statement costs no round trip (SQLite), nothing changes.
        """
        ...


@dataclass(frozen=True)
class AppSchema:
    """An application's own tables beside the queue: one ``.sql`` file per engine.

    The engine picks its own file (``Engine.install``), as River's drivers
    each carry their own migrations: the application never asks which
    engine it runs on, and the queue's schema never names its tables.
    """

    package: str  # where the files are, e.g. "queue_core.app"
    files: Mapping[str, str]  # an engine's name -> its file of the package


def engine_for(target: str | Path, *, busy_timeout_ms: int) -> Engine:
    """The engine for ``target``: a ``postgresql://`` URL, or an SQLite file."""
    if is_postgres_url(target):
        from .postgres import PostgresEngine

        return PostgresEngine(str(target), busy_timeout_ms=busy_timeout_ms)
    from .sqlite import SQLiteEngine

    return SQLiteEngine(Path(target), busy_timeout_ms=busy_timeout_ms)


def adopt(conn: object) -> Engine | None:
    """The engine for a connection of the caller's own database, or None.

    A plain ``sqlite3.Connection`` (receipts in a database that is not a
    queue's) is SQLite's; the file is then only named in messages.
    """
    from .sqlite import adopt as sqlite_adopt

    return sqlite_adopt(conn)


def is_postgres_url(target: object) -> bool:
    """Whether ``target`` names a PostgreSQL database rather than an SQLite file."""
    return isinstance(target, str) and target.startswith(POSTGRES_SCHEMES)


def migration_blocked(where: object, table: str) -> WrongPath:
    """Version 4 cannot key messages by (queue, event_id) while ``table`` references them.

    Only the reference ledger's table moves with the migration; another is its
    owner's to move. Nothing was changed.
    """
    return WrongPath(
        f"{where}: table {table} references messages; schema version 4 keys a "
        "message by (queue, event_id): give the table a column "
        "queue TEXT NOT NULL DEFAULT 'default' and reference "
        "messages (queue, event_id), or drop the reference, then open the "
        "queue again (nothing was changed)",
        code="migration_blocked",
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


def script(package: str, name: str) -> str:
    """The text of one of a package's ``.sql`` files."""
    return resources.files(package).joinpath(name).read_text(encoding="utf-8")
