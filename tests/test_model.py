"""Model-based test: the real store against a small pure-Python model of SPEC's state machine.

A hypothesis state machine drives several simulated workers (lease holders in
this one process) and the shared ``ModelClock`` through random interleavings of
enqueue, claim, complete (with a handler that succeeds, refuses the payload,
fails temporarily, raises something unexpected, or takes long; the failing
ones write a partial effect first, which must be rolled back), explicit fail
(with or without a detail), silent death, clock moves, expiry, stale and
forged completions, and redrive. After every step the whole ``messages``
table (state, attempts, generation, available_at, lease_until, last_error,
last_detail, payload), the ledger's ``effects`` table, ``status()``,
``ledger.report()`` and the clock must equal the model exactly, and every
return value and refusal must be the one the model predicts.

The model is written from SPEC.md, not from the store's code. Where SPEC is
silent the model follows what the store documents and says so:

* redrive keeps ``last_error`` (SPEC: "keeps generation and the payload");
* a handler failure inside ``complete`` is re-checked against the clock after
  the handler ran, like an effect: a refusal after the lease ended is itself
  refused (``LeaseLost``) and nothing is recorded;
* a handler that raises anything else is a temporary failure ``handler_error``
  whose detail names the exception; a last lease that ran out is dead of
  ``lease_expired`` with the detail "the lease of claim 3 of 3 ended at T with
  no completion" (the API's documented words); the ledger's own refusal
  (``invalid_payload``) has a detail in words, which the model only requires
  to be there.

The mutants at the end are real protocol bugs patched into the store (no
re-check after the handler, fencing without the generation, a refusal that
keeps the handler's partial writes, ...): the same state machine must catch
every one of them, so that "the store matches the model" means something.

``--hypothesis-show-statistics`` shows how often each situation was reached
(budget spent by silent deaths, lease lost during the work, a worker of the
previous cycle after a redrive, ...). ``QUEUE_CORE_MODEL_EXAMPLES=2000`` runs a
longer search than the default 250 examples of up to 50 steps.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from queue_core import (
    BatchRejected,
    Completion,
    Lease,
    LeaseLost,
    Message,
    ModelClock,
    NotDead,
    Outcome,
    QueueError,
    Store,
    TemporaryFailure,
    Tx,
    UnknownEvent,
    ledger,
)

START = 1000
MAX_ATTEMPTS = 3  # SPEC: "The budget is 3 claims"
BACKOFF = {1: 1, 2: 2}  # SPEC: "backoff 1 s after the first attempt, 2 s after the second"
V1 = frozenset({"book", "pen", "bag"})  # SPEC: the handler's categories
V2 = V1 | {"toy"}  # "Supporting a new category (e.g. toy) is a deliberate handler change"
TEMPORARY_CODE = "downstream_timeout"
TEMPORARY_DETAIL = "the bank did not answer in time"
HANDLER_ERROR = "handler_error"  # a handler that raised something else than a refusal
CRASH_TEXT = "the handler broke"
SOME_REASON = "<any reason in words>"  # the model requires a non-empty detail, not its wording
FAIL_DETAILS = [None, "the bank said no"]

EVENT_IDS = [f"E{n:04d}" for n in range(1, 9)]
UNKNOWN_ID = "E0999"
WORKERS = 3

# Payloads that the transport accepts; the handler accepts only some of them.
PAYLOADS: list[dict[str, Any]] = [
    {"category": "book", "amount_cents": 100},
    {"category": "pen", "amount_cents": 2000},
    {"category": "book", "amount_cents": 5000},
    {"category": "pen", "amount_cents": 1},
    {"amount_cents": 9_999_999, "category": "bag"},
    {"category": "toy", "amount_cents": 3000},  # valid only for the v2 handler
    {"category": "book", "amount_cents": 0},  # out of range
    {"category": "book", "amount_cents": True},  # a bool is not an integer
    {"category": ["book"], "amount_cents": 5},  # category of the wrong type
    {"category": "pen", "amount_cents": 1.0},  # 1.0 is not an integer
    {"category": "book", "amount_cents": 1, "note": "x"},  # extra fields are fine
]


def canonical(payload: Mapping[str, Any]) -> str:
    """SPEC: keys sorted, no insignificant whitespace, value types preserved."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def business_effect(payload: Mapping[str, Any], categories: frozenset[str]) -> tuple[str, int] | None:
    """SPEC's handler rule, or None for a permanent ``invalid_payload`` failure."""
    category, amount = payload.get("category"), payload.get("amount_cents")
    if type(category) is not str or category not in categories:
        return None
    if type(amount) is not int or not 1 <= amount <= 9_999_999:
        return None
    return category, amount


