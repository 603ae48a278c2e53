"""Without a lease: a worker marks a message "taken" and dies holding it.

The flag has no end. A real child process takes E0001 (commit) and dies with
os._exit(86) before it does the work; every worker started afterwards skips
the taken message, so its money is never counted, however long you wait.

Run it in an empty folder: python lease_forever_flag.py (Python 3.11+, stdlib only).
"""

import sqlite3
import subprocess
import sys
import tempfile
from contextlib import closing
from pathlib import Path

# --8<-- [start:shown]
WORKER = """
import os, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
row = db.execute(
    "SELECT event_id, amount_cents FROM messages"
    " WHERE taken = 0 AND done = 0 LIMIT 1"
).fetchone()
if row is None:
    print("nothing to do")
    sys.exit(0)
event_id, amount_cents = row
db.execute("UPDATE messages SET taken = 1 WHERE event_id = ?", (event_id,))
db.commit()                                     # E0001 is now "mine", with no end
if sys.argv[2] == "die":
    os._exit(86)                                # the owner dies
db.execute("UPDATE totals SET cents = cents + ?", (amount_cents,))
db.execute("UPDATE messages SET done = 1 WHERE event_id = ?", (event_id,))
db.commit()
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
        taken, done = conn.execute(
            "SELECT taken, done FROM messages WHERE event_id = 'E0001'"
        ).fetchone()
        cents = conn.execute("SELECT cents FROM totals").fetchone()[0]
    print(f"{step:<24} {worker:<22} {taken:>5} {done:>4} {cents:>11}")


AMOUNT_CENTS = 10000

with tempfile.TemporaryDirectory() as folder:
    db = Path(folder) / "naive.sqlite3"
    with closing(sqlite3.connect(db)) as conn:
        conn.execute(
            "CREATE TABLE messages (event_id TEXT PRIMARY KEY, amount_cents INTEGER,"
            " taken INTEGER, done INTEGER)"
        )
        conn.execute("CREATE TABLE totals (cents INTEGER NOT NULL)")
        conn.execute("INSERT INTO messages VALUES ('E0001', ?, 0, 0)", (AMOUNT_CENTS,))
        conn.execute("INSERT INTO totals VALUES (0)")
        conn.commit()
    print(
        f"{'step':<24} {'worker process':<22} "
        f"{'taken':>5} {'done':>4} {'total_cents':>11}"
    )
    row(f"enqueue E0001 ({AMOUNT_CENTS})", "", db)
    row("worker 1: takes, dies", run_worker(db, "die"), db)
    for number in (2, 3, 4):
        row(f"worker {number}: started", run_worker(db, "live"), db)
