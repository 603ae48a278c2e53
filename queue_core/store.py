"""The queue's storage and protocol: every SQL statement of queue_core lives here.

One ``Store`` is one SQLite file. Each protocol operation is one short write
transaction that starts with ``BEGIN IMMEDIATE`` *before* it reads, so that
choosing a message and taking it are serialised with every other writer.

Each operation comes in two forms (as in goqite's ``Send``/``SendTx``):
``store.claim(...)`` runs its own transaction (and waits out a busy database),
while ``store.claim_tx(tx, ...)`` runs inside a transaction the caller opened
with ``store.transaction()``, so that the caller's own writes commit or roll
back together with it.

How long a connection lives is decided in one place, ``Store._connect``: today
a connection per transaction, closed explicitly in ``finally``.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

from . import faults, receipts
from .clock import Clock, SystemClock
from .envelope import Batch, parse_batch
from .errors import (
    BatchRejected,
    LeaseLost,
    NotDead,
    PermanentFailure,
    ReceiptError,
    StorageError,
    TemporaryFailure,
    UnknownEvent,
    WrongPath,
)
from .handler import Effect

SCHEMA_VERSION = 1
APPLICATION_ID = 0x51436F72  # "QCor": marks a file as a queue_core database
DEFAULT_LEASE_SECONDS = 30
MAX_LEASE_SECONDS = 365 * 86_400  # a year; keeps now + lease far inside SQLite's 64-bit integers
MAX_ATTEMPTS = 3  # claims per cycle, whether they ended in a failure or a silent death
BUSY_TIMEOUT_MS = 2_000  # SQLite's own wait for the write lock, per attempt
BUSY_RETRY_SECONDS = 60.0  # then we back off and retry until this much time has passed
LEASE_EXPIRED = "lease_expired"  # last_error of a message whose last lease ran out
RECEIPT_WITHOUT_EFFECT = "receipt_without_effect"  # last_error: a receipt names no effect row

STATES = ("ready", "leased", "done", "dead")
_SQLITE_MAGIC = b"SQLite format 3\x00"

T = TypeVar("T")


def backoff_seconds(attempt: int) -> int:
    """Delay before the next attempt after a temporary failure of ``attempt``: 1 s, 2 s, 4 s..."""
    return 2 ** (attempt - 1)


@dataclass(frozen=True)
class Lease:
    """A temporary, fenced right to process one message.

    ``generation`` is the fencing token: every claim raises it, and every
    completion must present the current one.
    """

    event_id: str
    generation: int
    attempt: int
    lease_until: int


class Outcome(str, Enum):
    """Where a completion left the message."""

    DONE = "done"
    RETRY = "retry"
    DEAD = "dead"


@dataclass(frozen=True)
class Completion:
    event_id: str
    outcome: Outcome
    error: str | None = None
    available_at: int | None = None


@dataclass(frozen=True)
class EnqueueResult:
    accepted: int
    duplicates: int

    def to_dict(self) -> dict[str, int]:
        return {"accepted": self.accepted, "duplicates": self.duplicates}


@dataclass(frozen=True)
class Message:
    """One row of ``messages`` exactly as stored (no expiry applied)."""

    event_id: str
    payload: str
    state: str
    attempts: int
    generation: int
    available_at: int
    lease_until: int | None
    last_error: str | None

    @property
    def payload_object(self) -> dict[str, Any]:
        return json.loads(self.payload)


@dataclass(frozen=True)
class Snapshot:
    """Counts by state and the money in effects: the shape of ``status --json``."""

    messages: Mapping[str, int]
    effects_count: int
    total_cents: int
    by_category: Mapping[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "messages": {state: self.messages.get(state, 0) for state in STATES},
            "effects": {
                "count": self.effects_count,
                "total_cents": self.total_cents,
                "by_category": dict(self.by_category),
            },
        }


class Tx:
    """An open ``BEGIN IMMEDIATE`` transaction on one connection."""

    def __init__(self, conn: sqlite3.Connection, clock: Clock, operation: str) -> None:
        self.conn = conn
        self.clock = clock
        self.operation = operation

    def now(self) -> int:
        """Read the clock again (a long handler may have let time pass)."""
        return self.clock.now()

    def execute(self, sql: str, params: Iterable[Any] | Mapping[str, Any] = ()) -> sqlite3.Cursor:
        return self.conn.execute(sql, params)

    def point(self, step: str) -> None:
        faults.reach(f"{self.operation}.{step}")


# A business handler, or one wrapped in receipts.ReceiptHandler (see complete_tx).
HandlerFunc = Callable[[Mapping[str, Any]], Effect]  # e.g. a handler.Handler instance


class Store:
    """A queue in one SQLite file."""

    def __init__(
        self,
        path: str | Path,
        *,
        clock: Clock | None = None,
        create: bool = True,
        max_attempts: int = MAX_ATTEMPTS,
        busy_timeout_ms: int = BUSY_TIMEOUT_MS,
        busy_retry_seconds: float = BUSY_RETRY_SECONDS,
    ) -> None:
        """Open (and with ``create``, initialise) the queue database at ``path``.

        A path that is not a queue database is refused without being modified.
        """
        self.path = Path(path)
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.max_attempts = max_attempts
        self.busy_timeout_ms = busy_timeout_ms
        self.busy_retry_seconds = busy_retry_seconds
        if self._inspect_file(create):
            self._initialise()

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r}, clock={self.clock!r})"

    # ------------------------------------------------------------------ files

    def _inspect_file(self, create: bool) -> bool:
        """Check the file without modifying it; return True if it must be initialised."""
        path = self.path
        try:
            is_dir, exists = path.is_dir(), path.exists()
            parent_is_dir = path.parent.is_dir()
        except OSError as exc:  # e.g. a folder this process may not search, a name too long
            raise WrongPath(f"cannot open {path}: {exc.strerror}", code="cannot_open") from None
        if is_dir:
            raise WrongPath(f"{path} is a directory, not a queue database", code="not_a_file")
        if not exists:
            if not create:
                raise WrongPath(f"no queue database at {path}", code="no_database")
            if not parent_is_dir:
                raise WrongPath(f"cannot create {path}: {path.parent} is not a directory", code="cannot_open")
            return True
        try:
            with open(path, "rb") as fh:
                header = fh.read(100)
        except OSError as exc:
            raise WrongPath(f"cannot read {path}: {exc.strerror}", code="cannot_open") from None
        if not header and create:
            return True  # an empty file (e.g. from mkstemp) is a new database
        # The header is read directly: application_id (offset 68) and
        # user_version (offset 60) are written before the file switches to WAL.
        if len(header) < 100 or not header.startswith(_SQLITE_MAGIC):
            raise WrongPath(f"{path} is not a queue database (not an SQLite file)", code="not_a_queue_database")
        application_id = int.from_bytes(header[68:72], "big")
        version = int.from_bytes(header[60:64], "big")
        wal = path.with_name(path.name + "-wal")
        try:
            wal_pending = wal.is_file() and wal.stat().st_size > 0
        except OSError:
            wal_pending = False  # then SQLite cannot use it either, and will say so
        if application_id == APPLICATION_ID and wal_pending:
            # Another client (running, or crashed) has commits still only in the
            # WAL, e.g. a newer queue_core's upgrade: the header on disk may be
            # stale. Read it through SQLite; a read-only connection neither
            # checkpoints nor removes the WAL, so nothing is modified.
            try:
                reader = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True,
                                         timeout=self.busy_timeout_ms / 1000)
            except sqlite3.Error as exc:
                raise _storage_error(exc, path) from exc
            try:
                application_id = reader.execute("PRAGMA application_id").fetchone()[0]
                version = reader.execute("PRAGMA user_version").fetchone()[0]
            except sqlite3.Error as exc:
                raise _storage_error(exc, path) from exc
            finally:
                _close(reader, quiet=True)
        if application_id != APPLICATION_ID:
            raise WrongPath(f"{path} is an SQLite file of another application, not a queue database",
                            code="not_a_queue_database")
        if version > SCHEMA_VERSION:
            raise WrongPath(f"{path} has schema version {version}; this queue_core knows up to {SCHEMA_VERSION}",
                            code="schema_too_new")
        if version < 1:
            raise WrongPath(f"{path} is an incomplete queue database (schema version {version})",
                            code="not_a_queue_database")
        return False

    def _initialise(self) -> None:
        conn = self._connect()
        try:
            try:
                conn.execute("BEGIN IMMEDIATE")
                # Another process may have initialised the file meanwhile.
                if conn.execute("PRAGMA user_version").fetchone()[0] == 0:
                    for statement in _schema_statements():
                        conn.execute(statement)
                    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                conn.execute("COMMIT")
                # WAL lets readers (status) run beside the one writer.
                conn.execute("PRAGMA journal_mode = WAL")
            except sqlite3.Error as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise _storage_error(exc, self.path) from exc
        finally:
            _close(conn)

    def _connect(self) -> sqlite3.Connection:
        """The one place where connections are made and configured."""
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=self.busy_timeout_ms / 1000,
                isolation_level=None,  # we issue BEGIN/COMMIT ourselves
            )
        except sqlite3.Error as exc:
            raise _storage_error(exc, self.path) from exc
        try:
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
            conn.execute("PRAGMA synchronous = FULL")
        except sqlite3.Error as exc:
            _close(conn)
            raise _storage_error(exc, self.path) from exc
        return conn

    # ----------------------------------------------------------- transactions

    @contextmanager
    def transaction(self, operation: str = "custom") -> Iterator[Tx]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT``; roll back on any exception.

        Use it to run ``*_tx`` operations together with your own writes.
        """
        conn = self._connect()
        committed = False
        try:
            try:
                conn.execute("BEGIN IMMEDIATE")
                tx = Tx(conn, self.clock, operation)
                tx.point("after_begin")
                yield tx
                tx.point("before_commit")
                conn.execute("COMMIT")
                committed = True
            except BaseException as exc:
                if conn.in_transaction:
                    try:
                        conn.execute("ROLLBACK")
                    except sqlite3.Error:
                        pass  # closing the connection rolls back as well
                if isinstance(exc, sqlite3.Error):
                    raise _storage_error(exc, self.path) from exc
                raise
            tx.point("after_commit")
        finally:
            # After a COMMIT, a failure while closing (e.g. the WAL checkpoint
            # on a full disk) must not turn a committed result into an error.
            _close(conn, quiet=committed)

    @contextmanager
    def _snapshot(self) -> Iterator[sqlite3.Connection]:
        """A read transaction: one consistent view, no write lock."""
        conn = self._connect()
        try:
            try:
                conn.execute("BEGIN")
                yield conn
            finally:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
        except sqlite3.Error as exc:
            raise _storage_error(exc, self.path) from exc
        finally:
            _close(conn, quiet=True)

    def _write(self, operation: str, body: Callable[[Tx], T]) -> T:
        """Run ``body`` in its own transaction; wait out a busy database.

        SQLite's busy handler sleeps and polls, which is unfair under
        contention, so after its timeout we back off with jitter and retry.
        """
        return self._retry_busy(lambda: self._once(operation, body))

    def _once(self, operation: str, body: Callable[[Tx], T]) -> T:
        with self.transaction(operation) as tx:
            return body(tx)

    def _read(self, body: Callable[[sqlite3.Connection], T]) -> T:
        def once() -> T:
            with self._snapshot() as conn:
                return body(conn)
        return self._retry_busy(once)

    def _retry_busy(self, attempt: Callable[[], T]) -> T:
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
        """Validate a whole JSONL batch, then store its new events in one transaction."""
        batch = data if isinstance(data, Batch) else parse_batch(
            data.encode("utf-8") if isinstance(data, str) else data)
        return self._write("enqueue", lambda tx: self.enqueue_tx(tx, batch))

    def enqueue_tx(self, tx: Tx, batch: Batch) -> EnqueueResult:
        """Store a validated batch inside the caller's transaction.

        A stored event with the same canonical payload is a duplicate; with a
        different one it is a conflict that rejects the whole batch.
        """
        now = tx.now()
        accepted, duplicates = 0, batch.duplicates_in_batch
        for event in batch.events:
            row = tx.execute("SELECT payload FROM messages WHERE event_id = ?", (event.event_id,)).fetchone()
            tx.point("after_read")
            if row is None:
                tx.execute(
                    "INSERT INTO messages (event_id, payload, state, available_at) VALUES (?, ?, 'ready', ?)",
                    (event.event_id, event.payload, now),
                )
                tx.point("after_insert")
                accepted += 1
            elif row[0] == event.payload:
                duplicates += 1
            else:
                raise BatchRejected(
                    "event_conflict",
                    f"{event.event_id} is already stored with a different payload; a fix needs a new event id",
                    event.line,
                )
        return EnqueueResult(accepted=accepted, duplicates=duplicates)

    # ----------------------------------------------------------------- claim

    def claim(self, lease_seconds: int = DEFAULT_LEASE_SECONDS) -> Lease | None:
        """Lease the next available message, or return None if there is none now."""
        return self._write("claim", lambda tx: self.claim_tx(tx, lease_seconds))

    def claim_tx(self, tx: Tx, lease_seconds: int = DEFAULT_LEASE_SECONDS) -> Lease | None:
        """Choose and lease a message inside the caller's ``BEGIN IMMEDIATE``.

        A ready message whose ``available_at`` has come, or a leased one whose
        lease has expired (applied lazily here; there is no sweeper). Order:
        ``available_at, event_id``. A message whose last allowed claim expired
        goes to dead instead, and the search goes on.
        """
        if (isinstance(lease_seconds, bool) or not isinstance(lease_seconds, int)
                or not 1 <= lease_seconds <= MAX_LEASE_SECONDS):
            raise ValueError(f"lease_seconds must be an integer 1..{MAX_LEASE_SECONDS}, got {lease_seconds!r}")
        now = tx.now()
        while True:
            row = tx.execute(
                """
                SELECT event_id, attempts, generation FROM messages
                WHERE state IN ('ready', 'leased')
                  AND available_at <= :now
                  AND (state = 'ready' OR lease_until <= :now)
                ORDER BY available_at, event_id
                LIMIT 1
                """,
                {"now": now},
            ).fetchone()
            tx.point("after_read")
            if row is None:
                return None
            event_id, attempts, generation = row
            if attempts >= self.max_attempts:
                # Its last allowed lease ran out: a silent death spent the budget.
                tx.execute(
                    "UPDATE messages SET state = 'dead', lease_until = NULL, last_error = ? WHERE event_id = ?",
                    (LEASE_EXPIRED, event_id),
                )
                tx.point("after_expire")
                continue
            lease = Lease(event_id, generation + 1, attempts + 1, now + lease_seconds)
            tx.execute(
                """
                UPDATE messages
                SET state = 'leased', attempts = ?, generation = ?, lease_until = ?
                WHERE event_id = ?
                """,
                (lease.attempt, lease.generation, lease.lease_until, event_id),
            )
            tx.point("after_update")
            return lease

    # -------------------------------------------------------------- complete

    def complete(self, lease: Lease, handler: HandlerFunc) -> Completion:
        """Effect + ACK in one transaction: the heart of the protocol.

        Checks the lease, reads the payload *from the database*, asks the
        handler for the effect, INSERTs it, re-checks the lease and marks the
        message done. If the handler refuses the payload the message moves to
        retry or dead instead. Raises ``LeaseLost`` if fencing refuses; the
        effect is rolled back with the transaction.

        With a ``receipts.ReceiptHandler`` the same transaction also writes the
        operation's receipt, and a repeated operation is ACKed on the proof of
        its receipt instead of getting a second effect (see ``complete_tx``).
        """
        return self._write("complete", lambda tx: self.complete_tx(tx, lease, handler))

    def complete_tx(self, tx: Tx, lease: Lease, handler: HandlerFunc) -> Completion:
        """``complete`` inside the caller's transaction (their writes join it).

        The ACK is reached only after a new effect row, or -- with a
        ``receipts.ReceiptHandler`` -- after a receipt read in this transaction
        whose effect row exists (see ``_under_receipt``).
        """
        message = self._fenced(tx, lease)
        tx.point("after_read")

        def insert_effect(effect: Effect) -> str:
            tx.execute(
                "INSERT INTO effects (event_id, category, amount_cents) VALUES (?, ?, ?)",
                (lease.event_id, effect.category, effect.amount_cents),
            )
            tx.point("after_insert")
            return lease.event_id

        if isinstance(handler, receipts.ReceiptHandler):
            refused = self._under_receipt(tx, lease, message, handler, insert_effect)
            if refused is not None:
                return refused
        else:
            try:
                effect = handler(message.payload_object)
            except PermanentFailure as failure:
                return self._refuse(tx, lease, failure.code, permanent=True)
            except TemporaryFailure as failure:
                return self._refuse(tx, lease, failure.code, permanent=False)
            insert_effect(effect)
        self._fenced(tx, lease)  # the work may have taken long: check again
        tx.point("after_recheck")
        tx.execute(
            "UPDATE messages SET state = 'done', lease_until = NULL WHERE event_id = ?",
            (lease.event_id,),
        )
        tx.point("after_update")
        return Completion(lease.event_id, Outcome.DONE)

    def _under_receipt(
        self,
        tx: Tx,
        lease: Lease,
        message: Message,
        handler: receipts.ReceiptHandler,
        insert_effect: Callable[[Effect], str],
    ) -> Completion | None:
        """The effect under a receipt; None means: proceed to the ACK.

        * a new operation: the effect row, then its receipt (same transaction);
        * the same operation and payload again (e.g. under another event id):
          no new effect; the receipt and the effect row it names are the proof;
        * the same operation with another payload: dead, ``operation_conflict``
          (the receipt and the first effect are untouched);
        * a receipt that names no effect row: dead, ``receipt_without_effect``.
        """
        payload = message.payload_object
        try:
            tenant, operation = handler.key(payload)
            recorded = receipts.record(tx, tenant, operation, payload,
                                       lambda: insert_effect(handler.handler(payload)))
        except PermanentFailure as failure:
            return self._refuse(tx, lease, failure.code, permanent=True)
        except TemporaryFailure as failure:
            return self._refuse(tx, lease, failure.code, permanent=False)
        except ReceiptError as refusal:  # operation_conflict, or an unusable key
            return self._refuse(tx, lease, refusal.code, permanent=True)
        if recorded.reused:
            row = tx.execute("SELECT 1 FROM effects WHERE event_id = ?", (recorded.effect,)).fetchone()
            if row is None:
                return self._refuse(tx, lease, RECEIPT_WITHOUT_EFFECT, permanent=True)
        return None

    # ------------------------------------------------------------------ fail

    def fail(self, lease: Lease, code: str, *, permanent: bool = False) -> Completion:
        """Record a failed attempt: retry after a backoff, or dead.

        Permanent failures and a temporary failure on the last allowed attempt
        go to dead, keeping ``code``. Fenced like ``complete``.
        """
        return self._write("fail", lambda tx: self.fail_tx(tx, lease, code, permanent=permanent))

    def fail_tx(self, tx: Tx, lease: Lease, code: str, *, permanent: bool = False) -> Completion:
        """``fail`` inside the caller's transaction."""
        if not code:
            raise ValueError("a failure needs a non-empty error code")
        message = self._fenced(tx, lease)
        tx.point("after_read")
        return self._fail_checked(tx, message, code, permanent=permanent)

    def _refuse(self, tx: Tx, lease: Lease, code: str, *, permanent: bool) -> Completion:
        """A handler refused the payload: record it only if the lease is still current.

        The handler may have taken long, so the lease is checked again, as on
        the success path; a refusal after the lease ended raises ``LeaseLost``.
        """
        return self._fail_checked(tx, self._fenced(tx, lease), code, permanent=permanent)

    def _fail_checked(self, tx: Tx, message: Message, code: str, *, permanent: bool) -> Completion:
        if permanent or message.attempts >= self.max_attempts:
            tx.execute(
                "UPDATE messages SET state = 'dead', lease_until = NULL, last_error = ? WHERE event_id = ?",
                (code, message.event_id),
            )
            outcome = Completion(message.event_id, Outcome.DEAD, code)
        else:
            available_at = tx.now() + backoff_seconds(message.attempts)
            tx.execute(
                """
                UPDATE messages SET state = 'ready', lease_until = NULL, available_at = ?, last_error = ?
                WHERE event_id = ?
                """,
                (available_at, code, message.event_id),
            )
            outcome = Completion(message.event_id, Outcome.RETRY, code, available_at)
        tx.point("after_update")
        return outcome

    def _fenced(self, tx: Tx, lease: Lease) -> Message:
        """Return the message if ``lease`` is still its current, unexpired lease."""
        message = _fetch_message(tx.conn, lease.event_id)
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
            raise LeaseLost(f"{lease.event_id}: the lease ended at {message.lease_until} (now {now})")
        return message

    # --------------------------------------------------------------- redrive

    def redrive(self, event_ids: Iterable[str]) -> list[str]:
        """Give dead messages a new cycle (all or none); returns the ids."""
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
            row = tx.execute("SELECT state FROM messages WHERE event_id = ?", (event_id,)).fetchone()
            tx.point("after_read")
            if row is None:
                raise UnknownEvent(f"{event_id} is not in the queue")
            if row[0] != "dead":
                raise NotDead(f"{event_id} is {row[0]}; only dead messages can be redriven")
            tx.execute(
                "UPDATE messages SET state = 'ready', attempts = 0, available_at = ? WHERE event_id = ?",
                (now, event_id),
            )
            tx.point("after_update")
            done.append(event_id)
        return done

    # ----------------------------------------------------------------- reads

    def status(self) -> Snapshot:
        """Counts by stored state and the money in effects (no expiry applied)."""
        def read(conn: sqlite3.Connection) -> Snapshot:
            counts = dict(conn.execute("SELECT state, count(*) FROM messages GROUP BY state").fetchall())
            count, total = conn.execute("SELECT count(*), coalesce(sum(amount_cents), 0) FROM effects").fetchone()
            by_category = dict(conn.execute(
                "SELECT category, sum(amount_cents) FROM effects GROUP BY category ORDER BY category"
            ).fetchall())
            return Snapshot(counts, count, total, by_category)
        return self._read(read)

    def message(self, event_id: str) -> Message:
        """One stored message, as stored."""
        found = self._read(lambda conn: _fetch_message(conn, event_id))
        if found is None:
            raise UnknownEvent(f"{event_id} is not in the queue")
        return found

    def messages(self, state: str | None = None) -> list[Message]:
        """All stored messages (optionally of one state), by event id."""
        if state is not None and state not in STATES:
            raise ValueError(f"unknown state {state!r}")
        sql = f"SELECT {_MESSAGE_COLUMNS} FROM messages"
        sql += " WHERE state = ? ORDER BY event_id" if state else " ORDER BY event_id"
        params = (state,) if state else ()
        return self._read(lambda conn: [Message(*row) for row in conn.execute(sql, params)])

    def dead_letters(self) -> list[Message]:
        """The dead-letter queue: messages with ``state = 'dead'``."""
        return self.messages("dead")

    def effects(self) -> list[tuple[str, str, int]]:
        """All effects as ``(event_id, category, amount_cents)``, by event id."""
        return self._read(lambda conn: conn.execute(
            "SELECT event_id, category, amount_cents FROM effects ORDER BY event_id").fetchall())


