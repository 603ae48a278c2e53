"""Claiming: a lease on the next message, one or a batch, and redrive.

A claim chooses a ready message (or a leased one whose lease ran out) in the
claim order, ``priority DESC, available_at, event_id`` (the highest priority
first, then the earliest ``available_at``, then the event id bytewise), and
leases it with the next generation, in one transaction; a message whose last
allowed lease ran out goes to dead instead. A batch comes back in that order.
Redrive gives dead messages a new cycle.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from .errors import NotDead, UnknownEvent
from .rules import LEASE_EXPIRED, check_count
from .scope import Scope
from .transactions import Transactions, Tx, dooms_on_failure
from .values import Claimed, Lease, new_lease_token

# Dead messages redrive_all gives a new cycle per transaction (and statement).
REDRIVE_CHUNK: Final = 1_000
# The longest error code redrive_all accepts as a filter (a code is a short name).
MAX_CODE_LENGTH: Final = 200


class Claiming:
    """The store's claims and redrive: a facet of ``Store``, with no state of its own."""

    # set by the Store that composes this facet: its transaction runner, its queue
    _runner: Transactions
    _scope: Scope

    # ----------------------------------------------------------------- claim

    def claim(self, lease_seconds: int | None = None) -> Lease | None:
        """Lease the next available message, or return None if there is none now.

        :param lease_seconds: how long the lease lasts; complete before
            ``lease.lease_until``.
        :returns: the lease (event id, generation, attempt, deadline), or ``None``.
        """
        lease_seconds = self._scope.lease_seconds_for(lease_seconds)
        return self._runner._write("claim", lambda tx: self.claim_tx(tx, lease_seconds))

    @dooms_on_failure
    def claim_tx(
        self, tx: Tx, lease_seconds: int | None = None
    ) -> Lease | None:
        """Choose and lease a message inside the caller's ``BEGIN IMMEDIATE``.

        A ready message whose ``available_at`` has come, or a leased one whose
        lease has expired (applied lazily here; there is no sweeper). Order:
        ``priority DESC, available_at, event_id``. A message whose last allowed
        claim expired goes to dead instead, and the search goes on.
        """
        taken = self._claim(tx, 1, self._scope.lease_seconds_for(lease_seconds))
        return taken[0].lease if taken else None

    def _claim(self, tx: Tx, count: int, lease_seconds: int) -> list[Claimed]:
        """The claim, the one every path runs: the next ``count`` claimable messages, leased.

        One statement chooses and leases them (``claim_messages``), so no
        other claim can come between the choice and the lease; a candidate
        whose last allowed lease ran out goes to dead in it (a silent death
        spent the budget), and the search goes on past it. The clock is read
        once: what has come is decided on it rounded down, a new lease counts
        from it rounded up. One claim token for the whole claim. The leases
        come back in the claim order, so a batch is completed in it too.
        """
        token = new_lease_token()  # one per claim: the generation names the row
        times = tx.times(lease_seconds)
        claimed: list[Claimed] = []
        while len(claimed) < count:
            wanted = count - len(claimed)
            taken = tx.ops.claim_messages(
                tx.conn,
                self._scope.queue,
                wanted,
                max_attempts=self._scope.max_attempts,
                token=token,
                times=times,
                lease_expired=LEASE_EXPIRED,
            )
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
                    self._scope.at("claim.after_update")
            # fewer rows than wanted: nothing more is claimable now (a full set
            # with dead ones in it: look again)
            if len(taken) < wanted:
                break
        # RETURNING gives no order: the claim order, as the statement's ORDER BY
        claimed.sort(key=_claim_order)
        return claimed

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
        lease_seconds = self._scope.lease_seconds_for(lease_seconds)
        claimed = self._runner._alone(lambda tx: self.claim_messages_tx(tx, 1, lease_seconds))
        return claimed[0] if claimed else None

    def claim_messages(
        self, count: int, lease_seconds: int | None = None
    ) -> list[Claimed]:
        """Lease up to ``count`` messages in one statement, with their messages.

        The batched worker's claim: what ``claim_many`` leases, as
        ``claim_message`` takes one. Complete them with ``complete_many``.
        """
        check_count(count)
        lease_seconds = self._scope.lease_seconds_for(lease_seconds)
        return self._runner._alone(lambda tx: self.claim_messages_tx(tx, count, lease_seconds))

    @dooms_on_failure
    def claim_messages_tx(
        self, tx: Tx, count: int, lease_seconds: int | None = None
    ) -> list[Claimed]:
        """Lease up to ``count`` messages with their messages, in claim order."""
        check_count(count)
        return self._claim(tx, count, self._scope.lease_seconds_for(lease_seconds))

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
        lease_seconds = self._scope.lease_seconds_for(lease_seconds)
        return self._runner._write(
            "claim_many", lambda tx: self.claim_many_tx(tx, count, lease_seconds)
        )

    @dooms_on_failure
    def claim_many_tx(
        self, tx: Tx, count: int, lease_seconds: int | None = None
    ) -> list[Lease]:
        """``claim_many`` inside the caller's transaction."""
        check_count(count)
        taken = self._claim(tx, count, self._scope.lease_seconds_for(lease_seconds))
        return [claimed.lease for claimed in taken]

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
        return self._runner._write("redrive", lambda tx: self.redrive_tx(tx, ids))

    @dooms_on_failure
    def redrive_tx(self, tx: Tx, event_ids: Iterable[str]) -> list[str]:
        """Reset ``attempts`` and make dead messages available now.

        ``generation`` and the payload are kept, so a worker of the previous
        cycle still cannot complete. Any id that is not dead rejects them all.
        """
        now = tx.now()
        ids = list(dict.fromkeys(event_ids))  # the same id twice is one request
        # every id is checked before the first is written: a refusal writes nothing
        for event_id in ids:
            state = tx.ops.state(tx.conn, self._scope.queue, event_id)
            self._scope.at("redrive.after_read")
            if state is None:
                raise UnknownEvent(f"{event_id} is not in the queue")
            if state != "dead":
                raise NotDead(
                    f"{event_id} is {state}; only dead messages can be redriven"
                )
        for event_id in ids:
            tx.ops.redrive(tx.conn, self._scope.queue, event_id, now)
            self._scope.at("redrive.after_update")
        return ids

    def redrive_all(self, code: str | None = None) -> list[str]:
        """Give every dead message (of one error ``code``) a new cycle; returns the ids.

        One transaction per chunk of ``REDRIVE_CHUNK`` messages, each one
        statement: the write lock is given back between chunks, so workers
        go on while thousands are redriven, and each chunk is all or
        nothing. A message redriven here that dies again before the last
        chunk is not redriven twice (the chunks go forward by event id).

        :param code: only dead messages whose ``last_error`` is this code;
            ``None``: every dead message.
        :returns: the redriven ids, by event id (empty: none was dead).
        """
        check_error_code(code)
        done: list[str] = []
        after = ""  # every event id sorts after the empty string
        while True:
            chunk = self._runner._write(
                "redrive", lambda tx: self._redrive_chunk(tx, code, after)
            )
            if not chunk:
                return done
            done += chunk
            after = chunk[-1]

    @dooms_on_failure
    def redrive_all_tx(self, tx: Tx, code: str | None = None) -> list[str]:
        """``redrive_all`` inside the caller's transaction (all of it in that one)."""
        check_error_code(code)
        done: list[str] = []
        while chunk := self._redrive_chunk(tx, code, done[-1] if done else ""):
            done += chunk
        return done

    def _redrive_chunk(self, tx: Tx, code: str | None, after: str) -> list[str]:
        """The next chunk of dead messages after ``after`` redriven, by event id."""
        ids = tx.ops.redrive_dead(
            tx.conn,
            self._scope.queue,
            code=code,
            after=after,
            limit=REDRIVE_CHUNK,
            now=tx.now(),
        )
        self._scope.at("redrive.after_update")
        # RETURNING promises no order; Python sorts ids as the database does (bytewise)
        return sorted(ids)


def check_error_code(code: object) -> None:
    """Check ``redrive_all``'s ``code``: None, or an error code as stored."""
    if code is None:
        return
    if not isinstance(code, str):
        raise TypeError(
            f"code must be an error code (str) or None, got {type(code).__name__}"
        )
    if not 1 <= len(code) <= MAX_CODE_LENGTH:
        raise ValueError(
            f"code must be 1..{MAX_CODE_LENGTH} characters, got {len(code)}"
        )


def _claim_order(claimed: Claimed) -> tuple[int, int, str]:
    """The claim order of ``claim_messages``' ORDER BY: priority DESC, available_at, event_id.

    Python compares strings by code point, which is the bytewise order of
    their UTF-8 (SQLite's BINARY, PostgreSQL's COLLATE "C").
    """
    message = claimed.message
    return -message.priority, message.available_at, message.event_id
