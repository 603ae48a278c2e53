"""The engines behind one interface: a ``Store`` chooses one, once, from its target.

What differs between SQLite and PostgreSQL is an ``Engine``: how it
connects, how a write and a read transaction begin, whether writers take
turns, its clock, its operations (``queries.Operations`` on its own ``.sql``
file of named statements), how its errors become ``StorageError`` codes, and
its schema as numbered migrations. An application's own tables are a
``MigrationLine``, versioned beside the queue's schema.
The protocol (``store.py``) and the transaction runner (``transactions.py``)
call these and never ask which engine they run on.
"""

from __future__ import annotations

import functools
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

    def install(self, conn: Connection, line: MigrationLine) -> None:
        """Move ``line`` to its newest version inside the open transaction (``install_line``)."""
        ...

    def together(self, conn: Connection) -> AbstractContextManager[None]:
        """Statements of the block may go out together, unanswered until needed.

        A result read inside the block waits for what was sent before it; the
        block's end waits for all, and raises the first ``StorageError`` of
        them. Where a statement costs no round trip (SQLite), nothing changes.
        """
        ...


def engine_for(
    target: str | Path, *, busy_timeout_ms: int, read_only: bool = False
) -> Engine:
    """The engine for ``target``: a ``postgresql://`` URL, or an SQLite file.

    With ``read_only`` it never writes: no creation, no migration, and a write
    transaction is refused (``read_only``).
    """
    if is_postgres_url(target):
        from .postgres import PostgresEngine

        return PostgresEngine(
            str(target), busy_timeout_ms=busy_timeout_ms, read_only=read_only
        )
    from .sqlite import SQLiteEngine

    return SQLiteEngine(
        Path(target), busy_timeout_ms=busy_timeout_ms, read_only=read_only
    )


def read_only_reason(target: str | Path) -> str | None:
    """Why this process may only read ``target``, or None when it may write (or cannot tell).

    Answered for an SQLite file from its permissions and its file system's;
    a PostgreSQL role's rights are not looked at (None).
    """
    if is_postgres_url(target):
        return None
    from .sqlite import read_only_reason as file_reason

    return file_reason(Path(target))


def needs_migration(where: str, found: int, newest: int) -> StorageError:
    """A store opened read-only on a schema older than this queue_core's."""
    return StorageError(
        f"{where} has schema version {found} and this queue_core reads version "
        f"{newest}; a store opened read-only cannot migrate it: open it once with "
        "write access (any queue-core command run by its owner)",
        code="needs_migration",
    )


def refuse_write(where: str) -> StorageError:
    """A write transaction on a store opened read-only."""
    return StorageError(
        f"{where}: the store was opened read-only; it cannot write", code="read_only"
    )


def adopt(conn: object) -> Engine:
    """The engine for a connection of the caller's own database.

    A plain ``sqlite3.Connection`` (receipts in a database that is not a
    queue's) is SQLite's; the file is then only named in messages. Anything
    else is refused with ``TypeError``.
    """
    from .sqlite import adopt as sqlite_adopt

    engine = sqlite_adopt(conn)
    if engine is None:
        raise TypeError(
            "expected a store transaction (Tx) or an sqlite3.Connection, "
            f"got {type(conn).__name__}"
        )
    return engine


def is_postgres_url(target: object) -> bool:
    """Whether ``target`` names a PostgreSQL database rather than an SQLite file."""
    return isinstance(target, str) and target.startswith(POSTGRES_SCHEMES)


# The core migration that keys a message by (queue, event_id): a table that
# references messages (event_id) cannot cross it unless its line moves it.
REKEYED: Final = 4

# The registered migration lines, by name (``register_line``).
LINES: Final[dict[str, MigrationLine]] = {}


