"""Your own handler, fed from Python: send, a delay, a list of events.

The handler writes the effect into a table of your own through ``tx``, inside
the completion's transaction, so the effect and the ACK commit together.
"""

import tempfile
from pathlib import Path

from queue_core import ModelClock, PermanentFailure, Store, work


def reserve(tx, message):
    """One stock reservation per event: the effect, in the completion's transaction."""
    order = message.payload_object
    if order["quantity"] < 1:
        raise PermanentFailure("bad_quantity", f"quantity {order['quantity']}")
    tx.execute(
        "INSERT INTO reservations (event_id, sku, quantity) VALUES (?, ?, ?)",
        (message.event_id, order["sku"], order["quantity"]),
    )


with tempfile.TemporaryDirectory() as folder:
    clock = ModelClock(1000)
    with Store(Path(folder) / "queue.sqlite3", clock=clock) as store:
        store.write(lambda tx: tx.execute(
            "CREATE TABLE reservations"
            " (event_id TEXT PRIMARY KEY, sku TEXT, quantity INTEGER)"
        ))
        print(store.send("E0001", {"sku": "book-7", "quantity": 2}))
        print(store.send("E0002", {"sku": "pen-3", "quantity": 1}, delay=60))
        listed = store.enqueue([
            {"event_id": "E0003", "payload": {"sku": "book-7", "quantity": 0}},
            {"event_id": "E0001", "payload": {"quantity": 2, "sku": "book-7"}},
        ])
        print(listed)
        assert listed.duplicates == 1, "the same payload in another key order was new"
        print("at 1000:", work(store, reserve))
        delayed = store.message("E0002")
        assert (delayed.state, delayed.attempts) == ("ready", 0), (
            "E0002 was claimed before its delay ended"
        )
        clock.advance(60)
        print("at 1060:", work(store, reserve))
        assert store.message("E0002").state == "done", "E0002 not done after its delay"
        for m in store.messages():
            print(f"  {m.event_id} {m.state:<5} {m.last_error or ''}".rstrip())
        rows = store.read(lambda tx: tx.execute(
            "SELECT event_id, sku, quantity FROM reservations ORDER BY event_id"
        ).fetchall())
        print("reservations:", [tuple(row) for row in rows])
