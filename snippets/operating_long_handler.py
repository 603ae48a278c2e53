"""The worker loop's heartbeat: a LongHandler's long step, outside the transaction.

A payment must be scored before it is booked, and scoring takes 24 seconds;
the lease is 10. ``work(store, LongHandler(prepare, write))`` claims E0001,
runs ``prepare`` outside any transaction while a heartbeat extends the lease,
then completes with ``write``, the short step that writes the effect.

1. The long step outlives its first lease: another worker never gets E0001
   and can write meanwhile (it claims and completes E0002); the completion
   is the first attempt's.
2. The worker stalls for 11 s, longer than its lease, so its heartbeat
   cannot save it: another worker takes E0001 over and books it. The stalled
   worker's score is dropped; ``write`` is never called.

The heartbeat's thread and its connection are real; the work is the model
clock moving (ModelClock), so the output is the same on every run.

Run it in an empty folder with queue_core installed: python operating_long_handler.py
"""

import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from queue_core import (
    Handler,
    LongHandler,
    Message,
    ModelClock,
    Store,
    Tx,
    ledger,
    work,
)

EVENTS = (
    '{"event_id": "E0001", "payload": {"category": "book", "amount_cents": 10000}}\n'
    '{"event_id": "E0002", "payload": {"category": "pen", "amount_cents": 2000}}\n'
)


def wait_for(condition: Callable[[], bool]) -> None:
    """Real time: give the heartbeat's thread the moment it needs to act."""
    deadline = time.monotonic() + 10
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit("the heartbeat did not act")
        time.sleep(0.005)


def other_worker(store: Store) -> str:
    """Another worker, on a thread of its own: claim one message and book it."""
    said: list[str] = []

    def run() -> None:
        lease = store.claim(lease_seconds=10)
        if lease is None:
            said.append("claims nothing")
        else:
            outcome = store.complete(lease, Handler())
            said.append(
                f"claims {lease.event_id} (generation {lease.generation}): "
                f"{outcome.outcome.value}"
            )

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return said[0]


written: list[str] = []


def write(tx: Tx, message: Message, score: int) -> None:
    """The short step, inside the completion's transaction: the effect."""
    written.append(message.event_id)
    print(f"  {message.event_id}: write the effect (score {score})")
    Handler()(tx, message)


def new_queue(folder: str, name: str) -> tuple[Store, ModelClock]:
    clock = ModelClock(1000)
    store = Store(Path(folder) / f"{name}.sqlite3", clock=clock)
    ledger.install(store)
    store.enqueue(EVENTS)
    return store, clock


with tempfile.TemporaryDirectory() as folder:
    print("1. A long step of 24 s under a heartbeat, with a 10 s lease")
    store, clock = new_queue(folder, "one")

    def score(message: Message) -> int:
        """The long step, outside any transaction; the heartbeat keeps the lease."""
        for _ in range(4):
            clock.advance(6)
            # a beat since
            wait_for(lambda: store.message("E0001").lease_until == clock.now() + 10)
            until = store.message("E0001").lease_until
            print(
                f"  {clock.now()} scoring {message.event_id}, lease until {until}; "
                f"another worker {other_worker(store)}"
            )
        return 7

    # --8<-- [start:shown]
    summary = work(
        store, LongHandler(score, write), lease_seconds=10, heartbeat_every=0.01
    )
    m = store.message("E0001")
    print(f"  {summary.to_dict()}")
    print(f"  E0001 {m.state}: attempts {m.attempts}, generation {m.generation}")
    print(f"  effects {ledger.effects(store)}")
    store.close()
    print()

    print("2. The worker stalls for 11 s in its long step")
    store, clock = new_queue(folder, "two")
    written.clear()

    def stalled_score(message: Message) -> int:
        if message.event_id == "E0001":
            clock.advance(11)  # a pause longer than the lease: no beat in time
            print(f"  {clock.now()} stalled; another worker {other_worker(store)}")
        return 7

    summary = work(
        store,
        LongHandler(stalled_score, write),
        lease_seconds=10,
        heartbeat_every=0.01,
        max_messages=1,
    )
    m = store.message("E0001")
    print(f"  {summary.to_dict()}")
    print(
        f"  E0001 {m.state}: generation {m.generation}; effects {ledger.effects(store)}"
    )
    print(f"  the stalled worker's write was called {len(written)} times")
    store.close()
    # --8<-- [end:shown]
