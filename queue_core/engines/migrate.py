"""Moving a queue's schema forward, written once: the steps every engine's migration takes.

A new database runs every numbered migration of its engine from 1; a
database of version N runs those after N; all in one transaction, under the
schema's lock, so that two clients opening an old database never both
migrate it. Around each core migration, the registered migration lines whose
tables it would break run their own steps (``lines.lines_moving``). What
differs per engine (how the version is kept, how the transaction is locked,
what is checked before the COMMIT) is its ``Schema``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from .base import Connection, schema_too_new
from .lines import REKEYED, core_steps, lines_moving


class Schema(Protocol):
    """What an engine gives the one migration procedure (``migrate``)."""

    @property
    def name(self) -> str: ...

    @property
    def where(self) -> str: ...

    def begin_migration(self, conn: Connection) -> None:
        """Begin the migration's transaction, holding the schema's lock."""
        ...

    def schema_version(self, conn: Connection) -> int:
        """The version the database records (0: no queue yet)."""
        ...

    def check_before(self, conn: Connection, found: int) -> None:
        """Refuse a database that may not be migrated (nothing is changed)."""
        ...

    def referencing_messages(self, conn: Connection) -> list[str]:
        """The tables whose foreign keys reference ``messages``."""
        ...

    def run_script(self, conn: Connection, text: str) -> None:
        """Run every statement of an SQL script inside the open transaction."""
        ...

    def check_after(self, conn: Connection) -> None:
        """Refuse what the migrations left broken, before the COMMIT."""
        ...

    def record_version(self, conn: Connection, found: int, version: int) -> None:
        """Record ``version`` (the database was at ``found``)."""
        ...

    def commit(self, conn: Connection) -> None: ...

    def rollback(self, conn: Connection) -> None: ...


def migrate(schema: Schema, conn: Connection, migrations: Mapping[int, str]) -> int:
    """Create the queue's schema, or move an older one forward: one transaction.

    The version is read again under the schema's lock, since another client
    may have created or migrated the database meanwhile. Returns the version
    found. Anything that fails rolls everything back.
    """
    newest = max(migrations)
    schema.begin_migration(conn)
    try:
        found = schema.schema_version(conn)
        if found > newest:
            raise schema_too_new(schema.where, found, newest)
        schema.check_before(conn, found)
        moving = (
            lines_moving(schema.where, schema.name, schema.referencing_messages(conn), REKEYED)
            if 0 < found < REKEYED
            else []
        )
        for target, text in migrations.items():
            if target <= found:
                continue
            for script in (
                core_steps(moving, schema.name, target, "before"),
                text,
                core_steps(moving, schema.name, target, "after"),
            ):
                if script:
                    schema.run_script(conn, script)
        schema.check_after(conn)
        schema.record_version(conn, found, newest)
        schema.commit(conn)
    except BaseException:
        if conn.in_transaction:
            schema.rollback(conn)
        raise
    return found
