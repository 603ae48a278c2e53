"""The queue: ``Store``, one named queue of one database, and the rules it runs by.

A ``Store`` composes a transaction runner (``transactions.Transactions``) and
the queue it opened (``scope.Scope``), and offers the protocol's operations,
grouped by concern in facets that keep no state of their own:
``enqueues.Enqueueing`` (validated batches in), ``claims.Claiming`` (leases
and redrive), ``completion.Completing`` (the fenced completions),
``reads.Reading`` (reports and prune) and ``admin.Administering`` (the
database's queues). ``rules.py`` holds the numbers they live by, and each
engine its statements (``engines/*_queries.sql``, run through
``engines/queries.py``).

One ``Store`` is one named queue (``default`` unless named) of one SQLite
file, or of one PostgreSQL database (``engines/`` holds what differs there).
Each protocol operation is one short write transaction. On SQLite it starts
with ``BEGIN IMMEDIATE`` *before* it reads, so that choosing a message and
taking it are serialised with every other writer; on PostgreSQL it locks the
rows it takes instead.

The store knows no business. Completing a message means: a fenced check, the
*caller's* writes in the same transaction, a re-check, the ACK. Both ways in:

* ``store.complete(lease, handler)``: the store opens the transaction and
  calls ``handler(tx, message)``, which writes its effect through ``tx``;
* ``store.complete_tx(tx, lease)``: inside ``store.transaction()``, after the
  caller's own SQL (as goqite's ``*Tx`` operations and River's
  ``JobCompleteTx`` allow).

Every operation comes in both forms: ``store.claim(...)`` runs its own
transaction (and waits out a busy database), ``store.claim_tx(tx, ...)`` runs
inside the caller's. An optional *probe* (``Store(..., probe=...)``) is told
each named step of each operation, which is how the crash tests stop a real
process at an exact point.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TypeVar

from .admin import Administering
from .claims import Claiming
from .clock import Clock, SystemClock
from .completion import Completing
from .engines import Engine, engine_for
from .enqueues import Enqueueing
from .errors import UnknownQueue
from .queues import DEFAULT_QUEUE, DEFAULT_SETTINGS, QueueSettings, check_queue_name
from .reads import Reading
from .rules import (
    BATCH_OPERATIONS,
    BUSY_RETRY_SECONDS,
    BUSY_TIMEOUT_MS,
    DEFAULT_LEASE_SECONDS,
    HANDLER_ERROR,
    LEASE_EXPIRED,
    MAX_ATTEMPTS,
    MAX_ATTEMPTS_LIMIT,
    MAX_BATCH,
    MAX_LEASE_SECONDS,
    OPERATIONS,
    PROBE_POINTS,
    MessageHandler,
    backoff_seconds,
    lease_deadline,
    refusal,
)
from .scope import Probe, Scope
from .transactions import Transactions, Tx

T = TypeVar("T")

__all__ = [  # what the store's module offers, its own and the rules it runs by
    "BATCH_OPERATIONS",
    "BUSY_RETRY_SECONDS",
    "BUSY_TIMEOUT_MS",
    "DEFAULT_LEASE_SECONDS",
    "HANDLER_ERROR",
    "LEASE_EXPIRED",
    "MAX_ATTEMPTS",
    "MAX_ATTEMPTS_LIMIT",
    "MAX_BATCH",
    "MAX_LEASE_SECONDS",
    "OPERATIONS",
    "PROBE_POINTS",
    "MessageHandler",
    "Probe",
    "Store",
    "Tx",
    "backoff_seconds",
    "lease_deadline",
    "refusal",
]


class Store(Enqueueing, Claiming, Completing, Reading, Administering):
    """A queue in one SQLite file, or in one PostgreSQL database.

    ``path`` is the SQLite file, or a ``postgresql://`` URL.

    A store keeps one connection per thread until ``close()``; use it as
    ``with Store(path) as store:``. A store dropped without ``close()`` keeps
    its connections (and the ``-wal`` file) until Python's garbage collector
    frees them, since an sqlite3 connection refers to itself through its
    statement cache.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        clock: Clock | None = None,
        create: bool = True,
        queue: str = DEFAULT_QUEUE,
        max_attempts: int | None = None,
        busy_timeout_ms: int = BUSY_TIMEOUT_MS,
        busy_retry_seconds: float = BUSY_RETRY_SECONDS,
        probe: Probe | None = None,
    ) -> None:
        """Open (and with ``create``, initialise) the queue database at ``path``.

        ``path`` is an SQLite file, or a ``postgresql://`` URL of a database
        (``pip install queue_core[postgres]``). Without ``create``, a file or
        database with no queue in it is refused (``no_database``).
        A path that is not a queue database is refused without being modified;
        a file of an older schema version is migrated forward in one transaction.

        ``queue`` names the queue this store works on (``create_queue`` makes
        one; ``default`` always exists); its settings are read from the
        database. ``max_attempts`` overrides the queue's own for this store.
        """
        _check_options(path, clock, queue, max_attempts, busy_timeout_ms, busy_retry_seconds)
        # chosen once: the protocol below never asks which engine it runs on
        engine = engine_for(path, busy_timeout_ms=busy_timeout_ms)
        self._open(engine, clock, create, queue, max_attempts, busy_timeout_ms,
                   busy_retry_seconds, probe)

    @classmethod
    def open_read_only(
        cls,
        path: str | Path,
        *,
        clock: Clock | None = None,
        queue: str = DEFAULT_QUEUE,
        busy_timeout_ms: int = BUSY_TIMEOUT_MS,
        busy_retry_seconds: float = BUSY_RETRY_SECONDS,
    ) -> Store:
        """Open an existing queue database for reading only; it writes nothing to it.

        For a database this process may only read (a read-only file, folder or
        file system). Reads work as on any store; a write raises
        ``StorageError`` (``read_only``). A database of an older schema is
        refused (``needs_migration``): migrating is writing.
        """
        _check_options(path, clock, queue, None, busy_timeout_ms, busy_retry_seconds)
        engine = engine_for(path, busy_timeout_ms=busy_timeout_ms, read_only=True)
        store = cls.__new__(cls)
        store._open(engine, clock, False, queue, None, busy_timeout_ms,
                    busy_retry_seconds, None)
        return store

    def _open(
        self,
        engine: Engine,
        clock: Clock | None,
        create: bool,
        queue: str,
        max_attempts: int | None,
        busy_timeout_ms: int,
        busy_retry_seconds: float,
        probe: Probe | None,
    ) -> None:
        """Open ``queue`` on ``engine`` (the arguments already checked)."""
        self.busy_timeout_ms = busy_timeout_ms
        self._runner = Transactions(
            engine,
            clock if clock is not None else SystemClock(),
            # no clock given: the engine's own, where it has one (the server's)
            server_clock=clock is None and engine.has_clock,
            busy_retry_seconds=busy_retry_seconds,
            probe=probe,
            queue=queue,
        )
        self._scope = Scope(queue, DEFAULT_SETTINGS, MAX_ATTEMPTS, probe)  # until the queue is read
        try:
            engine.open_queue(self._runner._thread_connection, create=create)
            # The default queue's row never changes (create_queue refuses other
            # settings): opening it reads nothing, so writes nothing beside the file.
            found = DEFAULT_SETTINGS if queue == DEFAULT_QUEUE else self.queue_settings(queue)
            if found is None:
                raise UnknownQueue(
                    f"no queue {queue!r} in {self.where}; create it first "
                    f"(queue-core create {queue}, or Store.create_queue)"
                )
            self._scope = Scope(
                queue,
                found,
                found.max_attempts if max_attempts is None else max_attempts,
                probe,
            )
        except BaseException:
            self.close()  # a refused target keeps no connection of ours
            raise


    # ----------------------------------------------- the queue and its runner

    @property
    def queue(self) -> str:
        """The name of the queue this store works on."""
        return self._scope.queue

    @property
    def settings(self) -> QueueSettings:
        """The queue's settings, as stored with it."""
        return self._scope.settings

    @property
    def max_attempts(self) -> int:
        """Claims per cycle before dead: the queue's own, unless the store was opened with another."""
        return self._scope.max_attempts

    @property
    def engine(self) -> Engine:
        """The engine the target chose (SQLite or PostgreSQL)."""
        return self._runner.engine

    @property
    def clock(self) -> Clock:
        """The clock the store reads (the engine's own where none was given)."""
        return self._runner.clock

    @property
    def busy_retry_seconds(self) -> float:
        """How long a busy database is waited out, with backoff."""
        return self._runner.busy_retry_seconds

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called."""
        return self._runner.closed

    def close(self) -> None:
        """Close every connection this store opened (call it when no operation runs).

        Everything committed is already durable. Using the store afterwards
        raises ``StorageError`` (``store_closed``).
        """
        self._runner.close()

    def transaction(self) -> AbstractContextManager[Tx]:
        """Begin a write transaction ... ``COMMIT``; roll back on any exception.

        Use it to run ``*_tx`` operations together with your own writes.
        """
        return self._runner.transaction()

    def snapshot(self) -> AbstractContextManager[Tx]:
        """A read transaction: one consistent view of the queue, no write lock."""
        return self._runner.snapshot()

    def read(self, body: Callable[[Tx], T]) -> T:
        """Run ``body(view)`` in one consistent snapshot; wait out a busy database."""
        return self._runner.read(body)

    def write(self, body: Callable[[Tx], T]) -> T:
        """Run ``body(tx)`` in its own write transaction; wait out a busy database.

        ``body`` may run more than once (each time in a fresh transaction) if
        the database stays busy, so it must not have effects outside it.
        """
        return self._runner.write(body)

    def writer_turn(self) -> AbstractContextManager[None]:
        """Hold this thread's turn to write across several transactions (re-entrant)."""
        return self._runner.writer_turn()

    def lease_seconds_for(self, lease_seconds: int | None) -> int:
        """``lease_seconds``, checked; None is the queue's own (30 for ``default``)."""
        return self._scope.lease_seconds_for(lease_seconds)

    def _release_thread_connection(self) -> None:
        """Close this thread's connection now (its thread ends before the store)."""
        self._runner._release_thread_connection()

    @property
    def target(self) -> str | Path:
        """The SQLite file, or the ``postgresql://`` URL: what ``Store()`` was given."""
        return self.engine.target

    @property
    def where(self) -> str:
        """The file, or the URL without its password: what messages name."""
        return self.engine.where

    def __repr__(self) -> str:
        queue = "" if self._scope.queue == DEFAULT_QUEUE else f", queue={self._scope.queue!r}"
        return f"Store({self.where!r}{queue}, clock={self.clock!r})"

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _check_options(
    path: object,
    clock: Clock | None,
    queue: str,
    max_attempts: int | None,
    busy_timeout_ms: int,
    busy_retry_seconds: float,
) -> None:
    """The arguments of ``Store()`` checked, before anything is opened."""
    if not isinstance(path, (str, Path)):
        raise TypeError(
            f"Store() takes a file path (str or Path) or a postgresql:// URL, "
            f"got {type(path).__name__}"
        )
    if clock is not None and not callable(getattr(clock, "now", None)):
        raise TypeError(
            "clock must have a now() method returning seconds, "
            f"got {type(clock).__name__}"
        )
    check_queue_name(queue)
    if max_attempts is not None and (
        isinstance(max_attempts, bool)
        or not isinstance(max_attempts, int)
        or not 1 <= max_attempts <= MAX_ATTEMPTS_LIMIT
    ):
        raise ValueError(
            f"max_attempts must be a whole number 1..{MAX_ATTEMPTS_LIMIT}, "
            f"got {max_attempts!r}"
        )
    if (
        isinstance(busy_timeout_ms, bool)
        or not isinstance(busy_timeout_ms, int)
        or busy_timeout_ms < 0
    ):
        raise ValueError(
            f"busy_timeout_ms must be a whole number of milliseconds, 0 or more, "
            f"got {busy_timeout_ms!r}"
        )
    if (
        isinstance(busy_retry_seconds, bool)
        or not isinstance(busy_retry_seconds, (int, float))
        or not 0 <= busy_retry_seconds < float("inf")
    ):
        raise ValueError(
            "busy_retry_seconds must be a number of seconds, 0 or more, "
            f"got {busy_retry_seconds!r}"
        )
