"""SQLite: the queue in one file.

Everything here is about *the file*: is this path a queue database (checked
without modifying it), which schema version it has, its numbered migrations
(``sqlite_migrations/``), how a connection is configured, the writers' turn
beside the file, and which stable code an ``sqlite3`` error becomes.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Final

from ..errors import StorageError, WrongPath
from . import (
    APPLICATION_ID,
    REKEYED,
    Connection,
    MigrationLine,
    core_steps,
    install_line,
    lines_moving,
    migrations,
    needs_migration,
    refuse_write,
    sqlite_turn,
)
from .caller_statements import check_caller_statement
from .queries import Operations, load

MIGRATIONS: Final = migrations("sqlite_migrations")
OPERATIONS: Final = Operations(load(__package__, "sqlite_queries.sql"))
SCHEMA_VERSION: Final = max(MIGRATIONS)
MIN_SQLITE: Final = (3, 37, 0)  # STRICT tables (3.37.0, 2021-11-27)
_SQLITE_MAGIC = b"SQLite format 3\x00"


class SQLiteEngine:
    """One SQLite file: one writer at a time, taking fair turns (``sqlite_turn.py``)."""

    name: Final = "sqlite"
    ops: Final = OPERATIONS
    has_clock: Final = False  # the store's clock, or the system's

    def __init__(
        self, path: Path, *, busy_timeout_ms: int, read_only: bool = False
    ) -> None:
        sqlite_turn.check_file_locks()
        self.path = self.target = path
        self._turn_name = os.path.abspath(path)  # the writers' turn, beside the file
        self.where = str(path)
        self.busy_timeout_ms = busy_timeout_ms
        self.read_only = read_only

    def open_queue(self, connection: Callable[[], Connection], *, create: bool) -> None:
        version = inspect(
            self.path,
            create=create and not self.read_only,
            busy_timeout_ms=self.busy_timeout_ms,
        )
        if version == SCHEMA_VERSION:
            return
        if self.read_only:
            raise needs_migration(self.where, version, SCHEMA_VERSION)
        conn = connection()
        if not isinstance(conn, sqlite3.Connection):
            raise TypeError(f"not an SQLite connection: {type(conn).__name__}")
        migrate(conn, self.path)
        # a migration: the new version into the file itself, not only the WAL
        if version > 0:
            checkpoint(conn)

    def connect(self) -> sqlite3.Connection:
        if self.read_only:
            return connect_read_only(self.path, busy_timeout_ms=self.busy_timeout_ms)
        return connect(self.path, busy_timeout_ms=self.busy_timeout_ms)

    def close(self, conn: Connection, *, quiet: bool = False) -> None:
        close(conn, quiet=quiet)

    def begin_write(self, conn: Connection) -> None:
        if self.read_only:
            raise refuse_write(self.where)
        # IMMEDIATE: the write lock before the first read, so that what a
        # transaction reads cannot change before it writes.
        conn.execute("BEGIN IMMEDIATE")

    def begin_read(self, conn: Connection) -> None:
        conn.execute("BEGIN")  # in WAL mode, one snapshot until the transaction ends

    def writer_turn(self, wait_seconds: float) -> AbstractContextManager[None]:
        if self.read_only:
            return contextlib.nullcontext()  # no lock file made: it writes nothing
        return sqlite_turn.writer_turn(self._turn_name, wait_seconds=wait_seconds)

    def storage_error(self, exc: BaseException) -> StorageError | None:
        return storage_error(exc, self.path) if isinstance(exc, sqlite3.Error) else None

    def caller_sql(self, sql: str) -> str:
        return caller_sql(sql)

    def run_script(self, conn: Connection, text: str) -> None:
        for statement in sql_statements(text):
            conn.execute(statement)

    def install(self, conn: Connection, line: MigrationLine) -> None:
        install_line(self, conn, line)

    def together(self, conn: Connection) -> AbstractContextManager[None]:
        return contextlib.nullcontext()  # a statement here is a function call


def adopt(conn: object) -> SQLiteEngine | None:
    """An engine for the caller's own ``sqlite3.Connection``, or None for anything else."""
    if not isinstance(conn, sqlite3.Connection):
        return None
    return SQLiteEngine(Path("your database"), busy_timeout_ms=0)


