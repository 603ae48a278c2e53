"""Effect and ACK in two commits: a real crash between them doubles or loses money.

A naive worker writes the effect and the ACK in two separate transactions. A
real child process makes the first commit and dies with os._exit(86) before
the second. Then the message is handed out again if it is not done (what a
lease expiry does), and a healthy worker finishes it. For comparison, the
last row does the same with queue_core, whose effect and ACK share one
transaction.

Run: python ack_two_commits.py   (needs queue_core installed; leaves nothing behind)
"""

import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

from queue_core import Handler, ModelClock, Store, ledger
from queue_core.app.crash_child import run_crashing_completion

SALE = 10000  # E0001: a book sold for 100.00, to be counted exactly once


def naive_file(db: Path) -> sqlite3.Connection:
    """A bare queue: E0001 leased to the naive worker, and an empty effects table."""
    conn = sqlite3.connect(db)
    conn.executescript("""
        CREATE TABLE messages (
            event_id TEXT PRIMARY KEY, amount_cents INTEGER, state TEXT
        );
        CREATE TABLE effects (event_id TEXT, amount_cents INTEGER);
    """)
    conn.execute("INSERT INTO messages VALUES ('E0001', ?, 'leased')", (SALE,))
    conn.commit()
    return conn


def look(conn: sqlite3.Connection) -> tuple[str, int]:
    state = conn.execute("SELECT state FROM messages").fetchone()[0]
    total = conn.execute(
        "SELECT coalesce(sum(amount_cents), 0) FROM effects"
    ).fetchone()[0]
    return state, total


# --8<-- [start:shown]
# The naive worker, run as a separate OS process.
WORKER = """
import os, sqlite3, sys
db, order, crash = sys.argv[1], sys.argv[2], sys.argv[3] == "crash"
effect = ("INSERT INTO effects SELECT event_id, amount_cents FROM messages"
          " WHERE event_id = 'E0001'")
ack = "UPDATE messages SET state = 'done' WHERE event_id = 'E0001'"
first, second = (effect, ack) if order == "effect, then ACK" else (ack, effect)
conn = sqlite3.connect(db)
conn.execute(first)
conn.commit()          # the first write is committed and durable
if crash:
    os._exit(86)       # the process dies here: no second commit
conn.execute(second)
conn.commit()
"""


def naive(folder: Path, order: str) -> tuple[int, str, int, str, int]:
    db = folder / (
        "naive-effect-first.sqlite3"
        if order.startswith("effect")
        else "naive-ack-first.sqlite3"
    )
    conn = naive_file(db)
    status = subprocess.run(
        [sys.executable, "-c", WORKER, str(db), order, "crash"]
    ).returncode
    state_after_crash, total_after_crash = look(conn)
    if state_after_crash != "done":  # not acknowledged: the message is delivered again
        subprocess.run(
            [sys.executable, "-c", WORKER, str(db), order, "no-crash"], check=True
        )
    final_state, final_total = look(conn)
    conn.close()
    return status, state_after_crash, total_after_crash, final_state, final_total
    # --8<-- [end:shown]


def one_transaction(folder: Path) -> tuple[int, str, int, str, int]:
    db = folder / "queue_core.sqlite3"
    clock = ModelClock(1000)
    store = Store(db, clock=clock)
    ledger.install(store)  # the reference application's effects table
    store.enqueue(
        '{"event_id": "E0001", "payload": {"category": "book", "amount_cents": %d}}'
        % SALE
    )
    lease = store.claim(lease_seconds=2)
    # dies after the handler's INSERT
    status = run_crashing_completion(db, lease, now=clock.now())
    state_after_crash, total_after_crash = (
        store.message("E0001").state,
        ledger.report(store).total_cents,
    )
    clock.set(lease.lease_until)  # the dead worker's lease runs out...
    # ...and the message is handed out again
    store.complete(store.claim(lease_seconds=2), Handler())
    return (
        status,
        state_after_crash,
        total_after_crash,
        store.message("E0001").state,
        ledger.report(store).total_cents,
    )


with tempfile.TemporaryDirectory() as tmp:
    folder = Path(tmp)
    rows = [
        ("effect, then ACK", *naive(folder, "effect, then ACK")),
        ("ACK, then effect", *naive(folder, "ACK, then effect")),
        ("queue_core, one transaction", *one_transaction(folder)),
    ]

print(
    f"{'worker':<27} {'exit':>4}  {'after the crash':<15}  "
    f"{'redelivered':<13}   verdict"
)
for order, status, state1, total1, state2, total2 in rows:
    verdict = {SALE: "counted once", 2 * SALE: "DOUBLED", 0: "LOST"}.get(
        total2, "wrong"
    )
    print(
        f"{order:<27} {status:>4}  {state1:<6} {total1:>6}    "
        f"{state2:<6} {total2:>6}   {verdict}"
    )
