"""The queue's file: identify it, create or migrate it, connect, translate errors.

Everything here is about *the file*, nothing about the protocol: is this path
a queue database (checked without modifying it), which schema version does it
have, how a connection is configured, and which stable code an ``sqlite3``
error becomes. The protocol's transactions live in ``store.py``.
"""

from __future__ import annotations

import os
import sqlite3
from importlib import resources
from pathlib import Path
from typing import Any, Final

from .errors import StorageError, WrongPath

SCHEMA_VERSION: Final = 3
APPLICATION_ID: Final = 0x51436F72  # "QCor": marks a file as a queue_core database
SCHEMA_FILES: Final = ("schema.sql", "receipts.sql")  # the queue's schema, in order
_SQLITE_MAGIC = b"SQLite format 3\x00"

# Each entry moves a file from version N-1 to N (all of them in one
# transaction): SQL statements, or the name of one of the package's .sql files.
MIGRATIONS: Final[dict[int, tuple[str, ...]]] = {
    2: (
        # The human-readable reason beside last_error's code.
        "ALTER TABLE messages ADD COLUMN last_detail TEXT"
        " CHECK (last_detail IS NULL OR last_error IS NOT NULL)",
        # Receipts join the versioned schema (version 1 created them lazily,
        # identically).
        "receipts.sql",
    ),
    3: (
        # Timestamps and counts for the metrics; a row from before has NULL
        # times (unknown, never guessed) and no expired lease counted.
        "ALTER TABLE messages ADD COLUMN enqueued_at INTEGER"
        " CHECK (enqueued_at IS NULL OR enqueued_at >= 0)",
        "ALTER TABLE messages ADD COLUMN done_at INTEGER"
        " CHECK (done_at IS NULL OR state = 'done')",
        "ALTER TABLE messages ADD COLUMN expired_leases INTEGER NOT NULL DEFAULT 0"
        " CHECK (expired_leases >= 0)",
        # Retention: prune keeps the hash of a payload it removes.
        "ALTER TABLE messages ADD COLUMN payload_sha256 TEXT"
        " CHECK (payload_sha256 IS NULL"
        " OR (state = 'done' AND payload = '{}' AND length(payload_sha256) = 64))",
    ),
}


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


MIN_SQLITE: Final = (3, 37, 0)  # STRICT tables (3.37.0, 2021-11-27)


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


def connect(
    path: Path, *, busy_timeout_ms: int, check_same_thread: bool = True
) -> sqlite3.Connection:
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
            check_same_thread=check_same_thread,
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


def prepare(conn: sqlite3.Connection, path: Path) -> None:
    """Create the schema in a new file, or migrate an older one: one transaction.

    The version is read again under the write lock, since another process may
    have created or migrated the file meanwhile.
    """
    try:
        conn.execute("BEGIN IMMEDIATE")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise WrongPath(
                f"{path} has schema version {version}; "
                f"this queue_core knows up to {SCHEMA_VERSION}",
                code="schema_too_new",
            )
        if version == 0:
            for name in SCHEMA_FILES:
                for statement in sql_statements(name):
                    conn.execute(statement)
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        else:
            for target in range(version + 1, SCHEMA_VERSION + 1):
                for statement in _migration_statements(target):
                    conn.execute(statement)
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


# Whether a table exists in the queue's database, per engine (on PostgreSQL:
# in the connection's current schema). Reading it writes nothing.
_TABLE_EXISTS: Final = {
    "sqlite": "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
    "postgresql": "SELECT 1 FROM information_schema.tables"
    " WHERE table_schema = current_schema() AND table_name = ?",
}


def table_exists(conn: Any, name: str) -> bool:
    """Whether table ``name`` exists.

    ``conn`` is an sqlite3 connection, a PostgreSQL one, or a store ``Tx``.
    """
    # engine_postgres.Connection and Tx name theirs
    engine = getattr(conn, "engine", "sqlite")
    return conn.execute(_TABLE_EXISTS[engine], (name,)).fetchone() is not None


def _migration_statements(target: int) -> list[str]:
    statements: list[str] = []
    for step in MIGRATIONS[target]:
        statements += sql_statements(step) if step.endswith(".sql") else [step]
    return statements


def checkpoint(conn: sqlite3.Connection) -> None:
    """Copy the WAL into the database file and empty it (unless a reader needs it)."""
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    except sqlite3.Error:
        pass  # busy or a full disk: the WAL keeps the commits, which stay durable


def sql_statements(name: str) -> list[str]:
    """Split one of the package's ``.sql`` files into statements.

    (``executescript`` would COMMIT first, so it cannot run inside a transaction.)
    """
    text = resources.files("queue_core").joinpath(name).read_text(encoding="utf-8")
    statements, current = [], ""
    for line in text.splitlines(keepends=True):
        if line.lstrip().startswith("--") and not current.strip():
            continue
        current += line
        if sqlite3.complete_statement(current):
            statements.append(current.strip())
            current = ""
    return statements


def close(conn: sqlite3.Connection, *, quiet: bool = False) -> None:
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
