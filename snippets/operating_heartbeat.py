"""A heartbeat: a background thread extends the lease while long work runs.

1. Around work done between claim and complete, the heartbeat keeps E0001
   leased for four times its 10-second lease; another worker finds nothing
   to claim, and the completion is the first attempt's.
2. Around the completion itself it cannot help: the handler runs inside the
   completion's transaction, which holds SQLite's write lock, so the
   heartbeat's extension waits for that transaction to end. The handler
   takes 15 s, the lease ends after 10, and the completion is refused.

The heartbeat's thread and its connection are real; the work is the model
clock moving (ModelClock), so the output is the same on every run.

Run it in an empty folder with queue_core installed: python operating_heartbeat.py
"""

import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from queue_core import Handler, LeaseLost, Message, ModelClock, Store, Tx, ledger

EVENT = '{"event_id": "E0001", "payload": {"category": "book", "amount_cents": 10000}}'
SECOND_EVENT = (
    '{"event_id": "E0002", "payload": {"category": "pen", "amount_cents": 2000}}'
)


def wait_for(condition: Callable[[], bool]) -> None:
    """Real time: give the heartbeat's thread the moment it needs to act."""
    deadline = time.monotonic() + 10
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit("the heartbeat did not act")
        time.sleep(0.005)


with tempfile.TemporaryDirectory() as folder:
    print("1. A heartbeat around long work, between claim and complete")
    clock = ModelClock(1000)
    store = Store(Path(folder) / "one.sqlite3", clock=clock)
    ledger.install(store)
    store.enqueue(EVENT + "\n" + SECOND_EVENT)
    lease = store.claim(lease_seconds=10)
    print(f"  {clock.now()}  claim {lease.event_id}: lease until {lease.lease_until}")
    # --8<-- [start:shown]
    with store.heartbeat(lease, every=0.01, lease_seconds=10) as beat:
        for _ in range(4):  # 24 s of work in four steps
            clock.advance(6)
            wait_for(lambda: store.message("E0001").lease_until == clock.now() + 10)
            other = store.claim(lease_seconds=10)  # another worker
            until = store.message("E0001").lease_until
            print(
                f"  {clock.now()}  working; stored lease until {until}; "
                f"another worker's claim gets {other.event_id if other else 'nothing'}"
            )
            assert other is None or other.event_id != "E0001", "E0001 claimed twice"
            if other is not None:
                store.complete(other, Handler())
    print(f"  {clock.now()}  work done; lost: {beat.lost}")
    outcome = store.complete(beat.lease, Handler())  # the latest extension
    m = store.message("E0001")
    print(
        f"  {clock.now()}  complete: {outcome.outcome.value}; "
        f"attempts {m.attempts}, generation {m.generation}"
    )
    assert (m.state, m.attempts) == ("done", 1), "the heartbeat did not keep the lease"
    store.close()
    print()

    print("2. A heartbeat around a slow handler, inside the completion")
    clock = ModelClock(1000)
    store = Store(Path(folder) / "two.sqlite3", clock=clock)
    ledger.install(store)
    store.enqueue(EVENT)
    lease = store.claim(lease_seconds=10)
    print(f"  {clock.now()}  claim {lease.event_id}: lease until {lease.lease_until}")

    def slow_handler(tx: Tx, message: Message) -> None:
        clock.advance(15)  # 15 s of work while this transaction holds the write lock
        time.sleep(0.2)  # real time, in which the heartbeat tries to extend, and waits
        Handler()(tx, message)

    with store.heartbeat(lease, every=0.01, lease_seconds=10) as beat:
        try:
            store.complete(lease, slow_handler)
        except LeaseLost as exc:
            print(f"  {clock.now()}  complete: LeaseLost: {exc.message}")
        else:
            raise AssertionError("a completion after its lease ended was accepted")
        wait_for(lambda: beat.lost is not None)  # the extension, too late
    # --8<-- [end:shown]
    m = store.message("E0001")
    print(f"  stored lease until {m.lease_until}: no extension got in")
    lost = beat.lost.message if beat.lost else None
    print(f"  the heartbeat afterwards: LeaseLost: {lost}")
    print(f"  effects: {ledger.effects(store)}")
    assert (m.state, m.lease_until, m.attempts) == ("leased", 1010, 1), (
        "the refused completion (or a late extension) changed the message"
    )
    assert ledger.effects(store) == [], "the refused completion's effect was committed"
    store.close()
