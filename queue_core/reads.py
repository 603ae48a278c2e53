"""What a store reports and keeps of its queue: counts, metrics, messages, prune.

None of these changes a message's state: the reads run in one snapshot each
(``Transactions.read``), and prune only replaces the payloads of old done
messages by their hash.
"""

from __future__ import annotations

from typing import Final

from .envelope import payload_digest
from .errors import UnknownEvent
from .scope import Scope
from .transactions import Transactions, Tx, dooms_on_failure
from .values import STATES, Latency, Message, Metrics, Pruned, StateCounts

# Payloads prune reads and rewrites per statement.
PRUNE_CHUNK: Final = 1_000


class Reading:
    """The store's reads and prune: a facet of ``Store``, with no state of its own."""

    # set by the Store that composes this facet: its transaction runner, its queue
    _runner: Transactions
    _scope: Scope

    def status(self) -> StateCounts:
        """Counts by stored state (no expiry applied): all four states, 0 where none."""
        return self._runner.read(self.status_tx)

    def status_tx(self, view: Tx) -> StateCounts:
        """``status`` inside the caller's transaction or snapshot."""
        return StateCounts.of(view.ops.counts(view.conn, self._scope.queue))

    def metrics(self) -> Metrics:
        """Counts, oldest ready age, dead attempts, enqueue-to-done, work counters."""
        return self._runner.read(self.metrics_tx)

    def metrics_tx(self, view: Tx) -> Metrics:
        """``metrics`` inside the caller's transaction or snapshot."""
        return queue_metrics(view, self._scope.queue)

    def metrics_all(self) -> dict[str, Metrics]:
        """The metrics of every queue of the database, by name, in one snapshot."""
        return self._runner.read(self.metrics_all_tx)

    def metrics_all_tx(self, view: Tx) -> dict[str, Metrics]:
        """``metrics_all`` inside the caller's transaction or snapshot."""
        names = [row[0] for row in view.ops.queues(view.conn)]
        return {name: queue_metrics(view, name) for name in names}

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
        return self._runner._write(None, lambda tx: self.prune_tx(tx, older_than_seconds))

    @dooms_on_failure
    def prune_tx(self, tx: Tx, older_than_seconds: int) -> Pruned:
        """``prune`` inside the caller's transaction."""
        cutoff = tx.now() - older_than_seconds
        pruned = 0
        while True:  # in chunks, so that memory stays flat however many payloads go
            rows = tx.ops.prunable(tx.conn, self._scope.queue, cutoff, PRUNE_CHUNK)
            if not rows:
                break
            tx.ops.prune(
                tx.conn,
                self._scope.queue,
                [(event_id, payload_digest(payload)) for event_id, payload in rows],
            )
            pruned += len(rows)
        return Pruned(pruned=pruned, unknown_age=tx.ops.unknown_age(tx.conn, self._scope.queue))

    def message(self, event_id: str) -> Message:
        """One stored message, as stored."""
        found = self._runner.read(lambda view: fetch_message(view, self._scope.queue, event_id))
        if found is None:
            raise UnknownEvent(f"{event_id} is not in the queue")
        return found

    def messages(
        self, state: str | None = None, *, limit: int | None = None
    ) -> list[Message]:
        """The stored messages (optionally of one state), by event id.

        :param state: only messages in this state.
        :param limit: at most this many (the first by event id); ``None``: all.
        """
        if state is not None and state not in STATES:
            raise ValueError(f"unknown state {state!r}; states are {', '.join(STATES)}")
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < 1
        ):
            raise ValueError(f"limit must be a positive integer or None, got {limit!r}")

        return self._runner.read(lambda view: view.ops.messages(view.conn, self._scope.queue, state, limit))

    def purge(self, state: str) -> int:
        """Remove every ``ready`` or every ``dead`` message; returns how many.

        Never a leased message (a worker holds it) nor a done one (its id is
        what deduplication remembers). The removed ids are forgotten: the same
        id enqueued again is a new message. One transaction.

        :param state: ``"ready"`` or ``"dead"``.
        """
        if state not in ("ready", "dead"):
            raise ValueError(
                f"purge removes ready or dead messages, got {state!r}: a leased "
                "message is being worked on, and a done one keeps deduplication exact"
            )
        return self._runner._write(None, lambda tx: self.purge_tx(tx, state))

    @dooms_on_failure
    def purge_tx(self, tx: Tx, state: str) -> int:
        """``purge`` inside the caller's transaction."""
        if state not in ("ready", "dead"):
            raise ValueError(f"purge removes ready or dead messages, got {state!r}")
        return tx.ops.purge(tx.conn, self._scope.queue, state)

    def dead_letters(self) -> list[Message]:
        """The dead-letter queue: messages with ``state = 'dead'``."""
        return self.messages("dead")


def queue_metrics(view: Tx, queue: str) -> Metrics:
    """The metrics of ``queue`` in ``view``: any queue of the database."""
    ops, conn = view.ops, view.conn
    now = view.now()
    counts = StateCounts.of(ops.counts(conn, queue)).messages
    oldest = ops.oldest_ready(conn, queue)
    done, longest, total = ops.done_summary(conn, queue)

    def percentile(p: int) -> int | None:
        if not done:
            return None
        rank = max(1, -(-p * done // 100))  # nearest rank: ceil(p/100 * n)
        return ops.done_seconds_at(conn, queue, rank - 1)

    _, pruned = ops.expired_and_pruned(conn, queue)
    counters = ops.work_counters(conn, queue)
    return Metrics(
        now=now,
        messages=counts,
        oldest_ready_age=None if oldest is None else max(0, now - oldest),
        dead_attempts=ops.dead_attempts(conn, queue),
        enqueue_to_done=Latency(done, percentile(50), percentile(95), longest, total),
        # the total that only grows: a purged message's expired leases stay counted
        expired_leases=counters.expired_leases,
        pruned=pruned,
        counters=counters,
    )


def fetch_message(tx: Tx, queue: str, event_id: str) -> Message | None:
    """One message of ``queue``, or None."""
    return tx.ops.message(tx.conn, queue, event_id)