def inspect(path: Path, *, create: bool, busy_timeout_ms: int) -> int:
    """Check ``path`` without modifying it; return its schema version (0: create it).

    Raises ``WrongPath`` for anything that is not a queue database this
    version can open: a directory, a missing file (unless ``create``), a text
    file, a foreign SQLite file, a newer schema.
    """
    try:
        is_dir, exists = path.is_dir(), path.exists()
        parent_is_dir = path.parent.is_dir()
    except OSError as exc:  # e.g. a folder this process may not search, a name too long
        raise WrongPath(
            f"cannot open {path}: {exc.strerror}", code="cannot_open"
        ) from None
    if is_dir:
        raise WrongPath(
            f"{path} is a directory, not a queue database", code="not_a_file"
        )
    if not exists:
        if not create:
            raise WrongPath(f"no queue database at {path}", code="no_database")
        if not parent_is_dir:
            raise WrongPath(
                f"cannot create {path}: {path.parent} is not a directory",
                code="cannot_open",
            )
        return 0
    try:
        with open(path, "rb") as fh:
            header = fh.read(100)
    except OSError as exc:
        raise WrongPath(
            f"cannot read {path}: {exc.strerror}", code="cannot_open"
        ) from None
    if not header and create:
        return 0  # an empty file (e.g. from mkstemp) is a new database
    # The header is read directly: application_id (offset 68) and
    # user_version (offset 60) are written before the file switches to WAL.
    if len(header) < 100 or not header.startswith(_SQLITE_MAGIC):
        raise WrongPath(
            f"{path} is not a queue database (not an SQLite file)",
            code="not_a_queue_database",
        )
    application_id = int.from_bytes(header[68:72], "big")
    version = int.from_bytes(header[60:64], "big")
    wal = path.with_name(path.name + "-wal")
    try:
        wal_pending = wal.is_file() and wal.stat().st_size > 0
    except OSError:
        wal_pending = False  # then SQLite cannot use it either, and will say so
    if application_id == APPLICATION_ID and wal_pending:
        # Another client (running, or crashed) has commits still only in the
        # WAL, e.g. a newer queue_core's upgrade: the header on disk may be
        # stale. Read it through SQLite; a read-only connection neither
        # checkpoints nor removes the WAL, so nothing is modified.
        try:
            reader = sqlite3.connect(
                f"{path.absolute().as_uri()}?mode=ro",
                uri=True,
                timeout=busy_timeout_ms / 1000,
            )
        except sqlite3.Error as exc:
            raise storage_error(exc, path) from exc
        try:
            application_id = reader.execute("PRAGMA application_id").fetchone()[0]
            version = reader.execute("PRAGMA user_version").fetchone()[0]
        except sqlite3.Error as exc:
            raise storage_error(exc, path) from exc
        finally:
            close(reader, quiet=True)
    if application_id != APPLICATION_ID:
        raise WrongPath(
            f"{path} is an SQLite file of another application, not a queue database",
            code="not_a_queue_database",
        )
    if version > SCHEMA_VERSION:
        raise WrongPath(
            f"{path} has schema version {version}; "
            f"this queue_core knows up to {SCHEMA_VERSION}",
            code="schema_too_new",
        )
    if version < 1:
        raise WrongPath(
            f"{path} is an incomplete queue database (schema version {version})",
            code="not_a_queue_database",
        )
    return int(version)


def check_sqlite_version(
    version: tuple[int, int, int] = sqlite3.sqlite_version_info,
) -> None:
    """Refuse an SQLite library older than ``MIN_SQLITE``.

    Python links whichever SQLite the system has.
    """
    if tuple(version) < MIN_SQLITE:
        found = ".".join(map(str, version))
        needed = ".".join(map(str, MIN_SQLITE))
        raise StorageError(
            f"queue_core needs SQLite {needed} or newer (STRICT tables); "
            f"this Python's sqlite3 module uses SQLite {found}",
            code="sqlite_too_old",
        )


