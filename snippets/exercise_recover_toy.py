"""Exercise 3: recover toy to 20000.

Starts from the reference demo's `final` state: E0004 (toy, 3000) is a dead
letter because this handler version does not know `toy`. A redrive alone
sends it back to dead; the handler must learn the category first.

Run: python exercise_recover_toy.py
(needs queue_core installed; leaves nothing behind)
"""

import tempfile
from pathlib import Path

from queue_core import Handler, ModelClock, Store, ledger, work
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


def solve(store, clock):
    """The solution."""
    store.redrive(["E0004"])  # without a fix: the same handler refuses it again
    print(
        "redrive, no fix:",
        work(store, Handler(), lease_seconds=LEASE_SECONDS).to_dict(),
    )
    clock.advance(1)
    toy = Handler.with_categories({"toy"})  # the deliberate handler change
    print("redriven:", store.redrive(["E0004"]))
    print("work, new handler:", work(store, toy, lease_seconds=LEASE_SECONDS).to_dict())


with tempfile.TemporaryDirectory() as folder:
    store, clock = reference_state(folder)
    check(store, 17000, 3, done=3, dead=1)
    solve(store, clock)
    check(store, 20000, 4, done=4)