@dataclass
class Row:
    payload: str
    state: str = "ready"
    attempts: int = 0
    generation: int = 0
    available_at: int = 0
    lease_until: int | None = None
    last_error: str | None = None
    last_detail: str | None = None
    enqueued_at: int | None = None
    done_at: int | None = None
    expired_leases: int = 0  # leases that ran out and a later claim took over (or ended in dead)
    # the random token of the claim that issued the current lease: learnt from
    # the store's claim (it is random), checked with the generation
    token: int = 0


Result = tuple[Outcome, "str | None", "int | None", "str | None"]  # outcome, error, available_at, detail


class Refused(Exception):
    """The model's prediction that the store refuses (with this exception type)."""

    def __init__(self, kind: type[Exception], line: int | None = None) -> None:
        super().__init__(kind.__name__)
        self.kind = kind
        self.line = line


class Model:
    """SPEC's state machine over plain Python values."""

    def __init__(self, now: int) -> None:
        self.now = now
        self.rows: dict[str, Row] = {}
        self.effects: dict[str, tuple[str, int]] = {}

    # -------------------------------------------------------------- enqueue

    def enqueue(self, lines: list[tuple[str, dict[str, Any]]]) -> tuple[int, int]:
        first: dict[str, tuple[str, int]] = {}
        duplicates = 0
        for number, (event_id, payload) in enumerate(lines, start=1):
            text = canonical(payload)
            if event_id not in first:
                first[event_id] = (text, number)
            elif first[event_id][0] == text:
                duplicates += 1
            else:  # a different payload for the same id inside the batch
                raise Refused(BatchRejected, number)
        new = []
        for event_id, (text, number) in first.items():
            stored = self.rows.get(event_id)
            if stored is None:
                new.append((event_id, text))
            elif stored.payload == text:
                duplicates += 1
            else:  # a different payload than the stored one: the whole batch goes
                raise Refused(BatchRejected, number)
        for event_id, text in new:
            self.rows[event_id] = Row(payload=text, available_at=self.now, enqueued_at=self.now)
        return len(new), duplicates

    # ---------------------------------------------------------------- claim

    def claim(self, lease_seconds: int) -> tuple[str, int, int, int] | None:
        while True:
            due = [
                (row.available_at, event_id)
                for event_id, row in self.rows.items()
                if row.available_at <= self.now
                and (row.state == "ready" or (row.state == "leased" and row.lease_until <= self.now))
            ]
            if not due:
                return None
            event_id = min(due)[1]
            row = self.rows[event_id]
            if row.state == "leased":
                row.expired_leases += 1
            if row.attempts >= MAX_ATTEMPTS:  # "after the third death, the next claim moves it to dead"
                event("claim: budget spent by silent deaths -> dead")
                row.last_detail = (f"the lease of claim {row.attempts} of {MAX_ATTEMPTS} ended at "
                                   f"{row.lease_until} with no completion")
                row.state, row.lease_until, row.last_error = "dead", None, "lease_expired"
                continue
            row.state = "leased"
            row.attempts += 1
            row.generation += 1
            row.lease_until = self.now + lease_seconds
            return event_id, row.generation, row.attempts, row.lease_until

    # --------------------------------------------------- complete and fail

    def fenced(self, lease: Lease) -> Row:
        row = self.rows.get(lease.event_id)
        if row is not None and row.generation == lease.generation + 1 and row.attempts == 1 and lease.attempt > 1:
            event("fencing: a worker of the previous cycle after a redrive")
        if (row is None or row.generation != lease.generation or row.token != lease.token
                or row.state != "leased" or not self.now < row.lease_until):
            raise Refused(LeaseLost)
        return row

    def failed(self, row: Row, code: str, permanent: bool, detail: str | None) -> Result:
        row.last_detail = detail
        if permanent or row.attempts >= MAX_ATTEMPTS:
            event("failure -> dead" + ("" if permanent else " (budget spent)"))
            row.state, row.lease_until, row.last_error = "dead", None, code
            return Outcome.DEAD, code, None, detail
        row.state, row.lease_until, row.last_error = "ready", None, code
        row.available_at = self.now + BACKOFF[row.attempts]
        return Outcome.RETRY, code, row.available_at, detail

    def complete(self, lease: Lease, kind: str, slow: int) -> Result:
        row = self.fenced(lease)
        self.now += slow  # the handler runs; the work may take long
        # A refusal is recorded only if the lease is still current after the
        # work (re-checked like a success); otherwise LeaseLost, nothing recorded.
        # Whatever a refusing handler wrote is rolled back: no effect.
        if kind == "temporary":
            return self.failed(self.fenced(lease), TEMPORARY_CODE, False, TEMPORARY_DETAIL)
        if kind == "error":
            event("complete: the handler raised something unexpected")
            return self.failed(self.fenced(lease), HANDLER_ERROR, False, f"RuntimeError: {CRASH_TEXT}")
        effect = business_effect(json.loads(row.payload), V2 if kind == "v2" else V1)
        if effect is None:
            return self.failed(self.fenced(lease), "invalid_payload", True, SOME_REASON)
        if not self.now < row.lease_until:
            event("complete: lease ran out during the work, effect rolled back")
        self.fenced(lease)  # re-check after the work: a lost lease rolls the effect back
        self.effects[lease.event_id] = effect
        row.state, row.lease_until, row.done_at = "done", None, self.now
        return Outcome.DONE, None, None, None

    def fail(self, lease: Lease, code: str, permanent: bool, detail: str | None) -> Result:
        return self.failed(self.fenced(lease), code, permanent, detail)

    # -------------------------------------------------------------- redrive

    def redrive(self, event_ids: list[str]) -> list[str]:
        ids = list(dict.fromkeys(event_ids))
        for event_id in ids:  # all or none
            row = self.rows.get(event_id)
            if row is None:
                raise Refused(UnknownEvent)
            if row.state != "dead":
                raise Refused(NotDead)
        for event_id in ids:
            row = self.rows[event_id]
            row.state, row.attempts, row.available_at = "ready", 0, self.now
            event("redrive: a dead message gets a new cycle")
        return ids

    # ---------------------------------------------------------------- views

    def messages(self) -> list[Message]:
        return [
            Message(event_id, r.payload, r.state, r.attempts, r.generation, r.available_at,
                    r.lease_until, r.last_error, r.last_detail, r.enqueued_at, r.done_at, r.expired_leases)
            for event_id, r in sorted(self.rows.items())
        ]