def connect(path: Path, *, busy_timeout_ms: int) -> sqlite3.Connection:
    """The one place where connections are made and configured.

    ``check_same_thread=False`` only lets the store *close* a thread's
    connection from another thread; each connection is used by one thread.
    """
    check_sqlite_version()
    try:
        conn = sqlite3.connect(
            path,
            timeout=busy_timeout_ms / 1000,
            isolation_level=None,  # the store issues BEGIN/COMMIT itself
            check_same_thread=False,
        )
    except sqlite3.Error as exc:
        raise storage_error(exc, path) from exc
    try:
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        conn.execute("PRAGMA synchronous = FULL")
        # On macOS fsync() does not flush the drive's cache: F_FULLFSYNC does
        # (SQLite's PRAGMA fullfsync). Elsewhere SQLite ignores both.
        conn.execute("PRAGMA fullfsync = ON")
        conn.execute("PRAGMA checkpoint_fullfsync = ON")
    except sqlite3.Error as exc:
        close(conn)
        raise storage_error(exc, path) from exc
    return conn


def read_only_reason(path: Path) -> str | None:
    """Why this process may only read the queue database at ``path`` (None: it may write)."""
    try:
        if not path.is_file():
            return None  # nothing to read: the ordinary open says what is wrong
        if os.statvfs(path).f_flag & os.ST_RDONLY:
            return f"{path} is on a read-only file system"
        if not os.access(path, os.W_OK):
            return f"{path} is read-only for this process"
        if not os.access(path.parent, os.W_OK):
            return f"the folder of {path} is read-only for this process"
    except OSError:
        return None
    return None


def connect_read_only(path: Path, *, busy_timeout_ms: int) -> sqlite3.Connection:
    """A connection that can only read (``mode=ro``): it never writes the database.

    A WAL database is read through its ``-shm`` index, which SQLite creates
    beside the file when it may. Where it may not (a read-only folder or file
    system) and neither ``-wal`` nor ``-shm`` is there, every commit is in the
    file itself and no writer has it open (a writer in WAL mode keeps both
    files while connected): then the file is read as ``immutable``, without
    locks or an index. A writer that starts while such a store reads is not
    seen, and is not waited for: see SQLite's "Read-Only Databases",
    https://www.sqlite.org/wal.html.
    """
    check_sqlite_version()
    wal, shm = (path.with_name(path.name + suffix) for suffix in ("-wal", "-shm"))
    try:
        folder_writable = os.access(path.parent, os.W_OK)
        companions = wal.exists() or shm.exists()
    except OSError:
        folder_writable, companions = True, True  # let SQLite say what is wrong
    immutable = "&immutable=1" if not folder_writable and not companions else ""
    try:
        conn = sqlite3.connect(
            f"{path.absolute().as_uri()}?mode=ro{immutable}",
            uri=True,
            timeout=busy_timeout_ms / 1000,
            isolation_level=None,
            check_same_thread=False,
        )
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
    except sqlite3.Error as exc:
        raise storage_error(exc, path) from exc
    return conn


def migrate(conn: sqlite3.Connection, path: Path) -> None:
    """Create the schema in a new file, or migrate an older one: one transaction.

    A new file runs every migration from 1; a file of version N runs those
    after N. The version is read again under the write lock, since another
    process may have created or migrated the file meanwhile.
    """
    # Migration 4 rebuilds tables that others reference (and a line's step
    # rebuilds its own): SQLite's procedure for that runs with foreign keys off
    # (a pragma that cannot change inside a transaction) and checks every key
    # before COMMIT.
    conn.execute("PRAGMA foreign_keys = OFF")
    try:
        conn.execute("BEGIN IMMEDIATE")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise WrongPath(
                f"{path} has schema version {version}; "
                f"this queue_core knows up to {SCHEMA_VERSION}",
                code="schema_too_new",
            )
        moving = (lines_moving(path, SQLiteEngine.name, _referencing_messages(conn), REKEYED)
                  if 0 < version < REKEYED else [])
        for target, text in MIGRATIONS.items():
            if target > version:
                for script in (core_steps(moving, SQLiteEngine.name, target, "before"), text,
                               core_steps(moving, SQLiteEngine.name, target, "after")):
                    for statement in sql_statements(script):
                        conn.execute(statement)
        broken = conn.execute("PRAGMA foreign_key_check").fetchall()
        if broken:
            raise StorageError(
                f"{path}: a migration left {len(broken)} rows without their "
                f"referenced row (first: table {broken[0][0]}); nothing was changed",
                code="corrupt",
            )
        if version == 0:
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
        # WAL lets readers (status) run beside the one writer.
        conn.execute("PRAGMA journal_mode = WAL")
    except BaseException as exc:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        if isinstance(exc, sqlite3.Error):
            raise storage_error(exc, path) from exc
        raise
    finally:
        conn.execute("PRAGMA foreign_keys = ON")


