"""The transaction runner: connections, BEGIN ... COMMIT, busy retries, probes.

Every operation of the store is one short transaction run here. A store
keeps one connection per thread (closing the last connection to a WAL file
checkpoints and deletes the WAL, which per transaction would cost several
fsyncs). A write first waits for its writers' turn where the engine has one,
then begins before it reads; a read gets one consistent view. A database
that stays busy past the engine's own wait is retried with backoff until
``busy_retry_seconds``. The probe is told each named step it reaches.

A transaction in which a statement failed, or a fence refused, is *doomed*:
nothing the caller does inside it (catching the error, savepoints opened
before or after it) lets it commit; its COMMIT raises instead. Only the
queue's own savepoints, which undo everything after them, lift a doom.
"""

from __future__ import annotations

import functools
import math
import os
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, Concatenate, Final, NoReturn, ParamSpec, TypeVar

from . import interrupts
from .clock import Clock, lease_deadline
from .engines import Connection, Engine, Rows
from .errors import InputError, LeaseLost, StatementFailed, StatementRefused, StorageError

if TYPE_CHECKING:
    from .engines.queries import Operations

T = TypeVar("T")
S = TypeVar("S")
P = ParamSpec("P")
Probe = Callable[[str], None]  # told each named step of an operation as it is reached

# Errors after which a connection is kept; after any other, it is closed and reopened.
_CONNECTION_STAYS_USABLE: Final = frozenset({"database_busy", "constraint_violation"})


class Tx:
    """An open transaction on one connection: run your SQL in it with ``execute``."""

    def __init__(
        self,
        conn: Connection,
        engine: Engine,
        clock: Clock,
        *,
        server_clock: bool = False,
        queue: str = "default",
    ) -> None:
        self.conn = conn
        self.queue = queue  # the store's queue: what a handler's effect may name
        self.engine = engine
        self.ops: Operations = engine.ops  # the protocol's operations on this engine
        self.clock = clock
        # no clock was given and the engine has one of its own (PostgreSQL's)
        self._server_clock = server_clock
        # What doomed this transaction first (a failed statement, a refused
        # fence), or None: an ACK must not commit past a write that did not
        # happen, nor a refused attempt's effect.
        self._doomed: BaseException | None = None
        # the queue's own open savepoints, each with the doom it was opened under
        self._savepoints: list[tuple[str, BaseException | None]] = []

    def now(self) -> int:
        """Read the clock again, in whole seconds rounded down.

        A long handler may have let time pass since the transaction began.
        """
        if self._server_clock:
            return int(self.instant())
        return self.clock.now()

    def instant(self) -> float:
        """Read the clock again with its fraction.

        A clock without ``time()`` ticks in whole seconds.
        """
        if self._server_clock:
            return self.ops.server_time(self.conn)
        reading = getattr(self.clock, "time", None)
        return float(reading()) if callable(reading) else float(self.clock.now())

    def times(self, lease_seconds: int = 0) -> dict[str, int | None]:
        """The named time parameters of a statement: ``now``, ``until``, ``lease_seconds``.

        With the engine's own clock they are left NULL and the statement reads
        that clock itself (no round trip of their own).
        """
        if self._server_clock:
            return {"now": None, "until": None, "lease_seconds": lease_seconds}
        instant = self.instant()
        return {
            "now": math.floor(instant),
            "until": lease_deadline(instant, lease_seconds),
            "lease_seconds": lease_seconds,
        }

    def execute(self, sql: str, params: Iterable[Any] | Mapping[str, Any] = ()) -> Rows:
        """Run one statement of yours, with ``?`` placeholders, in this transaction.

        The same text runs on both engines. One statement per call; a
        statement that would begin or end the transaction (``BEGIN``,
        ``COMMIT``, ``ROLLBACK`` without ``TO``) is refused
        (``StatementRefused``): the store begins and ends it. A statement
        that fails dooms the transaction, even if you catch its error and
        even after a ``ROLLBACK TO``: its ACK is refused (``StatementFailed``)
        and its COMMIT raises. Write a statement that may clash so that it
        cannot fail (``INSERT ... ON CONFLICT DO NOTHING``), or run it in a
        transaction of its own.
        """
        try:
            rows = self.conn.execute(self.engine.caller_sql(sql), params)
        except BaseException as exc:
            self.doom(exc)
            raise
        return rows

    # ------------------------------------------------------------------ doom

    @property
    def doomed(self) -> bool:
        """Whether a failed statement or a refused fence keeps this transaction from committing."""
        return self._doomed is not None

    @property
    def doom_cause(self) -> BaseException | None:
        """The error that doomed this transaction first, as it was raised; None if none did."""
        return self._doomed

    def doom(self, why: BaseException) -> None:
        """Keep this transaction from committing; ``why`` is said when it tries (the first is kept)."""
        if self._doomed is None:
            self._doomed = why

    def raise_if_doomed(self) -> None:
        """Raise what keeps this transaction from committing, if anything does."""
        why = self.doom_error()
        if why is not None:
            raise why from self._doomed

    def doom_error(self) -> LeaseLost | StatementFailed | None:
        """The error that says why this transaction cannot commit; None if it can.

        ``LeaseLost`` after a refused fence, ``StatementFailed`` after a
        failed statement (or an operation that failed part way).
        """
        why = self._doomed
        if why is None:
            return None
        if isinstance(why, LeaseLost):
            return LeaseLost(
                "the transaction cannot commit: a fence refused it earlier "
                f"({why.message})"
            )
        if isinstance(why, StatementFailed) and not isinstance(why, StatementRefused):
            return why
        return StatementFailed(
            "a statement run through the transaction failed, so it cannot "
            f"commit: {type(why).__name__}: {why}",
            code=why.code if isinstance(why, StatementRefused) else None,
        )

    # ----------------------------------------------- the queue's savepoints

    def savepoint(self, name: str) -> None:
        """Open one of the queue's own savepoints (``name`` is the queue's, never a caller's)."""
        self.conn.execute(f"SAVEPOINT {name}")
        self._savepoints.append((name, self._doomed))

    def rollback_to(self, name: str) -> None:
        """Undo everything after savepoint ``name``, the doom of it included; it stays open."""
        self.conn.execute(f"ROLLBACK TO {name}")
        while self._savepoints[-1][0] != name:
            self._savepoints.pop()
        self._doomed = self._savepoints[-1][1]

    def release(self, name: str) -> None:
        """Close savepoint ``name``, keeping what came after it."""
        self.conn.execute(f"RELEASE {name}")
        while self._savepoints.pop()[0] != name:
            pass


