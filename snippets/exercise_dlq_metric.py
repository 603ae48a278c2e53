"""Exercise 5: a metric of the dead-letter queue's attempts.

Starts from the reference demo's `final` state. Write `dlq_metrics(store)`:
from `store.dead_letters()`, the number of dead letters and the sum and the
maximum of their attempts. Then add a second dead letter, E0005, whose
downstream service never answers, so that it spends every attempt, and
measure again.

Run: python exercise_dlq_metric.py
(needs queue_core installed; leaves nothing behind)
"""

import tempfile
from pathlib import Path

from queue_core import (
    MAX_ATTEMPTS,
    Handler,
    ModelClock,
    Store,
    TemporaryFailure,
    ledger,
    work,
)
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
def dlq_metrics(store):
    """The solution's metric: how many dead letters, and their attempts."""
    attempts = [message.attempts for message in store.dead_letters()]
    return {
        "dead_letters": len(attempts),
        "attempts_total": sum(attempts),
        "attempts_max": max(attempts, default=0),
    }


def unavailable(tx, message):
    raise TemporaryFailure("downstream_unavailable", "the service does not answer")


def solve(store, clock):
    """The solution."""
    print("metric before:", dlq_metrics(store))
    store.enqueue(
        '{"event_id": "E0005", "payload": {"category": "bag", "amount_cents": 700}}\n'
    )
    for _ in range(MAX_ATTEMPTS):  # each attempt when its backoff has passed
        clock.set(max(clock.now(), store.message("E0005").available_at))
        print(
            f"t={clock.now()}:",
            work(store, unavailable, lease_seconds=LEASE_SECONDS).to_dict(),
        )
    print("metric after:", dlq_metrics(store))
    return dlq_metrics(store)


# --8<-- [end:shown]
with tempfile.TemporaryDirectory() as folder:
    store, clock = reference_state(folder)
    check(store, 17000, 3, done=3, dead=1)
    metric = solve(store, clock)
    check(store, 17000, 3, done=3, dead=2)
    assert metric == {
        "dead_letters": 2,
        "attempts_total": 1 + MAX_ATTEMPTS,
        "attempts_max": MAX_ATTEMPTS,
    }
