"""The engines behind one interface: a ``Store`` chooses one, once, from its target.

A target is an SQLite file, or a URL whose scheme names its engine:
``postgresql://`` (and ``postgres://``) is PostgreSQL's, and an engine of
your own is registered under its scheme (``register_engine``, or the entry
point group ``queue_core.engines`` of an installed package, found when its
scheme is first used). The registry is here, in the seam; the engines below
it (``sqlite.py``, ``postgres.py``) import nothing from it: what they share
is ``base.py`` (a connection's shape, how a transaction ends),
``operations.py`` (what the protocol asks of their statements),
``queries.py`` (the named-statement file, the default), ``lines.py`` (an
application's migration lines), ``migrate.py`` (the migration's steps) and
``engine.py`` (the ``Engine`` interface). This module hands those names on,
so that ``from queue_core.engines import Engine, MigrationLine`` keeps working.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Final, Protocol

from .base import APPLICATION_ID, BUSY_TIMEOUT_MS, THREADS, Connection, Rows, needs_migration, refuse_write
from .engine import Engine
from .lines import (
    LINES,
    REKEYED,
    MigrationLine,
    core_steps,
    install_line,
    line_is_current,
    lines_moving,
    migration_blocked,
    register_line,
)
from .operations import Operations

__all__ = [  # the seam's own names and those it hands on
    "APPLICATION_ID",
    "BUSY_TIMEOUT_MS",
    "ENTRY_POINTS",
    "LINES",
    "POSTGRES_SCHEMES",
    "REKEYED",
    "THREADS",
    "Connection",
    "Engine",
    "EngineFactory",
    "MigrationLine",
    "Operations",
    "Rows",
    "core_steps",
    "engine_for",
    "install_line",
    "is_postgres_url",
    "line_is_current",
    "lines_moving",
    "migration_blocked",
    "needs_migration",
    "read_only_reason",
    "refuse_write",
    "register_engine",
    "register_line",
    "scheme_of",
]

POSTGRES_SCHEMES: Final = ("postgresql", "postgres")
# An installed package offers an engine as an entry point of this group, named
# after its scheme: ``myengine = mypackage.engine:MyEngine``.
ENTRY_POINTS: Final = "queue_core.engines"
_SCHEME: Final = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


class EngineFactory(Protocol):
    """What makes an engine for a target: an engine's class, or any callable like it."""

    def __call__(self, target: str, *, busy_timeout_ms: int, read_only: bool = False) -> Engine: ...


# The engines that ship with queue_core, by scheme: imported when first used
# (psycopg is imported only when a PostgreSQL URL is opened).
_SHIPPED: Final = {scheme: ("queue_core.engines.postgres", "PostgresEngine") for scheme in POSTGRES_SCHEMES}
_REGISTERED: Final[dict[str, EngineFactory]] = {}


def register_engine(scheme: str, factory: EngineFactory) -> None:
    """Make ``scheme://...`` targets open with ``factory(target, busy_timeout_ms=..., read_only=...)``.

    Registering the same factory again changes nothing; another one under a
    scheme already taken is refused (``ValueError``).
    """
    if not _SCHEME.fullmatch(f"{scheme}://"):
        raise ValueError(f"not a URL scheme: {scheme!r}")
    scheme = scheme.lower()
    if scheme in _SHIPPED or _REGISTERED.setdefault(scheme, factory) is not factory:
        raise ValueError(f"the scheme {scheme} already has an engine")


def scheme_of(target: object) -> str | None:
    """The scheme of a URL target (``postgresql``), lower-cased; None for a file."""
    if not isinstance(target, str):
        return None
    found = _SCHEME.match(target)
    return None if found is None else found.group(1).lower()


def is_postgres_url(target: object) -> bool:
    """Whether ``target`` names a PostgreSQL database rather than an SQLite file."""
    return scheme_of(target) in POSTGRES_SCHEMES


def _factory(scheme: str) -> EngineFactory | None:
    """The registered engine of ``scheme``: shipped, registered, or an installed entry point."""
    found = _REGISTERED.get(scheme)
    if found is not None:
        return found
    if scheme in _SHIPPED:
        module, name = _SHIPPED[scheme]
        factory: EngineFactory = getattr(importlib.import_module(module), name)
        return factory
    from importlib import metadata  # only for a scheme not shipped nor registered

    for entry in metadata.entry_points(group=ENTRY_POINTS, name=scheme):
        loaded: EngineFactory = entry.load()
        register_engine(scheme, loaded)
        return loaded
    return None


def engine_for(
    target: str | Path, *, busy_timeout_ms: int, read_only: bool = False
) -> Engine:
    """The engine for ``target``: a URL's registered engine, or an SQLite file.

    A string whose scheme no engine has is a file's name, as it always was.
    With ``read_only`` it never writes: no creation, no migration, and a write
    transaction is refused (``read_only``).
    """
    scheme = scheme_of(target)
    factory = None if scheme is None else _factory(scheme)
    if factory is not None:
        return factory(str(target), busy_timeout_ms=busy_timeout_ms, read_only=read_only)
    from .sqlite import SQLiteEngine  # imported when first used, as every engine

    return SQLiteEngine(Path(target), busy_timeout_ms=busy_timeout_ms, read_only=read_only)


def read_only_reason(target: str | Path) -> str | None:
    """Why this process may only read ``target``, or None when it may write (or cannot tell).

    Answered for an SQLite file from its permissions and its file system's;
    a database behind a URL is not looked at (None).
    """
    scheme = scheme_of(target)
    if scheme is not None and _factory(scheme) is not None:
        return None
    from .sqlite import read_only_reason as file_reason

    return file_reason(Path(target))
