"""PostgreSQL: the same protocol in one database, reached over a socket.

What differs from SQLite (the statements' part is in ``postgres_queries.sql``):

* a connection is a psycopg 3 connection in autocommit, so that the store's
  own ``BEGIN``/``COMMIT`` delimit each transaction exactly as on SQLite;
* there is no database write lock, so no writers' turn: a claim locks the
  rows it takes (``FOR UPDATE SKIP LOCKED``) and a completion locks its
  message's row before it checks the lease;
* with no clock given, time is the database server's (one clock for every host);
* the schema is numbered migrations (``postgres_migrations/``) and a one-row
  table ``queue_core_schema`` holding the version;
* errors become the same ``StorageError`` codes.

psycopg is imported only when a PostgreSQL URL is opened, so the SQLite
default keeps its zero dependencies (``pip install queue_core[postgres]``).
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from typing import Any, Final

from ..errors import StatementRefused, StorageError, WrongPath
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
)
from .caller_statements import after_comments, check_caller_statement
from .queries import Operations, load

MIGRATIONS: Final = migrations("postgres_migrations")
OPERATIONS: Final = Operations(load(__package__, "postgres_queries.sql"))
SCHEMA_VERSION: Final = max(MIGRATIONS)
# A dead link raises connection_lost within about a minute, not never; a URL's own win.
CONNECT_DEFAULTS: Final = {
    "connect_timeout": "10",
    "keepalives": "1",
    "keepalives_idle": "30",
    "keepalives_interval": "10",
    "keepalives_count": "3",
    "tcp_user_timeout": "60000",
}
# A client paused inside a transaction (SIGSTOP, a stopped VM) holds its rows'
# locks until it wakes; the server ends such a session after this long idle
# in a transaction: 5 minutes (milliseconds), far above any statement gap of
# the store's own. A URL's ``options=-c idle_in_transaction_session_timeout=N``
# wins (0: never).
IDLE_IN_TRANSACTION_MS: Final = 300_000


def server_bounds(bounds: Mapping[str, Any]) -> str | None:
    """The server's side of the session gets the client's bounds for a dead link.

    A worker cut between its effect and COMMIT leaves its transaction open on
    the server, holding its message's row; the server only ends it when its
    own keepalives give up (with the kernel's defaults, after two hours). These
    settings are the session's own (any user may set them; a Unix socket
    ignores them). ``keepalives=0`` leaves the server's as they are.
    """
    if str(bounds.get("keepalives", "1")) == "0":
        return None
    settings = {
        "tcp_keepalives_idle": bounds["keepalives_idle"],
        "tcp_keepalives_interval": bounds["keepalives_interval"],
        "tcp_keepalives_count": bounds["keepalives_count"],
        "tcp_user_timeout": bounds["tcp_user_timeout"],
    }
    # int(): libpq took these values already; nothing but a number is pasted in
    return "; ".join(f"SET {name} = {int(value)}" for name, value in settings.items())


# A caller's SQL is written with ``?`` placeholders, as sqlite3 takes them; for
# psycopg each ``?`` that is a placeholder becomes ``%s``. What is not SQL code
# is skipped whole, so that a ``?`` inside it stays: comments (``--``, ``/* */``,
# nested as PostgreSQL nests them), strings ('', E'' with backslash escapes),
# quoted names ("") and dollar-quoted bodies ($$...$$, $tag$...$tag$). The
# store's own statements are written for psycopg already and never pass here.
_CALLER_SQL = re.compile(
    r"""(?P<skip>
          --[^\n]*
        | [Ee]'(?:[^'\\]|\\.|'')*'
        | '(?:[^']|'')*'
        | "(?:[^"]|"")*"
        | \$(?P<tag>(?:[A-Za-z_][A-Za-z_0-9]*)?)\$.*?\$(?P=tag)\$
        )
      | (?P<comment>/\*)
      | (?P<mark>\?)
      | (?P<end>;)""",
    re.VERBOSE | re.DOTALL,
)


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise StorageError(
            "PostgreSQL needs psycopg 3: pip install 'queue_core[postgres]'",
            code="postgres_unavailable",
        ) from None
    return psycopg


class Rows:
    """The rows of one statement, read as from an sqlite3 cursor.

    Sent inside ``together``, its answer may not have come yet: reading it
    first waits for everything sent before it (``settle``).
    """

    def __init__(self, cursor: Any, settle: Callable[[], None] | None = None) -> None:
        self._cursor = cursor  # None: nothing was sent
        self._settle = settle

    def _answered(self) -> Any:
        settle, self._settle = self._settle, None
        if settle is not None and self._cursor.pgresult is None:
            settle()
        return self._cursor

    @property
    def rowcount(self) -> int:
        return -1 if self._cursor is None else self._answered().rowcount

    def fetchone(self) -> Any:
        if self._cursor is None or self._answered().description is None:
            return None
        return self._cursor.fetchone()

    def fetchall(self) -> list[Any]:
        if self._cursor is None or self._answered().description is None:
            return []
        return list(self._cursor.fetchall())

    def __iter__(self) -> Iterator[Any]:
        return iter(self.fetchall())


class PostgresConnection:
    """One psycopg connection in autocommit, whose errors are ``StorageError``."""

    def __init__(self, url: str, *, busy_timeout_ms: int) -> None:
        psycopg = _psycopg()
        self._errors: type[Exception] = psycopg.Error
        self._status = psycopg.pq.TransactionStatus
        self.url = url
        self._begin: str | None = None  # a BEGIN that waits for its first statement
        self._pipeline: Any = None  # psycopg's pipeline, inside ``together``
        try:
            given = psycopg.conninfo.conninfo_to_dict(url)
            defaults = {k: v for k, v in CONNECT_DEFAULTS.items() if k not in given}
            self.raw = psycopg.connect(
                psycopg.conninfo.make_conninfo(url, **defaults), autocommit=True
            )
            bounds = {**defaults, **given}
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
        if "idle_in_transaction_session_timeout" not in str(given.get("options", "")):
            self.execute(f"SET idle_in_transaction_session_timeout = {IDLE_IN_TRANSACTION_MS}")
        own_bounds = server_bounds(bounds)
        if own_bounds is not None:
            self.execute(own_bounds)

    def begin(self, statement: str) -> None:
        """Begin a transaction with the next statement: both go in one round trip."""
        self._begin = statement

    def execute(self, sql: str, parameters: Any = (), /) -> Rows:
        begin, self._begin = self._begin, None
        if begin is not None and sql in ("COMMIT", "ROLLBACK"):
            return Rows(None)  # nothing was begun: nothing to end
        try:
            if self._pipeline is not None:  # sent now, answered when read
                if begin is not None:
                    self.raw.execute(begin)
                return Rows(self.raw.execute(sql, parameters or None), self._settle)
            if begin is None:
                return Rows(self.raw.execute(sql, parameters or None))
            # psycopg's pipeline mode sends both and waits once
            with self.raw.pipeline():
                self.raw.execute(begin)
                cursor = self.raw.execute(sql, parameters or None)
            return Rows(cursor)
        except self._errors as exc:
            raise storage_error(exc, self.url) from exc

    @contextlib.contextmanager
    def together(self) -> Iterator[None]:
        """psycopg's pipeline mode: statements go out without waiting for answers."""
        if self._pipeline is not None:
            yield  # already together
            return
        try:
            with self.raw.pipeline() as pipeline:
                self._pipeline = pipeline
                try:
                    yield
                finally:
                    self._pipeline = None
        except self._errors as exc:
            raise storage_error(exc, self.url) from exc

    def _settle(self) -> None:
        """Wait for the answers to everything sent so far."""
        try:
            self._pipeline.sync()
        except self._errors as exc:
            raise storage_error(exc, self.url) from exc

    def _send_begin(self) -> None:
        """Send a waiting BEGIN on its own (a statement that cannot take it along)."""
        begin, self._begin = self._begin, None
        if begin is not None:
            self.raw.execute(begin)

    def executemany(self, sql: str, parameters: Iterable[Any], /) -> None:
        try:
            self._send_begin()
            with self.raw.cursor() as cursor:
                cursor.executemany(sql, list(parameters))
        except self._errors as exc:
            raise storage_error(exc, self.url) from exc

    def execute_script(self, text: str) -> None:
        """Several statements in one text, without parameters (a simple query)."""
        try:
            self._send_begin()
            self.raw.execute(text)
        except self._errors as exc:
            raise storage_error(exc, self.url) from exc

    @property
    def in_transaction(self) -> bool:
        if self._begin is not None:
            return True
        return self.raw.info.transaction_status in (
            self._status.INTRANS,
            self._status.INERROR,
        )

    def close(self) -> None:
        self.raw.close()


