"""The queue's protocol: every transaction over ``messages`` lives here.

One ``Store`` is one queue: one SQLite file, or one PostgreSQL database
(``engine_postgres.py`` holds what differs there). Each protocol operation is
one short write transaction. On SQLite it starts with ``BEGIN IMMEDIATE``
*before* it reads, so that choosing a message and taking it are serialised
with every other writer; on PostgreSQL it locks the rows it takes instead.

The store knows no business. Completing a message means: a fenced check, the
*caller's* writes in the same transaction, a re-check, the ACK. Both ways in:

* ``store.complete(lease, handler)``: the store opens the transaction and
  calls ``handler(tx, message)``, which writes its effect through ``tx``;
* ``store.complete_tx(tx, lease)``: inside ``store.transaction()``, after the
  caller's own SQL (as goqite's ``*Tx`` operations and River's
  ``JobCompleteTx`` allow).

Every operation comes in both forms: ``store.claim(...)`` runs its own
transaction (and waits out a busy database), ``store.claim_tx(tx, ...)`` runs
inside the caller's.

Files, connections and error codes are ``database.py``'s; an optional
*probe* (``Store(..., probe=...)``) is told each named step of each operation,
which is how the crash tests stop a real process at an exact point.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import random
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Final, NoReturn, Protocol, TypeVar

from . import database, engine_postgres, turn
from .clock import Clock, SystemClock
from .envelope import Batch, parse_batch
from .heartbeat import Heartbeat
from .values import (
    STATES,
    Completion,
    EnqueueResult,
    Latency,
    Lease,
    Message,
    Metrics,
    Outcome,
    Pruned,
    Snapshot,
)
from .errors import (
    BatchRejected,
    HandlerFailure,
    LeaseLost,
    NoThreads,
    NotDead,
    PermanentFailure,
    StorageError,
    UnknownEvent,
)

DEFAULT_LEASE_SECONDS: Final = 30
# a year; keeps now + lease far inside SQLite's 64-bit integers
MAX_LEASE_SECONDS: Final = 365 * 86_400
# claims per cycle, whether they ended in a failure or a silent death
MAX_ATTEMPTS: Final = 3
BUSY_TIMEOUT_MS: Final = 2_000  # SQLite's own wait for the write lock, per attempt
# then we back off and retry until this much time has passed
BUSY_RETRY_SECONDS: Final = 60.0
# last_error of a message whose last lease ran out
LEASE_EXPIRED: Final = "lease_expired"
# last_error of a handler that raised something unexpected
HANDLER_ERROR: Final = "handler_error"
# Errors after which a connection is kept; after any other, it is closed and reopened.
_CONNECTION_STAYS_USABLE: Final = frozenset({"database_busy", "constraint_violation"})

# The named steps of each write operation, where a probe is called.
_COMMON_STEPS = ("after_begin", "after_read", "before_commit", "after_commit")
_EXTRA_STEPS = {
    "enqueue": ("after_insert",),
    "claim": ("after_expire", "after_update"),
    "complete": ("after_effect", "after_recheck", "after_update"),
    "fail": ("after_update",),
    "redrive": ("after_update",),
    "extend": ("after_update",),
}
# The batched path's transactions reach their messages' steps (claim.*,
# complete.*) once per message, and these of their own.
_BATCH_STEPS = ("after_begin", "before_commit", "after_commit")
BATCH_OPERATIONS: Final = ("claim_many", "complete_many")
OPERATIONS: Final = tuple(_EXTRA_STEPS) + BATCH_OPERATIONS
PROBE_POINTS: Final = frozenset(
    [f"{op}.{step}" for op in _EXTRA_STEPS for step in _COMMON_STEPS + _EXTRA_STEPS[op]]
    + [f"{op}.{step}" for op in BATCH_OPERATIONS for step in _BATCH_STEPS]
)
MAX_BATCH: Final = 1_000  # messages per batched transaction

T = TypeVar("T")
Probe = Callable[[str], None]  # told each point of PROBE_POINTS as it is reached


def backoff_seconds(attempt: int) -> int:
    """Delay after a temporary failure of ``attempt``: 1 s, 2 s, 4 s..."""
    return int(2 ** (attempt - 1))


class Tx:
    """An open transaction on one connection: run your SQL in it with ``execute``."""

    def __init__(
        self, conn: sqlite3.Connection, clock: Clock, *, server_clock: bool = False
    ) -> None:
        self.conn = conn
        self.clock = clock
        self.engine: str = getattr(conn, "engine", "sqlite")  # "sqlite" or "postgresql"
        self._server_clock = server_clock

    def now(self) -> int:
        """Read the clock again, in whole seconds rounded down.

        A long handler may have let time pass since the transaction began.
        """
        # PostgreSQL with the system clock: the server's, one clock for every host
        if self._server_clock:
            return int(self.conn.server_now())  # type: ignore[attr-defined]
        return self.clock.now()

    def instant(self) -> float:
        """Read the clock again with its fraction.

        A clock without ``time()`` ticks in whole seconds.
        """
        if self._server_clock:
            return float(self.conn.server_time())  # type: ignore[attr-defined]
        reading = getattr(self.clock, "time", None)
        return float(reading()) if callable(reading) else float(self.clock.now())

    def execute(
        self, sql: str, params: Iterable[Any] | Mapping[str, Any] = ()
    ) -> sqlite3.Cursor:
        """Run one statement with bound parameters inside this transaction."""
        return self.conn.execute(sql, params)  # type: ignore[arg-type]


class Handler(Protocol):
    """Writes one message's effect through ``tx``, inside the completion's transaction.

    Raise ``PermanentFailure`` (dead at once) or ``TemporaryFailure`` (retry
    after a backoff) to refuse the payload; whatever the handler wrote is then
    rolled back, and so it is if it raises anything else (recorded as
    ``handler_error``). The return value is ignored.
    """

    def __call__(self, tx: Tx, message: Message) -> object: ...


class Store:
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
        max_attempts: int = MAX_ATTEMPTS,
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
        """
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
        if (
            isinstance(max_attempts, bool)
            or not isinstance(max_attempts, int)
            or max_attempts < 1
        ):
            raise ValueError(
                f"max_attempts must be an integer of at least 1, got {max_attempts!r}"
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
        # "postgresql://..." selects PostgreSQL (engine_postgres.py); anything
        # else is an SQLite file.
        self.url: str | None = str(path) if engine_postgres.is_url(path) else None
        self.engine = "postgresql" if self.url else "sqlite"
        self.path = Path(path) if self.url is None else Path(".")
        self._where = engine_postgres.safe_url(self.url) if self.url else str(self.path)
        self._server_clock = self.url is not None and clock is None
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.max_attempts = max_attempts
        self.busy_timeout_ms = busy_timeout_ms
        self.busy_retry_seconds = busy_retry_seconds
        self._probe = probe
        # One connection per thread, kept for the store's life: closing the
        # last connection to a WAL file checkpoints and deletes the WAL, which
        # per transaction costs several fsyncs (see the performance page).
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._registry = threading.Lock()
        self._pid = os.getpid()
        self._closed = False
        if self.url is not None:
            conn = self._thread_connection()
            try:
                engine_postgres.open_queue(
                    conn,  # type: ignore[arg-type]
                    create=create,
                    known_version=database.SCHEMA_VERSION,
                    where=self._where,
                )
            except BaseException:
                self.close()  # a refused database keeps no connection of ours
                raise
            return
        version = database.inspect(
            self.path, create=create, busy_timeout_ms=busy_timeout_ms
        )
        if version < database.SCHEMA_VERSION:
            with self._connection() as conn:
                database.prepare(conn, self.path)
                # a migration: the new version into the file itself, not only the WAL
                if version > 0:
                    database.checkpoint(conn)

    def __repr__(self) -> str:
        return f"Store({self._where!r}, clock={self.clock!r})"

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every connection this store opened (call it when no operation runs).

        Everything committed is already durable; a failure while closing (the
        final WAL checkpoint on a full disk) does not undo it and is not raised.
        Using the store afterwards raises ``StorageError`` (``store_closed``).
        """
        with self._registry:
            self._closed = True
            connections, self._connections = self._connections, []
        for conn in connections:
            database.close(conn, quiet=True)
        self._local = threading.local()

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called."""
        return self._closed

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        """This thread's connection for one transaction; a temporary one when nested.

        A call made while this thread's connection is inside a transaction
        (e.g. ``status()`` inside ``with store.transaction()``) gets its own
        short-lived connection, as it would from another client.
        """
        if (
            getattr(self._local, "in_use", False)
            and not self._closed
            and os.getpid() == self._pid
        ):
            extra = self._open()
            try:
                yield extra
            finally:
                database.close(extra, quiet=True)
            return
        conn = self._thread_connection()
        self._local.in_use = True
        try:
            yield conn
        except StorageError as exc:
            self._discard_unless_usable(conn, exc)
            raise
        finally:
            self._local.in_use = False

    def _thread_connection(self) -> sqlite3.Connection:
        """This thread's connection, opened on first use and kept until ``close()``."""
        if self._closed:
            raise StorageError(
                f"{self._where}: this store was closed", code="store_closed"
            )
        # a forked child must not touch its parent's connections
        if os.getpid() != self._pid:
            with self._registry:
                self._pid, self._connections, self._local = (
                    os.getpid(),
                    [],
                    threading.local(),
                )
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._open(check_same_thread=False)
            with self._registry:
                self._connections.append(conn)
            self._local.conn = conn
        return conn

    def _release_thread_connection(self) -> None:
        """Close this thread's connection now (its thread ends before the store)."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            return
        self._local.conn = None
        with self._registry:
            if conn in self._connections:
                self._connections.remove(conn)
        database.close(conn, quiet=True)

    def _open(self, *, check_same_thread: bool = True) -> sqlite3.Connection:
        if self.url is not None:
            postgres = engine_postgres.Connection(
                self.url, busy_timeout_ms=self.busy_timeout_ms
            )
            return postgres  # type: ignore[return-value]
        return database.connect(
            self.path,
            busy_timeout_ms=self.busy_timeout_ms,
            check_same_thread=check_same_thread,
        )

    def writer_turn(self) -> AbstractContextManager[None]:
        """Hold this thread's turn to write across several transactions (re-entrant).

        Every write transaction first waits for its turn (``turn.py``: an OS
        lock beside the database on which waiting processes queue fairly,
        instead of SQLite's sleep-and-poll). The worker loop holds one turn
        for a claim and its completion, so that two processes trade places
        once per message, not twice.
        """
        if self.url is not None:
            # PostgreSQL locks rows, not the database: no turns
            return contextlib.nullcontext()
        return turn.writer_turn(self.path, wait_seconds=self.busy_retry_seconds)

    def _discard_unless_usable(
        self, conn: sqlite3.Connection, exc: StorageError
    ) -> None:
        if exc.code not in _CONNECTION_STAYS_USABLE:
            self._discard(conn)  # after an I/O error or a full disk, start afresh

    def _discard(self, conn: sqlite3.Connection) -> None:
        with self._registry:
            if conn in self._connections:
                self._connections.remove(conn)
        if getattr(self._local, "conn", None) is conn:
            self._local.conn = None
        database.close(conn, quiet=True)

    def _at(self, point: str) -> None:
        if self._probe is not None:
            self._probe(point)

    # ----------------------------------------------------------- transactions

    @contextmanager
    def transaction(self) -> Iterator[Tx]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT``; roll back on any exception.

        Use it to run ``*_tx`` operations together with your own writes.
        """
        with self._transaction(None) as tx:
            yield tx

    @contextmanager
    def _transaction(self, operation: str | None) -> Iterator[Tx]:
        # The with-block form of _write_once (same steps), for transaction()
        # and nested calls.
        probed = operation is not None and self._probe is not None
        with self._connection() as conn, self.writer_turn():
            try:
                self._begin(conn, operation if probed else None)
                yield Tx(conn, self.clock, server_clock=self._server_clock)
                self._commit(conn, operation if probed else None)
            except BaseException as exc:
                self._roll_back(conn, exc)
            if probed:
                self._at(f"{operation}.after_commit")

    def _begin(self, conn: sqlite3.Connection, probed_operation: str | None) -> None:
        # IMMEDIATE: the write lock before the first read, so that what a
        # transaction reads cannot change before it writes.
        # (PostgreSQL has no database write lock: its transactions lock the
        # rows they take.)
        conn.execute("BEGIN" if self.url is not None else "BEGIN IMMEDIATE")
        if probed_operation:
            self._at(f"{probed_operation}.after_begin")

    def _commit(self, conn: sqlite3.Connection, probed_operation: str | None) -> None:
        if probed_operation:
            self._at(f"{probed_operation}.before_commit")
        conn.execute("COMMIT")

    def _roll_back(self, conn: sqlite3.Connection, exc: BaseException) -> NoReturn:
        """Undo the open transaction after ``exc`` and raise it.

        An sqlite3 error is raised as its ``StorageError``.
        """
        if conn.in_transaction:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # the connection is discarded, which rolls back as well
        if isinstance(exc, sqlite3.Error):
            raise database.storage_error(exc, self.path) from exc
        raise exc

    @contextmanager
    def snapshot(self) -> Iterator[Tx]:
        """A read transaction: one consistent view of the file, no write lock."""
        with self._connection() as conn:
            try:
                try:
                    # PostgreSQL: one snapshot for all of the body's statements,
                    # like a WAL read on SQLite.
                    conn.execute(
                        "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
                        if self.url
                        else "BEGIN"
                    )
                    yield Tx(conn, self.clock, server_clock=self._server_clock)
                finally:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
            except sqlite3.Error as exc:
                raise database.storage_error(exc, self.path) from exc

    def read(self, body: Callable[[Tx], T]) -> T:
        """Run ``body(view)`` in one consistent snapshot; wait out a busy database.

        :param body: reads through ``view.execute``; its return value is returned.
        """

        def once() -> T:
            with self.snapshot() as view:
                return body(view)

        return self._retry_busy(once)

    def write(self, body: Callable[[Tx], T]) -> T:
        """Run ``body(tx)`` in its own write transaction; wait out a busy database.

        ``body`` may run more than once (each time in a fresh transaction) if
        the database stays busy past SQLite's own timeout, so it must not have
        effects outside the transaction.

        :param body: writes through ``tx.execute``; its return value is returned.
        :raises StorageError: ``database_busy`` after ``busy_retry_seconds``, or
            another storage code.
        """
        return self._write(None, body)

    def _write(self, operation: str | None, body: Callable[[Tx], T]) -> T:
        return self._retry_busy(lambda: self._write_once(operation, body))

    def _write_once(self, operation: str | None, body: Callable[[Tx], T]) -> T:
        """One write transaction: ``_begin``, ``body(tx)``, ``COMMIT``.

        Any exception rolls back.

        The store's own operations come here; ``transaction()`` does the same
        for a caller's with-block. Written out rather than built from context
        managers: this is the hot path (they cost a fifth of a message's time).
        """
        # nested, e.g. status() inside store.transaction()
        if getattr(self._local, "in_use", False):
            with self._transaction(operation) as tx:
                return body(tx)
        probed = operation is not None and self._probe is not None
        conn = self._thread_connection()
        self._local.in_use = True
        try:
            with self.writer_turn():
                try:
                    self._begin(conn, operation if probed else None)
                    result = body(Tx(conn, self.clock, server_clock=self._server_clock))
                    self._commit(conn, operation if probed else None)
                except BaseException as exc:
                    self._roll_back(conn, exc)
                if probed:
                    self._at(f"{operation}.after_commit")
                return result
        except StorageError as exc:
            self._discard_unless_usable(conn, exc)
            raise
        finally:
            self._local.in_use = False

    def _retry_busy(self, attempt: Callable[[], T]) -> T:
        # SQLite's busy handler sleeps and polls, which is unfair under
        # contention, so after its timeout we back off with jitter and retry.
        deadline = time.monotonic() + self.busy_retry_seconds
        pause = 0.005
        while True:
            try:
                return attempt()
            except StorageError as exc:
                if exc.code != "database_busy" or time.monotonic() >= deadline:
                    raise
            time.sleep(random.uniform(pause / 2, pause))
            pause = min(pause * 2, 0.25)

    # --------------------------------------------------------------- enqueue

    def enqueue(self, data: bytes | str | Batch) -> EnqueueResult:
        """Validate a whole JSONL batch, then store its new events in one transaction.

        :param data: JSONL text or bytes, one ``{"event_id": ..., "payload": {...}}``
            per line, or a ``Batch`` from ``parse_batch``.
        :returns: how many events were new and how many were duplicates.
        :raises BatchRejected: on the first bad line (its number and code); nothing
            is written.
        """
        if isinstance(data, Batch):
            batch = data
        elif isinstance(data, (str, bytes, bytearray)):
            batch = parse_batch(
                data.encode("utf-8") if isinstance(data, str) else bytes(data)
            )
        else:
            raise TypeError(
                "enqueue takes JSONL text (str or bytes) or a parsed Batch, "
                f"got {type(data).__name__}; "
                'one event is one line: \'{"event_id": "E0001", "payload": {...}}\''
            )
        return self._write("enqueue", lambda tx: self.enqueue_tx(tx, batch))

    def enqueue_tx(self, tx: Tx, batch: Batch) -> EnqueueResult:
        """Store a validated batch inside the caller's transaction.

        A stored event with the same canonical payload is a duplicate; with a
        different one it is a conflict that rejects the whole batch.
        """
        if not isinstance(batch, Batch):
            raise TypeError(
                "enqueue_tx takes a Batch from parse_batch(), "
                f"got {type(batch).__name__}"
            )
        now = tx.now()
        # One read for the whole batch, then one INSERT statement for its new events.
        ids = [event.event_id for event in batch.events]
        if tx.engine == "postgresql":
            # No database write lock there: enqueues take turns on an advisory
            # lock, so that a duplicate or a conflict is decided as on SQLite.
            tx.execute(
                "SELECT pg_advisory_xact_lock(?)", (database.APPLICATION_ID + 1,)
            )
            found = tx.execute(
                "SELECT event_id, payload, payload_sha256 FROM messages "
                "WHERE event_id = ANY(?)",
                (ids,),
            )
        else:
            found = tx.execute(
                "SELECT event_id, payload, payload_sha256 FROM messages "
                "WHERE event_id IN (SELECT value FROM json_each(?))",
                (json.dumps(ids),),
            )
        stored: dict[str, str] = {}
        # event_id -> SHA-256 of the canonical payload prune removed
        pruned: dict[str, str] = {}
        for event_id, payload, digest in found.fetchall():
            if digest is None:
                stored[event_id] = payload
            else:
                pruned[event_id] = digest
        self._at("enqueue.after_read")
        new: list[tuple[str, str, int, int]] = []
        duplicates = batch.duplicates_in_batch
        # in batch order: a conflict names the first line at fault
        for event in batch.events:
            payload = stored.get(event.event_id)
            if payload is None and event.event_id in pruned:
                # Pruned: the same canonical payload has the same hash, another
                # one (all but surely) not.
                payload = (
                    event.payload
                    if payload_digest(event.payload) == pruned[event.event_id]
                    else ""
                )
            if payload is None:
                new.append((event.event_id, event.payload, now, now))
            elif payload == event.payload:
                duplicates += 1
            else:
                raise BatchRejected(
                    "event_conflict",
                    f"{event.event_id} is already stored with a different payload; "
                    "a fix needs a new event id",
                    event.line,
                )
        if new:
            # Rows of many VALUES per statement: per-row statement steps cost
            # more than the CHECKs themselves (see scripts/bench.py's enqueue row).
            for start in range(0, len(new), _INSERT_ROWS):
                chunk = new[start : start + _INSERT_ROWS]
                tx.execute(
                    "INSERT INTO messages"
                    " (event_id, payload, state, available_at, enqueued_at) VALUES "
                    + ", ".join(["(?, ?, 'ready', ?, ?)"] * len(chunk)),
                    [value for row in chunk for value in row],
                )
            self._at("enqueue.after_insert")
        return EnqueueResult(accepted=len(new), duplicates=duplicates)

    # ----------------------------------------------------------------- claim

    def claim(self, lease_seconds: int = DEFAULT_LEASE_SECONDS) -> Lease | None:
        """Lease the next available message, or return None if there is none now.

        :param lease_seconds: how long the lease lasts; complete before
            ``lease.lease_until``.
        :returns: the lease (event id, generation, attempt, deadline), or ``None``.
        """
        _check_lease_seconds(lease_seconds)
        return self._write("claim", lambda tx: self.claim_tx(tx, lease_seconds))

    def claim_tx(
        self, tx: Tx, lease_seconds: int = DEFAULT_LEASE_SECONDS
    ) -> Lease | None:
        """Choose and lease a message inside the caller's ``BEGIN IMMEDIATE``.

        A ready message whose ``available_at`` has come, or a leased one whose
        lease has expired (applied lazily here; there is no sweeper). Order:
        ``available_at, event_id``. A message whose last allowed claim expired
        goes to dead instead, and the search goes on.
        """
        _check_lease_seconds(lease_seconds)
        leases = self._claim_up_to(tx, 1, lease_seconds, tx.instant())
        return leases[0] if leases else None

    def _claim_up_to(
        self, tx: Tx, count: int, lease_seconds: int, instant: float
    ) -> list[Lease]:
        """Lease the next ``count`` claimable messages, in claim order.

        It leases what ``count`` claims would lease.
        One read finds the candidates. A candidate whose last allowed lease
        ran out goes to dead (a silent death spent the budget), and the search
        goes on past it. ``instant`` is the clock's reading: what has come is
        decided on it rounded down, a new lease counts from it rounded up.
        """
        now, lease_until = math.floor(instant), lease_deadline(instant, lease_seconds)
        leases: list[Lease] = []
        while len(leases) < count:
            rows = tx.execute(
                """
                SELECT event_id, attempts, generation, lease_until FROM messages
                WHERE state IN ('ready', 'leased')
                  AND available_at <= :now
                  AND (state = 'ready' OR lease_until <= :now)
                ORDER BY available_at, event_id
                LIMIT :wanted
                """ + _ROW_LOCK[tx.engine]["claim"],
                {"now": now, "wanted": count - len(leases)},
            ).fetchall()
            self._at("claim.after_read")
            if not rows:
                break
            for event_id, attempts, generation, expired_at in rows:
                # a leased candidate: its lease ran out
                expired = int(expired_at is not None)
                if attempts >= self.max_attempts:
                    tx.execute(
                        "UPDATE messages SET state = 'dead', lease_until = NULL, "
                        "last_error = ?, last_detail = ?, "
                        "expired_leases = expired_leases + 1 WHERE event_id = ?",
                        (
                            LEASE_EXPIRED,
                            f"the lease of claim {attempts} of {self.max_attempts} "
                            f"ended at {expired_at} with no completion",
                            event_id,
                        ),
                    )
                    self._at("claim.after_expire")
                    continue
                lease = Lease(event_id, generation + 1, attempts + 1, lease_until)
                tx.execute(
                    """
                    UPDATE messages
                    SET state = 'leased', attempts = ?, generation = ?, lease_until = ?,
                        expired_leases = expired_leases + ?
                    WHERE event_id = ?
                    """,
                    (
                        lease.attempt,
                        lease.generation,
                        lease.lease_until,
                        expired,
                        event_id,
                    ),
                )
                self._at("claim.after_update")
                leases.append(lease)
        return leases

    # -------------------------------------------------------------- complete

    def complete(self, lease: Lease, handler: Handler) -> Completion:
        """Effect + ACK in one transaction: the heart of the protocol.

        Checks the lease, reads the message *from the database*, calls
        ``handler(tx, message)`` to write the effect in this transaction,
        re-checks the lease and marks the message done. If the handler refuses
        the payload (or raises), its writes are rolled back and the message
        moves to retry or dead instead. Raises ``LeaseLost`` if fencing
        refuses; everything the handler wrote is rolled back with it.

        :param lease: what ``claim`` returned.
        :param handler: ``handler(tx, message)`` writes the effect through ``tx``;
            it refuses a payload by raising ``PermanentFailure`` or
            ``TemporaryFailure``.
        :returns: the outcome: ``DONE``, ``RETRY`` (with ``available_at``) or ``DEAD``.
        :raises LeaseLost: the lease is no longer the message's current, unexpired
            lease.
        """
        _check_lease(lease)
        if not callable(handler):
            raise TypeError(
                "handler must be callable as handler(tx, message), "
                f"got {type(handler).__name__}"
            )
        return self._write(
            "complete", lambda tx: self._complete_with(tx, lease, handler)
        )

    def _complete_with(self, tx: Tx, lease: Lease, handler: Handler) -> Completion:
        # One savepoint holds this message's effect and ACK: a refusing
        # handler's partial writes are undone while the refusal is still
        # recorded in this transaction, and a lost lease undoes this message
        # only (complete_many goes on with the next one).
        tx.execute("SAVEPOINT message")
        try:
            message = self.leased_tx(tx, lease)
            self._at("complete.after_read")
            try:
                handler(tx, message)
            except Exception as exc:
                if not tx.conn.in_transaction:
                    # SQLite itself ended the transaction (e.g. a full disk):
                    # nothing is left to record the refusal in
                    raise
                # undo the handler's writes; the read before them wrote nothing
                tx.execute("ROLLBACK TO message")
                code, detail, permanent = refusal(exc)
                result = self._refuse(tx, lease, code, detail, permanent=permanent)
            else:
                self._at("complete.after_effect")
                result = self.complete_tx(tx, lease)
        except LeaseLost:
            if tx.conn.in_transaction:
                tx.execute("ROLLBACK TO message")
                tx.execute("RELEASE message")
            raise
        tx.execute("RELEASE message")
        return result

    def leased_tx(self, tx: Tx, lease: Lease) -> Message:
        """The message if ``lease`` is its current, unexpired lease, else ``LeaseLost``.

        The fenced check that opens a completion: the payload comes from here,
        from the database, never from the caller.
        """
        _check_lease(lease)
        message = _fetch_message(tx, lease.event_id, lock=True)
        now = tx.now()
        if message is None:
            raise LeaseLost(f"{lease.event_id} is not in the queue")
        if message.generation != lease.generation:
            raise LeaseLost(
                f"{lease.event_id}: generation {lease.generation} is stale; "
                f"the message was claimed again (generation {message.generation})"
            )
        if message.state != "leased" or message.lease_until is None:
            raise LeaseLost(f"{lease.event_id} is {message.state}, not leased")
        if not now < message.lease_until:
            raise LeaseLost(
                f"{lease.event_id}: the lease ended at {message.lease_until} "
                f"(now {now})"
            )
        return message

    def complete_tx(self, tx: Tx, lease: Lease) -> Completion:
        """The ACK inside the caller's transaction, after the caller's own writes.

        Re-checks the lease (the work may have taken long) and marks the
        message done. If fencing refuses it raises ``LeaseLost``; let it
        escape ``store.transaction()`` so your writes roll back with it.
        """
        _check_lease(lease)
        now = tx.now()
        if not now < lease.lease_until:
            # the lease ran out during the work: raises LeaseLost saying so
            self.leased_tx(tx, lease)
        self._at("complete.after_recheck")
        # The fence and the ACK in one statement: the row changes only while
        # this lease is its current, unexpired lease.
        acked = tx.execute(
            "UPDATE messages SET state = 'done', lease_until = NULL, done_at = ? "
            "WHERE event_id = ? AND generation = ? "
            "AND state = 'leased' AND lease_until > ?",
            (now, lease.event_id, lease.generation, now),
        ).rowcount
        if acked != 1:
            self.leased_tx(tx, lease)  # raises LeaseLost with the reason
            raise LeaseLost(
                f"{lease.event_id}: generation {lease.generation} "
                "is no longer the current lease"
            )
        self._at("complete.after_update")
        return Completion(lease.event_id, Outcome.DONE)

    # ------------------------------------------------------------- batches

    def claim_many(
        self, count: int, lease_seconds: int = DEFAULT_LEASE_SECONDS
    ) -> list[Lease]:
        """Lease up to ``count`` available messages in one transaction (batched).

        Each lease is the one ``claim`` would have given, with its own
        generation; they only share one commit. Empty if nothing is available.

        :param count: at most this many leases (1..``MAX_BATCH``).
        :param lease_seconds: how long each lease lasts; it must cover the whole
            batch's work.
        """
        _check_count(count)
        _check_lease_seconds(lease_seconds)
        return self._write(
            "claim_many", lambda tx: self.claim_many_tx(tx, count, lease_seconds)
        )

    def claim_many_tx(
        self, tx: Tx, count: int, lease_seconds: int = DEFAULT_LEASE_SECONDS
    ) -> list[Lease]:
        """``claim_many`` inside the caller's transaction."""
        _check_count(count)
        _check_lease_seconds(lease_seconds)
        return self._claim_up_to(tx, count, lease_seconds, tx.instant())

    def complete_many(
        self, leases: Iterable[Lease], handler: Handler
    ) -> list[Completion]:
        """Complete several leased messages in one transaction.

        Each message has its own effect and ACK.

        Every message runs exactly as in ``complete`` (fenced check, the
        handler's writes, re-check, ACK), inside a savepoint of its own: its
        effect and its ACK are kept or undone together. A lease lost for one
        message undoes only that message and is reported as
        ``Outcome.LEASE_LOST`` instead of raised, so the others still commit.

        :param leases: what ``claim_many`` returned (at most ``MAX_BATCH``).
        :param handler: as for ``complete``.
        :returns: one completion per lease, in the order given.
        """
        batch = list(leases)
        for lease in batch:
            _check_lease(lease)
        if len(batch) > MAX_BATCH:
            raise ValueError(
                f"complete_many takes at most {MAX_BATCH} leases, got {len(batch)}"
            )
        if not callable(handler):
            raise TypeError(
                "handler must be callable as handler(tx, message), "
                f"got {type(handler).__name__}"
            )
        return self._write(
            "complete_many", lambda tx: self.complete_many_tx(tx, batch, handler)
        )

    def complete_many_tx(
        self, tx: Tx, leases: Iterable[Lease], handler: Handler
    ) -> list[Completion]:
        """``complete_many`` inside the caller's transaction."""
        results: list[Completion] = []
        for lease in leases:
            try:
                # undoes its own message on LeaseLost
                results.append(self._complete_with(tx, lease, handler))
            except LeaseLost as lost:
                results.append(
                    Completion(
                        lease.event_id,
                        Outcome.LEASE_LOST,
                        LeaseLost.code,
                        detail=lost.message,
                    )
                )
        return results

    # ---------------------------------------------------------------- extend

    def extend(self, lease: Lease, lease_seconds: int = DEFAULT_LEASE_SECONDS) -> Lease:
        """Heartbeat: the same lease, now ending ``lease_seconds`` from now.

        It is fenced like a completion.

        Only the message's current, unexpired lease can be extended: a stale
        generation, an expired lease (it cannot be revived) or a finished
        message raises ``LeaseLost`` and changes nothing. The generation and
        the attempt stay: an extension spends no attempt. Like SQS's
        ChangeMessageVisibility, the new deadline counts from now, so it may
        also shorten a lease.

        :param lease: the current lease (what ``claim`` or an earlier ``extend``
            returned).
        :param lease_seconds: the lease then ends this many seconds from now.
        :returns: the lease with its new ``lease_until``; complete with it (or with
            the old one).
        :raises LeaseLost: the lease is no longer the message's current, unexpired
            lease.
        """
        _check_lease(lease)
        _check_lease_seconds(lease_seconds)
        return self._write(
            "extend", lambda tx: self.extend_tx(tx, lease, lease_seconds)
        )

    def extend_tx(
        self, tx: Tx, lease: Lease, lease_seconds: int = DEFAULT_LEASE_SECONDS
    ) -> Lease:
        """``extend`` inside the caller's transaction."""
        _check_lease_seconds(lease_seconds)
        self.leased_tx(tx, lease)  # the fence: raises LeaseLost saying why
        self._at("extend.after_read")
        instant = tx.instant()
        now = math.floor(instant)
        extended = Lease(
            lease.event_id,
            lease.generation,
            lease.attempt,
            lease_deadline(instant, lease_seconds),
        )
        # The same fence in the UPDATE itself, as in complete_tx.
        changed = tx.execute(
            "UPDATE messages SET lease_until = ? "
            "WHERE event_id = ? AND generation = ? "
            "AND state = 'leased' AND lease_until > ?",
            (extended.lease_until, lease.event_id, lease.generation, now),
        ).rowcount
        if changed != 1:
            raise LeaseLost(
                f"{lease.event_id}: generation {lease.generation} "
                "is no longer the current lease"
            )
        self._at("extend.after_update")
        return extended

    def heartbeat(
        self, lease: Lease, *, every: float, lease_seconds: int = DEFAULT_LEASE_SECONDS
    ) -> Heartbeat:
        """Keep extending ``lease`` every ``every`` seconds while long work runs.

        The extensions run in a background thread.

        Use it around work done between ``claim`` and ``complete``::

            with store.heartbeat(lease, every=10, lease_seconds=30) as beat:
                result = long_computation(lease)
            store.complete(beat.lease, handler)

        The thread uses its own connection (one per thread) and stops when the
        block ends. If an extension is refused, the thread stops and
        ``beat.lost`` holds the ``LeaseLost``: the work's result must not be
        written, and ``complete`` would refuse it anyway.
        """
        _check_lease(lease)
        _check_lease_seconds(lease_seconds)
        if not every > 0:
            raise ValueError(
                f"every must be a positive number of seconds, got {every!r}"
            )
        if not turn.THREADS:
            raise NoThreads(
                "a heartbeat extends the lease from a thread, and this Python"
                f" ({sys.platform}) cannot start one: run this on a machine"
            )
        return Heartbeat(self, lease, every, lease_seconds)

    # ------------------------------------------------------------------ fail

    def fail(
        self,
        lease: Lease,
        code: str,
        *,
        permanent: bool = False,
        detail: str | None = None,
    ) -> Completion:
        """Record a failed attempt: retry after a backoff, or dead.

        Permanent failures and a temporary failure on the last allowed attempt
        go to dead, keeping ``code`` (and ``detail``, the reason in words).
        Fenced like ``complete``.

        :param lease: what ``claim`` returned.
        :param code: a short machine-readable reason, stored as ``last_error``.
        :param permanent: dead at once instead of a retry.
        :param detail: the reason in words, stored as ``last_detail``.
        :raises LeaseLost: the lease is no longer current.
        """
        _check_lease(lease)
        _check_code(code, detail)
        return self._write(
            "fail",
            lambda tx: self.fail_tx(
                tx, lease, code, permanent=permanent, detail=detail
            ),
        )

    def fail_tx(
        self,
        tx: Tx,
        lease: Lease,
        code: str,
        *,
        permanent: bool = False,
        detail: str | None = None,
    ) -> Completion:
        """``fail`` inside the caller's transaction."""
        _check_code(code, detail)
        message = self.leased_tx(tx, lease)
        self._at("fail.after_read")
        return self._fail_checked(
            tx, message, code, detail, permanent=permanent, point="fail.after_update"
        )

    def _refuse(
        self, tx: Tx, lease: Lease, code: str, detail: str | None, *, permanent: bool
    ) -> Completion:
        """A handler refused the payload: record it only if the lease is still current.

        The handler may have taken long, so the lease is checked again, as on
        the success path; a refusal after the lease ended raises ``LeaseLost``.
        """
        message = self.leased_tx(tx, lease)
        return self._fail_checked(
            tx,
            message,
            code,
            detail,
            permanent=permanent,
            point="complete.after_update",
        )

    def _fail_checked(
        self,
        tx: Tx,
        message: Message,
        code: str,
        detail: str | None,
        *,
        permanent: bool,
        point: str,
    ) -> Completion:
        if permanent or message.attempts >= self.max_attempts:
            tx.execute(
                "UPDATE messages SET state = 'dead', lease_until = NULL, "
                "last_error = ?, last_detail = ? WHERE event_id = ?",
                (code, detail, message.event_id),
            )
            outcome = Completion(message.event_id, Outcome.DEAD, code, detail=detail)
        else:
            available_at = tx.now() + backoff_seconds(message.attempts)
            tx.execute(
                """
                UPDATE messages
                SET state = 'ready', lease_until = NULL, available_at = ?,
                    last_error = ?, last_detail = ?
                WHERE event_id = ?
                """,
                (available_at, code, detail, message.event_id),
            )
            outcome = Completion(
                message.event_id, Outcome.RETRY, code, available_at, detail
            )
        self._at(point)
        return outcome

    # --------------------------------------------------------------- redrive

    def redrive(self, event_ids: Iterable[str]) -> list[str]:
        """Give dead messages a new cycle (all or none); returns the ids.

        :param event_ids: ids of dead messages; their attempts start again,
            generation and payload are kept.
        :raises NotDead: one of them is not dead (nothing is changed).
        :raises UnknownEvent: one of them is not in the queue (nothing is changed).
        """
        if isinstance(event_ids, str):
            raise TypeError(
                f"redrive takes a list of event ids, got the string {event_ids!r}; "
                f"write redrive([{event_ids!r}])"
            )
        ids = list(dict.fromkeys(event_ids))  # the same id twice is one request
        return self._write("redrive", lambda tx: self.redrive_tx(tx, ids))

    def redrive_tx(self, tx: Tx, event_ids: Iterable[str]) -> list[str]:
        """Reset ``attempts`` and make dead messages available now.

        ``generation`` and the payload are kept, so a worker of the previous
        cycle still cannot complete. Any id that is not dead rejects them all.
        """
        now = tx.now()
        done: list[str] = []
        for event_id in event_ids:
            row = tx.execute(
                "SELECT state FROM messages WHERE event_id = ?"
                + _ROW_LOCK[tx.engine]["message"],
                (event_id,),
            ).fetchone()
            self._at("redrive.after_read")
            if row is None:
                raise UnknownEvent(f"{event_id} is not in the queue")
            if row[0] != "dead":
                raise NotDead(
                    f"{event_id} is {row[0]}; only dead messages can be redriven"
                )
            tx.execute(
                "UPDATE messages SET state = 'ready', attempts = 0, available_at = ? "
                "WHERE event_id = ?",
                (now, event_id),
            )
            self._at("redrive.after_update")
            done.append(event_id)
        return done

    # ----------------------------------------------------------------- reads

    def status(self) -> Snapshot:
        """Counts by stored state (no expiry applied)."""
        return self.read(self.status_tx)

    def status_tx(self, view: Tx) -> Snapshot:
        """``status`` inside the caller's transaction or snapshot."""
        return Snapshot(
            dict(
                view.execute(
                    "SELECT state, count(*) FROM messages GROUP BY state"
                ).fetchall()
            )
        )

    def metrics(self) -> Metrics:
        """Counts, oldest ready age, dead attempts, enqueue-to-done, expired leases."""
        return self.read(self.metrics_tx)

    def metrics_tx(self, view: Tx) -> Metrics:
        """``metrics`` inside the caller's transaction or snapshot."""
        now = view.now()
        counts = self.status_tx(view).messages
        oldest = view.execute(
            "SELECT min(enqueued_at) FROM messages WHERE state = 'ready'"
        ).fetchone()[0]
        dead = dict(
            view.execute(
                "SELECT attempts, count(*) FROM messages WHERE state = 'dead' "
                "GROUP BY attempts ORDER BY attempts"
            )
        )
        timed = (
            "FROM messages WHERE state = 'done' "
            "AND enqueued_at IS NOT NULL AND done_at IS NOT NULL"
        )
        done, longest, total = view.execute(
            "SELECT count(*), max(done_at - enqueued_at), "
            f"coalesce(sum(done_at - enqueued_at), 0) {timed}"
        ).fetchone()

        def percentile(p: int) -> int | None:
            if not done:
                return None
            rank = max(1, -(-p * int(done) // 100))  # nearest rank: ceil(p/100 * n)
            row = view.execute(
                f"SELECT done_at - enqueued_at AS seconds {timed} ORDER BY seconds "
                "LIMIT 1 OFFSET ?",
                (rank - 1,),
            ).fetchone()
            return int(row[0])

        expired, pruned = view.execute(
            "SELECT coalesce(sum(expired_leases), 0), count(payload_sha256) "
            "FROM messages"
        ).fetchone()
        return Metrics(
            now=now,
            messages={state: counts.get(state, 0) for state in STATES},
            oldest_ready_age=None if oldest is None else max(0, now - int(oldest)),
            dead_attempts={int(k): int(v) for k, v in dead.items()},
            enqueue_to_done=Latency(
                int(done),
                percentile(50),
                percentile(95),
                None if longest is None else int(longest),
                int(total),
            ),
            expired_leases=int(expired),
            pruned=int(pruned),
        )

    # ---------------------------------------------------------------- prune

    def prune(self, older_than_seconds: int) -> Pruned:
        """Remove payloads of done messages ACKed at least ``older_than_seconds`` ago.

        Prune keeps what deduplication needs.

        A pruned message keeps its id, state, counts and times, and the
        SHA-256 of its canonical payload: enqueueing its id again with the
        same payload is still a duplicate, with another payload still a
        conflict. Dead messages are never pruned (they wait for an operator),
        nor done messages from before schema version 3 (their age is unknown).
        One transaction: all or nothing.

        :param older_than_seconds: 0 or more; ``0`` prunes every done message with
            a done time.
        """
        if isinstance(older_than_seconds, bool) or not isinstance(
            older_than_seconds, int
        ):
            raise TypeError(
                "older_than_seconds must be an integer, "
                f"got {type(older_than_seconds).__name__}"
            )
        if older_than_seconds < 0:
            raise ValueError(
                f"older_than_seconds must not be negative, got {older_than_seconds}"
            )
        return self._write(None, lambda tx: self.prune_tx(tx, older_than_seconds))

    def prune_tx(self, tx: Tx, older_than_seconds: int) -> Pruned:
        """``prune`` inside the caller's transaction."""
        cutoff = tx.now() - older_than_seconds
        pruned = 0
        while True:  # in chunks, so that memory stays flat however many payloads go
            rows = tx.execute(
                "SELECT event_id, payload FROM messages "
                "WHERE state = 'done' AND payload_sha256 IS NULL "
                "AND done_at IS NOT NULL AND done_at <= ? "
                "ORDER BY event_id LIMIT ?",
                (cutoff, _PRUNE_CHUNK),
            ).fetchall()
            if not rows:
                break
            tx.conn.executemany(
                "UPDATE messages SET payload = '{}', payload_sha256 = ? "
                "WHERE event_id = ?",
                [(payload_digest(payload), event_id) for event_id, payload in rows],
            )
            pruned += len(rows)
        unknown = tx.execute(
            "SELECT count(*) FROM messages WHERE state = 'done' AND done_at IS NULL"
        ).fetchone()[0]
        return Pruned(pruned=pruned, unknown_age=int(unknown))

    def message(self, event_id: str) -> Message:
        """One stored message, as stored."""
        found = self.read(lambda view: _fetch_message(view, event_id))
        if found is None:
            raise UnknownEvent(f"{event_id} is not in the queue")
        return found

    def messages(self, state: str | None = None) -> list[Message]:
        """All stored messages (optionally of one state), by event id."""
        if state is not None and state not in STATES:
            raise ValueError(f"unknown state {state!r}; states are {', '.join(STATES)}")
        sql = f"SELECT {_MESSAGE_COLUMNS} FROM messages"
        sql += " WHERE state = ? ORDER BY event_id" if state else " ORDER BY event_id"
        params = (state,) if state else ()
        return self.read(
            lambda view: [_message(row) for row in view.execute(sql, params)]
        )

    def dead_letters(self) -> list[Message]:
        """The dead-letter queue: messages with ``state = 'dead'``."""
        return self.messages("dead")


# What a transaction locks beyond SQLite's one writer: on PostgreSQL a claim
# takes the rows it leases and skips rows another transaction holds, and a
# completion or failure locks its message's row before checking the lease.
_ROW_LOCK: Final = {
    "sqlite": {"claim": "", "message": ""},
    "postgresql": {"claim": " FOR UPDATE SKIP LOCKED", "message": " FOR UPDATE"},
}

# Payloads prune reads and rewrites per statement.
_PRUNE_CHUNK = 1_000

# Rows per INSERT statement on enqueue: 4 bound values each, far below
# SQLite's 32,766-variable limit and PostgreSQL's 65,535.
_INSERT_ROWS = 250

_MESSAGE_COLUMNS = (
    "event_id, payload, state, attempts, generation, available_at, lease_until, "
    "last_error, last_detail, enqueued_at, done_at, expired_leases, "
    "payload_sha256 IS NOT NULL"
)


def _message(row: Sequence[Any]) -> Message:
    values = list(row)
    values[-1] = bool(values[-1])  # pruned: SQLite says 0/1, PostgreSQL a bool
    return Message(*values)


def _fetch_message(tx: Tx, event_id: str, *, lock: bool = False) -> Message | None:
    suffix = _ROW_LOCK[tx.engine]["message"] if lock else ""
    row = tx.execute(
        f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE event_id = ?{suffix}",
        (event_id,),
    ).fetchone()
    return None if row is None else _message(row)


def refusal(exc: Exception) -> tuple[str, str | None, bool]:
    """What a handler's exception records: (code, detail, permanent).

    Anything unexpected is a ``handler_error``.
    """
    if isinstance(exc, HandlerFailure):
        return exc.code, exc.detail or None, isinstance(exc, PermanentFailure)
    return HANDLER_ERROR, f"{type(exc).__name__}: {exc}", False


def lease_deadline(instant: float, lease_seconds: int) -> int:
    """A new lease's ``lease_until``, counted from the next whole second.

    So it lasts at least ``lease_seconds``.
    A lease is valid while ``now() < lease_until``, and ``now()`` rounds the time
    down: counted from the second below, a lease taken at 1000.9 would end at
    1001.0 after 0.1 s.
    """
    return math.ceil(instant) + lease_seconds


def payload_digest(canonical: str) -> str:
    """The SHA-256 (hex) of a canonical payload: what prune keeps, for deduplication."""
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _check_lease_seconds(lease_seconds: object) -> None:
    if isinstance(lease_seconds, bool) or not isinstance(lease_seconds, int):
        raise TypeError(
            "lease_seconds must be an integer of seconds, "
            f"got {type(lease_seconds).__name__}"
        )
    if not 1 <= lease_seconds <= MAX_LEASE_SECONDS:
        raise ValueError(
            f"lease_seconds must be 1..{MAX_LEASE_SECONDS}, got {lease_seconds}"
        )


def _check_count(count: object) -> None:
    if isinstance(count, bool) or not isinstance(count, int):
        raise TypeError(f"count must be an integer, got {type(count).__name__}")
    if not 1 <= count <= MAX_BATCH:
        raise ValueError(f"count must be 1..{MAX_BATCH}, got {count}")


def _check_lease(lease: object) -> None:
    if not isinstance(lease, Lease):
        hint = (
            " (claim() returned None: nothing was available)" if lease is None else ""
        )
        raise TypeError(
            f"expected a Lease from claim(), got {type(lease).__name__}{hint}"
        )


def _check_code(code: object, detail: object) -> None:
    if not isinstance(code, str) or not code:
        raise ValueError(f"a failure needs a non-empty error code, got {code!r}")
    if detail is not None and not isinstance(detail, str):
        raise TypeError(f"detail must be a string or None, got {type(detail).__name__}")
