"""A real process dies between INSERT and COMMIT; then one dies just after COMMIT.

Part 1: E0003 is claimed (committed). A separate OS process completes that
lease: BEGIN IMMEDIATE, the checks, the handler's INSERT of the effect, and
then it dies with os._exit(86) before COMMIT (set HOW = "sigkill" to kill
it with SIGKILL instead). Right after, before any connection opens the file,
we read the WAL file's raw bytes (how many frames, how many commit records)
and compare the database file with its bytes before the child ran. Then the
lease runs out, the message is claimed again with a new generation, and
completed.
Part 2: the child dies just after its COMMIT instead.

Our own store is closed before the child starts: an open store keeps its
connection, and with it its own commits in the WAL; closing the last
connection copies them into the database file, so that the WAL and the file
then show only what the child did.

Run: python crash_between_insert_and_commit.py
(needs queue_core; leaves nothing behind)
"""

import hashlib
import sqlite3
import struct
import tempfile
from pathlib import Path

from queue_core import Handler, ModelClock, Store, ledger
from queue_core.testing.child import run_crashing_completion

HOW = "exit"  # or "sigkill"


def story(point: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "queue.sqlite3"
        clock = ModelClock(1000)

        def show(store: Store, step: str) -> None:
            m = store.message("E0003")
            effects = (
                ", ".join(f"{e} {c} {a}" for e, c, a in ledger.effects(store)) or "none"
            )
            print(f"  t={clock.now()} {step}")
            print(
                f"         E0003 {m.state}, generation {m.generation}, "
                f"lease_until {m.lease_until}; effects: {effects}"
            )

        # --8<-- [start:shown]
        with Store(db, clock=clock) as store:  # closed before the child runs
            ledger.install(store)  # the reference application's effects table
            store.enqueue(
                '{"event_id": "E0003",'
                ' "payload": {"category": "book", "amount_cents": 5000}}'
            )
            lease = store.claim(lease_seconds=2)
            show(store, f"claimed (generation {lease.generation}), committed")
        before = hashlib.sha256(db.read_bytes()).digest()
        status = run_crashing_completion(
            db, lease, now=clock.now(), point=point, how=HOW
        )
        print(f"  the child process died at {point}: exit status {status}")
        print(f"  {wal_summary(db)}")  # read before any connection touches the file
        unchanged = hashlib.sha256(db.read_bytes()).digest() == before
        print(f"  queue.sqlite3 unchanged by the child: {unchanged}")
        print(f"  PRAGMA integrity_check: {integrity(db)}")
        with Store(db, clock=clock) as store:
            show(store, "right after the crash")
            clock.set(lease.lease_until)  # the dead worker's lease runs out
            again = store.claim(lease_seconds=2)
            if again is None:
                show(store, "the next claim: nothing to redo")
                return
            outcome = store.complete(again, Handler()).outcome.value
            show(
                store,
                f"claimed again (generation {again.generation}), completed: {outcome}",
            )
        # --8<-- [end:shown]


def wal_summary(db: Path) -> str:
    """Count the frames of the WAL file and its commit records, from the raw bytes."""
    wal = Path(f"{db}-wal")
    if not wal.exists():
        return "no WAL file"
    data = wal.read_bytes()
    if len(data) < 32:
        return "WAL file: empty; commit records: 0"
    page_size, salt = struct.unpack(">I", data[8:12])[0], data[16:24]
    frames = commits = 0
    offset = 32  # the WAL header; then frames of a 24-byte header and one page each
    while (
        offset + 24 + page_size <= len(data) and data[offset + 8 : offset + 16] == salt
    ):
        frames += 1
        # db size: set on commit frames
        commits += struct.unpack(">I", data[offset + 4 : offset + 8])[0] != 0
        offset += 24 + page_size
    return f"WAL file: {frames} frames; commit records: {commits}"


def integrity(db: Path) -> str:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        conn.close()


print("1. crash between INSERT and COMMIT")
story("complete.after_effect")
print("2. crash just after COMMIT")
story("complete.after_commit")