def _scratch_parent() -> str | None:
    """A tmpfs for speed if there is one (durability is not what this test checks)."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None


class QueueMachine(RuleBasedStateMachine):
    """Real store and model, step by step; several workers share one clock."""

    @initialize(home=st.lists(st.integers(0, len(PAYLOADS) - 1), min_size=len(EVENT_IDS),
                              max_size=len(EVENT_IDS)))
    def open_store(self, home: list[int]) -> None:
        # Each id mostly comes with its "home" payload, so that most batches are
        # accepted; sometimes with another one, which is a conflict.
        self.home = dict(zip(EVENT_IDS, home))
        self.dir = tempfile.mkdtemp(prefix="qc-model-", dir=_scratch_parent())
        self.clock = ModelClock(START)
        self.store = Store(os.path.join(self.dir, "q.sqlite3"), clock=self.clock)
        ledger.install(self.store)  # the reference application's effects table
        self.model = Model(START)
        self.current: list[Lease | None] = [None] * WORKERS  # each worker's own lease
        self.issued: list[Lease] = []  # every lease ever handed out, for stale attempts

    def teardown(self) -> None:
        if hasattr(self, "dir"):
            shutil.rmtree(self.dir, ignore_errors=True)

    # ------------------------------------------------------------ helpers

    def expect(self, predict, act):
        """Run the model's prediction and the store's action; they must agree."""
        try:
            expected = predict()
        except Refused as refusal:
            event(f"refused: {refusal.kind.__name__}")
            with pytest.raises(refusal.kind) as info:
                act()
            if refusal.line is not None:
                assert info.value.line == refusal.line
                assert info.value.code == "event_conflict"
            return None
        return expected, act()

    def handler(self, kind: str, slow: int) -> Callable[[Tx, Message], None]:
        """The ledger's handler (v1 or v2), or one that writes a partial effect and then fails."""
        base = ledger.Handler.with_categories({"toy"}) if kind == "v2" else ledger.Handler()

        def run(tx: Tx, message: Message) -> None:
            if slow:
                self.clock.advance(slow)
            if kind in ("temporary", "error"):
                tx.execute("INSERT INTO effects (event_id, category, amount_cents) VALUES (?, 'partial', 1)",
                           (message.event_id,))
                if kind == "temporary":
                    raise TemporaryFailure(TEMPORARY_CODE, TEMPORARY_DETAIL)
                raise RuntimeError(CRASH_TEXT)
            base(tx, message)

        return run

    def check_completion(self, lease: Lease, expected: Result, got: Completion) -> None:
        outcome, error, available_at, detail = expected
        assert (got.event_id, got.outcome, got.error, got.available_at) == (
            lease.event_id, outcome, error, available_at)
        if detail == SOME_REASON:
            assert isinstance(got.detail, str) and got.detail
        else:
            assert got.detail == detail

    # -------------------------------------------------------------- rules

    @rule(lines=st.lists(
        st.tuples(st.sampled_from(EVENT_IDS),
                  # about one line in sixteen carries another payload than its id's home one
                  st.tuples(st.booleans(), st.booleans(), st.booleans(), st.booleans()).map(all),
                  st.integers(0, len(PAYLOADS) - 1),
                  st.booleans()),
        min_size=1, max_size=4))
    def enqueue(self, lines: list[tuple[str, bool, int, bool]]) -> None:
        chosen = [(event_id, PAYLOADS[other if elsewhere else self.home[event_id]], flip)
                  for event_id, elsewhere, other, flip in lines]
        items = [(event_id, payload) for event_id, payload, _ in chosen]
        # The same payload is written with its keys in either order: one canonical form.
        text = "".join(
            json.dumps({"event_id": event_id, "payload": dict(reversed(payload.items())) if flip else payload}) + "\n"
            for event_id, payload, flip in chosen
        )
        result = self.expect(lambda: self.model.enqueue(items), lambda: self.store.enqueue(text))
        if result is not None:
            (accepted, duplicates), got = result
            assert (got.accepted, got.duplicates) == (accepted, duplicates)

    @precondition(lambda self: not all(self.current))
    @rule(data=st.data(), lease_seconds=st.integers(1, 4))
    def claim_by_an_idle_worker(self, data: st.DataObject, lease_seconds: int) -> None:
        worker = data.draw(st.sampled_from([w for w, lease in enumerate(self.current) if lease is None]))
        self.claim(worker, lease_seconds)

    @rule(worker=st.integers(0, WORKERS - 1), lease_seconds=st.integers(1, 4))
    def claim(self, worker: int, lease_seconds: int) -> None:
        # A worker that still holds a lease abandons it: a silent death of that work.
        expected = self.model.claim(lease_seconds)
        lease = self.store.claim(lease_seconds)
        if expected is None:
            assert lease is None
            return
        assert lease is not None
        assert (lease.event_id, lease.generation, lease.attempt, lease.lease_until) == expected
        assert lease.token != 0 and lease.token not in {issued.token for issued in self.issued}
        self.model.rows[lease.event_id].token = lease.token
        self.current[worker] = lease
        self.issued.append(lease)

    def _complete(self, lease: Lease, kind: str, slow: int) -> None:
        result = self.expect(lambda: self.model.complete(lease, kind, slow),
                             lambda: self.store.complete(lease, self.handler(kind, slow)))
        if result is not None:
            expected, got = result
            event(f"complete: {expected[0].value}")
            self.check_completion(lease, expected, got)

    @rule(worker=st.integers(0, WORKERS - 1), lease_seconds=st.integers(1, 4))
    def claim_then_die_silently(self, worker: int, lease_seconds: int) -> None:
        """A worker claims, then dies without a word; its lease runs out."""
        self.claim(worker, lease_seconds)
        self.current[worker] = None
        self.advance(lease_seconds)

    @rule(worker=st.integers(0, WORKERS - 1), lease_seconds=st.integers(1, 4))
    def claim_then_fail_temporarily(self, worker: int, lease_seconds: int) -> None:
        """A worker claims and hits a temporary error; the clock moves to the retry."""
        self.claim(worker, lease_seconds)
        lease, self.current[worker] = self.current[worker], None
        if lease is not None:
            self._complete(lease, "temporary", 0)
            row = self.model.rows[lease.event_id]
            self.advance(max(0, row.available_at - self.model.now))

    @rule(worker=st.integers(0, WORKERS - 1), lease_seconds=st.integers(1, 4), overrun=st.integers(0, 2),
          kind=st.sampled_from(["v1", "v2", "temporary", "error"]))
    def claim_then_work_past_the_lease(self, worker: int, lease_seconds: int, overrun: int, kind: str) -> None:
        """A worker claims, and its handler runs as long as the lease or longer: the re-check must refuse."""
        self.claim(worker, lease_seconds)
        lease, self.current[worker] = self.current[worker], None
        if lease is not None:
            self._complete(lease, kind, lease_seconds + overrun)

    @precondition(lambda self: any(self.current))
    @rule(data=st.data(), kind=st.sampled_from(["v1", "v1", "v2", "temporary", "temporary", "error"]),
          slow=st.sampled_from([0, 0, 1, 2, 5]))
    def complete(self, data: st.DataObject, kind: str, slow: int) -> None:
        worker = data.draw(st.sampled_from([w for w, lease in enumerate(self.current) if lease]))
        lease, self.current[worker] = self.current[worker], None
        self._complete(lease, kind, slow)

    @precondition(lambda self: any(self.current))
    @rule(data=st.data(), code=st.sampled_from(["flaky", "timeout", "bad_data"]), permanent=st.booleans(),
          detail=st.sampled_from(FAIL_DETAILS))
    def fail(self, data: st.DataObject, code: str, permanent: bool, detail: str | None) -> None:
        worker = data.draw(st.sampled_from([w for w, lease in enumerate(self.current) if lease]))
        lease, self.current[worker] = self.current[worker], None
        result = self.expect(lambda: self.model.fail(lease, code, permanent, detail),
                             lambda: self.store.fail(lease, code, permanent=permanent, detail=detail))
        if result is not None:
            self.check_completion(lease, *result)

    @precondition(lambda self: any(self.current))
    @rule(worker=st.integers(0, WORKERS - 1))
    def die(self, worker: int) -> None:
        """A worker dies silently: it forgets its lease, the store hears nothing."""
        self.current[worker] = None

    @precondition(lambda self: self.issued)
    @rule(data=st.data(), kind=st.sampled_from(["v1", "v2"]), slow=st.sampled_from([0, 1]))
    def stale_complete(self, data: st.DataObject, kind: str, slow: int) -> None:
        """Any lease ever issued (most are stale by now) tries to complete."""
        self._complete(data.draw(st.sampled_from(self.issued)), kind, slow)

    @precondition(lambda self: self.issued)
    @rule(data=st.data(), code=st.sampled_from(["flaky", "bad_data"]), permanent=st.booleans(),
          detail=st.sampled_from(FAIL_DETAILS))
    def stale_fail(self, data: st.DataObject, code: str, permanent: bool, detail: str | None) -> None:
        lease = data.draw(st.sampled_from(self.issued))
        result = self.expect(lambda: self.model.fail(lease, code, permanent, detail),
                             lambda: self.store.fail(lease, code, permanent=permanent, detail=detail))
        if result is not None:
            self.check_completion(lease, *result)

    @precondition(lambda self: self.issued)
    @rule(data=st.data(), generation_shift=st.sampled_from([-1, 0, 1]),
          attempt=st.integers(1, 3), lease_until=st.sampled_from([0, START, 10**9]))
    def forged_complete(self, data: st.DataObject, generation_shift: int, attempt: int, lease_until: int) -> None:
        """A lease rebuilt by hand: only the generation and its claim's token (and the stored lease) count.

        E.g. a worker of a previous cycle whose attempt number matches again
        after a redrive, or whose ``lease_until`` claims more time.
        """
        base = data.draw(st.sampled_from(self.issued))
        forged = replace(base, generation=max(0, base.generation + generation_shift),
                         attempt=attempt, lease_until=lease_until)
        self._complete(forged, "v1", 0)

    @rule(seconds=st.sampled_from([0, 1, 1, 2, 3, 5]))
    def advance(self, seconds: int) -> None:
        self.clock.advance(seconds)
        self.model.now += seconds

    @rule(ids=st.lists(st.sampled_from(EVENT_IDS + [UNKNOWN_ID]), min_size=1, max_size=3))
    def redrive(self, ids: list[str]) -> None:
        result = self.expect(lambda: self.model.redrive(ids), lambda: self.store.redrive(ids))
        if result is not None:
            expected, got = result
            assert got == expected

    @precondition(lambda self: any(r.state == "dead" for r in self.model.rows.values()))
    @rule(data=st.data())
    def redrive_dead(self, data: st.DataObject) -> None:
        dead = sorted(e for e, r in self.model.rows.items() if r.state == "dead")
        ids = data.draw(st.lists(st.sampled_from(dead), min_size=1, max_size=len(dead)))
        expected, got = self.expect(lambda: self.model.redrive(ids), lambda: self.store.redrive(ids))
        assert got == expected

    # --------------------------------------------------------- invariants

    @invariant()
    def store_equals_model(self) -> None:
        if not hasattr(self, "store"):
            return
        assert self.clock.now() == self.model.now
        stored, predicted = self.store.messages(), self.model.messages()
        assert [replace(m, last_detail=None) for m in stored] == [replace(m, last_detail=None) for m in predicted]
        for got, want in zip(stored, predicted):
            if want.last_detail == SOME_REASON:
                assert isinstance(got.last_detail, str) and got.last_detail, got
            else:
                assert got.last_detail == want.last_detail, got
        assert ledger.effects(self.store) == [(e, c, a) for e, (c, a) in sorted(self.model.effects.items())]
        counts = dict.fromkeys(("ready", "leased", "done", "dead"), 0)  # all four, zeros too
        for row in self.model.rows.values():
            counts[row.state] += 1
        assert dict(self.store.status().messages) == counts
        report = ledger.report(self.store)
        assert dict(report.queue.messages) == counts
        assert report.effects_count == len(self.model.effects)
        assert report.total_cents == sum(a for _, a in self.model.effects.values())

    @invariant()
    def model_is_consistent(self) -> None:
        """SPEC facts that hold in every state (so a wrong model fails too)."""
        if not hasattr(self, "model"):
            return
        done = {e for e, r in self.model.rows.items() if r.state == "done"}
        assert set(self.model.effects) == done  # an effect exactly for each done message
        for row in self.model.rows.values():
            assert (row.state == "leased") == (row.lease_until is not None)
            assert row.state != "dead" or row.last_error
            assert 0 <= row.attempts <= MAX_ATTEMPTS
            assert row.generation >= row.attempts


QueueMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("QUEUE_CORE_MODEL_EXAMPLES", "250")),
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_store_matches_the_model = QueueMachine.TestCase


# ------------------------------------------------------------------------ mutants
#
# Each mutant is a real protocol bug, patched into the store's current code (the
# methods below are the store's own with one rule broken or left out). The same
# state machine, with the same number of examples, must catch every one of them.

from queue_core import store as store_module  # noqa: E402  (the mutants patch its Store)
from queue_core.reads import fetch_message  # noqa: E402
from queue_core.errors import HandlerFailure, PermanentFailure  # noqa: E402

_original = {name: getattr(Store, name) for name in ("claim_tx", "redrive_tx", "_fail_checked")}


def _fenced_without(skip: str) -> Callable[[Store, Tx, Lease], Message]:
    """``leased_tx`` with one of its three checks left out."""

    def leased_tx(self: Store, tx: Tx, lease: Lease) -> Message:
        message = fetch_message(tx, self.queue, lease.event_id)
        now = tx.now()
        if message is None:
            raise LeaseLost(f"{lease.event_id} is not in the queue")
        if skip != "generation" and message.generation != lease.generation:
            raise LeaseLost("stale generation")
        if skip != "state" and (message.state != "leased" or message.lease_until is None):
            raise LeaseLost("not leased")
        if skip != "time" and message.lease_until is not None and not now < message.lease_until:
            raise LeaseLost("the lease ended")
        return message

    return leased_tx


