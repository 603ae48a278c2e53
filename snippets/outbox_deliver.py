"""An outbox and an inbox: an external call that is neither lost nor doubled.

The handler does not call the other service. It writes its *intent* (a row of
an `outbox` table in the queue file) through the completion's transaction, so
the intent commits or rolls back with the effect and the ACK. A separate
deliverer sends each outbox row later, with a key that never changes (the
event id), and marks it sent. If the deliverer dies between sending and
marking, it sends again; the receiver remembers the keys it has applied (its
inbox) and applies each one once. The "service" is a second SQLite file
standing in for HTTP.

Run: python outbox_deliver.py   (needs queue_core installed; leaves nothing behind)
"""

import sqlite3
import tempfile
from pathlib import Path

from queue_core import Handler, LeaseLost, ModelClock, Store, ledger

LINE = '{"event_id": "E0001", "payload": {"category": "book", "amount_cents": 10000}}\n'

with tempfile.TemporaryDirectory() as folder:
    folder = Path(folder)
    clock = ModelClock(1000)
    store = Store(folder / "queue.sqlite3", clock=clock)
    ledger.install(store)  # the reference application's effects table
    store.enqueue(LINE)
    # the outbox lives in the queue file, so it can join the ACK
    with store.transaction() as tx:
        tx.execute(
            "CREATE TABLE outbox (key TEXT PRIMARY KEY, body TEXT NOT NULL,"
            " sent INTEGER NOT NULL DEFAULT 0) STRICT"
        )

    # --- the receiving service: its own database, its own transaction -------------
    service = sqlite3.connect(folder / "service.sqlite3", isolation_level=None)
    service.execute("CREATE TABLE inbox (key TEXT PRIMARY KEY)")
    service.execute("CREATE TABLE notices (key TEXT, body TEXT)")
    service.execute("CREATE TABLE received (key TEXT)")  # every delivery, as a log

    # --8<-- [start:shown]
    def receive(key: str, body: str) -> str:
        service.execute("BEGIN IMMEDIATE")
        service.execute("INSERT INTO received VALUES (?)", (key,))
        inbox = service.execute("INSERT OR IGNORE INTO inbox VALUES (?)", (key,))
        new = inbox.rowcount == 1
        if new:
            service.execute("INSERT INTO notices VALUES (?, ?)", (key, body))
        service.execute("COMMIT")  # the key and the notice commit together
        return "applied" if new else "duplicate, ignored"

    # --- the worker's handler: effect + intent, then the store's ACK -------------
    def pay_and_intend(tx, message) -> None:
        Handler()(tx, message)  # the effect row, through the completion's tx
        tx.execute(
            "INSERT INTO outbox (key, body) VALUES (?, ?)",
            (message.event_id, f"paid {message.event_id}"),
        )

    # --- the deliverer: send outside any queue transaction, then mark -------------
    def deliver(dies_before_marking: bool) -> None:
        with store.transaction() as tx:  # a short read; never hold it during a call
            pending = tx.execute(
                "SELECT key, body FROM outbox WHERE sent = 0 ORDER BY key"
            ).fetchall()
        if not pending:
            print("  nothing left to send")
        for key, body in pending:
            print(f"  send {key}: receiver says {receive(key, body)}")
            if dies_before_marking:
                print("  the deliverer stops here, before marking the row sent")
                return
            with store.transaction() as tx:
                tx.execute("UPDATE outbox SET sent = 1 WHERE key = ?", (key,))
            print(f"  {key} marked sent")

    # --8<-- [end:shown]

    def slow(tx, message):
        clock.advance(2)  # the work outlives the lease: this attempt must not count
        pay_and_intend(tx, message)

    def outbox_rows() -> int:
        with store.transaction() as tx:
            return tx.execute("SELECT count(*) FROM outbox").fetchone()[0]

    lease = store.claim(lease_seconds=2)
    try:
        store.complete(lease, slow)
    except LeaseLost:
        effects = ledger.report(store).effects_count
        print(
            f"attempt 1 (generation {lease.generation}): lease lost, rolled back;"
            f" outbox rows: {outbox_rows()}, effects: {effects}"
        )
        assert (outbox_rows(), effects) == (0, 0), "the intent rolls back with the ACK"
    else:
        raise AssertionError("a completion after the lease ran out was accepted")
    lease = store.claim(lease_seconds=2)
    outcome = store.complete(lease, pay_and_intend).outcome.value
    effects = ledger.report(store).effects_count
    print(
        f"attempt 2 (generation {lease.generation}): {outcome};"
        f" outbox rows: {outbox_rows()}, effects: {effects}"
    )
    assert (outcome, outbox_rows(), effects) == ("done", 1, 1), "intent commits"

    print("delivery round 1:")
    deliver(dies_before_marking=True)
    print("delivery round 2:")
    deliver(dies_before_marking=False)
    print("delivery round 3:")
    deliver(dies_before_marking=False)

    deliveries = service.execute("SELECT count(*) FROM received").fetchone()[0]
    notices = service.execute("SELECT count(*) FROM notices").fetchone()[0]
    service.close()
    print(f"receiver: deliveries {deliveries}, notices applied {notices}")
    assert (deliveries, notices) == (2, 1), "delivered twice, applied once (the inbox)"
    snapshot = ledger.report(store)
    print(
        f"queue: effects {snapshot.effects_count}, total {snapshot.total_cents},"
        f" messages {snapshot.to_dict()['messages']}"
    )