def dooms_on_failure(
    operation: Callable[Concatenate[S, Tx, P], T],
) -> Callable[Concatenate[S, Tx, P], T]:
    """Mark a ``*_tx`` operation: when it fails, the caller's transaction is doomed.

    A refused fence (``LeaseLost``), a failed statement, anything unforeseen:
    the operation may have written part of its work, so the caller, who may
    catch the error, must not be able to commit the rest. A refused request
    (``InputError``) and refused arguments (``TypeError``, ``ValueError``) are
    raised before the operation writes anything, and doom nothing.
    """

    @functools.wraps(operation)
    def dooming(self: S, tx: Tx, /, *args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return operation(self, tx, *args, **kwargs)
        except (InputError, TypeError, ValueError):
            raise
        except BaseException as failed:
            tx.doom(failed)
            raise

    return dooming


class Transactions:
    """One connection per thread, and the transactions a store runs on them."""

    def __init__(
        self,
        engine: Engine,
        clock: Clock,
        *,
        server_clock: bool,
        busy_retry_seconds: float,
        probe: Probe | None,
        queue: str,
    ) -> None:
        self.engine = engine
        self.queue = queue  # every statement names it: a store is one queue
        self.clock = clock
        self.busy_retry_seconds = busy_retry_seconds
        self._server_clock = server_clock
        self._probe = probe
        self._local = threading.local()
        self._connections: list[Connection] = []
        self._registry = threading.Lock()
        self._pid = os.getpid()
        self._closed = False

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
            self.engine.close(conn, quiet=True)
        self._local = threading.local()

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called."""
        return self._closed

    # ------------------------------------------------------------ connections

    @contextmanager
    def _connection(self) -> Iterator[Connection]:
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
            extra = self.engine.connect()
            try:
                yield extra
            finally:
                self.engine.close(extra, quiet=True)
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

    def _thread_connection(self) -> Connection:
        """This thread's connection, opened on first use and kept until ``close()``."""
        if self._closed:
            raise StorageError(
                f"{self.engine.where}: this store was closed", code="store_closed"
            )
        # a forked child must not touch its parent's connections
        if os.getpid() != self._pid:
            with self._registry:
                self._pid, self._connections, self._local = (
                    os.getpid(),
                    [],
                    threading.local(),
                )
        conn: Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self.engine.connect()
            with self._registry:
                self._connections.append(conn)
            self._local.conn = conn
        return conn

    def _release_thread_connection(self) -> None:
        """Close this thread's connection now (its thread ends before the store)."""
        conn: Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            return
        self._local.conn = None
        with self._registry:
            if conn in self._connections:
                self._connections.remove(conn)
        self.engine.close(conn, quiet=True)

    def _discard_unless_usable(self, conn: Connection, exc: StorageError) -> None:
        if exc.code not in _CONNECTION_STAYS_USABLE:
            self._discard(conn)  # after an I/O error or a full disk, start afresh

    def _discard(self, conn: Connection) -> None:
        """Close ``conn`` and forget it; this thread's next transaction opens another."""
        with self._registry:
            if conn in self._connections:
                self._connections.remove(conn)
        if getattr(self._local, "conn", None) is conn:
            self._local.conn = None
        self.engine.close(conn, quiet=True)

    def _at(self, point: str) -> None:
        if self._probe is not None:
            self._probe(point)

    def _tx(self, conn: Connection) -> Tx:
        return Tx(
            conn,
            self.engine,
            self.clock,
            server_clock=self._server_clock,
            queue=self.queue,
        )

    # ----------------------------------------------------------- transactions

    def writer_turn(self) -> AbstractContextManager[None]:
        """Hold this thread's turn to write across several transactions (re-entrant).

        On SQLite every write transaction first waits for its turn
        (``engines/sqlite_turn.py``: an OS lock beside the database on which waiting
        processes queue fairly, instead of SQLite's sleep-and-poll). The worker
        loop holds one turn for a claim and its completion, so that two
        processes trade places once per message, not twice. PostgreSQL locks
        rows, not the database: there, this does nothing.
        """
        return self.engine.writer_turn(self.busy_retry_seconds)

    @contextmanager
    def transaction(self) -> Iterator[Tx]:
        """Begin a write transaction ... ``COMMIT``; roll back on any exception.

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
                tx = self._tx(conn)
                yield tx
                tx.raise_if_doomed()
                self._commit(conn, operation if probed else None)
            except BaseException as exc:
                self._roll_back(conn, exc)
            if probed:
                self._at(f"{operation}.after_commit")

    def _begin(self, conn: Connection, probed_operation: str | None) -> None:
        self.engine.begin_write(conn)
        if probed_operation:
            self._at(f"{probed_operation}.after_begin")

    def _commit(self, conn: Connection, probed_operation: str | None) -> None:
        if probed_operation:
            self._at(f"{probed_operation}.before_commit")
        with interrupts.committing():  # never cancelled by the queue's own Ctrl-C
            conn.execute("COMMIT")

    def _roll_back(self, conn: Connection, exc: BaseException) -> NoReturn:
        """Undo the open transaction after ``exc`` and raise it.

        A driver's error is raised as its ``StorageError``.
        """
        if conn.in_transaction:
            try:
                conn.execute("ROLLBACK")
            except Exception:
                pass  # the connection is discarded, which rolls back as well
        self._raise(exc)

    def _raise(self, exc: BaseException) -> NoReturn:
        """Raise ``exc``; a driver's error as the ``StorageError`` it means."""
        translated = self.engine.storage_error(exc)
        if translated is not None:
            raise translated from exc
        raise exc

    @contextmanager
    def snapshot(self) -> Iterator[Tx]:
        """A read transaction: one consistent view of the queue, no write lock."""
        with self._connection() as conn:
            try:
                try:
                    self.engine.begin_read(conn)
                    yield self._tx(conn)
                finally:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
            except Exception as exc:
                self._raise(exc)

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
        the database stays busy past the engine's own wait, so it must not
        have effects outside the transaction.

        :param body: writes through ``tx.execute``; its return value is returned.
        :raises StorageError: ``database_busy`` after ``busy_retry_seconds``, or
            another storage code.
        """
        return self._write(None, body)

    def _write(self, operation: str | None, body: Callable[[Tx], T]) -> T:
        return self._retry_busy(lambda: self._write_once(operation, body))

    def _write_once(self, operation: str | None, body: Callable[[Tx], T]) -> T:
        """One write transaction: begin, ``body(tx)``, ``COMMIT``.

        Any exception rolls back.

        The store's own operations come here; ``transaction()`` does the same
        for a caller's with-block. Written out rather than built from context
        managers: this is the hot path.
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
                    tx = self._tx(conn)
                    result = body(tx)
                    tx.raise_if_doomed()
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

    def _alone(self, body: Callable[[Tx], T]) -> T:
        """Run ``body``'s statements each as a transaction of its own (no BEGIN).

        For an operation that is one statement: it commits by itself, in one
        round trip, and a crash can only come before or after it. Called
        inside a transaction of this thread, it gets a transaction of its own,
        as every operation does.
        """
        if getattr(self._local, "in_use", False):
            return self._write(None, body)

        def once() -> T:
            conn = self._thread_connection()
            self._local.in_use = True
            try:
                with self.writer_turn():
                    try:
                        with interrupts.committing():  # the statement commits
                            return body(self._tx(conn))
                    except Exception as exc:
                        self._raise(exc)
            except StorageError as exc:
                self._discard_unless_usable(conn, exc)
                raise
            finally:
                self._local.in_use = False

        return self._retry_busy(once)

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