def _ack_without_the_fence(self: Store, tx: Tx, leases: list[Lease], times: Any) -> list[Completion]:
    """``_ack`` that marks the messages done without checking their leases after the handler ran."""
    for lease in leases:
        tx.execute("UPDATE messages SET state = 'done', lease_until = NULL, done_at = ? WHERE event_id = ?",
                   (tx.now(), lease.event_id))
    return [Completion(lease.event_id, Outcome.DONE) for lease in leases]


def _complete_with(*, roll_back: bool, record_errors: bool) -> Callable[..., Completion]:
    """``_complete_with`` that keeps a refusing handler's writes, or lets its exception escape."""

    def complete_with(self: Store, tx: Tx, lease: Lease, handler: Callable[[Tx, Message], object],
                      claimed: Message | None = None) -> Completion:
        message = self.leased_tx(tx, lease) if claimed is None else claimed
        tx.execute("SAVEPOINT effect")
        try:
            handler(tx, message)
        except Exception as exc:
            if roll_back:
                tx.execute("ROLLBACK TO effect")
            tx.execute("RELEASE effect")
            if isinstance(exc, HandlerFailure):
                return self._refuse(tx, lease, exc.code, exc.detail or None,
                                    permanent=isinstance(exc, PermanentFailure))
            if not record_errors:
                raise
            return self._refuse(tx, lease, HANDLER_ERROR, f"{type(exc).__name__}: {exc}", permanent=False)
        tx.execute("RELEASE effect")
        return self.complete_tx(tx, lease) if claimed is None else self.ack_tx(tx, lease)

    return complete_with


