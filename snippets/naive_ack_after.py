"""Naive version (b): write the effect, then ACK, in two transactions.

A worker process adds the money (commit), then dies with os._exit(86) before
it marks E0001 done: a real child process, no cleanup, no second commit. The
message is still not done, so it is delivered again, and the restarted worker
adds the money a second time.

Run it in an empty folder: python naive_ack_after.py (Python 3.11+, stdlib only).
"""

import sqlite3
import subprocess
import sys
import tempfile
from contextlib import closing
from pathlib import Path

# --8<-- [start:shown]
# The worker is a separate program, so that it can really die half-way.
WORKER = """
import os, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
row = db.execute(
    "SELECT event_id, amount_cents FROM messages WHERE done = 0 LIMIT 1"
).fetchone()
if row is None:
    print("nothing to do")
    sys.exit(0)
event_id, amount_cents = row
db.execute("UPDATE totals SET cents = cents + ?", (amount_cents,))
db.commit()                                     # transaction 1: the effect
if sys.argv[2] == "die":
    os._exit(86)                                # the process dies right here
db.execute("UPDATE messages SET done = 1 WHERE event_id = ?", (event_id,))
db.commit()                                     # transaction 2: the ACK
print(f"processed {event_id}")
"""
# --8<-- [end:shown]


def run_worker(db: Path, how: str) -> str:
    child = subprocess.run(
        [sys.executable, "-c", WORKER, str(db), how], capture_output=True, text=True
    )
    return f"exit {child.returncode} {child.stdout.strip()}"


def row(step: str, worker: str, db: Path) -> None:
    with closing(sqlite3.connect(db)) as conn:
        done = conn.execute(
            "SELECT done FROM messages WHERE event_id = 'E0001'"
        ).fetchone()[0]
        cents = conn.execute("SELECT cents FROM totals").fetchone()[0]
    print(f"{step:<28} {worker:<22} {done:>10} {cents:>11}")


AMOUNT_CENTS = 10000

with tempfile.TemporaryDirectory() as folder:
    db = Path(folder) / "naive.sqlite3"
    with closing(sqlite3.connect(db)) as conn:
        conn.execute(
            "CREATE TABLE messages"
            " (event_id TEXT PRIMARY KEY, amount_cents INTEGER, done INTEGER)"
        )
        conn.execute("CREATE TABLE totals (cents INTEGER NOT NULL)")
        conn.execute("INSERT INTO messages VALUES ('E0001', ?, 0)", (AMOUNT_CENTS,))
        conn.execute("INSERT INTO totals VALUES (0)")
        conn.commit()
    print(f"{'step':<28} {'worker process':<22} {'E0001 done':>10} {'total_cents':>11}")
    row(f"enqueue E0001 ({AMOUNT_CENTS})", "", db)
    row("worker 1: effect, then dies", run_worker(db, "die"), db)
    row("worker 2: redelivery", run_worker(db, "live"), db)
    with closing(sqlite3.connect(db)) as conn:
        total = conn.execute("SELECT cents FROM totals").fetchone()[0]
    assert total == 2 * AMOUNT_CENTS, "the naive worker should have doubled E0001"
