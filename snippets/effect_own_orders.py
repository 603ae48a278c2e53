"""Your own effect under the protocol: an `orders` row, completed both ways.

The store knows nothing of orders. This program owns an `orders` table (in the
queue's file, so that it can join the completion's transaction) and writes its
effect in the two ways the protocol offers:

1. a handler, `place_order(tx, message)`, given to `store.complete_message`
   (what `work()` calls): one transaction with the order and the fenced ACK;
2. its own SQL inside `store.transaction()`, between `store.leased_tx(tx, lease)`
   (the fenced check; it returns the message as stored) and
   `store.complete_tx(tx, lease)` (the fenced ACK).

Then a slow worker writes its order and finds at the ACK that its lease has
ended: `LeaseLost` leaves the `with` block and the order rolls back with the
transaction. The next claim completes that message, once.

Run: python effect_own_orders.py   (needs queue_core installed; leaves nothing behind)
"""

import tempfile
from pathlib import Path

from queue_core import LeaseLost, ModelClock, Store

BATCH = """\
{"event_id": "E0001", "payload": {"customer": "ada", "sku": "BOOK-1", "quantity": 2}}
{"event_id": "E0002", "payload": {"customer": "bob", "sku": "PEN-9", "quantity": 5}}
{"event_id": "E0003", "payload": {"customer": "cy", "sku": "BAG-3", "quantity": 1}}
"""
ORDERS = """
CREATE TABLE orders (
    queue    TEXT    NOT NULL,
    event_id TEXT    NOT NULL,
    customer TEXT    NOT NULL,
    sku      TEXT    NOT NULL,
    quantity INTEGER NOT NULL CHECK (quantity > 0),
    PRIMARY KEY (queue, event_id),
    FOREIGN KEY (queue, event_id) REFERENCES messages (queue, event_id)
) STRICT
"""
INSERT = (
    "INSERT INTO orders (queue, event_id, customer, sku, quantity) "
    "VALUES (?, ?, ?, ?, ?)"
)


def place_order(tx, message):
    """A handler: the order of one message, written in the completion's transaction."""
    order = message.payload_object  # the payload as stored, read inside the transaction
    key = (message.queue, message.event_id)  # a message's key: its queue and its id
    tx.execute(INSERT, (*key, order["customer"], order["sku"], order["quantity"]))


with tempfile.TemporaryDirectory() as folder:
    clock = ModelClock(1000)
    store = Store(Path(folder) / "queue.sqlite3", clock=clock)
    # your table, your schema: the queue's schema never mentions it
    with store.transaction() as tx:
        tx.execute(ORDERS)
    store.enqueue(BATCH)

    # --8<-- [start:shown]
    # 1. The handler form: one call, one transaction.
    claimed = store.claim_message(lease_seconds=30)
    completion = store.complete_message(claimed, place_order)
    print(
        "1. complete_message(claimed, place_order)  "
        f"{claimed.lease.event_id}: {completion.outcome.value}"
    )

    # 2. The explicit form: your SQL between the fenced check and the ACK.
    lease = store.claim(lease_seconds=30)
    with store.transaction() as tx:
        message = store.leased_tx(tx, lease)
        order = message.payload_object
        key = (message.queue, message.event_id)
        tx.execute(INSERT, (*key, order["customer"], order["sku"], order["quantity"]))
        completion = store.complete_tx(tx, lease)
    print(
        "2. leased_tx, your INSERT, complete_tx     "
        f"{lease.event_id}: {completion.outcome.value}"
    )

    # 3. The explicit form, too slow: the fenced ACK refuses, the order rolls back.
    lease = store.claim(lease_seconds=30)
    try:
        with store.transaction() as tx:
            message = store.leased_tx(tx, lease)
            place_order(tx, message)  # the same function works here too
            clock.advance(30)  # the work took the whole lease
            store.complete_tx(tx, lease)
    except LeaseLost as exc:
        assert exc.code == "lease_lost"
        print(f"3. too slow: LeaseLost ({exc})")
    else:
        raise AssertionError("an ACK after the lease ended was accepted")
    # --8<-- [end:shown]
    kept = store.read(
        lambda view: view.execute(
            "SELECT count(*) FROM orders WHERE event_id = ?", (lease.event_id,)
        ).fetchone()[0]
    )
    print(f"   orders of {lease.event_id} after the rollback: {kept}")
    assert kept == 0, "the order of a refused ACK was kept"
    assert store.message(lease.event_id).state == "leased", "a refused ACK changed it"
    again = store.claim(lease_seconds=30)
    print(
        f"   claimed again (generation {again.generation}):"
        f" {store.complete(again, place_order).outcome.value}"
    )

    print()
    orders = store.read(
        lambda view: view.execute(
            "SELECT event_id, customer, sku, quantity FROM orders ORDER BY event_id"
        ).fetchall()
    )
    for event_id, customer, sku, quantity in orders:
        state = store.message(event_id).state
        print(f"order {event_id}: {customer} {sku} x{quantity}, message {state}")
    print("queue:", store.status().to_dict())
    assert store.status().messages["done"] == 3, "not every message is done"
    assert len(orders) == 3, "not one order per message"
