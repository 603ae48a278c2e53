"""The reference demo's database, row by row, after the demo has run.

`run_demo(folder)` leaves its database in `folder/demo.sqlite3`. The snapshots
only count; the rows show what counting hides: how many claims each message
took, its generation, and why the dead letter died before its redrive.

Run: python demo_rows.py   (needs queue_core installed; leaves nothing behind)
"""

import tempfile
from pathlib import Path

from queue_core import ModelClock, Store, ledger
from queue_core.app.demo import run_demo

with tempfile.TemporaryDirectory() as folder:
    result = run_demo(Path(folder))
    clock = ModelClock(result.steps[-1].now)
    store = Store(Path(folder) / "demo.sqlite3", clock=clock, create=False)

    print("event_id  state  attempts  generation  last_error")
    for m in store.messages():
        print(
            f"{m.event_id:<9} {m.state:<6} {m.attempts:>8}  {m.generation:>10}  "
            f"{m.last_error or '-'}"
        )
    print()
    print("event_id  category  amount_cents")
    for event_id, category, amount_cents in ledger.effects(store):
        print(f"{event_id:<9} {category:<9} {amount_cents:>12}")
    print()
    print(
        "matches the last snapshot:",
        ledger.report(store) == result.snapshots["after_redrive"],
    )
