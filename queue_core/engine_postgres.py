"""PostgreSQL for the same protocol: what differs from SQLite, in one module.

The store's transactions are written once (``store.py``). On PostgreSQL:

* a connection is a psycopg 3 connection, wrapped so that it answers the
  few calls the store makes of an sqlite3 connection (``execute`` with ``?``
  and ``:name`` placeholders, ``executemany``, ``in_transaction``);
* there is no global write lock: a claim locks the rows it takes
  (``FOR UPDATE SKIP LOCKED``), so workers on several hosts take different
  messages, and a completion locks its message's row (``FOR UPDATE``) before
  it checks the lease;
* with the system clock, time is the database server's (one clock for every
  host); a ``ModelClock`` still works for tests and examples;
* errors become the same ``StorageError`` codes.

psycopg is imported only when a PostgreSQL URL is opened, so the SQLite
default keeps its zero dependencies (``pip install queue_core[postgres]``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from typing import Any, Final

from .errors import StorageError, WrongPath

SCHEMES: Final = ("postgresql://", "postgres://")
SCHEMA_FILE: Final = "schema_postgres.sql"

# ``?`` and ``:name`` outside quoted strings (the store's SQL has no ``::`` casts).
_PLACEHOLDER = re.compile(r"'(?:[^']|'')*'|\?|(?<!:):([A-Za-z_][A-Za-z0-9_]*)")


def is_url(target: object) -> bool:
    """Whether ``target`` names a PostgreSQL database rather than an SQLite file."""
    return isinstance(target, str) and target.startswith(SCHEMES)


def translate(sql: str) -> str:
    """The store's SQL with psycopg's placeholders.

    ``?`` becomes ``%s``, ``:name`` becomes ``%(name)s``; a literal ``%`` is doubled.
    """

    def replace(match: re.Match[str]) -> str:
        text = match.group(0)
        if text.startswith("'"):
            return text  # a string literal: nothing in it is a placeholder
        return "%s" if text == "?" else f"%({match.group(1)})s"

    return _PLACEHOLDER.sub(replace, sql.replace("%", "%%"))


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise StorageError(
            "PostgreSQL needs psycopg 3: pip install 'queue_core[postgres]'",
            code="postgres_unavailable",
        ) from None
    return psycopg


def storage_error(exc: Exception, url: str) -> StorageError:
    """Translate a psycopg error into a StorageError with one of the store's codes."""
    psycopg = _psycopg()
    errors = psycopg.errors
    where = safe_url(url)
    if isinstance(
        exc,
        (
            errors.SerializationFailure,
            errors.DeadlockDetected,
            errors.LockNotAvailable,
            errors.QueryCanceled,
        ),
    ):
        # Only the first line: the rest quotes the statement that waited
        # ("LINE 2: ...", a caret).
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return StorageError(
            f"{where}: the database is busy ({reason})", code="database_busy"
        )
    if isinstance(exc, errors.IntegrityError):
        return StorageError(
            f"{where}: a schema constraint refused the write ({_one_line(exc)})",
            code="constraint_violation",
        )
    if isinstance(exc, errors.DiskFull):
        return StorageError(
            f"{where}: the database server's disk is full ({_one_line(exc)})",
            code="disk_full",
        )
    if isinstance(exc, errors.ReadOnlySqlTransaction):
        return StorageError(
            f"{where}: the database is read-only ({_one_line(exc)})", code="read_only"
        )
    if isinstance(exc, psycopg.OperationalError):
        return StorageError(
            f"{where}: the connection to the database server failed ({_one_line(exc)})",
            code="connection_lost",
        )
    return StorageError(f"{where}: {_one_line(exc)}", code="storage_error")


def safe_url(url: str) -> str:
    """The URL without a password (``user:password@``, ``?password=``), for messages."""
    url = re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", url)
    return re.sub(r"([?&]password=)[^&#]*", r"\1***", url, flags=re.IGNORECASE)


def _one_line(exc: Exception) -> str:
    # libpq's messages span lines ("DETAIL:", "HINT:"); the CLI promises one.
    return " ".join(str(exc).split())


class Cursor:
    """The rows of one statement, as the store reads them from an sqlite3 cursor."""

    def __init__(self, cursor: Any) -> None:
        self._cursor = cursor
        self.rowcount: int = cursor.rowcount

    def fetchone(self) -> Any:
        return self._cursor.fetchone() if self._cursor.description is not None else None

    def fetchall(self) -> list[Any]:
        return (
            list(self._cursor.fetchall())
            if self._cursor.description is not None
            else []
        )

    def __iter__(self) -> Any:
        return iter(self.fetchall())


