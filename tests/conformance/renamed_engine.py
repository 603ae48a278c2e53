"""A third engine, written here in the tests: SQLite with the queue's tables renamed.

It shows what issue #45 (item 5) asks of the seam: an engine that queue_core
does not ship, found through the registry by its URL's scheme
(``register_engine``), passes the conformance suite without a line of the
protocol changed. It is built only from what an engine may use:

- its own schema: SQLite's numbered migrations with the queue's inner tables
  renamed (``queues`` -> ``qc3_queues``, ``queue_counters`` ->
  ``qc3_counters``, ``migration_lines`` -> ``qc3_lines``), moved forward by the
  one procedure of ``engines/migrate.py`` with a ``Schema`` of its own;
  ``messages`` and ``receipts`` keep their names, since an application's own
  tables reference ``messages (queue, event_id)`` (the reference ledger does);
- its own statements: SQLite's named-query file, renamed alike, and one
  operation (``counts``) done with a statement of its own, in the driver's
  ``?`` style, whose one row is a JSON object (its own row type);
- its own transactions: COMMIT and ROLLBACK through the driver
  (``sqlite3.Connection.commit``/``rollback``), savepoints with quoted names;
- a migration line installs from the line's ``sqlite`` folder: an engine's
  ``name`` is the dialect a line's files are written in, and this engine
  speaks SQLite's (its scheme, not its name, tells it apart); the line's
  statements are renamed alike.

The queue's file is named by the URL ``qc-renamed:///path/to/queue.sqlite3``.
``OPENED`` counts the engines made, so that a test can tell it really ran here.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sqlite3
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Final

from queue_core.engines import Connection, MigrationLine, register_engine
from queue_core.engines.base import needs_migration, refuse_write
from queue_core.engines.lines import install_line
from queue_core.engines.migrate import migrate
from queue_core.engines.queries import NamedQueries, Query, load
from queue_core.engines import sqlite as sqlite_engine
from queue_core.engines import sqlite_turn

SCHEME: Final = "qc-renamed"
RENAMED: Final = {"queues": "qc3_queues", "queue_counters": "qc3_counters",
                  "migration_lines": "qc3_lines"}
_NAMES: Final = re.compile(r"\b(" + "|".join(RENAMED) + r")\b")
OPENED: list[str] = []  # the target of each engine made, in order


def renamed(sql: str) -> str:
    """``sql`` with the queue's inner tables renamed (a word, never part of one)."""
    return _NAMES.sub(lambda found: RENAMED[found.group(1)], sql)


MIGRATIONS: Final = {version: renamed(text) for version, text in sqlite_engine.MIGRATIONS.items()}
SCHEMA_VERSION: Final = max(MIGRATIONS)


class RenamedQueries(NamedQueries):
    """SQLite's named statements, renamed; ``counts`` is this engine's own."""

    def counts(self, conn: Connection, queue: str) -> dict[str, int]:
        row = conn.execute(
            "SELECT json_group_object(state, n) FROM "
            "(SELECT state, count(*) AS n FROM messages WHERE queue = ? GROUP BY state)",
            (queue,),
        ).fetchone()
        return {str(state): int(count) for state, count in json.loads(row[0]).items()}


OPERATIONS: Final = RenamedQueries({
    name: Query(query.name, query.doc, renamed(query.sql))
    for name, query in load("queue_core.engines", "sqlite_queries.sql").items()
})


class _Schema:
    """This engine's part of the one migration procedure (``migrate.Schema``)."""

    name: Final = "sqlite"  # the dialect a migration line's files are written in

    def __init__(self, path: Path) -> None:
        self.where = str(path)

    def begin_migration(self, conn: Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")

    def schema_version(self, conn: Connection) -> int:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])

    def check_before(self, conn: Connection, found: int) -> None:
        pass  # the file was inspected before it was opened

    def referencing_messages(self, conn: Connection) -> list[str]:
        rows = conn.execute(
            "SELECT DISTINCT m.name FROM sqlite_master AS m, pragma_foreign_key_list(m.name) AS f "
            "WHERE m.type = 'table' AND f.\"table\" = 'messages' ORDER BY m.name"
        ).fetchall()
        return [str(row[0]) for row in rows]

    def run_script(self, conn: Connection, text: str) -> None:
        for statement in sqlite_engine.sql_statements(renamed(text)):
            conn.execute(statement)

    def check_after(self, conn: Connection) -> None:
        broken = conn.execute("PRAGMA foreign_key_check").fetchall()
        if broken:
            raise RuntimeError(f"{self.where}: a migration broke {len(broken)} references")

    def record_version(self, conn: Connection, found: int, version: int) -> None:
        if found == 0:
            conn.execute(f"PRAGMA application_id = {sqlite_engine.APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version = {version}")

    def commit(self, conn: Connection) -> None:
        _driver(conn).commit()

    def rollback(self, conn: Connection) -> None:
        _driver(conn).rollback()