def _referencing_messages(conn: sqlite3.Connection) -> list[str]:
    """The tables whose foreign keys reference ``messages``.

    Version 4 keys a message by (queue, event_id): a table that references
    messages (event_id) alone would no longer find a unique key there, unless
    its migration line moves it (``lines_moving``).
    """
    return [
        name
        for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
        ).fetchall()
        if any(
            key[2] == "messages"
            for key in conn.execute(
                "SELECT * FROM pragma_foreign_key_list(?)", (name,)
            ).fetchall()
        )
    ]


def table_exists(conn: Connection, name: str) -> bool:
    """Whether table ``name`` exists; reading it writes nothing."""
    return OPERATIONS.table_exists(conn, name)


def checkpoint(conn: sqlite3.Connection) -> None:
    """Copy the WAL into the database file and empty it (unless a reader needs it)."""
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    except sqlite3.Error:
        pass  # busy or a full disk: the WAL keeps the commits, which stay durable


@functools.lru_cache(maxsize=512)
def caller_sql(sql: str) -> str:
    """A caller's statement as sqlite3 takes it (``?`` is its own placeholder), once checked.

    A statement that would begin or end the transaction is refused
    (``StatementRefused``); sqlite3 itself refuses a second statement. Each
    distinct statement is checked once.
    """
    check_caller_statement(sql, nested_comments=False)
    return sql


def sql_statements(text: str) -> list[str]:
    """Split an SQL script into statements.

    (``executescript`` would COMMIT first, so it cannot run inside a transaction.)
    """
    statements, current = [], ""
    for line in text.splitlines(keepends=True):
        if line.lstrip().startswith("--") and not current.strip():
            continue
        current += line
        if sqlite3.complete_statement(current):
            statements.append(current.strip())
            current = ""
    return statements


def close(conn: Connection, *, quiet: bool = False) -> None:
    """Close ``conn``; with ``quiet``, a failure to close is ignored (after COMMIT)."""
    try:
        conn.close()
    except sqlite3.Error:
        if not quiet:
            raise


ERROR_CODES: Final = (
    ("SQLITE_BUSY", "database_busy", "the database is locked by another process"),
    ("SQLITE_LOCKED", "database_busy", "the database is locked"),
    ("SQLITE_READONLY", "read_only", "the database is read-only"),
    ("SQLITE_FULL", "disk_full", "the database or disk is full"),
    ("SQLITE_CANTOPEN", "cannot_open", "the database file cannot be opened"),
    ("SQLITE_NOTADB", "not_a_queue_database", "the file is not a database"),
    ("SQLITE_CORRUPT", "corrupt", "the database file is corrupt"),
    (
        "SQLITE_CONSTRAINT",
        "constraint_violation",
        "a schema constraint refused the write",
    ),
    # SQLite could not grow the WAL index (-shm): in practice the disk is out of space.
    (
        "SQLITE_IOERR_SHMSIZE",
        "disk_full",
        "the disk is full (no room for the WAL index file)",
    ),
    ("SQLITE_IOERR", "io_error", "the operating system reported an I/O error"),
)


def storage_error(exc: sqlite3.Error, path: Path) -> StorageError:
    """Translate an sqlite3 error into a StorageError with a stable code."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    if name.startswith("SQLITE_CANTOPEN"):
        # SQLite says "unable to open" where it may not write the file or create
        # the WAL beside it (a read-only file system, file or folder): say so.
        try:
            file_read_only = path.exists() and not os.access(path, os.W_OK)
            folder_read_only = path.parent.is_dir() and not os.access(
                path.parent, os.W_OK
            )
        except OSError:
            file_read_only = folder_read_only = False
        if file_read_only or folder_read_only:
            where = "database" if file_read_only else "folder of the database"
            return StorageError(
                f"{path}: the {where} is read-only for this process ({exc})",
                code="read_only",
            )
    for prefix, code, sentence in ERROR_CODES:
        if name.startswith(prefix):
            return StorageError(f"{path}: {sentence} ({exc})", code=code)
    return StorageError(f"{path}: {exc}", code="storage_error")
