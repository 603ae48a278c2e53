"""Check the invariants: a real SIGKILL in a completion, a fresh worker, the checker.

The reference batch is enqueued and E0001 is claimed. A separate OS process
completes that lease and is killed with SIGKILL right after its handler wrote
the effect (probe point complete.after_effect), before COMMIT. The checker
reads the file (read-only) straight after the crash, then a fresh worker
finishes the queue and the checker reads it again, this time with everything
the producer sent and the money it must add up to. Last, raw SQL makes the
two states a worker that commits its effect and its ACK separately leaves
behind (a done message without its effect, an effect without a done
message), and the checker names them.

Run it in a clone of queue_core's repository, from its root (the checker is
the repository's proof package, not installed with queue_core):
PYTHONPATH=. python snippets/evidence_check.py   (leaves nothing behind)
"""

import json
import sqlite3
import tempfile
from pathlib import Path

from queue_core import ModelClock, Store, ledger
from queue_core.app.crash_child import run_crashing
from proof.invariants import check_invariants, finish_queue

EVENTS = {
    "E0001": {"category": "book", "amount_cents": 10000},
    "E0002": {"category": "pen", "amount_cents": 2000},
    "E0003": {"category": "book", "amount_cents": 5000},
    # this handler refuses toys: dead
    "E0004": {"category": "toy", "amount_cents": 3000},
}
BATCH = "".join(
    json.dumps({"event_id": e, "payload": p}) + "\n" for e, p in EVENTS.items()
)

with tempfile.TemporaryDirectory() as folder:
    db = Path(folder) / "queue.sqlite3"
    store = Store(db, clock=ModelClock(1000))
    ledger.install(store)  # the reference application's effects table
    store.enqueue(BATCH)
    # --8<-- [start:shown]
    lease = store.claim(lease_seconds=2)
    status = run_crashing(
        db,
        "complete",
        lease=lease,
        now=1000,
        point="complete.after_effect",
        how="sigkill",
    )
    print(
        f"the child completing {lease.event_id} died at complete.after_effect: "
        f"exit status {status}"
    )

    row = store.message("E0001")
    print(
        f"E0001 after the crash: {row.state}, "
        f"attempts {row.attempts}, generation {row.generation}"
    )
    print("effects after the crash:", ledger.effects(store))
    print("violations (not finished yet):", check_invariants(db, finished=False))

    # a fresh worker; model time jumps past the lease
    finished_at = finish_queue(db, now=1000)
    row = store.message("E0001")
    print(f"a fresh worker finished the queue at model second {finished_at}")
    print(
        f"E0001 now: {row.state}, attempts {row.attempts}, generation {row.generation}"
    )
    expected = sum(p["amount_cents"] for p in EVENTS.values() if p["category"] != "toy")
    print(f"money: {ledger.totals(store).total_cents} (expected {expected})")
    print("violations:", check_invariants(db, events=EVENTS, expected_total=expected))

    raw = sqlite3.connect(db)  # a client that bypasses the protocol
    # E0001 stays done: "ACK first"
    raw.execute("DELETE FROM effects WHERE event_id = 'E0001'")
    # E0004 stays dead: "effect first"
    raw.execute("INSERT INTO effects VALUES ('default', 'E0004', 'toy', 3000)")
    raw.commit()
    raw.close()
    print("violations after raw SQL:")
    for violation in check_invariants(db, events=EVENTS, expected_total=expected):
        print("  " + violation)
    # --8<-- [end:shown]