def _driver(conn: Connection) -> sqlite3.Connection:
    if not isinstance(conn, sqlite3.Connection):
        raise TypeError(f"not an SQLite connection: {type(conn).__name__}")
    return conn


class RenamedEngine:
    """One SQLite file whose queue tables have other names; its own transactions."""

    # Engine.name is also the folder of a migration line's files: the dialect
    # they are written in. This engine speaks SQLite's (its scheme tells it apart).
    name: Final = "sqlite"
    ops: Final = OPERATIONS
    has_clock: Final = False

    def __init__(self, target: str, *, busy_timeout_ms: int, read_only: bool = False) -> None:
        if not target.startswith(f"{SCHEME}://"):
            raise ValueError(f"not a {SCHEME}:// URL: {target!r}")
        self.target = target
        self.path = Path(target.removeprefix(f"{SCHEME}://"))
        self.where = str(self.path)
        self.busy_timeout_ms = busy_timeout_ms
        self.read_only = read_only
        OPENED.append(target)

    def open_queue(self, connection: Callable[[], Connection], *, create: bool) -> None:
        version = sqlite_engine.inspect(
            self.path, create=create and not self.read_only, busy_timeout_ms=self.busy_timeout_ms
        )
        if version == SCHEMA_VERSION:
            return
        if self.read_only:
            raise needs_migration(self.where, version, SCHEMA_VERSION)
        conn = _driver(connection())
        conn.execute("PRAGMA foreign_keys = OFF")  # migration 4 rebuilds referenced tables
        try:
            migrate(_Schema(self.path), conn, MIGRATIONS)
            conn.execute("PRAGMA journal_mode = WAL")
        except sqlite3.Error as exc:
            raise sqlite_engine.storage_error(exc, self.path) from exc
        finally:
            conn.execute("PRAGMA foreign_keys = ON")

    def connect(self) -> Connection:
        if self.read_only:
            return sqlite_engine.connect_read_only(self.path, busy_timeout_ms=self.busy_timeout_ms)
        return sqlite_engine.connect(self.path, busy_timeout_ms=self.busy_timeout_ms)

    def close(self, conn: Connection, *, quiet: bool = False) -> None:
        sqlite_engine.close(conn, quiet=quiet)

    def begin_write(self, conn: Connection) -> None:
        if self.read_only:
            raise refuse_write(self.where)
        conn.execute("BEGIN IMMEDIATE")

    def begin_read(self, conn: Connection) -> None:
        conn.execute("BEGIN")

    def commit(self, conn: Connection) -> None:
        _driver(conn).commit()

    def rollback(self, conn: Connection) -> None:
        _driver(conn).rollback()

    def savepoint(self, conn: Connection, name: str) -> None:
        conn.execute(f'SAVEPOINT "{name}"')

    def rollback_to(self, conn: Connection, name: str) -> None:
        conn.execute(f'ROLLBACK TO SAVEPOINT "{name}"')

    def release_savepoint(self, conn: Connection, name: str) -> None:
        conn.execute(f'RELEASE SAVEPOINT "{name}"')

    def writer_turn(self, wait_seconds: float) -> AbstractContextManager[None]:
        if self.read_only:
            return contextlib.nullcontext()
        return sqlite_turn.writer_turn(os.path.abspath(self.path), wait_seconds=wait_seconds)

    def storage_error(self, exc: BaseException) -> Any:
        return sqlite_engine.storage_error(exc, self.path) if isinstance(exc, sqlite3.Error) else None

    def caller_sql(self, sql: str) -> str:
        return sqlite_engine.caller_sql(sql)

    def run_script(self, conn: Connection, text: str) -> None:
        for statement in sqlite_engine.sql_statements(renamed(text)):
            conn.execute(statement)

    def install(self, conn: Connection, line: MigrationLine) -> None:
        install_line(self, conn, line)  # the line's statements renamed by run_script

    def together(self, conn: Connection) -> AbstractContextManager[None]:
        return contextlib.nullcontext()


def url(path: Path) -> str:
    """The target of this engine for the SQLite file ``path``."""
    return f"{SCHEME}://{path}"


def file_of(target: str | Path) -> Path:
    """The SQLite file behind a store's target: this engine's URL, or a file's path."""
    text = str(target)
    return Path(text.removeprefix(f"{SCHEME}://"))


register_engine(SCHEME, RenamedEngine)
