"""Exercise 4: reject an old generation.

Starts from the reference demo's `final` state. Teach the handler `toy` and
redrive E0004; then let worker A claim it and stall past its lease, worker B
claim it again, and A wake up and try to complete. A's completion must be
refused (its generation is old), before and after B's, and toy must count once.

Run: python exercise_old_generation.py
(needs queue_core installed; leaves nothing behind)
"""

import tempfile
from pathlib import Path

from queue_core import Handler, LeaseLost, ModelClock, Store, ledger, work
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
    assert snapshot.total_cents == total_cents, "the money is not what it should be"
    assert snapshot.effects_count == effects, "an effect is missing or doubled"
    assert {s: n for s, n in snapshot.to_dict()["messages"].items() if n} == states, (
        "the messages are not in the states they should be"
    )


# --8<-- [start:shown]
def solve(store, clock):
    """The solution."""
    toy = Handler.with_categories({"toy"})
    store.redrive(["E0004"])
    redriven = store.message("E0004")
    assert (redriven.state, redriven.attempts) == ("ready", 0), "redrive kept attempts"
    worker_a = store.claim(lease_seconds=LEASE_SECONDS)
    print(f"A leased {worker_a.event_id}, generation {worker_a.generation}")
    clock.advance(LEASE_SECONDS)  # A stalls until its lease has run out
    worker_b = store.claim(lease_seconds=LEASE_SECONDS)
    print(f"B leased {worker_b.event_id}, generation {worker_b.generation}")
    for moment in ("before B completes", "after B completes"):
        try:
            store.complete(worker_a, toy)
        except LeaseLost as exc:
            print(f"A {moment}: refused:")
            print(f"  {exc}")
        else:
            raise AssertionError(f"A's old generation completed {moment}")
        m = store.message("E0004")
        assert m.generation == worker_b.generation, "A's refusal changed the message"
        if moment == "before B completes":
            print("B:", store.complete(worker_b, toy).outcome.value)


# --8<-- [end:shown]
with tempfile.TemporaryDirectory() as folder:
    store, clock = reference_state(folder)
    check(store, 17000, 3, done=3, dead=1)
    solve(store, clock)
    check(store, 20000, 4, done=4)
    assert [e for e in ledger.effects(store) if e[0] == "E0004"] == [
        ("E0004", "toy", 3000)
    ]
