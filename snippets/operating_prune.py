"""Retention that forgets, and retention that keeps deduplication exact.

The reference demo's events are processed (E0001-E0003 done, E0004 a toy,
dead). Then the source sends its batch once more, as sources do.
1. The obvious retention: delete the old done rows with raw SQL. The re-sent
   events are new again: three of them are accepted and worked a second time,
   and only the ledger's unique key on effects keeps the money from doubling
   (an effect without such a key, an HTTP call, would be made twice).
2. queue_core's prune: the payloads of old done messages go, each one's
   SHA-256 stays. The same batch is all duplicates; another payload under a
   pruned id is still a conflict; the dead letter is kept whole.

Run it in an empty folder with queue_core installed: python operating_prune.py
"""

import hashlib
import sqlite3
import tempfile
import textwrap
from contextlib import closing
from pathlib import Path

from queue_core import BatchRejected, Handler, ModelClock, Store, ledger, work

BATCH = (
    '{"event_id": "E0001", "payload": {"category": "book", "amount_cents": 10000}}\n'
    '{"event_id": "E0001", "payload": {"amount_cents": 10000, "category": "book"}}\n'
    '{"event_id": "E0002", "payload": {"category": "pen", "amount_cents": 2000}}\n'
    '{"event_id": "E0003", "payload": {"category": "book", "amount_cents": 5000}}\n'
    '{"event_id": "E0004", "payload": {"category": "toy", "amount_cents": 3000}}\n'
)
DAY = 86_400


def processed(db: Path, clock: ModelClock) -> Store:
    store = Store(db, clock=clock)
    ledger.install(store)
    store.enqueue(BATCH)
    work(store, Handler(), lease_seconds=30)
    return store


# --8<-- [start:shown]
with tempfile.TemporaryDirectory() as folder:
    print("1. Delete the old done rows")
    clock = ModelClock(1000)
    db = Path(folder) / "delete.sqlite3"
    with processed(db, clock) as store:
        clock.advance(30 * DAY)
        with closing(sqlite3.connect(db)) as conn, conn:
            deleted = conn.execute(
                "DELETE FROM messages WHERE state = 'done' AND done_at <= ?",
                (clock.now() - 7 * DAY,),
            ).rowcount
        print(f"   deleted {deleted} done rows")
        print(f"   the batch again: {store.enqueue(BATCH).to_dict()}")
        print(f"   work: {work(store, Handler(), lease_seconds=30)}")
        print("   ready again, with the last error:")
        for m in store.messages("ready"):
            said = f"     {m.event_id} {m.last_error}, {m.last_detail}"
            print(textwrap.fill(said, 88, subsequent_indent=" " * 11))
    print()

    print("2. prune")
    clock = ModelClock(1000)
    with processed(Path(folder) / "prune.sqlite3", clock) as store:
        before = store.message("E0001")
        clock.advance(30 * DAY)
        print(f"   prune(older_than_seconds=7 days): {store.prune(7 * DAY).to_dict()}")
        after = store.message("E0001")
        print(
            f"   E0001 before: {before.state}, payload {before.payload}, "
            f"done_at {before.done_at}"
        )
        print(
            f"   E0001 after:  {after.state}, payload {after.payload}, "
            f"done_at {after.done_at}, pruned {after.pruned}"
        )
        # --8<-- [end:shown]
        kept = store.read(
            lambda view: view.execute(
                "SELECT payload_sha256 FROM messages WHERE event_id = 'E0001'"
            ).fetchone()[0]
        )
        print(
            f"   kept: SHA-256 {kept[:16]}..., the canonical payload's: "
            f"{kept == hashlib.sha256(before.payload.encode()).hexdigest()}"
        )
        again = store.enqueue(BATCH)
        print(f"   the batch again: {again.to_dict()}")
        assert (again.accepted, again.duplicates) == (0, 5), (
            "after prune, the same payloads were not all duplicates: the hash was lost"
        )
        try:
            store.enqueue(
                '{"event_id": "E0005",'
                ' "payload": {"category": "bag", "amount_cents": 700}}\n'
                '{"event_id": "E0001",'
                ' "payload": {"category": "book", "amount_cents": 10001}}\n'
            )
        except BatchRejected as exc:
            conflict = exc
        else:
            raise AssertionError("after prune, E0001 with another payload was accepted")
        stored = any(m.event_id == "E0005" for m in store.messages())
        assert (conflict.code, conflict.line, stored) == ("event_conflict", 2, False), (
            "after prune, another payload under a pruned id was not refused as a "
            "conflict of the whole batch"
        )
        print(
            f"   E0001 with another amount: {conflict.code} on line {conflict.line}; "
            f"E0005 stored: {stored}"
        )
        dead = store.message("E0004")
        print(f"   E0004 {dead.state}: payload {dead.payload}, pruned {dead.pruned}")
        assert (dead.state, dead.pruned) == ("dead", False), "prune touched a dead one"
        effects = ledger.report(store).to_dict()["effects"]
        print(f"   effects: {effects['count']}, total_cents {effects['total_cents']}")
        print(f"   by category: {effects['by_category']}")
