"""The interface every engine fits: ``Engine``, what a store asks of the database it opened.

What differs between SQLite and PostgreSQL (or an engine of your own) is an
``Engine``: how it checks and migrates its target, how it connects, how a
write and a read transaction begin and end (the COMMIT, ROLLBACK and the
queue's savepoints are the engine's), whether writers take turns, its clock,
its operations (``operations.Operations``: by default its ``.sql`` file of
named statements), how its errors become ``StorageError`` codes, and how an
application's migration line is installed. The protocol (``store.py``,
``transactions.py``) calls these and never asks which engine it runs on.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

from ..errors import StorageError
from .base import Connection
from .lines import MigrationLine
from .operations import Operations


class Engine(Protocol):
    """What one engine does for a store; one instance per store."""

    @property
    def name(self) -> str:
        """ "sqlite", "postgresql" or another engine's: for reports, pages and a
        migration line's folder, never for branching."""
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

    def install(self, conn: Connection, line: MigrationLine) -> None:
        """Move ``line`` to its newest version inside the open transaction (``install_line``)."""
        ...

    def commit(self, conn: Connection) -> None:
        """End the open transaction, keeping what it wrote (the only COMMIT: the engine's)."""
        ...

    def rollback(self, conn: Connection) -> None:
        """End the open transaction, a write's or a read's, undoing what it wrote."""
        ...

    def savepoint(self, conn: Connection, name: str) -> None:
        """Open the queue's savepoint ``name`` inside the open transaction."""
        ...

    def rollback_to(self, conn: Connection, name: str) -> None:
        """Undo everything after savepoint ``name``; it stays open."""
        ...

    def release_savepoint(self, conn: Connection, name: str) -> None:
        """Close savepoint ``name``, keeping what came after it."""
        ...

    def together(self, conn: Connection) -> AbstractContextManager[None]:
        """Statements of the block may go out together, unanswered until needed.

        A result read inside the block waits for what was sent before it; the
        block's end waits for all, and raises the first ``StorageError`` of
        them. Where a statement costs no round trip (SQLite), nothing changes.
        """
        ...
