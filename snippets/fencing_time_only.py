"""A lease checked on time alone: a stale worker's effect is accepted; money doubles.

Plain sqlite3 on a real file; time is given as model seconds so the race is
exact. Worker A claims E0001 and stalls past its lease (a GC pause, a stopped
VM, a laptop lid). Worker B claims it again. A wakes up inside B's lease: the
row's lease_until is in the future, so A's check passes, and so does B's.

Run it in an empty folder: python fencing_time_only.py (Python 3.11+, stdlib only).
"""

import sqlite3
import tempfile
from contextlib import closing
from pathlib import Path

LEASE_SECONDS = 2


# --8<-- [start:shown]
def claim(db: Path, now: int) -> tuple[str, int] | None:
    with closing(sqlite3.connect(db, isolation_level=None)) as conn:
        conn.execute("BEGIN IMMEDIATE")
        row = conn.execute(
            "SELECT event_id FROM messages WHERE done = 0"
            " AND (lease_until IS NULL OR lease_until <= ?)"
            " ORDER BY event_id LIMIT 1",
            (now,),
        ).fetchone()
        if row is None:
            conn.execute("ROLLBACK")
            return None
        conn.execute(
            "UPDATE messages SET lease_until = ? WHERE event_id = ?",
            (now + LEASE_SECONDS, row[0]),
        )
        conn.execute("COMMIT")
        return row[0], now + LEASE_SECONDS


def complete(db: Path, event_id: str, now: int) -> str:
    """Effect + ACK in one transaction, guarded by a check on time alone."""
    with closing(sqlite3.connect(db, isolation_level=None)) as conn:
        conn.execute("BEGIN IMMEDIATE")
        lease_until, amount_cents = conn.execute(
            "SELECT lease_until, amount_cents FROM messages WHERE event_id = ?",
            (event_id,),
        ).fetchone()
        if not now < lease_until:  # "is the lease still valid?" -- but whose lease?
            conn.execute("ROLLBACK")
            return f"refused ({now} >= {lease_until})"
        conn.execute("UPDATE totals SET cents = cents + ?", (amount_cents,))
        conn.execute("UPDATE messages SET done = 1 WHERE event_id = ?", (event_id,))
        conn.execute("COMMIT")
        return f"accepted ({now} < {lease_until})"
        # --8<-- [end:shown]


with tempfile.TemporaryDirectory() as folder:
    db = Path(folder) / "naive.sqlite3"
    with closing(sqlite3.connect(db)) as conn:
        conn.execute(
            "CREATE TABLE messages"
            " (event_id TEXT PRIMARY KEY, amount_cents INTEGER NOT NULL,"
            " lease_until INTEGER, done INTEGER NOT NULL DEFAULT 0)"
        )
        conn.execute("CREATE TABLE totals (cents INTEGER NOT NULL)")
        conn.execute(
            "INSERT INTO messages (event_id, amount_cents) VALUES ('E0001', 10000)"
        )
        conn.execute("INSERT INTO totals VALUES (0)")
        conn.commit()

    def row(now: int, who: str, result: str) -> None:
        with closing(sqlite3.connect(db)) as conn:
            lease_until, done = conn.execute(
                "SELECT lease_until, done FROM messages"
            ).fetchone()
            cents = conn.execute("SELECT cents FROM totals").fetchone()[0]
        print(
            f"{now:>4}  {who:<20} {result:<22} {lease_until:>11} {done:>4} {cents:>11}"
        )

    print(
        f"{'now':>4}  {'who':<20} {'result':<22} "
        f"{'lease_until':>11} {'done':>4} {'total_cents':>11}"
    )
    _, a_until = claim(db, 1000)
    row(1000, "A: claim", f"lease until {a_until}")
    _, b_until = claim(db, 1002)  # A's lease has ended; A itself is frozen mid-work
    row(1002, "B: claim", f"lease until {b_until}")
    row(1003, "A wakes: complete", complete(db, "E0001", 1003))
    row(1003, "B: complete", complete(db, "E0001", 1003))
    with closing(sqlite3.connect(db)) as conn:
        total = conn.execute("SELECT cents FROM totals").fetchone()[0]
    assert total == 20000, "the naive time check should have doubled the sale"