_MESSAGE_COLUMNS = "event_id, payload, state, attempts, generation, available_at, lease_until, last_error"


def _fetch_message(conn: sqlite3.Connection, event_id: str) -> Message | None:
    row = conn.execute(f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE event_id = ?", (event_id,)).fetchone()
    return None if row is None else Message(*row)


def _schema_statements() -> list[str]:
    """Split schema.sql into statements (executescript would COMMIT first)."""
    text = resources.files("queue_core").joinpath("schema.sql").read_text(encoding="utf-8")
    statements, current = [], ""
    for line in text.splitlines(keepends=True):
        if line.lstrip().startswith("--") and not current.strip():
            continue
        current += line
        if sqlite3.complete_statement(current):
            statements.append(current.strip())
            current = ""
    return statements


def _close(conn: sqlite3.Connection, *, quiet: bool = False) -> None:
    try:
        conn.close()
    except sqlite3.Error:
        if not quiet:
            raise


_ERROR_CODES = (
    ("SQLITE_BUSY", "database_busy", "the database is locked by another process"),
    ("SQLITE_LOCKED", "database_busy", "the database is locked"),
    ("SQLITE_READONLY", "read_only", "the database is read-only"),
    ("SQLITE_FULL", "disk_full", "the database or disk is full"),
    ("SQLITE_CANTOPEN", "cannot_open", "the database file cannot be opened"),
    ("SQLITE_NOTADB", "not_a_queue_database", "the file is not a database"),
    ("SQLITE_CORRUPT", "corrupt", "the database file is corrupt"),
    ("SQLITE_CONSTRAINT", "constraint_violation", "a schema constraint refused the write"),
    # SQLite could not grow the WAL index (-shm): in practice the disk is out of space.
    ("SQLITE_IOERR_SHMSIZE", "disk_full", "the disk is full (no room for the WAL index file)"),
    ("SQLITE_IOERR", "io_error", "the operating system reported an I/O error"),
)


def _storage_error(exc: sqlite3.Error, path: Path) -> StorageError:
    """Translate an sqlite3 error into a StorageError with a stable code."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    if name.startswith("SQLITE_CANTOPEN"):
        # SQLite says "unable to open" where it may not write the file or create
        # the WAL beside it (a read-only file system, file or folder): say so.
        try:
            file_read_only = path.exists() and not os.access(path, os.W_OK)
            folder_read_only = path.parent.is_dir() and not os.access(path.parent, os.W_OK)
        except OSError:
            file_read_only = folder_read_only = False
        if file_read_only or folder_read_only:
            where = "database" if file_read_only else "folder of the database"
            return StorageError(f"{path}: the {where} is read-only for this process ({exc})", code="read_only")
    for prefix, code, sentence in _ERROR_CODES:
        if name.startswith(prefix):
            return StorageError(f"{path}: {sentence} ({exc})", code=code)
    return StorageError(f"{path}: {exc}", code="storage_error")