class PostgresEngine:
    """One PostgreSQL database: row locks instead of turns, the server's clock."""

    name: Final = "postgresql"
    ops: Final = OPERATIONS
    has_clock: Final = True  # the server's: one clock for every host

    def __init__(self, url: str, *, busy_timeout_ms: int, read_only: bool = False) -> None:
        self.url = self.target = url
        self.where = safe_url(url)
        self.busy_timeout_ms = busy_timeout_ms
        self.read_only = read_only

    def open_queue(self, connection: Callable[[], Connection], *, create: bool) -> None:
        """Check the database, then create the queue or move it forward if it must.

        A current queue is only read.

        Refused, with nothing written: no queue and not ``create``
        (``no_database``), a ``messages`` table that is not a queue's
        (``not_a_queue_database``), a newer schema version (``schema_too_new``),
        a queue whose ``messages`` table is gone (``corrupt``). So a role that
        may only read can open it.
        """
        conn = connection()
        found = schema_version(conn)
        if found == SCHEMA_VERSION:
            if not table_exists(conn, "messages"):
                raise StorageError(
                    f"{self.where}: the queue's messages table is missing",
                    code="corrupt",
                )
            return
        self._refuse_newer(found)
        if found == 0 and (not create or self.read_only):
            raise WrongPath(f"no queue database at {self.where}", code="no_database")
        if self.read_only:
            raise needs_migration(self.where, found, SCHEMA_VERSION)
        self._migrate(conn)

    def _refuse_newer(self, found: int) -> None:
        if found > SCHEMA_VERSION:
            raise WrongPath(
                f"{self.where} has schema version {found}; "
                f"this queue_core knows up to {SCHEMA_VERSION}",
                code="schema_too_new",
            )

    def _migrate(self, conn: Connection) -> None:
        """Create the queue's tables, or move an older version forward: one transaction.

        Under the schema's own advisory lock the database is looked at again
        (a second client may have created or moved it meanwhile).
        """
        conn.execute("BEGIN")
        try:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (APPLICATION_ID,))
            found = schema_version(conn)
            self._refuse_newer(found)
            if found == 0 and table_exists(conn, "messages"):
                raise WrongPath(
                    f"{self.where} has a messages table that is not a queue's; "
                    "use another database or schema",
                    code="not_a_queue_database",
                )
            moving = (lines_moving(self.where, self.name, self._referencing_messages(conn), REKEYED)
                      if 0 < found < REKEYED else [])
            for target, text in MIGRATIONS.items():
                if target > found:
                    for script in (core_steps(moving, self.name, target, "before"), text,
                                   core_steps(moving, self.name, target, "after")):
                        if script:
                            self.run_script(conn, script)
            conn.execute(
                "INSERT INTO queue_core_schema (application_id, version) "
                "VALUES (%s, %s) ON CONFLICT (singleton) "
                "DO UPDATE SET version = EXCLUDED.version",
                (APPLICATION_ID, SCHEMA_VERSION),
            )
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _referencing_messages(self, conn: Connection) -> list[str]:
        """The tables whose foreign keys reference ``messages``.

        Version 4 keys a message by (queue, event_id), and the old key cannot
        go while a foreign key depends on it, unless the table's migration
        line moves it (``lines_moving``).
        """
        rows = conn.execute(
            "SELECT DISTINCT conrelid::regclass::text FROM pg_constraint "
            "WHERE contype = 'f' AND confrelid = 'messages'::regclass ORDER BY 1"
        ).fetchall()
        return [str(table) for (table,) in rows]

    def connect(self) -> PostgresConnection:
        return PostgresConnection(self.url, busy_timeout_ms=self.busy_timeout_ms)

    def close(self, conn: Connection, *, quiet: bool = False) -> None:
        try:
            conn.close()
        except Exception:
            if not quiet:
                raise

    def begin_write(self, conn: Connection) -> None:
        if self.read_only:
            raise refuse_write(self.where)
        if not isinstance(conn, PostgresConnection):
            raise TypeError(f"not a PostgreSQL connection: {type(conn).__name__}")
        conn.begin("BEGIN")

    def begin_read(self, conn: Connection) -> None:
        # one snapshot for all of the body's statements, like a WAL read on SQLite
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")

    def writer_turn(self, wait_seconds: float) -> AbstractContextManager[None]:
        return contextlib.nullcontext()  # rows are locked, not the database

    def storage_error(self, exc: BaseException) -> StorageError | None:
        psycopg = _psycopg()
        if isinstance(exc, psycopg.Error):
            return storage_error(exc, self.url)
        return None

    def caller_sql(self, sql: str) -> str:
        return caller_sql(sql)

    def run_script(self, conn: Connection, text: str) -> None:
        if not isinstance(conn, PostgresConnection):
            raise TypeError(f"not a PostgreSQL connection: {type(conn).__name__}")
        conn.execute_script(text)

    def install(self, conn: Connection, line: MigrationLine) -> None:
        install_line(self, conn, line)

    def together(self, conn: Connection) -> AbstractContextManager[None]:
        if not isinstance(conn, PostgresConnection):
            raise TypeError(f"not a PostgreSQL connection: {type(conn).__name__}")
        return conn.together()


