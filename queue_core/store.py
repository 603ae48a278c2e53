"""The queue's protocol: ``Store``, and its claim, batches and redrive.

The store is built in layers, one concept each: ``transactions.py`` (the
runner), ``reads.py`` (reads and prune), ``completion.py`` (the fenced
completions), ``enqueues.py`` (validated batches in), then this module; ``rules.py`` holds the numbers they live by,
and each engine its statements (``engines/*_queries.sql``, run through ``engines/queries.py``).

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
inside the caller's.

Connections and transactions are ``transactions.py``'s, reads and prune
``reads.py``'s, the statements and what differs between engines
``engines/``'s; an optional
*probe* (``Store(..., probe=...)``) is told each named step of each operation,
which is how the crash tests stop a real process at an exact point.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

from .clock import Clock, SystemClock
from .enqueues import Enqueues
from .engines import engine_for
from .errors import LeaseLost, NotDead, UnknownEvent, UnknownQueue
from .queues import DEFAULT_QUEUE, DEFAULT_SETTINGS, check_queue_name
from .rules import (
    BATCH_OPERATIONS,
    BUSY_RETRY_SECONDS,
    BUSY_TIMEOUT_MS,
    DEFAULT_LEASE_SECONDS,
    HANDLER_ERROR,
    LEASE_EXPIRED,
    MAX_ATTEMPTS,
    MAX_BATCH,
    MAX_LEASE_SECONDS,
    OPERATIONS,
    PROBE_POINTS,
    MessageHandler,
    backoff_seconds,
    check_count,
    check_handler,
    check_lease,
    lease_deadline,
    refusal,
)
from .transactions import Probe, Tx
from .values import Claimed, Completion, Lease, Message, Outcome, new_lease_token

__all__ = [  # what the store's module offers, its own and the rules it runs by
    "BATCH_OPERATIONS",
    "BUSY_RETRY_SECONDS",
    "BUSY_TIMEOUT_MS",
    "DEFAULT_LEASE_SECONDS",
    "HANDLER_ERROR",
    "LEASE_EXPIRED",
    "MAX_ATTEMPTS",
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

class Store(Enqueues):
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
        # chosen once: the protocol below never asks which engine it runs on
        engine = engine_for(path, busy_timeout_ms=busy_timeout_ms)
        self.busy_timeout_ms = busy_timeout_ms
        self.settings = DEFAULT_SETTINGS
        super().__init__(
            engine,
            clock if clock is not None else SystemClock(),
            # no clock given: the engine's own, where it has one (the server's)
            server_clock=clock is None and engine.has_clock,
            busy_retry_seconds=busy_retry_seconds,
            probe=probe,
            queue=queue,
        )
        try:
            engine.open_queue(self._thread_connection, create=create)
            # The default queue's row never changes (create_queue refuses other
            # settings): opening it reads nothing, so writes nothing beside the file.
            found = DEFAULT_SETTINGS if queue == DEFAULT_QUEUE else self.queue_settings(queue)
            if found is None:
                raise UnknownQueue(
                    f"no queue {queue!r} in {self.where}; create it first "
                    f"(queue-core create {queue}, or Store.create_queue)"
                )
            self.settings = found
            self.max_attempts = found.max_attempts if max_attempts is None else max_attempts
        except BaseException:
            self.close()  # a refused target keeps no connection of ours
            raise

    @property
    def target(self) -> str | Path:
        """The SQLite file, or the ``postgresql://`` URL: what ``Store()`` was given."""
        return self.engine.target

    @property
    def where(self) -> str:
        """The file, or the URL without its password: what messages name."""
        return self.engine.where

    def __repr__(self) -> str:
        queue = "" if self.queue == DEFAULT_QUEUE else f", queue={self.queue!r}"
        return f"Store({self.where!r}{queue}, clock={self.clock!r})"

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ----------------------------------------------------------------- claim

    def claim(self, lease_seconds: int | None = None) -> Lease | None:
        """Lease the next available message, or return None if there is none now.

        :param lease_seconds: how long the lease lasts; complete before
            ``lease.lease_until``.
        :returns: the lease (event id, generation, attempt, deadline), or ``None``.
        """
        lease_seconds = self.lease_seconds_for(lease_seconds)
        return self._write("claim", lambda tx: self.claim_tx(tx, lease_seconds))

    def claim_tx(
        self, tx: Tx, lease_seconds: int | None = None
    ) -> Lease | None:
        """Choose and lease a message inside the caller's ``BEGIN IMMEDIATE``.

        A ready message whose ``available_at`` has come, or a leased one whose
        lease has expired (applied lazily here; there is no sweeper). Order:
        ``available_at, event_id``. A message whose last allowed claim expired
        goes to dead instead, and the search goes on.
        """
        lease_seconds = self.lease_seconds_for(lease_seconds)
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
        token = new_lease_token()  # one per claim transaction: the generation names the row
        leases: list[Lease] = []
        while len(leases) < count:
            rows = tx.ops.claim_candidates(tx.conn, self.queue, now, count - len(leases))
            self._at("claim.after_read")
            if not rows:
                break
            for event_id, attempts, generation, expired_at in rows:
                # a leased candidate: its lease ran out
                if attempts >= self.max_attempts:
                    tx.ops.expire_to_dead(
                        tx.conn,
                        self.queue,
                        event_id,
                        LEASE_EXPIRED,
                        f"the lease of claim {attempts} of {self.max_attempts} "
                        f"ended at {expired_at} with no completion",
                    )
                    self._at("claim.after_expire")
                    continue
                lease = Lease(event_id, generation + 1, attempts + 1, lease_until, token)
                tx.ops.lease(tx.conn, self.queue, lease, expired=expired_at is not None)
                self._at("claim.after_update")
                leases.append(lease)
        return leases

    # ------------------------------------------------ the worker's claim

    def claim_message(
        self, lease_seconds: int | None = None
    ) -> Claimed | None:
        """Lease the next available message and return it with the message: one statement.

        The worker's path. It leases what ``claim`` leases, in the same order
        and with the same rule for a lease that ran out for the last time, but
        chooses and takes in one ``UPDATE ... RETURNING`` that commits by
        itself (one round trip on PostgreSQL), and returns the message, so
        that ``complete_message`` needs no read of its own.

        :param lease_seconds: how long the lease lasts.
        :returns: the lease and its message, or ``None`` if none is available now.
        """
        lease_seconds = self.lease_seconds_for(lease_seconds)
        claimed = self._alone(lambda tx: self.claim_messages_tx(tx, 1, lease_seconds))
        return claimed[0] if claimed else None

    def claim_messages(
        self, count: int, lease_seconds: int | None = None
    ) -> list[Claimed]:
        """Lease up to ``count`` messages in one statement, with their messages.

        The batched worker's claim: what ``claim_many`` leases, as
        ``claim_message`` takes one. Complete them with ``complete_many``.
        """
        check_count(count)
        lease_seconds = self.lease_seconds_for(lease_seconds)
        return self._alone(lambda tx: self.claim_messages_tx(tx, count, lease_seconds))

    def claim_messages_tx(
        self, tx: Tx, count: int, lease_seconds: int | None = None
    ) -> list[Claimed]:
        """Lease up to ``count`` messages with ``claim_messages``, in claim order."""
        check_count(count)
        lease_seconds = self.lease_seconds_for(lease_seconds)
        token = new_lease_token()  # one per claim transaction, as in claim
        times = tx.times(lease_seconds)
        claimed: list[Claimed] = []
        while len(claimed) < count:
            wanted = count - len(claimed)
            taken = tx.ops.claim_messages(
                tx.conn,
                self.queue,
                wanted,
                max_attempts=self.max_attempts,
                token=token,
                times=times,
                lease_expired=LEASE_EXPIRED,
            )
            # RETURNING gives no order: the claim order is available_at, event_id
            if len(taken) > 1:
                taken.sort(key=_claim_order)
            for message in taken:
                if message.state == "leased" and message.lease_until is not None:
                    lease = Lease(
                        message.event_id,
                        message.generation,
                        message.attempts,
                        message.lease_until,
                        token,
                    )
                    claimed.append(Claimed(lease, message))
            # fewer rows than wanted: nothing more is claimable now (a full set
            # with dead ones in it: look again, as claim does)
            if len(taken) < wanted:
                break
        return claimed

    # ------------------------------------------------------------- batches

    def claim_many(
        self, count: int, lease_seconds: int | None = None
    ) -> list[Lease]:
        """Lease up to ``count`` available messages in one transaction (batched).

        Each lease is the one ``claim`` would have given, with its own
        generation; they only share one commit. Empty if nothing is available.

        :param count: at most this many leases (1..``MAX_BATCH``).
        :param lease_seconds: how long each lease lasts; it must cover the whole
            batch's work.
        """
        check_count(count)
        lease_seconds = self.lease_seconds_for(lease_seconds)
        return self._write(
            "claim_many", lambda tx: self.claim_many_tx(tx, count, lease_seconds)
        )

    def claim_many_tx(
        self, tx: Tx, count: int, lease_seconds: int | None = None
    ) -> list[Lease]:
        """``claim_many`` inside the caller's transaction."""
        check_count(count)
        lease_seconds = self.lease_seconds_for(lease_seconds)
        return self._claim_up_to(tx, count, lease_seconds, tx.instant())

    def complete_many(
        self, leases: Iterable[Lease | Claimed], handler: MessageHandler
    ) -> list[Completion]:
        """Complete several leased messages in one transaction.

        Each message has its own effect and ACK.

        Every message runs exactly as in ``complete`` (fenced check, the
        handler's writes, re-check, ACK), inside a savepoint of its own: its
        effect and its ACK are kept or undone together. A lease lost for one
        message undoes only that message and is reported as
        ``Outcome.LEASE_LOST`` instead of raised, so the others still commit.
        Given what ``claim_messages`` returned, there is no read before the
        effects: every handler runs, then one fenced ACK marks them all done,
        and only if each lease is still current; otherwise (or if a handler
        refuses, or a statement fails) that attempt is undone and the batch
        runs one message at a time as in ``complete_message``.

        :param leases: what ``claim_many`` or ``claim_messages`` returned (at most
            ``MAX_BATCH``).
        :param handler: as for ``complete``.
        :returns: one completion per lease, in the order given.
        """
        batch: list[Lease | Claimed] = list(leases)
        for lease in batch:
            check_lease(lease.lease if isinstance(lease, Claimed) else lease)
        if len(batch) > MAX_BATCH:
            raise ValueError(
                f"complete_many takes at most {MAX_BATCH} leases, got {len(batch)}"
            )
        check_handler(handler)
        return self._write(
            "complete_many", lambda tx: self.complete_many_tx(tx, batch, handler)
        )

    def complete_many_tx(
        self, tx: Tx, leases: Iterable[Lease | Claimed], handler: MessageHandler
    ) -> list[Completion]:
        """``complete_many`` inside the caller's transaction."""
        batch = list(leases)
        claimed = [item for item in batch if isinstance(item, Claimed)]
        if claimed and len(claimed) == len(batch):
            done = self._complete_claimed_tx(tx, claimed, handler)
            if done is not None:
                return done
        results: list[Completion] = []
        for item in batch:
            lease, message = (
                (item.lease, item.message)
                if isinstance(item, Claimed)
                else (item, None)
            )
            try:
                # undoes its own message on LeaseLost
                results.append(self._complete_with(tx, lease, handler, message))
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
            state = tx.ops.state(tx.conn, self.queue, event_id)
            self._at("redrive.after_read")
            if state is None:
                raise UnknownEvent(f"{event_id} is not in the queue")
            if state != "dead":
                raise NotDead(
                    f"{event_id} is {state}; only dead messages can be redriven"
                )
            tx.ops.redrive(tx.conn, self.queue, event_id, now)
            self._at("redrive.after_update")
            done.append(event_id)
        return done


def _claim_order(message: Message) -> tuple[int, str]:
    return message.available_at, message.event_id
