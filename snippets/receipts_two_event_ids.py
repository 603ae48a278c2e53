"""One operation under two event ids: fencing cannot see it, a receipt can.

A checkout sent the charge "order-7:charge" of tenant "north", timed out
waiting for the answer, and sent it again under a new event id. The queue
holds E0001 and E0002 with the same payload. Each is a valid message; each
is claimed with its own generation and completed by the worker that holds
its lease. The batch runs twice, each time on a fresh SQLite file: with
the plain handler, then with the handler wrapped in a ReceiptHandler.

Run it in an empty folder with queue_core installed:
    python receipts_two_event_ids.py
"""

import json
import tempfile
from pathlib import Path

from queue_core import Handler, ModelClock, ReceiptHandler, Store, ledger
from queue_core import receipts, work

ORDER = {
    "tenant": "north",
    "operation": "order-7:charge",
    "category": "book",
    "amount_cents": 10000,
}
BATCH = "".join(
    json.dumps({"event_id": event_id, "payload": ORDER}) + "\n"
    for event_id in ("E0001", "E0002")
)


def run(title, handler, effects_expected):
    with tempfile.TemporaryDirectory() as folder:
        store = Store(Path(folder) / "queue.sqlite3", clock=ModelClock(1000))
        ledger.install(store)  # the reference application's effects table
        store.enqueue(BATCH)
        work(store, handler, lease_seconds=30)
        print(title)
        for m in store.messages():
            print(f"  {m.event_id}: {m.state}, generation {m.generation}")
        print(f"  effects: {ledger.effects(store)}")
        print(f"  total_cents: {ledger.report(store).total_cents}")
        keys = [(r.tenant, r.operation, r.effect) for r in receipts.stored(store)]
        print(f"  receipts: {keys}")
        states = [m.state for m in store.messages()]
        effects = [e[0] for e in ledger.effects(store)]
        assert states == ["done", "done"], "both messages end done"
        assert effects == effects_expected, f"{title} effects {effects_expected}"


run("without a receipt:", Handler(), ["E0001", "E0002"])
# with a receipt, E0002 is ACKed on E0001's effect: no effect of its own
run("with a receipt:", ReceiptHandler(Handler()), ["E0001"])
