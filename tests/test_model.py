"""Model-based test: the real store against a small pure-Python model of SPEC's state machine.

A hypothesis state machine drives several simulated workers (lease holders in
this one process) and the shared ``ModelClock`` through random interleavings of
enqueue, claim, complete (with a handler that succeeds, refuses the payload,
fails temporarily, or takes long), explicit fail, silent death, clock moves,
expiry, stale and forged completions, and redrive. After every step the whole
``messages`` table (state, attempts, generation, available_at, lease_until,
last_error, payload), the ``effects`` table, ``status()`` and the clock must
equal the model exactly, and every return value and refusal must be the one
the model predicts.

The model is written from SPEC.md, not from the store's code. Where SPEC is
silent the model follows what the store documents and says so:

* redrive keeps ``last_error`` (SPEC: "keeps generation and the payload");
* a handler failure inside ``complete`` is re-checked against the clock after
  the handler ran, like an effect: a refusal after the lease ended is itself
  refused (``LeaseLost``) and nothing is recorded.

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
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from queue_core import (
    BatchRejected,
    Effect,
    Handler,
    Lease,
    LeaseLost,
    Message,
    ModelClock,
    NotDead,
    Outcome,
    Store,
    TemporaryFailure,
    UnknownEvent,
)

START = 1000
MAX_ATTEMPTS = 3  # SPEC: "The budget is 3 claims"
BACKOFF = {1: 1, 2: 2}  # SPEC: "backoff 1 s after the first attempt, 2 s after the second"
V1 = frozenset({"book", "pen", "bag"})  # SPEC: the handler's categories
V2 = V1 | {"toy"}  # "Supporting a new category (e.g. toy) is a deliberate handler change"
TEMPORARY_CODE = "downstream_timeout"

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
            self.rows[event_id] = Row(payload=text, available_at=self.now)
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
            if row.attempts >= MAX_ATTEMPTS:  # "after the third death, the next claim moves it to dead"
                event("claim: budget spent by silent deaths -> dead")
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
        if (row is None or row.generation != lease.generation or row.state != "leased"
                or not self.now < row.lease_until):
            raise Refused(LeaseLost)
        return row

    def failed(self, row: Row, code: str, permanent: bool) -> tuple[Outcome, str, int | None]:
        if permanent or row.attempts >= MAX_ATTEMPTS:
            event("failure -> dead" + ("" if permanent else " (budget spent)"))
            row.state, row.lease_until, row.last_error = "dead", None, code
            return Outcome.DEAD, code, None
        row.state, row.lease_until, row.last_error = "ready", None, code
        row.available_at = self.now + BACKOFF[row.attempts]
        return Outcome.RETRY, code, row.available_at

    def complete(self, lease: Lease, kind: str, slow: int) -> tuple[Outcome, str | None, int | None]:
        row = self.fenced(lease)
        self.now += slow  # the handler runs; the work may take long
        # A refusal is recorded only if the lease is still current after the
        # work (re-checked like a success); otherwise LeaseLost, nothing recorded.
        if kind == "temporary":
            return self.failed(self.fenced(lease), TEMPORARY_CODE, permanent=False)
        effect = business_effect(json.loads(row.payload), V2 if kind == "v2" else V1)
        if effect is None:
            return self.failed(self.fenced(lease), "invalid_payload", permanent=True)
        if not self.now < row.lease_until:
            event("complete: lease ran out during the work, effect rolled back")
        self.fenced(lease)  # re-check after the work: a lost lease rolls the effect back
        self.effects[lease.event_id] = effect
        row.state, row.lease_until = "done", None
        return Outcome.DONE, None, None

    def fail(self, lease: Lease, code: str, permanent: bool) -> tuple[Outcome, str, int | None]:
        return self.failed(self.fenced(lease), code, permanent)

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
                    r.lease_until, r.last_error)
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

    def handler(self, kind: str, slow: int):
        base = Handler.with_categories({"toy"}) if kind == "v2" else Handler()

        def run(payload: Mapping[str, Any]) -> Effect:
            if slow:
                self.clock.advance(slow)
            if kind == "temporary":
                raise TemporaryFailure(TEMPORARY_CODE)
            return base(payload)

        return run

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
        self.current[worker] = lease
        self.issued.append(lease)

    def _complete(self, lease: Lease, kind: str, slow: int) -> None:
        result = self.expect(lambda: self.model.complete(lease, kind, slow),
                             lambda: self.store.complete(lease, self.handler(kind, slow)))
        if result is not None:
            (outcome, error, available_at), got = result
            event(f"complete: {outcome.value}")
            assert (got.event_id, got.outcome, got.error, got.available_at) == (
                lease.event_id, outcome, error, available_at)

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

    @precondition(lambda self: any(self.current))
    @rule(data=st.data(), kind=st.sampled_from(["v1", "v1", "v2", "temporary", "temporary"]),
          slow=st.sampled_from([0, 0, 1, 2, 5]))
    def complete(self, data: st.DataObject, kind: str, slow: int) -> None:
        worker = data.draw(st.sampled_from([w for w, lease in enumerate(self.current) if lease]))
        lease, self.current[worker] = self.current[worker], None
        self._complete(lease, kind, slow)

    @precondition(lambda self: any(self.current))
    @rule(data=st.data(), code=st.sampled_from(["flaky", "timeout", "bad_data"]), permanent=st.booleans())
    def fail(self, data: st.DataObject, code: str, permanent: bool) -> None:
        worker = data.draw(st.sampled_from([w for w, lease in enumerate(self.current) if lease]))
        lease, self.current[worker] = self.current[worker], None
        result = self.expect(lambda: self.model.fail(lease, code, permanent),
                             lambda: self.store.fail(lease, code, permanent=permanent))
        if result is not None:
            (outcome, error, available_at), got = result
            assert (got.outcome, got.error, got.available_at) == (outcome, error, available_at)

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
    @rule(data=st.data(), code=st.sampled_from(["flaky", "bad_data"]), permanent=st.booleans())
    def stale_fail(self, data: st.DataObject, code: str, permanent: bool) -> None:
        lease = data.draw(st.sampled_from(self.issued))
        result = self.expect(lambda: self.model.fail(lease, code, permanent),
                             lambda: self.store.fail(lease, code, permanent=permanent))
        if result is not None:
            (outcome, error, available_at), got = result
            assert (got.outcome, got.error, got.available_at) == (outcome, error, available_at)

    @precondition(lambda self: self.issued)
    @rule(data=st.data(), generation_shift=st.sampled_from([-1, 0, 1]),
          attempt=st.integers(1, 3), lease_until=st.sampled_from([0, START, 10**9]))
    def forged_complete(self, data: st.DataObject, generation_shift: int, attempt: int, lease_until: int) -> None:
        """A lease rebuilt by hand: only the generation (and the stored lease) count.

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
        assert self.store.messages() == self.model.messages()
        assert self.store.effects() == [(e, c, a) for e, (c, a) in sorted(self.model.effects.items())]
        counts: dict[str, int] = {}
        for row in self.model.rows.values():
            counts[row.state] = counts.get(row.state, 0) + 1
        snapshot = self.store.status()
        assert dict(snapshot.messages) == counts
        assert snapshot.effects_count == len(self.model.effects)
        assert snapshot.total_cents == sum(a for _, a in self.model.effects.values())

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
