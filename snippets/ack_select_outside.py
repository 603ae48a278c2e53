"""Where the write transaction starts decides whether two workers can take one message.

Two connections (workers A and B) choose "the first ready message" from a real
SQLite file in WAL mode, three ways:

1. SELECT outside the write transaction (what Python's sqlite3 does by default:
   its implicit BEGIN comes only before the first INSERT/UPDATE/DELETE);
2. BEGIN (deferred), SELECT, then write;
3. BEGIN IMMEDIATE, then SELECT, then write (what queue_core's Store.claim
   does; the worker's claim is one UPDATE statement, which takes the write
   lock before it reads).

Run: python ack_select_outside.py   (standard library only; leaves nothing behind)
"""

import sqlite3
import tempfile
import time
from pathlib import Path

CHOOSE = "SELECT event_id FROM messages WHERE state = 'ready' ORDER BY event_id LIMIT 1"
TAKE = "UPDATE messages SET state = 'leased', owner = ? WHERE event_id = ?"
EFFECT = (
    "INSERT INTO effects SELECT event_id, amount_cents FROM messages WHERE event_id = ?"
)
ACK = "UPDATE messages SET state = 'done' WHERE event_id = ?"


def new_queue(path: Path) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(
        "CREATE TABLE messages"
        " (event_id TEXT PRIMARY KEY, amount_cents INT, state TEXT, owner TEXT)"
    )
    conn.execute("CREATE TABLE effects (event_id TEXT, amount_cents INT)")
    conn.execute(
        "INSERT INTO messages VALUES"
        " ('E0001', 10000, 'ready', NULL), ('E0002', 2000, 'ready', NULL)"
    )
    conn.close()


with tempfile.TemporaryDirectory() as tmp:
    # --8<-- [start:shown]
    print("1. SELECT outside the write transaction (Python's default)")
    db = Path(tmp) / "one.sqlite3"
    new_queue(db)
    # default isolation_level: deferred, implicit
    a, b = sqlite3.connect(db), sqlite3.connect(db)
    chosen_a = a.execute(CHOOSE).fetchone()[0]  # no transaction is open yet
    chosen_b = b.execute(CHOOSE).fetchone()[0]
    a.execute(TAKE, ("A", chosen_a))
    a.commit()
    # nothing stops B: its UPDATE does not look at the state
    b.execute(TAKE, ("B", chosen_b))
    b.commit()
    owner = a.execute(
        "SELECT owner FROM messages WHERE event_id = ?", (chosen_a,)
    ).fetchone()[0]
    print(
        f"   A took {chosen_a}, B took {chosen_b}; both committed;"
        f" the row names {owner} as owner,"
    )
    print(
        "   but A believes it holds the message too."
        " Each worker now writes its effect:"
    )
    for worker, event_id in ((a, chosen_a), (b, chosen_b)):
        worker.execute(EFFECT, (event_id,))
        worker.execute(ACK, (event_id,))
        # effect and ACK in one transaction: that does not save a wrong claim
        worker.commit()
    sale, total = a.execute(
        "SELECT amount_cents, (SELECT sum(amount_cents) FROM effects)"
        " FROM messages WHERE event_id = ?",
        (chosen_a,),
    ).fetchone()
    print(f"   effects total {total} for one sale of {sale}")
    assert (chosen_a, chosen_b, total) == ("E0001", "E0001", 2 * sale)  # doubled
    # --8<-- [end:shown]
    a.close()
    b.close()

    print("2. BEGIN (deferred), SELECT, then write")
    db = Path(tmp) / "two.sqlite3"
    new_queue(db)
    a = sqlite3.connect(db, isolation_level=None, timeout=2.0)
    b = sqlite3.connect(db, isolation_level=None, timeout=2.0)
    a.execute("BEGIN")
    b.execute("BEGIN")
    # both read transactions see the same snapshot
    chosen_a = a.execute(CHOOSE).fetchone()[0]
    chosen_b = b.execute(CHOOSE).fetchone()[0]
    a.execute(TAKE, ("A", chosen_a))
    a.execute("COMMIT")
    started = time.monotonic()
    try:
        b.execute(TAKE, ("B", chosen_b))
        raise AssertionError("B wrote on a stale snapshot")
    except sqlite3.OperationalError as exc:
        assert exc.sqlite_errorname == "SQLITE_BUSY_SNAPSHOT", exc.sqlite_errorname
        waited = time.monotonic() - started
        print(f"   A took {chosen_a}; B chose {chosen_b} too, and its UPDATE failed:")
        print(f"   {exc} ({exc.sqlite_errorname}),")
        when = (
            "at once, without waiting out its 2 s busy timeout"
            if waited < 1.0
            else "after its busy timeout"
        )
        print(f"   {when}: B's snapshot is older")
        print(
            "   than A's commit, so waiting cannot help;"
            " B must roll back and start over"
        )
        b.execute("ROLLBACK")
    a.close()
    b.close()

    print("3. BEGIN IMMEDIATE, then SELECT, then write (Store.claim's way)")
    db = Path(tmp) / "three.sqlite3"
    new_queue(db)
    a = sqlite3.connect(db, isolation_level=None, timeout=2.0)
    # zero: show where B would wait
    b = sqlite3.connect(db, isolation_level=None, timeout=0)
    a.execute("BEGIN IMMEDIATE")
    try:
        b.execute("BEGIN IMMEDIATE")
        raise AssertionError("B began writing while A held the write lock")
    except sqlite3.OperationalError as exc:
        assert exc.sqlite_errorname == "SQLITE_BUSY", exc.sqlite_errorname
        print(f"   B's BEGIN IMMEDIATE: {exc} ({exc.sqlite_errorname}),")
        print("   before B has read anything; with a busy timeout B simply waits here")
    chosen_a = a.execute(CHOOSE).fetchone()[0]
    a.execute(TAKE, ("A", chosen_a))
    a.execute("COMMIT")
    b.execute("BEGIN IMMEDIATE")  # A has committed: B gets the write lock
    chosen_b = b.execute(CHOOSE).fetchone()[0]  # and reads the state after A's claim
    b.execute(TAKE, ("B", chosen_b))
    b.execute("COMMIT")
    print(f"   A took {chosen_a}, B took {chosen_b}: one message, one owner")
    assert (chosen_a, chosen_b) == ("E0001", "E0002"), "not one owner each"
    a.close()
    b.close()
