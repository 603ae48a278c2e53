"""Naive version (a): read each line, add its amount to a counter.

The source delivers E0001 twice, which sources do (a retry after a timeout, a
re-sent file). The counter cannot tell a repeat from a new payment, so the
book total doubles. Plain sqlite3, a real file in a temporary folder.

Run it in an empty folder: python naive_counter.py (Python 3.11+, stdlib only).
"""

import json
import sqlite3
import tempfile
from contextlib import closing
from pathlib import Path

LINES = [
    '{"event_id": "E0001", "payload": {"category": "book", "amount_cents": 10000}}',
    '{"event_id": "E0002", "payload": {"category": "pen", "amount_cents": 2000}}',
    # repeated
    '{"event_id": "E0001", "payload": {"category": "book", "amount_cents": 10000}}',
]

with tempfile.TemporaryDirectory() as folder:
    with closing(sqlite3.connect(Path(folder) / "naive.sqlite3")) as db:
        db.execute(
            "CREATE TABLE totals (category TEXT PRIMARY KEY, cents INTEGER NOT NULL)"
        )
        for line in LINES:
            payload = json.loads(line)["payload"]
            with db:  # one committed transaction per line
                db.execute(
                    "INSERT INTO totals VALUES (?, ?) "
                    "ON CONFLICT (category) "
                    "DO UPDATE SET cents = cents + excluded.cents",
                    (payload["category"], payload["amount_cents"]),
                )
        counted = dict(
            db.execute("SELECT category, cents FROM totals ORDER BY category")
        )

# What the events are worth: each event id once.
events = {json.loads(line)["event_id"]: json.loads(line)["payload"] for line in LINES}
worth: dict[str, int] = {}
for payload in events.values():
    worth[payload["category"]] = (
        worth.get(payload["category"], 0) + payload["amount_cents"]
    )

print(f"lines read: {len(LINES)}, distinct event ids: {len(events)}")
print(f"{'category':<9} {'counted':>8} {'worth':>8}")
for category in sorted(worth):
    print(f"{category:<9} {counted[category]:>8} {worth[category]:>8}")
print(f"{'total':<9} {sum(counted.values()):>8} {sum(worth.values()):>8}")
# the repeated E0001 was counted twice
assert counted["book"] == 2 * worth["book"], "the naive counter should double E0001"
