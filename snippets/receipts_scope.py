"""A receipt's scope: the same operation key in two queues, and outside any queue.

The charge and the refund of one order carry the same tenant, operation and
payload. Each queue's ReceiptHandler uses its queue's name as its scope, so
each writes its own effect. Given one scope on purpose, the refund is ACKed
on the charge's effect. A receipt an API request recorded in its own scope
changes neither queue.

Run it in an empty folder with queue_core installed:
    python receipts_scope.py
"""

import tempfile
from pathlib import Path

from queue_core import ModelClock, ReceiptHandler, Store, receipts

KEY = {"tenant": "acme", "operation": "op-1", "cents": 500}


def writes(table):
    def handler(tx, message):
        tx.execute(f"INSERT INTO {table} VALUES (?)", (message.event_id,))

    return handler


# --8<-- [start:shown]
def run(shared_scope=None, api_first=False):
    with tempfile.TemporaryDirectory() as folder:
        db = Path(folder) / "queue.sqlite3"
        clock = ModelClock(1000)
        with Store(db, clock=clock) as admin:
            for name in ("charges", "refunds"):
                admin.create_queue(name, id_pattern=r"[a-z]-[0-9]+")
                with admin.transaction() as tx:
                    tx.execute(f"CREATE TABLE {name}_done (event_id TEXT)")
            if api_first:
                with admin.transaction() as tx:
                    receipts.record(
                        tx, "acme", "op-1", KEY, lambda: "api-1", scope="api"
                    )
        written = []
        for queue, event_id in (("charges", "c-1"), ("refunds", "r-1")):
            with Store(db, clock=clock, queue=queue) as store:
                store.send(event_id, KEY)
                handler = ReceiptHandler(writes(f"{queue}_done"), scope=shared_scope)
                done = store.complete(store.claim(), handler)
                rows = store.read(lambda v: v.execute(f"SELECT * FROM {queue}_done"))
                effects = len(list(rows))
                written.append(f"{event_id} {done.outcome.value}, effects {effects}")
                stored = receipts.stored(store)
                kept = [(r.scope, r.effect_queue, r.effect) for r in stored]
        return written, kept


for title, options in (
    ("each queue its own scope", {}),
    ("one scope given to both", {"shared_scope": "payments"}),
    ("an API receipt first, scope api", {"api_first": True}),
):
    written, kept = run(**options)
    print(f"{title}:\n  {'; '.join(written)}")
    print("  receipts (scope, effect queue, effect):")
    for receipt in kept:
        print(f"    {receipt}")
    assert (written[1].endswith("effects 0")) == ("shared_scope" in options)
# --8<-- [end:shown]