def _claim_without_a_new_generation(self: Store, tx: Tx, lease_seconds: int = 30) -> Lease | None:
    lease = _original["claim_tx"](self, tx, lease_seconds)
    if lease is None:
        return None
    tx.execute("UPDATE messages SET generation = generation - 1 WHERE event_id = ?", (lease.event_id,))
    return replace(lease, generation=lease.generation - 1)


def _redrive_resetting_the_generation(self: Store, tx: Tx, event_ids: list[str]) -> list[str]:
    done: list[str] = _original["redrive_tx"](self, tx, event_ids)
    for event_id in done:
        tx.execute("UPDATE messages SET generation = 0 WHERE event_id = ?", (event_id,))
    return done


def _one_attempt_too_many(self: Store, tx: Tx, message: Message, code: str, detail: str | None, *,
                          permanent: bool, point: str, retry_after: float | None = None) -> Completion:
    if not permanent and message.attempts == self.max_attempts:
        message = replace(message, attempts=message.attempts - 1)  # the last attempt is not the last
    result: Completion = _original["_fail_checked"](self, tx, message, code, detail, permanent=permanent,
                                                    point=point, retry_after=retry_after)
    return result


MUTANTS: dict[str, dict[str, Callable[..., Any]]] = {
    "fencing ignores the generation": {"leased_tx": _fenced_without("generation")},
    "fencing ignores the lease's end": {"leased_tx": _fenced_without("time")},
    "fencing ignores the state": {"leased_tx": _fenced_without("state")},
    "no re-check after the handler": {"_recheck": lambda self, tx, lease, now: None,
                                      "_ack": _ack_without_the_fence},
    "a refusal keeps the handler's writes": {"_complete_with": _complete_with(roll_back=False,
                                                                               record_errors=True)},
    "a handler's exception escapes unrecorded": {"_complete_with": _complete_with(roll_back=True,
                                                                                   record_errors=False)},
    "a claim keeps the generation": {"claim_tx": _claim_without_a_new_generation},
    "a redrive resets the generation": {"redrive_tx": _redrive_resetting_the_generation},
    "the last failed attempt is retried": {"_fail_checked": _one_attempt_too_many},
}