@dataclass(frozen=True)
class MigrationLine:
    """An application's own tables beside the queue, as numbered migrations per engine.

    As River's migration lines: a line keeps its own version in the core table
    ``migration_lines`` and moves forward with ``Engine.install``, inside the
    caller's transaction, while the queue's own migrations never name its
    tables. Each engine's folder holds ``0001_<name>.sql``, ``0002_...``, and
    may hold ``core_0004_before.sql`` / ``core_0004_after.sql``: how the
    line's tables cross a core migration that would break them (run only for
    a registered line, ``register_line``).
    """

    name: str  # the key of its recorded version in ``migration_lines``
    package: str  # where its folders are, e.g. "queue_core.app"
    folders: Mapping[str, str]  # an engine's name -> its folder of the package
    tables: frozenset[str] = frozenset()  # the tables it owns

    def migrations(self, engine: str) -> dict[int, str]:
        """This engine's numbered migrations of the line: version -> the file's SQL."""
        found = {int(name[:4]): text for name, text in self._files(engine).items()
                 if name[:4].isdigit()}
        if list(found) != list(range(1, len(found) + 1)):
            raise ValueError(f"migration line {self.name}: the {engine} files are not "
                             f"numbered 1, 2, ... (found {list(found)})")
        return found

    def newest(self, engine: str) -> int:
        """The version the line's files move a database to on ``engine``."""
        return max(self.migrations(engine), default=0)

    def scripts(self, engine: str, above: int) -> list[tuple[int, str]]:
        """This engine's migrations after version ``above``, in order: (version, SQL)."""
        return [(version, text) for version, text in self.migrations(engine).items()
                if version > above]

    def core_step(self, engine: str, version: int, when: str) -> str:
        """The line's script ``"before"`` or ``"after"`` core migration ``version`` ("" if none)."""
        return self._files(engine).get(f"core_{version:04d}_{when}.sql", "")

    def _files(self, engine: str) -> Mapping[str, str]:
        """This engine's ``.sql`` files of the line, by name; refused if it has none."""
        if engine not in self.folders:
            raise StorageError(f"migration line {self.name} has no migrations for {engine}",
                               code="storage_error")
        return _sql_files(self.package, self.folders[engine])


@functools.lru_cache(maxsize=64)
def _sql_files(package: str, folder: str) -> dict[str, str]:
    """The ``.sql`` files of one of a package's folders, by name, sorted (read once)."""
    place = resources.files(package)
    for part in folder.split("/"):
        place = place.joinpath(part)
    return {entry.name: entry.read_text(encoding="utf-8")
            for entry in sorted(place.iterdir(), key=lambda entry: entry.name)
            if entry.name.endswith(".sql")}


def register_line(line: MigrationLine) -> MigrationLine:
    """Make ``line`` known to the engines' migrations, which then move its tables; returns it.

    Registering the same line again changes nothing; another line under its
    name, or owning one of its tables, is refused.
    """
    for other in LINES.values():
        if other.name != line.name and other.tables & line.tables:
            raise ValueError(f"migration line {line.name}: {sorted(other.tables & line.tables)} "
                             f"belong to line {other.name}")
    if LINES.setdefault(line.name, line) != line:
        raise ValueError(f"another migration line is registered as {line.name}")
    return line


def install_line(engine: Engine, conn: Connection, line: MigrationLine) -> None:
    """Run ``line``'s migrations above its recorded version, and record the newest.

    Inside the caller's transaction, after the line's turn (where no write
    lock serializes installs), so that two installs never both read the old
    version. A line at its newest version is only read.
    """
    engine.ops.line_turn(conn)
    recorded = engine.ops.line_version(conn, line.name)
    newest = line.newest(engine.name)
    if recorded > newest:
        raise WrongPath(
            f"{engine.where}: migration line {line.name} has version {recorded}; "
            f"its files know up to {newest}",
            code="line_too_new",
        )
    pending = line.scripts(engine.name, recorded)
    for _, text in pending:
        engine.run_script(conn, text)
    if pending:
        engine.ops.set_line_version(conn, line.name, newest)


def line_is_current(engine: Engine, conn: Connection, line: MigrationLine) -> bool:
    """Whether ``line`` is recorded here at its newest version, no older, no newer (reads only)."""
    return engine.ops.line_version(conn, line.name) == line.newest(engine.name)


def lines_moving(where: object, engine: str, tables: Iterable[str], version: int) -> list[MigrationLine]:
    """The registered lines that move ``tables`` across core migration ``version``.

    ``tables`` are those the core migration would break (they reference
    messages); one that no registered line owns and moves refuses the
    migration (``migration_blocked``), nothing changed.
    """
    moving: list[MigrationLine] = []
    for table in tables:
        line = next((line for line in LINES.values() if table in line.tables), None)
        if line is None or not any(line.core_step(engine, version, when)
                                   for when in ("before", "after")):
            raise migration_blocked(where, table)
        if line not in moving:
            moving.append(line)
    return moving


def core_steps(lines: Iterable[MigrationLine], engine: str, version: int, when: str) -> str:
    """The ``lines``' scripts ``"before"`` or ``"after"`` core migration ``version``, as one text."""
    return "\n".join(filter(None, (line.core_step(engine, version, when) for line in lines)))


def migration_blocked(where: object, table: str) -> WrongPath:
    """Core migration 4 cannot key messages by (queue, event_id) while ``table`` references them.

    No registered migration line owns the table and moves it: it is its
    owner's to move. Nothing was changed.
    """
    return WrongPath(
        f"{where}: table {table} references messages; schema version 4 keys a "
        "message by (queue, event_id): give the table a column "
        "queue TEXT NOT NULL DEFAULT 'default' and reference "
        "messages (queue, event_id), or drop the reference, or register the "
        "migration line that owns the table, then open the queue again "
        "(nothing was changed)",
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
