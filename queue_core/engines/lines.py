"""An application's own tables beside the queue: migration lines, as River's.

A ``MigrationLine`` names the tables an application owns and, per engine, a
folder of numbered files of its own; an engine installs it inside the
caller's transaction (``install_line``) and records its version in the core
table ``migration_lines``. The queue's own migrations never name a line's
tables: a table that a core migration would break is moved by its line's own
step (``core_0004_before.sql`` / ``core_0004_after.sql``), run only for a
registered line (``register_line``), or the migration is refused.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Final, Protocol

from ..errors import StorageError, WrongPath
from .base import Connection
from .operations import Operations


class Installs(Protocol):
    """What installing a line asks of an engine."""

    @property
    def name(self) -> str: ...

    @property
    def where(self) -> str: ...

    @property
    def ops(self) -> Operations: ...

    def run_script(self, conn: Connection, text: str) -> None: ...


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


def install_line(engine: Installs, conn: Connection, line: MigrationLine) -> None:
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


def line_is_current(engine: Installs, conn: Connection, line: MigrationLine) -> bool:
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