MUTANT_SETTINGS = settings(
    max_examples=int(os.environ.get("QUEUE_CORE_MODEL_EXAMPLES", "250")),
    stateful_step_count=50,
    deadline=None,
    database=None,  # a mutant's counterexample must not be replayed against the real store
    phases=[Phase.generate],  # found is enough: no shrinking
    report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def test_the_mutants_are_real_store_methods_with_one_rule_broken() -> None:
    # Each replaced method exists on the store, with the same parameters: the mutant is the store's
    # current code path, not a method nobody calls.
    import inspect

    for patches in MUTANTS.values():
        for name, mutant in patches.items():
            real = inspect.signature(getattr(Store, name))
            assert list(inspect.signature(mutant).parameters) == list(real.parameters), name


@pytest.mark.parametrize("mutant", MUTANTS, ids=list(MUTANTS))
def test_the_model_catches_a_broken_store(mutant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, replacement in MUTANTS[mutant].items():
        monkeypatch.setattr(Store, name, replacement)
    with pytest.raises(BaseException) as caught:
        run_state_machine_as_test(QueueMachine, settings=MUTANT_SETTINGS)
    failure = caught.value
    # Caught by a disagreement with the model, not by a mistake in the mutant itself.
    if isinstance(failure, RuntimeError):
        assert str(failure) == CRASH_TEXT, failure  # the handler's exception escaped the store
    else:
        assert isinstance(failure, (AssertionError, pytest.fail.Exception, QueueError)), repr(failure)
