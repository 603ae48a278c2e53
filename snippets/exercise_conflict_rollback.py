"""Exercise 2: roll back a conflicting batch so that E0005 is not enqueued.

Starts from the reference demo's `final` state. A batch brings a new event,
E0005, and a line that contradicts the stored E0001. The conflict must reject
everything, E0005 included: once as one batch, and once as two batches that
your own code enqueues in one transaction (`store.transaction()` with
`enqueue_tx`), where the first batch alone would have been fine.

Run: python exercise_conflict_rollback.py
(needs queue_core installed; leaves nothing behind)
"""

import tempfile
from pathlib import Path

from queue_core import (
    BatchRejected,
    Handler,
    ModelClock,
    Store,
    UnknownEvent,
    ledger,
    parse_batch,
    work,
)
from queue_core.app.demo import DEMO_BATCH, LEASE_SECONDS, START

NEW = '{"event_id": "E0005", "payload": {"category": "pen", "amount_cents": 2000}}\n'
CONFLICT = (
    '{"event_id": "E0001", "payload": {"category": "book", "amount_cents": 12000}}\n'
)


def reference_state(folder):
    """The demo's `final` snapshot: E0001-E0003 done, E0004 (toy) dead."""
    clock = ModelClock(START)
    store = Store(Path(folder) / "queue.sqlite3", clock=clock)
    ledger.install(store)  # the reference application's effects table
    store.enqueue(DEMO_BATCH)
    work(store, Handler(), lease_seconds=LEASE_SECONDS)
    return store, clock


def check(store, total_cents, effects, **states):
    """Money, number of effects and states, together."""
    snapshot = ledger.report(store)
    print(
        f"money: {snapshot.total_cents}, effects: {snapshot.effects_count}, "
        f"states: {snapshot.to_dict()['messages']}"
    )
    assert snapshot.total_cents == total_cents
    assert snapshot.effects_count == effects
    assert {s: n for s, n in snapshot.to_dict()["messages"].items() if n} == states


# --8<-- [start:shown]
def solve(store, clock):
    """The solution."""
    try:  # one batch: validated, then stored in one transaction, or not at all
        store.enqueue(NEW + CONFLICT)
    except BatchRejected as exc:
        print(f"one batch: rejected, line {exc.line}: {exc.code}")
    try:  # two batches in the caller's transaction: the conflict rolls back both
        with store.transaction() as tx:
            first = store.enqueue_tx(tx, parse_batch(NEW.encode()))
            print("  first batch alone:", first.to_dict())
            store.enqueue_tx(tx, parse_batch(CONFLICT.encode()))
    except BatchRejected as exc:
        print(f"two batches, one transaction: rolled back ({exc.code})")
    try:
        store.message("E0005")
    except UnknownEvent:
        print("E0005 is not in the queue")
    print("work:", work(store, Handler(), lease_seconds=LEASE_SECONDS).to_dict())


# --8<-- [end:shown]
with tempfile.TemporaryDirectory() as folder:
    store, clock = reference_state(folder)
    check(store, 17000, 3, done=3, dead=1)
    solve(store, clock)
    check(store, 17000, 3, done=3, dead=1)
    assert [m.event_id for m in store.messages()] == [
        "E0001",
        "E0002",
        "E0003",
        "E0004",
    ]