@functools.lru_cache(maxsize=512)
def caller_sql(sql: str) -> str:
    """A caller's SQL with psycopg's placeholders: each ``?`` placeholder becomes ``%s``.

    A literal ``%`` is doubled; a ``?`` in a comment, a string, a quoted name
    or a dollar-quoted body is left as it is. A statement that would begin or
    end the transaction, or a second statement after a ``;``, is refused
    (``StatementRefused``). (A ``?`` meant as PostgreSQL's
    jsonb operator is a placeholder here: write ``jsonb_exists(...)``.)
    Each distinct statement is rewritten once.
    """
    check_caller_statement(sql, nested_comments=True)
    text = sql.replace("%", "%%")
    out: list[str] = []
    at = 0
    while True:
        found = _CALLER_SQL.search(text, at)
        if found is None:
            out.append(text[at:])
            return "".join(out)
        out.append(text[at:found.start()])
        if found.group("end"):
            # psycopg would send a text without parameters as a simple query,
            # which runs every statement in it: one per call, as sqlite3 has it
            if after_comments(text, found.end(), True) < len(text):
                raise StatementRefused(
                    "one statement per call: the text goes on after a ';'",
                    code="multiple_statements",
                )
            out.append(text[found.start():])
            return "".join(out)
        if found.group("mark"):
            out.append("%s")
            at = found.end()
        elif found.group("comment"):
            end = _comment_end(text, found.start())
            out.append(text[found.start():end])
            at = end
        else:
            out.append(found.group(0))
            at = found.end()


def _comment_end(text: str, start: int) -> int:
    """Where the ``/* */`` comment opened at ``start`` ends (PostgreSQL nests them)."""
    depth, at = 0, start
    while at < len(text):
        if text.startswith("/*", at):
            depth, at = depth + 1, at + 2
        elif text.startswith("*/", at):
            depth, at = depth - 1, at + 2
            if depth == 0:
                return at
        else:
            at += 1
    return len(text)  # unterminated: the server will say so


def schema_version(conn: Connection) -> int:
    """The queue's schema version in this database (0: none yet); writes nothing."""
    if not table_exists(conn, "queue_core_schema"):
        return 0
    row = conn.execute("SELECT version FROM queue_core_schema").fetchone()
    return 0 if row is None else int(row[0])


def table_exists(conn: Connection, name: str) -> bool:
    """Whether table ``name`` exists in the connection's current schema (``table_exists``)."""
    return OPERATIONS.table_exists(conn, name)


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
    # the server ended a session idle in its transaction too long (the guard above)
    if isinstance(exc, (psycopg.OperationalError, errors.IdleInTransactionSessionTimeout)):
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