class Connection:
    """A psycopg connection that answers the store's calls of an sqlite3 connection.

    Autocommit is on, so that the store's own ``BEGIN``/``COMMIT`` delimit
    each transaction exactly as on SQLite.
    """

    engine: Final = "postgresql"

    def __init__(self, url: str, *, busy_timeout_ms: int) -> None:
        psycopg = _psycopg()
        self.url = url
        try:
            self._conn = psycopg.connect(url, autocommit=True)
        # never connected: nothing was lost, nothing was written
        except psycopg.Error as exc:
            raise StorageError(
                f"{safe_url(url)}: cannot connect to the database server "
                f"({_one_line(exc)})",
                code="cannot_connect",
            ) from None
        # SQLite's busy timeout, here: how long to wait for a row another
        # transaction holds before the store reports the database busy.
        # 0 would switch PostgreSQL's lock timeout off (wait forever); SQLite's 0
        # means do not wait.
        self.execute(f"SET lock_timeout = {max(1, int(busy_timeout_ms))}")

    def execute(
        self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()
    ) -> Cursor:
        psycopg = _psycopg()
        try:
            return Cursor(self._conn.execute(translate(sql), params or None))
        except psycopg.Error as exc:
            raise storage_error(exc, self.url) from exc

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        psycopg = _psycopg()
        try:
            with self._conn.cursor() as cursor:
                cursor.executemany(translate(sql), list(rows))
        except psycopg.Error as exc:
            raise storage_error(exc, self.url) from exc

    @property
    def in_transaction(self) -> bool:
        psycopg = _psycopg()
        return self._conn.info.transaction_status in (
            psycopg.pq.TransactionStatus.INTRANS,
            psycopg.pq.TransactionStatus.INERROR,
        )

    def server_now(self) -> int:
        """The database server's clock in whole seconds: one clock for every host."""
        row = self.execute(
            "SELECT floor(extract(epoch FROM clock_timestamp()))::bigint"
        ).fetchone()
        return int(row[0])

    def server_time(self) -> float:
        """The database server's clock in seconds since the epoch, with its fraction."""
        row = self.execute(
            "SELECT extract(epoch FROM clock_timestamp())::float8"
        ).fetchone()
        return float(row[0])

    def close(self) -> None:
        self._conn.close()


def schema_version(conn: Connection) -> int:
    """The queue's schema version in this database (0: none yet); writes nothing."""
    if not _exists(conn, "queue_core_schema"):
        return 0
    row = conn.execute("SELECT version FROM queue_core_schema").fetchone()
    return 0 if row is None else int(row[0])


def open_queue(
    conn: Connection, *, create: bool, known_version: int, where: str
) -> None:
    """Check the database, then create the queue or move it forward if it must.

    A current queue is only read.

    Refused, with nothing written: no queue and not ``create`` (``no_database``),
    a ``messages`` table that is not a queue's (``not_a_queue_database``), a
    newer schema version (``schema_too_new``), a queue whose ``messages``
    table is gone (``corrupt``). So a role that may only read can open it.
    """
    found = schema_version(conn)
    if found == known_version:
        if not _exists(conn, "messages"):
            raise StorageError(
                f"{where}: the queue's messages table is missing", code="corrupt"
            )
        return
    _refuse_newer(found, known_version, where)
    if found == 0 and not create:
        raise WrongPath(f"no queue database at {where}", code="no_database")
    prepare(conn, known_version=known_version, where=where)


def _exists(conn: Connection, table: str) -> bool:
    return bool(
        conn.execute("SELECT to_regclass(?) IS NOT NULL", (table,)).fetchone()[0]
    )


def _refuse_newer(found: int, known_version: int, where: str) -> None:
    if found > known_version:
        raise WrongPath(
            f"{where} has schema version {found}; "
            f"this queue_core knows up to {known_version}",
            code="schema_too_new",
        )


def prepare(conn: Connection, *, known_version: int, where: str) -> None:
    """Create the queue's tables, or move an older version forward.

    Idempotent, in one transaction.

    Under the script's own advisory lock the database is looked at again (a
    second client may have created or moved it meanwhile): a newer version is
    refused (``schema_too_new``), as on SQLite, and so is a ``messages`` table
    of another application (``not_a_queue_database``).
    """
    psycopg = _psycopg()
    script = (
        resources.files("queue_core").joinpath(SCHEMA_FILE).read_text(encoding="utf-8")
    )
    conn.execute("BEGIN")
    try:
        # The script's own lock (its key is database.APPLICATION_ID, "QCor"),
        # taken before reading.
        conn.execute("SELECT pg_advisory_xact_lock(1363373938)")
        found = schema_version(conn)
        _refuse_newer(found, known_version, where)
        if found == 0 and _exists(conn, "messages"):
            raise WrongPath(
                f"{where} has a messages table that is not a queue's; "
                "use another database or schema",
                code="not_a_queue_database",
            )
        try:
            conn._conn.execute(script)
        except psycopg.Error as exc:
            raise storage_error(exc, conn.url) from exc
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
