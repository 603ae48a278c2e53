"""Exercise 1: change the total to 19000 without editing an accepted event.

Starts from the reference demo's `final` state (E0001-E0003 done, 17000 cents
in effects; E0004, a toy, dead). An accepted event is never corrected in
place: re-sending E0002 with another amount is a conflict that rejects the
batch. The correction is a new event with its own id.

Run: python exercise_total_19000.py
(needs queue_core installed; leaves nothing behind)
"""

import tempfile
from pathlib import Path

from queue_core import BatchRejected, Handler, ModelClock, Store, ledger, work
from queue_core.app.demo import DEMO_BATCH, LEASE_SECONDS, START


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
    edit = (
        '{"event_id": "E0002", "payload": {"category": "pen", "amount_cents": 4000}}\n'
    )
    try:  # editing E0002 (pen 2000 -> 4000) is refused, and nothing is written
        store.enqueue(edit)
    except BatchRejected as exc:
        print("editing E0002:", exc.code)
    clock.advance(1)
    correction = (
        '{"event_id": "E0005", "payload": {"category": "pen", "amount_cents": 2000}}\n'
    )
    print("enqueue the correction:", store.enqueue(correction).to_dict())
    print("work:", work(store, Handler(), lease_seconds=LEASE_SECONDS).to_dict())


# --8<-- [end:shown]
with tempfile.TemporaryDirectory() as folder:
    store, clock = reference_state(folder)
    check(store, 17000, 3, done=3, dead=1)
    solve(store, clock)
    check(store, 19000, 4, done=4, dead=1)
