"""Completing a leased message: effect + ACK, failure, extension, heartbeat.

Every operation here is fenced: it changes the message only while the lease
it is given is the message's current, unexpired lease (state leased, the
generation, the claim token and the deadline, checked inside the writing
transaction), and raises ``LeaseLost`` otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence

from .engines import THREADS
from .errors import HandlerFailure, LeaseLost, StorageError, check_retry_after
from .heartbeat import Heartbeat, check_heartbeat
from .rules import (
    MAX_BATCH,
    MessageHandler,
    Refused,
    check_code,
    check_handler,
    check_lease,
    lease_deadline,
    refusal,
    retry_after_of,
    retry_draw,
)
from .scope import Scope
from .transactions import Transactions, Tx, dooms_on_failure
from .values import Claimed, Completion, Lease, Message, Outcome

# The queue's own savepoints (engines/caller_statements.py refuses a caller's use).
_MESSAGE = "queue_core_message"
_BATCH = "queue_core_batch"
_HANDLER = "queue_core_handler"  # around each handler of a batch


class Completing:
    """The store's completions: a facet of ``Store``, with no state of its own."""

    # set by the Store that composes this facet: its transaction runner, its queue
    _runner: Transactions
    _scope: Scope
    # the heartbeat's thread closes its own connection when it ends
    _release_thread_connection: Callable[[], None]

    # -------------------------------------------------------------- complete

    def complete(self, lease: Lease, handler: MessageHandler) -> Completion:
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
        check_lease(lease)
        check_handler(handler)
        return self._runner._write(
            "complete", lambda tx: self._complete_with(tx, lease, handler)
        )

    def _complete_with(
        self,
        tx: Tx,
        lease: Lease,
        handler: MessageHandler,
        claimed: Message | None = None,
    ) -> Completion:
        """One message's completion inside a transaction that goes on after it.

        A savepoint holds this message's effect and ACK: a refusing handler's
        partial writes are undone while the refusal is still recorded in this
        transaction, and a lost lease undoes this message only (complete_many
        goes on with the next one).
        """
        tx.raise_if_doomed()  # a caller's earlier failure is not forgotten
        tx.savepoint(_MESSAGE)
        try:
            try:
                result = self._effects_then_ack(tx, [(lease, claimed)], handler)[0]
            except Refused as refused:
                if not tx.conn.in_transaction:
                    # SQLite itself ended the transaction (e.g. a full disk):
                    # nothing is left to record the refusal in
                    raise refused.error from None
                # undo the handler's writes; the read before them wrote nothing
                tx.rollback_to(_MESSAGE)
                result = self._refuse(
                    tx, lease, *refusal(refused.error), retry_after_of(refused.error)
                )
        except LeaseLost:
            if tx.conn.in_transaction:
                tx.rollback_to(_MESSAGE)
                tx.release(_MESSAGE)
            raise
        tx.release(_MESSAGE)
        return result

    def _effects_then_ack(
        self, tx: Tx, batch: Sequence[tuple[Lease, Message | None]], handler: MessageHandler
    ) -> list[Completion]:
        """The completion, written once: each message's effect, then one fenced ACK for all.

        A message not given is read first, fenced, from the database (the
        payload never comes from the caller). A handler that refuses or raises
        ends it with ``Refused``; the caller undoes the effects and records
        the refusal (``_refuse``), in this transaction or in one of its own.
        """
        tx.raise_if_doomed()
        read: list[Lease] = []
        for lease, message in batch:
            if message is None:
                message = self.leased_tx(tx, lease)
                read.append(lease)
                self._scope.at("complete.after_read")
            try:
                if len(batch) > 1:  # no later handler can ROLLBACK TO its savepoints
                    tx.savepoint(_HANDLER)
                handler(tx, message)
                tx.raise_if_doomed()  # a failure it caught, or a fence it let pass
                if len(batch) > 1:
                    tx.release(_HANDLER)
            except Exception as exc:
                # what raised after a caught failure (PostgreSQL refuses every
                # later statement) is its consequence: the failure is the reason
                doomed = tx.doom_error()
                if doomed is not None and not isinstance(exc, HandlerFailure) and (
                    exc is not tx.doom_cause
                ):
                    raise Refused(doomed) from exc
                raise Refused(exc) from exc
            self._scope.at("complete.after_effect")
        leases = [lease for lease, _ in batch]
        if not read:
            return self._ack(tx, leases, tx.times())
        # what was read before the effect is checked again after it, as complete_tx does
        now = tx.now()
        for lease in read:
            self._recheck(tx, lease, now)
        return self._ack(tx, leases, {"now": now})

    def _complete_claimed_tx(
        self, tx: Tx, batch: list[Claimed], handler: MessageHandler
    ) -> list[Completion] | None:
        """A batch's usual case: the completion of all its messages at once.

        The statements go out together (on PostgreSQL, one round trip for the
        whole batch). Anything unusual, a handler that refuses or raises, a
        statement that fails, a lease that is not current any more, undoes
        the whole attempt and returns None: the caller then completes the
        messages one at a time, which says what happened to each.
        """
        tx.raise_if_doomed()  # a caller's earlier failure is not forgotten
        tx.savepoint(_BATCH)
        try:
            with tx.engine.together(tx.conn):
                done = self._effects_then_ack(
                    tx, [(c.lease, c.message) for c in batch], handler
                )
        except (Refused, LeaseLost, StorageError) as unusual:
            if not tx.conn.in_transaction:
                # SQLite itself ended the transaction (e.g. a full disk): nothing
                # is left to undo to, or to record a refusal in
                raise (unusual.error if isinstance(unusual, Refused) else unusual) from None
            tx.rollback_to(_BATCH)
            tx.release(_BATCH)
            return None
        tx.release(_BATCH)
        return done

    def complete_message(self, claimed: Claimed, handler: MessageHandler) -> Completion:
        """Effect + ACK of what ``claim_message`` returned: the worker's path.

        One transaction: ``handler(tx, message)`` writes the effect, then the
        fenced ACK marks the message done only while the lease is its current,
        unexpired lease; if fencing refuses, ``LeaseLost`` is raised and the
        effect is rolled back with it. The message comes from the claim's own
        statement, so there is no read before the effect: the ACK is the fence.
        If the handler refuses the payload (or raises), the transaction is
        rolled back and the refusal is recorded, fenced, in a second one.

        :returns: the outcome: ``DONE``, ``RETRY`` or ``DEAD``.
        :raises LeaseLost: the lease is no longer the message's current, unexpired
            lease.
        """
        if not isinstance(claimed, Claimed):
            raise TypeError(
                "complete_message takes what claim_message returned, "
                f"got {type(claimed).__name__}"
            )
        check_handler(handler)
        pair = [(claimed.lease, claimed.message)]
        try:
            return self._runner._write(
                "complete", lambda tx: self._effects_then_ack(tx, pair, handler)[0]
            )
        except Refused as refused:
            code, detail, permanent = refusal(refused.error)
            after = retry_after_of(refused.error)
        return self._runner._write(
            "fail",
            lambda tx: self._refuse(tx, claimed.lease, code, detail, permanent, after),
        )

    @dooms_on_failure
    def ack_tx(self, tx: Tx, lease: Lease) -> Completion:
        """The fence and the ACK in one statement, with the engine's clock.

        Marks the message done only while ``lease`` is its current, unexpired
        lease; otherwise raises ``LeaseLost`` saying why. Raises
        ``StatementFailed`` instead if a statement run through ``tx`` failed.
        """
        tx.raise_if_doomed()
        return self._ack(tx, [lease], tx.times())[0]

    @dooms_on_failure
    def leased_tx(self, tx: Tx, lease: Lease) -> Message:
        """The message if ``lease`` is its current, unexpired lease, else ``LeaseLost``.

        The fenced check that opens a completion: the payload comes from here,
        from the database, never from the caller.
        """
        check_lease(lease)
        found = tx.ops.lease_locked(tx.conn, self._scope.queue, lease.event_id)
        now = tx.now()
        if found is None:
            raise LeaseLost(f"{lease.event_id} is not in the queue")
        message, token = found
        if message.generation != lease.generation:
            raise LeaseLost(
                f"{lease.event_id}: generation {lease.generation} is stale; "
                f"the message was claimed again (generation {message.generation})"
            )
        if token != lease.token:
            # the same generation from another claim: the database lost the
            # claim that issued this lease, and issued its generation again
            raise LeaseLost(
                f"{lease.event_id}: generation {lease.generation} was issued again "
                "(the claim token differs: its claim was lost)"
            )
        if message.state != "leased" or message.lease_until is None:
            raise LeaseLost(f"{lease.event_id} is {message.state}, not leased")
        if not now < message.lease_until:
            raise LeaseLost(
                f"{lease.event_id}: the lease ended at {message.lease_until} "
                f"(now {now})"
            )
        return message

    @dooms_on_failure
    def complete_tx(self, tx: Tx, lease: Lease) -> Completion:
        """The ACK inside the caller's transaction, after the caller's own writes.

        Re-checks the lease (the work may have taken long) and marks the
        message done. If fencing refuses it raises ``LeaseLost`` and dooms
        ``tx``: your writes roll back with it, and if you catch the error,
        the transaction's COMMIT raises ``LeaseLost`` again. A statement of
        yours that failed in ``tx``, even one whose error you caught, makes it
        raise ``StatementFailed`` instead of acknowledging.
        """
        check_lease(lease)
        tx.raise_if_doomed()
        now = tx.now()
        self._recheck(tx, lease, now)
        return self._ack(tx, [lease], {"now": now})[0]

    def _recheck(self, tx: Tx, lease: Lease, now: int) -> None:
        """Before the ACK of work that took long: a lease that ran out says so."""
        if not now < lease.lease_until:
            self.leased_tx(tx, lease)  # raises LeaseLost saying why
        self._scope.at("complete.after_recheck")

    def _ack(
        self, tx: Tx, leases: list[Lease], times: Mapping[str, int | None]
    ) -> list[Completion]:
        """The fence and the ACK in one statement: all done, or ``LeaseLost`` with why.

        The rows change only while each lease is its message's current,
        unexpired lease (the engine's ``fenced_move``).
        """
        acked = tx.ops.ack(tx.conn, self._scope.queue, leases, times)
        if acked != len(leases):
            for lease in leases:
                self.leased_tx(tx, lease)  # raises LeaseLost with the reason
            raise LeaseLost(
                f"{leases[0].event_id}: generation {leases[0].generation} "
                "is no longer the current lease"
            )
        for _ in leases:
            self._scope.at("complete.after_update")
        return [Completion(lease.event_id, Outcome.DONE) for lease in leases]

    # --------------------------------------------------------------- release

    def release(self, lease: Lease) -> Completion:
        """Give a lease back unfinished: the message is ready again at once.

        Fenced like ``complete``. The message keeps its place in the claim
        order, and the claim that took it does not count as an attempt: a
        worker that stops before it starts a message has not tried it. The
        generation stays, so the released lease can no longer complete.

        :param lease: the current lease (what ``claim`` returned).
        :returns: the outcome ``RELEASED``.
        :raises LeaseLost: the lease is no longer the message's current,
            unexpired lease (nothing is changed).
        """
        check_lease(lease)
        return self._runner._write("release", lambda tx: self.release_tx(tx, lease))

    @dooms_on_failure
    def release_tx(self, tx: Tx, lease: Lease) -> Completion:
        """``release`` inside the caller's transaction."""
        self.leased_tx(tx, lease)  # the fence: raises LeaseLost saying why
        self._scope.at("release.after_read")
        # the row is locked and checked: the fenced UPDATE changes it
        if not tx.ops.release(tx.conn, self._scope.queue, lease, tx.times()):
            raise LeaseLost(f"{lease.event_id}: the lease changed while it was released")
        self._scope.at("release.after_update")
        return Completion(lease.event_id, Outcome.RELEASED)

    # ---------------------------------------------------------------- extend

    def extend(self, lease: Lease, lease_seconds: int | None = None) -> Lease:
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
        check_lease(lease)
        lease_seconds = self._scope.lease_seconds_for(lease_seconds)
        return self._runner._write(
            "extend", lambda tx: self.extend_tx(tx, lease, lease_seconds)
        )

    @dooms_on_failure
    def extend_tx(
        self, tx: Tx, lease: Lease, lease_seconds: int | None = None
    ) -> Lease:
        """``extend`` inside the caller's transaction."""
        lease_seconds = self._scope.lease_seconds_for(lease_seconds)
        self.leased_tx(tx, lease)  # the fence: raises LeaseLost saying why
        self._scope.at("extend.after_read")
        instant = tx.instant()
        now = math.floor(instant)
        extended = Lease(
            lease.event_id,
            lease.generation,
            lease.attempt,
            lease_deadline(instant, lease_seconds),
            lease.token,
        )
        # The same fence in the UPDATE itself, as in complete_tx.
        if not tx.ops.extend(tx.conn, self._scope.queue, lease, now=now, until=extended.lease_until):
            raise LeaseLost(
                f"{lease.event_id}: generation {lease.generation} "
                "is no longer the current lease"
            )
        self._scope.at("extend.after_update")
        return extended

    def heartbeat(
        self, lease: Lease, *, every: float, lease_seconds: int | None = None
    ) -> Heartbeat:
        """Keep extending ``lease`` every ``every`` seconds, from a thread, while long work runs.

        Use it around work done between ``claim`` and ``complete``::

            with store.heartbeat(lease, every=10, lease_seconds=30) as beat:
                result = long_computation(lease)
            store.complete(beat.lease, handler)

        The thread uses its own connection (one per thread) and stops when the
        block ends. If an extension is refused, the thread stops and
        ``beat.lost`` holds the ``LeaseLost``: the work's result must not be
        written, and ``complete`` would refuse it anyway.
        """
        check_lease(lease)
        lease_seconds = self._scope.lease_seconds_for(lease_seconds)
        check_heartbeat(every, threads=THREADS)
        return Heartbeat(self, lease, every, lease_seconds)

    # ------------------------------------------------------------------ fail

    def fail(
        self,
        lease: Lease,
        code: str,
        *,
        permanent: bool = False,
        detail: str | None = None,
        retry_after: float | None = None,
    ) -> Completion:
        """Record a failed attempt: retry after a backoff, or dead.

        Permanent failures and a temporary failure on the last allowed attempt
        go to dead, keeping ``code`` (and ``detail``, the reason in words).
        Fenced like ``complete``.

        :param lease: what ``claim`` returned.
        :param code: a short machine-readable reason, stored as ``last_error``.
        :param permanent: dead at once instead of a retry.
        :param detail: the reason in words, stored as ``last_detail``.
        :param retry_after: seconds to wait instead of the queue's backoff (an
            HTTP 429's Retry-After), at most the queue's ``backoff_max_seconds``.
        :raises LeaseLost: the lease is no longer current.
        """
        check_lease(lease)
        check_code(code, detail)
        check_retry_after(retry_after)
        return self._runner._write(
            "fail",
            lambda tx: self.fail_tx(
                tx,
                lease,
                code,
                permanent=permanent,
                detail=detail,
                retry_after=retry_after,
            ),
        )

    @dooms_on_failure
    def fail_tx(
        self,
        tx: Tx,
        lease: Lease,
        code: str,
        *,
        permanent: bool = False,
        detail: str | None = None,
        retry_after: float | None = None,
    ) -> Completion:
        """``fail`` inside the caller's transaction."""
        check_code(code, detail)
        check_retry_after(retry_after)
        message = self.leased_tx(tx, lease)
        self._scope.at("fail.after_read")
        return self._fail_checked(
            tx,
            message,
            code,
            detail,
            permanent=permanent,
            point="fail.after_update",
            retry_after=retry_after,
        )

    def _refuse(
        self,
        tx: Tx,
        lease: Lease,
        code: str,
        detail: str | None,
        permanent: bool,
        retry_after: float | None = None,
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
            retry_after=retry_after,
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
        retry_after: float | None = None,
    ) -> Completion:
        if permanent or message.attempts >= self._scope.max_attempts:
            tx.ops.fail_dead(tx.conn, self._scope.queue, message.event_id, code, detail)
            outcome = Completion(message.event_id, Outcome.DEAD, code, detail=detail)
        else:
            # the queue's retry policy; the jitter's draw is this attempt's own
            draw = retry_draw(self._scope.queue, message.event_id, message.generation)
            delay = self._scope.settings.backoff(message.attempts, draw, retry_after)
            available_at = tx.now() + delay
            tx.ops.fail_retry(
                tx.conn, self._scope.queue, message.event_id, code, detail, available_at=available_at
            )
            outcome = Completion(
                message.event_id, Outcome.RETRY, code, available_at, detail
            )
        self._scope.at(point)
        return outcome

    # ------------------------------------------------------------ batches

    def complete_many(
        self, leases: Iterable[Lease | Claimed], handler: MessageHandler
    ) -> list[Completion]:
        """Complete several leased messages in one transaction, each with its own effect and ACK.

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
        return self._runner._write(
            "complete_many", lambda tx: self._complete_many_in(tx, batch, handler)
        )

    @dooms_on_failure
    def complete_many_tx(
        self, tx: Tx, leases: Iterable[Lease | Claimed], handler: MessageHandler
    ) -> list[Completion]:
        """``complete_many`` inside the caller's transaction; a lost lease dooms ``tx``.

        The store cannot tell which of your own writes in ``tx`` belonged to
        that message, so its COMMIT raises ``LeaseLost`` (as after ``complete_tx``).
        """
        results = self._complete_many_in(tx, list(leases), handler)
        lost = [r for r in results if r.outcome is Outcome.LEASE_LOST]
        if lost:
            tx.doom(LeaseLost(f"{lost[0].event_id}: {lost[0].detail}"))
        return results

    def _complete_many_in(
        self, tx: Tx, batch: list[Lease | Claimed], handler: MessageHandler
    ) -> list[Completion]:
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
            try:  # undoes its own message on LeaseLost
                results.append(self._complete_with(tx, lease, handler, message))
            except LeaseLost as lost:
                lost_lease = Outcome.LEASE_LOST
                results.append(
                    Completion(lease.event_id, lost_lease, LeaseLost.code, detail=lost.message)
                )
        return results
