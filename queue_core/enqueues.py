"""Enqueue: a validated batch in, in one transaction; duplicates and conflicts decided by id.

A batch is validated whole before any transaction (``envelope.py``), so a bad
line or item writes nothing. The stored payload is the canonical JSON text:
the same event enqueued again is a duplicate, the same id with another
payload a conflict that rejects the batch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, cast

from .envelope import Batch, check_batch, parse_batch, parse_items, payload_digest
from .errors import BatchRejected
from .rules import DEFAULT_PRIORITY, available_at, check_at, check_delay, check_priority
from .scope import Scope
from .transactions import Transactions, Tx, dooms_on_failure
from .values import EnqueueResult

class Enqueueing:
    """The store's enqueues: a facet of ``Store``, with no state of its own."""

    # set by the Store that composes this facet: its transaction runner, its queue
    _runner: Transactions
    _scope: Scope

    def enqueue(
        self,
        data: bytes | str | Batch | Sequence[Mapping[str, Any]],
        *,
        delay: int = 0,
        at: datetime | int | None = None,
        priority: int = DEFAULT_PRIORITY,
    ) -> EnqueueResult:
        """Validate a whole batch, then store its new events in one transaction.

        :param data: JSONL text or bytes, one ``{"event_id": ..., "payload": {...}}``
            per line; a ``Batch`` from ``parse_batch``; or a list of such dicts,
            validated exactly as lines are.
        :param delay: seconds before the new events can be claimed (default 0).
        :param at: instead of a delay, when they can be claimed: a datetime with
            a timezone or Unix seconds, at most ``MAX_DELAY_SECONDS`` ahead
            (a past time is now).
        :param priority: ``MIN_PRIORITY``..``MAX_PRIORITY``, higher claimed
            first among the available messages (default 0).
        :returns: how many events were new and how many were duplicates.
        :raises BatchRejected: on the first bad line or item (its number and
            code); nothing is written.
        :raises InvalidTime: ``at`` has no timezone, is too far ahead, or comes
            with a delay; nothing is written.
        """
        def parse() -> Batch:
            if isinstance(data, Batch):
                return data
            if isinstance(data, (str, bytes, bytearray)):
                return parse_batch(
                    data.encode("utf-8") if isinstance(data, str) else bytes(data),
                    self._scope.settings,
                )
            if isinstance(data, Sequence):
                return parse_items(
                    cast(Sequence[Mapping[str, Any]], data), rules=self._scope.settings
                )
            raise TypeError(
                "enqueue takes JSONL text (str or bytes), a list of dicts or a "
                f"parsed Batch, got {type(data).__name__}; "
                'one event is one line: \'{"event_id": "E0001", "payload": {...}}\''
            )

        return self._write_batch(parse, delay, at, priority)

    def send(
        self,
        event_id: str,
        payload: Mapping[str, Any],
        *,
        delay: int = 0,
        at: datetime | int | None = None,
        priority: int = DEFAULT_PRIORITY,
    ) -> EnqueueResult:
        """Enqueue one event from Python values, validated exactly as a JSONL line is.

        :param event_id: the event's id.
        :param payload: a dict of JSON values.
        :param delay: seconds before it can be claimed (default 0).
        :param at: instead of a delay, when it can be claimed (as ``enqueue``'s).
        :param priority: higher is claimed first (as ``enqueue``'s; default 0).
        :raises BatchRejected: the event breaks a rule (its code); nothing is written.
        """
        return self._write_batch(
            lambda: parse_items(
                [{"event_id": event_id, "payload": payload}],
                single=True,
                rules=self._scope.settings,
            ),
            delay,
            at,
            priority,
        )

    def _write_batch(
        self,
        parse: Callable[[], Batch],
        delay: int,
        at: datetime | int | None,
        priority: int,
    ) -> EnqueueResult:
        """Check the options enqueue and send share (before the batch: its errors
        come second), parse the batch, then store it in one transaction."""
        check_delay(delay)
        when = check_at(at, delay)
        check_priority(priority)
        batch = parse()
        return self._runner._write(
            "enqueue",
            lambda tx: self.enqueue_tx(tx, batch, delay, at=when, priority=priority),
        )

    @dooms_on_failure
    def enqueue_tx(
        self,
        tx: Tx,
        batch: Batch,
        delay: int = 0,
        *,
        at: datetime | int | None = None,
        priority: int = DEFAULT_PRIORITY,
    ) -> EnqueueResult:
        """Store a validated batch inside the caller's transaction.

        A stored event with the same canonical payload is a duplicate (a delay,
        a time or a priority does not move it); with a different one it is a
        conflict that rejects the whole batch.
        """
        check_delay(delay)
        when = check_at(at, delay)
        check_priority(priority)
        if not isinstance(batch, Batch):
            raise TypeError(
                "enqueue_tx takes a Batch from parse_batch(), "
                f"got {type(batch).__name__}"
            )
        check_batch(batch, self._scope.settings)  # parsed by another queue's rules
        now = tx.now()
        # at is absolute: compared with this transaction's clock, never converted
        ready_at = available_at(now, delay, when)
        # One read for the whole batch, then one INSERT statement for its new events.
        ids = [event.event_id for event in batch.events]
        # where no write lock does it, enqueues take turns, so that a
        # duplicate or a conflict is decided as on SQLite
        tx.ops.enqueue_turn(tx.conn)
        stored: dict[str, str] = {}
        # event_id -> SHA-256 of the canonical payload prune removed
        pruned: dict[str, str] = {}
        for event_id, text, digest in tx.ops.stored(tx.conn, self._scope.queue, ids):
            if digest is None:
                stored[event_id] = text
            else:
                pruned[event_id] = digest
        self._scope.at("enqueue.after_read")
        new: list[tuple[str, str]] = []
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
                new.append((event.event_id, event.payload))
            elif payload == event.payload:
                duplicates += 1
            else:
                raise BatchRejected(
                    "event_conflict",
                    f"{event.event_id} is already stored with a different payload; "
                    "a fix needs a new event id",
                    None if batch.unit is None else event.line,
                    unit=batch.unit or "line",
                )
        if new:
            # one statement for the whole batch: per-row statement steps cost
            # more than the CHECKs themselves (see scripts/bench.py's enqueue row)
            tx.ops.insert(
                tx.conn,
                self._scope.queue,
                new,
                now=now,
                available_at=ready_at,
                priority=priority,
            )
            self._scope.at("enqueue.after_insert")
        return EnqueueResult(accepted=len(new), duplicates=duplicates)

