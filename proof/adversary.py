"""The adversary: a Hypothesis state machine that attacks the promise the way user code would.

``tests/test_model.py`` checks the store against a model of its own
bookkeeping, with handlers written by the same hands as the code. This
machine draws what *applications* do instead: handlers that write nothing or
write two tables, fail a statement and catch it, open and roll back
savepoints before and after a failure, sleep past their lease, swallow a
refused fence, run under receipts in several queues and beside receipts
recorded outside any queue; callers that complete inside their own
``store.transaction()`` with ``leased_tx``, ``complete_tx`` and ``ack_tx``;
batches with mixed outcomes; release, fail, redrive, purge; clock steps;
several lease holders racing on one message. After every step it reads the
whole database through a connection of its own and holds every clause of the
promise against it (``proof/adversary_model.py``); before that, each
attempt's outcome is compared with what the promise lets it be.

``run()`` runs it on a target (``proof/adversary_db.py``: SQLite files or a
throwaway PostgreSQL server) with a budget and a set of attack families
(``proof/adversary_user.py``), and returns an ``AdversaryResult``: examples
and steps run, each rule's count, the events reached, and what was found (the
broken clause and the shrunk steps, as Hypothesis printed them).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from dataclasses import asdict, dataclass, replace
from typing import Any, Final

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.reporting import with_reporter
from hypothesis.stateful import precondition, rule, run_state_machine_as_test

from queue_core import Claimed, Message, OperationConflict, QueueError, Tx
from queue_core.envelope import canonical_json

from proof import records
from proof.adversary_db import EffectRow, Snapshot, Target
from proof.adversary_machine import (
    EVENT_IDS,
    PAYLOADS,
    QUEUES,
    SHARED_SCOPE,
    WORKERS,
    Held,
    Machine,
    Tally,
)
from proof.adversary_model import Attempt, Owner, PromiseBroken, Verdict, fence_passes, judge
from proof.adversary_user import (
    ALL_FAMILIES,
    Call,
    OwnResult,
    OwnStep,
    receipt_handler,
    record_outside,
    run_own_step,
)

__all__ = ["LONG", "QUICK", "RECORDED_BY", "Adversary", "AdversaryResult", "Budget", "Issued", "Progress",
           "Scripted", "Step", "record_name", "replay", "run", "save"]

OUTSIDE_SCOPE: Final = "api"  # a scope of its own, for code outside any queue
# the scopes code outside any queue records its receipts under: its own, a queue's name (it then
# shares the queue's receipts: one effect within a scope), or the one both queues share on purpose
OUTSIDE_SCOPES: Final = (OUTSIDE_SCOPE, *QUEUES, SHARED_SCOPE)
Progress = Callable[[str], None]


class Adversary(Machine):
    """The rules: what user code does to the queue, one step at a time."""

    @rule(queue=st.sampled_from(QUEUES), event_id=st.sampled_from(EVENT_IDS),
          payload=st.integers(0, len(PAYLOADS) - 1), delay=st.sampled_from([0, 0, 3]))
    def send(self, queue: str, event_id: str, payload: int, delay: int = 0) -> None:
        self._count("send")
        self._send(queue, event_id, payload, delay)

    @rule(worker=st.integers(0, WORKERS - 1), queue=st.sampled_from(QUEUES),
          how=st.sampled_from(["claim", "claim_message", "claim_messages", "claim_many"]),
          count=st.integers(1, 3), lease_seconds=st.integers(1, 5))
    def claim(self, worker: int, queue: str, how: str, count: int, lease_seconds: int) -> None:
        self._count("claim")
        self._claim(worker, queue, how, count, lease_seconds)

    # ------------------------------------------------------------ completions

    @rule(data=st.data(), source=st.sampled_from(["held", "stale", "fresh"]))
    def complete(self, data: st.DataObject, source: str) -> None:
        """A lease (a worker's, a stale one, or a fresh claim) is completed by a drawn handler."""
        self._count("complete")
        held = self._take(data, source)
        if held is None:
            return
        if source == "stale" and data.draw(st.booleans(), label="forge lease_until"):
            held = Held(held.queue, replace(held.lease, lease_until=10**9))  # the fence reads the row
        self._complete(data, held)

    @rule(data=st.data(), queue=st.sampled_from(QUEUES), event_id=st.sampled_from(EVENT_IDS),
          payload=st.integers(0, len(PAYLOADS) - 1))
    def send_claim_complete(self, data: st.DataObject, queue: str, event_id: str, payload: int) -> None:
        """The common path in one step: send, claim, complete (the handler still drawn)."""
        self._count("send_claim_complete")
        self._send(queue, event_id, payload)
        for held in self._claim(0, queue, "claim_message", 1, 4):
            self.workers[0].remove(held)
            self._complete(data, held)

    @rule(queue=st.sampled_from(QUEUES), event_id=st.sampled_from(EVENT_IDS),
          payload=st.integers(0, len(PAYLOADS) - 1), lease_seconds=st.integers(1, 3))
    def race(self, queue: str, event_id: str, payload: int, lease_seconds: int) -> None:
        """Two workers race on one message: worker 1's lease runs out, worker 2 claims it again;
        both keep what they hold (worker 1 a lease that no longer passes the fence)."""
        self._count("race")
        self._send(queue, event_id, payload)
        if self._claim(1, queue, "claim_message", 1, lease_seconds):
            self.clock.advance(lease_seconds)
            self._claim(2, queue, "claim", 1, 5)

    def _complete(self, data: st.DataObject, held: Held) -> None:
        queue, lease = held.queue, held.lease
        store = self.stores[queue]
        kind, mode = self._kind(data, batch=False), self._mode(data, queue)
        claimed = isinstance(held.item, Claimed) and data.draw(st.booleans(), label="complete_message")
        pre, now = self._snapshot(), self.clock.now()
        payload = self._payload(pre.message(queue, lease.event_id), held)
        call = Call(kind, queue, lease, str(payload["tenant"]), str(payload["operation"]), self.clock,
                    store, scope=self._scope(queue, mode),
                    slow=data.draw(st.sampled_from([0, 0, 0, 1, 2, 3]), label="slow"),
                    failing=data.draw(st.integers(0, 1), label="failing statement"))
        call.payload = payload
        if kind.name == "outbox":
            call.outbox = self.stores[QUEUES[1] if queue == QUEUES[0] else QUEUES[0]]
        if kind.name == "swallow_other":
            others = [h for h in self.issued if (h.queue, h.lease.event_id) != (queue, lease.event_id)]
            if others:
                other = data.draw(st.sampled_from(others), label="other lease")
                call.other = (self.stores[other.queue], other.lease)
        handler = call if mode == "none" else receipt_handler(call, SHARED_SCOPE if mode == "shared" else None)
        code: str | None = None
        try:
            if claimed:
                assert isinstance(held.item, Claimed)
                done = store.complete_message(held.item, handler)
            else:
                done = store.complete(lease, handler)
            outcome, code = done.outcome.value, done.error
        except QueueError as refused:
            outcome = f"raised:{refused.code}"
        except Exception as ended:  # a handler's transaction control ended the transaction under it
            if kind.control is None:
                raise
            outcome = f"raised:{type(ended).__name__}"
        verdict = self._verdict(pre, call, payload, mode, now=now, read_first=not claimed)
        what = (f"{'complete_message' if claimed else 'complete'} of {queue}/{lease.event_id} "
                f"(generation {lease.generation}) with handler {kind.name!r}"
                f"{'' if mode == 'none' else ' under receipts (' + mode + ')'}")
        judge(verdict, outcome, code, what=what)
        if call.other is not None and call.other_result is not None:
            self._judge_other(pre, call, what)
        self.tally.note(f"complete {kind.name}: {outcome}")
        if outcome == "done":
            self._learn_done(call, payload, mode, verdict)

    def _judge_other(self, pre: Snapshot, call: Call, what: str) -> None:
        """swallow_other completed another message's lease inside the handler: fenced like any."""
        assert call.other is not None
        store, other = call.other
        passes = fence_passes(pre.message(store.queue, other.event_id), other, call.clock_after)
        expected = Verdict("done", "the other lease passes the fence", "completion") if passes else \
            Verdict("lease_lost", "the other lease does not pass the fence", "the fence")
        got = call.other_result if call.other_result == "done" else f"raised:{call.other_result}"
        judge(expected, got, what=f"{what}: complete_tx of {store.queue}/{other.event_id} inside it")

    # ---------------------------------------------------------------- batches

    @rule(data=st.data(), queue=st.sampled_from(QUEUES), count=st.integers(1, 3))
    def complete_many(self, data: st.DataObject, queue: str, count: int) -> None:
        """A worker completes all it holds of one queue at once (else claims a batch), each message
        with its own handler; sometimes with a stale lease of any queue among them."""
        self._count("complete_many")
        worker = data.draw(st.integers(0, WORKERS - 1), label="worker")
        batch = [h for h in self.workers[worker] if h.queue == queue]
        if not batch:
            self._claim(worker, queue, data.draw(st.sampled_from(["claim_messages", "claim_many"]),
                                                 label="claim"), count, 4)
            batch = [h for h in self.workers[worker] if h.queue == queue]
        self.workers[worker] = [h for h in self.workers[worker] if h.queue != queue]
        if bool(self.issued) and data.draw(st.booleans(), label="add a stale lease"):
            batch.append(data.draw(st.sampled_from(self.issued), label="stale lease"))  # any queue
        self._complete_batch(data, queue, batch)

    @rule(data=st.data(), queue=st.sampled_from(QUEUES),
          event_ids=st.lists(st.sampled_from(EVENT_IDS), min_size=2, max_size=3, unique=True),
          payloads=st.lists(st.integers(0, len(PAYLOADS) - 1), min_size=3, max_size=3))
    def send_batch_complete(self, data: st.DataObject, queue: str, event_ids: list[str],
                            payloads: list[int]) -> None:
        """A worker's batch path in one step: send a few, claim them at once (claim_messages), complete
        them together (complete_many), each with its own drawn handler."""
        self._count("send_batch_complete")
        for event_id, payload in zip(event_ids, payloads):
            self._send(queue, event_id, payload)
        batch = self._claim(0, queue, "claim_messages", len(event_ids), 4)
        self.workers[0] = [h for h in self.workers[0] if h not in batch]
        self._complete_batch(data, queue, batch)

    def _complete_batch(self, data: st.DataObject, queue: str, batch: list[Held]) -> None:
        batch = list({(h.lease.event_id, h.lease.generation): h for h in reversed(batch)}.values())[::-1]
        if not batch:
            return
        claimed = all(isinstance(h.item, Claimed) for h in batch)
        self.tally.note(f"complete_many: a batch of {len(batch)}{' claimed' if claimed else ''}")
        store, pre, now = self.stores[queue], self._snapshot(), self.clock.now()
        calls: dict[tuple[str, int], tuple[Call, str]] = {}
        focus = self._focus(data)
        for held in batch:
            payload = self._payload(pre.message(queue, held.lease.event_id), held)
            kind, mode = self._kind(data, batch=True, focus=focus), self._mode(data, queue)
            calls[(held.lease.event_id, held.lease.generation)] = (Call(
                kind, queue, held.lease, str(payload["tenant"]), str(payload["operation"]), self.clock,
                store, scope=self._scope(queue, mode),
                failing=data.draw(st.integers(0, 1), label="failing statement")), mode)
        handlers = {key: call if mode == "none" else
                    receipt_handler(call, SHARED_SCOPE if mode == "shared" else None)
                    for key, (call, mode) in calls.items()}

        def by_message(tx: Tx, message: Message) -> None:
            handlers[(message.event_id, message.generation)](tx, message)

        try:
            results = store.complete_many([h.item for h in batch], by_message)
        except Exception as refused:
            # transaction control or a ROLLBACK TO the store's savepoint may end the batch's
            # transaction under it (then the store raises what ended the attempt, a handler's
            # own exception too): nothing was ACKed that user code saw, and the invariant
            # judges what the database holds
            if not any(call.kind.control for call, _ in calls.values()):
                raise
            self.tally.note(f"complete_many raised {type(refused).__name__}")
            return
        if len(results) != len(batch):
            raise PromiseBroken("completion", f"complete_many of {len(batch)} returned {len(results)}")
        self._judge_batch(pre, now, batch, [(r.outcome.value, r.error) for r in results], calls)

    def _judge_batch(self, pre: Snapshot, now: int, batch: list[Held], results: list[tuple[str, str | None]],
                     calls: dict[tuple[str, int], tuple[Call, str]]) -> None:
        """Each message of the batch in order, as if alone, with what the earlier ones did."""
        rows = {(m.queue, m.event_id): m for m in pre.messages}
        pending: dict[tuple[str, str, str], Owner] = {}
        learnt: list[tuple[Call, dict[str, Any], str, Verdict]] = []
        for held, (outcome, code) in zip(batch, results):
            call, mode = calls[(held.lease.event_id, held.lease.generation)]
            key = (call.queue, held.lease.event_id)
            payload = self._payload(rows.get(key), held)
            verdict = self._verdict(Snapshot(tuple(rows.values()), (), ()), call, payload, mode, now=now,
                                    read_first=not isinstance(held.item, Claimed), pending=pending)
            judge(verdict, outcome, code, what=f"complete_many in {call.queue}: {held.lease.event_id} "
                  f"(generation {held.lease.generation}) with handler {call.kind.name!r}, receipts {mode}")
            self.tally.note(f"complete_many {call.kind.name}: {outcome}")
            if outcome == "done":
                rows[key] = replace(rows[key], state="done")
                learnt.append((call, payload, mode, verdict))
                if mode != "none" and verdict.reuse is None:
                    attempt = Attempt(call.queue, held.lease.event_id, held.lease.generation,
                                      held.lease.token, call.kind.name, call.rows())
                    owner = self.truth.own(call.scope, payload, attempt)
                    pending.setdefault((owner.scope, owner.tenant, owner.operation), owner)
            elif outcome in ("retry", "dead") and key in rows:
                rows[key] = replace(rows[key], state=outcome.replace("retry", "ready"), lease_until=None)
        for call, payload, mode, verdict in learnt:
            self._learn_done(call, payload, mode, verdict)

    # ------------------------------------------------- the caller's own transaction

    @rule(data=st.data(), queue=st.sampled_from(QUEUES), size=st.integers(1, 2))
    def own_transaction(self, data: st.DataObject, queue: str, size: int) -> None:
        """Inside ``store.transaction()``: the caller's writes, maybe a failure, then the fenced ACK."""
        self._count("own_transaction")
        failures: list[str | None] = [None, None, "plain"]
        failures += ["savepoint_after"] if "savepoints" in self.families else []
        failures += ["savepoint_before"] if "recovery" in self.families else []
        failures += ["commit"] if "control" in self.families else []
        acks = ["complete_tx", "ack_tx"] + (["complete_many_tx"] * 4 if "batch_tx" in self.families else [])
        # a lease that no longer passes the fence is what batch_tx and swallow are about
        sources = ["held", "fresh", "stale"] + (["stale"] if self.families & {"batch_tx", "swallow"} else [])
        plan: list[tuple[Held, OwnStep]] = []
        for _ in range(size):
            held = self._take(data, data.draw(st.sampled_from(sources), label="lease"))
            if held is not None:
                plan.append((held, OwnStep(
                    check_first=data.draw(st.booleans(), label="leased_tx first"),
                    writes=data.draw(st.sampled_from([True, True, False]), label="writes"),
                    failure=data.draw(st.sampled_from(failures), label="failure"),
                    ack=data.draw(st.sampled_from(acks), label="ack"),
                    swallow="swallow" in self.families and data.draw(st.booleans(), label="swallow"))))
        if not plan:
            return
        pre, now = self._snapshot(), self.clock.now()
        seen = [OwnResult() for _ in plan]
        escaped: str | None = None
        try:
            with self.stores[queue].transaction() as tx:
                for (held, step), result in zip(plan, seen):
                    lease = held.lease
                    row = EffectRow("adv_effect", "", held.queue, lease.event_id, lease.generation,
                                    lease.token, "own_tx", "a", "", "")
                    result.rows = (row,) if step.writes else ()
                    run_own_step(tx, self.stores[held.queue], lease, step, row, result)
        except Exception as exc:
            if not (isinstance(exc, QueueError) or _driver_error(exc)):
                raise
            escaped = str(getattr(exc, "code", type(exc).__name__))
        self._judge_own(pre, now, plan, seen, escaped)

    def _judge_own(self, pre: Snapshot, now: int, plan: list[tuple[Held, OwnStep]],
                   seen: list[OwnResult], escaped: str | None) -> None:
        rows = {(m.queue, m.event_id): m for m in pre.messages}
        failed = control = doomed = False  # doomed: a refusal it swallowed (no COMMIT can follow)
        for (held, step), result in zip(plan, seen):
            key, lease = (held.queue, held.lease.event_id), held.lease
            what = f"own transaction: {step} on {key[0]}/{key[1]} (generation {lease.generation})"
            passes = fence_passes(rows.get(key), lease, now)
            if result.checked == "done" and not passes:
                raise PromiseBroken("the fence", f"{what}: leased_tx let a lease through that does not pass")
            doomed = doomed or (result.checked or "").startswith("raised:")
            failed, control = failed or result.failed, control or result.control
            if result.acked is None:
                break  # this step's refusal escaped the block (or a statement of it failed)
            if control:
                verdict = Verdict("refused", "a COMMIT ran through tx.execute, which is refused "
                                  "(StatementRefused) and dooms the transaction", "effect and ACK together",
                                  tolerant=True)
            elif failed:
                verdict = Verdict("refused", "a statement of this transaction failed", "failed statement",
                                  tolerant=True)
            elif doomed:  # the store raises the first refusal again: this ACK could never commit
                verdict = Verdict("refused", "a refusal swallowed earlier in this transaction doomed it",
                                  "effect and ACK together", tolerant=True)
            elif not passes:
                verdict = Verdict("lease_lost", "the lease does not pass the fence", "the fence")
            else:
                verdict = Verdict("done", "the lease passes the fence", "completion")
            judge(verdict, result.acked, what=what)
            self.tally.note(f"own transaction {step.ack}: {result.acked}"
                            f"{' (swallowed)' if result.acked.startswith('raised:') else ''}")
            if result.acked == "done":
                rows[key] = replace(rows[key], state="done")
            doomed = doomed or result.acked.startswith("raised:") or result.acked == "lease_lost"
        if escaped is not None:
            self.tally.note(f"own transaction: rolled back ({escaped})")
            return
        for (held, step), result in zip(plan, seen):
            if result.acked == "done":
                lease = held.lease
                self.truth.ack(Attempt(held.queue, lease.event_id, lease.generation, lease.token,
                                       "own_tx", result.rows))

    # -------------------------------------------------- receipts outside a queue

    @precondition(lambda self: "scopes" in self.families)
    @rule(payload=st.integers(0, len(PAYLOADS) - 1), scope=st.sampled_from(OUTSIDE_SCOPES))
    def record_outside(self, payload: int, scope: str = OUTSIDE_SCOPE) -> None:
        """Code outside any queue records an effect under a receipt: in a scope of its own ("api"),
        in a queue's ("alpha": it and the queue's receipt handler share their receipts), or in the
        one both queues' handlers share."""
        self._count("record_outside")
        self.outside += 1
        body = PAYLOADS[payload]
        name = f"api-{self.outside}"
        row = EffectRow("adv_effect", scope, "", name, 0, 0, "outside", "a",
                        str(body["tenant"]), str(body["operation"]))
        expected, _ = self.truth.receipt(scope, body)
        try:
            with self.stores[QUEUES[0]].transaction() as tx:
                got = "own" if record_outside(tx, scope, dict(body), row) else "reuse"
        except OperationConflict:
            got = "conflict"
        if got != expected:
            raise PromiseBroken("receipts", f"code outside the queues recorded {body} under scope "
                                            f"{scope!r}: {got}, expected {expected}")
        where = "a queue's scope" if scope in QUEUES else scope
        self.tally.note(f"record outside ({where}): {got}")
        if got == "own":
            self.truth.record_outside(Owner(scope, str(body["tenant"]), str(body["operation"]),
                                            canonical_json(body), name, None, (row,)))

    # ---------------------------------------------------- release, fail, redrive

    @rule(data=st.data(), how=st.sampled_from(["release", "fail", "fail permanently", "die", "extend"]),
          source=st.sampled_from(["held", "stale"]))
    def give_up(self, data: st.DataObject, how: str, source: str) -> None:
        """A worker releases its lease, fails it, dies silently, or extends it (a heartbeat's beat,
        and it keeps the extended lease); sometimes with a stale lease."""
        self._count("give_up")
        held = self._take(data, source)
        if held is None or how == "die":
            return
        store, lease = self.stores[held.queue], held.lease
        passes = fence_passes(self._snapshot().message(held.queue, lease.event_id), lease, self.clock.now())
        try:
            if how == "release":
                outcome = store.release(lease).outcome.value
            elif how == "extend":
                extended = Held(held.queue, store.extend(lease, 3))
                self.workers[0].append(extended)
                self.issued.append(extended)
                outcome = "extended"
            else:
                outcome = store.fail(lease, "adv_gave_up", permanent=how != "fail").outcome.value
        except QueueError as refused:
            outcome = f"raised:{refused.code}"
        if passes == outcome.startswith("raised:"):
            raise PromiseBroken("the fence", f"{how} of {held.queue}/{lease.event_id} (generation "
                                             f"{lease.generation}): {outcome}, but the lease "
                                             f"{'passes' if passes else 'does not pass'} the fence")
        self.tally.note(f"{how}: {outcome}")

    @rule(queue=st.sampled_from(QUEUES), how=st.sampled_from(["redrive_all", "purge ready", "purge dead",
                                                               "prune"]))
    def manage(self, queue: str, how: str) -> None:
        """An operator redrives the dead letters, purges the ready or dead messages, or prunes the
        payloads of the done ones (their digest stays: sent again, they are still duplicates)."""
        self._count("manage")
        store = self.stores[queue]
        state = {"purge ready": "ready", "prune": "done"}.get(how, "dead")
        before = sorted(m.event_id for m in self._snapshot().messages
                        if m.queue == queue and m.state == state and m.digest is None)
        if how == "prune":
            pruned = store.prune(0).pruned
            if pruned != len(before):
                raise PromiseBroken("stored once", f"prune in {queue} pruned {pruned}, {len(before)} were done")
        elif how == "redrive_all":
            done = store.redrive_all()
            if sorted(done) != before:
                raise PromiseBroken("at least once", f"redrive_all in {queue} redrove {done}, dead were {before}")
        else:
            purged = store.purge(state)
            if purged != len(before):
                raise PromiseBroken("stored once", f"purge {state} in {queue} removed {purged}, "
                                                   f"{len(before)} were {state}")
            self.truth.purge((queue, event_id) for event_id in before)
        self.tally.note(f"{how}: {len(before)}")

    @rule(step=st.sampled_from(["1", "1", "2", "3", "5", "to a lease end"]))
    def time_passes(self, step: str) -> None:
        """The clock moves on: some seconds, or exactly to the next lease end (the fence's edge)."""
        self._count("time_passes")
        if step != "to a lease end":
            self.clock.advance(int(step))
            return
        ends = [m.lease_until for m in self._snapshot().messages
                if m.lease_until is not None and m.lease_until > self.clock.now()]
        if ends:
            self.clock.set(min(ends))


def _found(exc: BaseException, printed: list[str]) -> dict[str, Any]:
    """What a failed run found: the clause, the message, the steps Hypothesis printed.

    A failure that did not happen again when Hypothesis replayed it (a race, e.g. with the
    database driver) comes as a ``FlakyFailure`` around what was raised the first time: that
    is what is reported, said to be flaky.
    """
    first: BaseException = exc
    flaky = ""
    inner = getattr(exc, "exceptions", None)
    if inner:
        first = next((e for e in inner if hasattr(e, "clause")), inner[0])
        flaky = " (flaky: it did not happen again when Hypothesis replayed the steps)"
    notes = [*getattr(exc, "__notes__", []), *getattr(first, "__notes__", [])]
    return {"clause": getattr(first, "clause", None), "message": f"{type(first).__name__}: {first}{flaky}",
            "steps": "\n".join([*printed, *dict.fromkeys(notes)])}


def _driver_error(exc: BaseException) -> bool:
    """An error of the database's driver (sqlite3 or psycopg) that reached user code."""
    return type(exc).__module__.split(".")[0] in ("sqlite3", "psycopg")


# ------------------------------------------------------------------ replays
#
# A sequence Hypothesis printed, replayed step by step (the regression seeds): each
# rule's draws are given in the order the failing example printed them.


@dataclass(frozen=True)
class Issued:
    """A draw of ``self.issued[index]``: a lease issued earlier in the replay."""

    index: int


class Scripted:
    """A ``st.data()`` stand-in that returns the given draws, in order."""

    def __init__(self, machine: Adversary, *draws: Any) -> None:
        self.machine, self.draws = machine, list(draws)

    def draw(self, strategy: Any, label: str | None = None) -> Any:
        value = self.draws.pop(0)
        return self.machine.issued[value.index] if isinstance(value, Issued) else value


Step = Callable[[Adversary], None]  # one rule, called on the machine


def replay(target: Target, steps: list[Step], attacks: frozenset[str] = ALL_FAMILIES) -> None:
    """Run ``steps`` on a fresh machine, holding the promise after each, as Hypothesis does."""
    machine_class = type("Replay", (Adversary,), {"target": target, "families": attacks})
    machine = machine_class()
    try:
        machine.open_database()
        machine.the_promise_holds()
        for step in steps:
            step(machine)
            machine.the_promise_holds()
    finally:
        machine.teardown()
        target.close()


@dataclass(frozen=True)
class Budget:
    """How much to search: Hypothesis examples, and steps per example."""

    examples: int
    steps: int


QUICK: Final = Budget(examples=60, steps=30)  # make test
LONG: Final = Budget(examples=2000, steps=50)  # scripts/adversary.py --long


@dataclass(frozen=True)
class AdversaryResult:
    """One run: where, how much, what each rule did, and what was found (None: nothing broke)."""

    engine: str
    families: list[str]
    budget: dict[str, int]
    examples: int  # examples run, shrinking included
    steps: int
    rules: dict[str, int]
    events: dict[str, int]
    seconds: float
    found: dict[str, Any] | None

    @property
    def ok(self) -> bool:
        return self.found is None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def run(target: Target, budget: Budget = QUICK, families: frozenset[str] = ALL_FAMILIES, *,
        shrink: bool = True, progress: Progress | None = None, derandomize: bool = False) -> AdversaryResult:
    """Run the adversary on ``target``; a broken clause is returned in ``found``, not raised.

    ``derandomize``: the draws are seeded, the same on every run of the same code (the test
    suite's runs, whose every assertion must hold or fail the same way each time); without it
    each run draws anew (the long profile: more ground over many runs).
    """
    unknown = families - ALL_FAMILIES
    if unknown:
        raise ValueError(f"unknown attack families {sorted(unknown)}; they are {sorted(ALL_FAMILIES)}")
    tally = Tally()
    machine = type(f"Adversary_{target.engine}", (Adversary,),
                   {"target": target, "families": families, "tally": tally})
    phases = [Phase.generate, Phase.target] + ([Phase.shrink] if shrink else [])
    chosen = settings(max_examples=budget.examples, stateful_step_count=budget.steps, deadline=None,
                      database=None, phases=phases, report_multiple_bugs=False, print_blob=False,
                      suppress_health_check=list(HealthCheck), derandomize=derandomize)
    printed: list[str] = []
    began = time.monotonic()
    found: dict[str, Any] | None = None
    with with_reporter(lambda value: printed.append(str(value))):
        try:
            run_state_machine_as_test(machine, settings=chosen)
        except Exception as exc:  # a broken clause, or anything else the store raised at user code
            found = _found(exc, printed)
        finally:
            target.close()
    if progress is not None:
        progress(f"{target.engine}: {tally.examples} examples, {tally.steps} steps, "
                 f"{'nothing broke' if found is None else found['message']}")
    return AdversaryResult(target.engine, sorted(families), asdict(budget), tally.examples, tally.steps,
                           dict(tally.rules), dict(tally.events), round(time.monotonic() - began, 1), found)


RECORDED_BY: Final = "scripts/adversary.py --long --record"


def record_name(engine: str) -> str:
    """The name of the committed record of the long run on ``engine``: adversary-<engine>."""
    return f"adversary-{engine}"


def save(result: AdversaryResult, folder: str | Path = records.COMMITTED) -> records.Record:
    """Write ``result`` as the record ``adversary-<engine>.json`` in ``folder``; its parameters
    are the budget and the attack families."""
    params = {"budget": result.budget, "families": result.families}
    return records.save_record(record_name(result.engine), params, result, by=RECORDED_BY,
                               seconds=result.seconds, folder=folder)
