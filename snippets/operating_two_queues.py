"""Two queues with the same counts: one healthy, one whose workers keep dying.

Queue A: four events arrive at 1000; a worker completes E0001 at 1005 and is
working on E0002 now. Queue B: the same four events; a real child process
claims E0001 and dies with os._exit(86); at 1100 a worker takes the expired
lease over and completes E0001; then a second child claims E0002 and dies
too. Nobody has worked on B since. An hour later both queues show the same
counts by state. The metrics tell them apart.

Run it in an empty folder with queue_core installed: python operating_two_queues.py
"""

import subprocess
import sys
import tempfile
from pathlib import Path

from queue_core import Handler, ModelClock, Store, ledger
from queue_core.values import Metrics

EVENTS = (
    '{"event_id": "E0001", "payload": {"category": "book", "amount_cents": 10000}}\n'
    '{"event_id": "E0002", "payload": {"category": "pen", "amount_cents": 2000}}\n'
    '{"event_id": "E0003", "payload": {"category": "book", "amount_cents": 5000}}\n'
    '{"event_id": "E0004", "payload": {"category": "bag", "amount_cents": 3000}}\n'
)

# A worker in its own OS process: it claims (that commits) and dies before completing.
DYING_WORKER = """
import os, sys
from queue_core import ModelClock, Store
store = Store(sys.argv[1], clock=ModelClock(int(sys.argv[2])))
lease = store.claim(lease_seconds=30)
print(lease.event_id, flush=True)
os._exit(86)
"""


def dying_worker(db: Path, now: int) -> str:
    child = subprocess.run(
        [sys.executable, "-c", DYING_WORKER, str(db), str(now)],
        capture_output=True,
        text=True,
    )
    return f"{child.stdout.strip()} (exit {child.returncode})"


def queue_a(folder: Path) -> Metrics:
    clock = ModelClock(1000)
    with Store(folder / "a.sqlite3", clock=clock) as store:
        ledger.install(store)
        store.enqueue(EVENTS)
        clock.set(1005)
        # E0001, 5 s after it arrived
        store.complete(store.claim(lease_seconds=30), Handler())
        store.claim(lease_seconds=30)  # E0002: this worker is alive and working on it
        return store.metrics()


# --8<-- [start:shown]
def queue_b(folder: Path) -> Metrics:
    db = folder / "b.sqlite3"
    clock = ModelClock(1000)
    with Store(db, clock=clock) as store:
        ledger.install(store)
        store.enqueue(EVENTS)
        print(f"B at 1000: a worker claims {dying_worker(db, 1000)}")
        clock.set(1100)
        lease = store.claim(lease_seconds=30)  # E0001's lease ended at 1030: taken over
        store.complete(lease, Handler())
        print(
            f"B at 1100: a worker takes {lease.event_id} over "
            f"(generation {lease.generation}) and completes it"
        )
        print(f"B at 1100: a worker claims {dying_worker(db, 1100)}")
        clock.set(4600)
        e0002 = store.message("E0002")
        print(
            f"B at 4600: E0002 is stored as {e0002.state}, "
            f"its lease ended at {e0002.lease_until}"
        )
        return store.metrics()


# --8<-- [end:shown]
with tempfile.TemporaryDirectory() as tmp:
    a, b = queue_a(Path(tmp)), queue_b(Path(tmp))

print()
print(f"{'':<28}{'A at ' + str(a.now):>12}{'B at ' + str(b.now):>12}")
for state in ("ready", "leased", "done", "dead"):
    print(f"{state:<28}{a.messages[state]:>12}{b.messages[state]:>12}")
print("the metrics:")
print(f"{'oldest ready age (s)':<28}{a.oldest_ready_age:>12}{b.oldest_ready_age:>12}")
print(
    f"{'enqueue to done, max (s)':<28}"
    f"{a.enqueue_to_done.max:>12}{b.enqueue_to_done.max:>12}"
)
print(f"{'expired leases taken over':<28}{a.expired_leases:>12}{b.expired_leases:>12}")
