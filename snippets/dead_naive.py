"""A message the handler cannot understand: a naive worker either stops or drops it.

Four events on a real SQLite file: E0002's category is a JSON array (the
sender's bug), E0004's category is 'toy' (newer than this handler). Naive
worker 1 checks `category in KNOWN` and dies on the array with a TypeError,
in a real child process, again after a restart. Naive worker 2 "skips what it
cannot handle" and marks it done: nothing stops, and the money of both events
vanishes without a trace. queue_core moves both to the dead letters and goes on.

Run: python dead_naive.py   (needs queue_core installed; leaves nothing behind)
"""

import json
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

from queue_core import Handler, ModelClock, Store, ledger, work

EVENTS = [
    {"event_id": "E0001", "payload": {"category": "book", "amount_cents": 10000}},
    {"event_id": "E0002", "payload": {"category": ["book"], "amount_cents": 5000}},
    {"event_id": "E0003", "payload": {"category": "pen", "amount_cents": 2000}},
    {"event_id": "E0004", "payload": {"category": "toy", "amount_cents": 3000}},
]

# --8<-- [start:shown]
NAIVE_WORKER = """
import json, sqlite3, sys
KNOWN = {"book", "pen", "bag"}
db, policy = sys.argv[1], sys.argv[2]
conn = sqlite3.connect(db, isolation_level=None)
while True:
    conn.execute("BEGIN IMMEDIATE")
    row = conn.execute("SELECT event_id, payload FROM messages WHERE state = 'ready' "
                       "ORDER BY event_id LIMIT 1").fetchone()
    if row is None:
        conn.execute("COMMIT")
        break
    event_id, payload = row[0], json.loads(row[1])
    try:
        if payload["category"] not in KNOWN:      # a list here raises TypeError
            raise ValueError("unknown category")
        conn.execute("INSERT INTO effects VALUES (?, ?)",
                     (event_id, payload["amount_cents"]))
    except Exception:
        if policy == "stop":
            raise                                # the worker process dies
        # policy "skip": mark it done without an effect and carry on
    conn.execute("UPDATE messages SET state = 'done' WHERE event_id = ?", (event_id,))
    conn.execute("COMMIT")
"""
# --8<-- [end:shown]


def naive_queue(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE messages (event_id TEXT PRIMARY KEY, payload TEXT, state TEXT)"
    )
    conn.execute("CREATE TABLE effects (event_id TEXT, amount_cents INT)")
    conn.executemany(
        "INSERT INTO messages VALUES (?, ?, 'ready')",
        [(e["event_id"], json.dumps(e["payload"])) for e in EVENTS],
    )
    conn.commit()
    conn.close()


def report(path: Path) -> tuple[str, int]:
    conn = sqlite3.connect(path)
    states = " ".join(
        f"{event_id}={state}"
        for event_id, state in conn.execute(
            "SELECT event_id, state FROM messages ORDER BY event_id"
        )
    )
    total = conn.execute(
        "SELECT coalesce(sum(amount_cents), 0) FROM effects"
    ).fetchone()[0]
    conn.close()
    return states, total


with tempfile.TemporaryDirectory() as tmp:
    sent = sum(e["payload"]["amount_cents"] for e in EVENTS)
    print(f"four sales, {sent} cents in all")

    db = Path(tmp) / "stop.sqlite3"
    naive_queue(db)
    print("naive worker 1 (an unexpected payload raises):")
    for run in ("first run", "after a restart"):
        result = subprocess.run(
            [sys.executable, "-c", NAIVE_WORKER, str(db), "stop"],
            capture_output=True,
            text=True,
        )
        # the exception's name
        error = result.stderr.strip().splitlines()[-1].split(":")[0]
        print(
            f"  {run}: exit {result.returncode}, {error} on E0002's category",
            "(a list is unhashable)",
        )
    states, total = report(db)
    print(f"  {states}; total {total}")
    print("  the queue is stuck behind E0002")

    db = Path(tmp) / "skip.sqlite3"
    naive_queue(db)
    print("naive worker 2 (skip what it cannot handle):")
    result = subprocess.run([sys.executable, "-c", NAIVE_WORKER, str(db), "skip"])
    states, total = report(db)
    print(f"  exit {result.returncode}; {states}; total {total}")
    print(
        f"  {sent - total} cents marked done and never counted;",
        "nothing says which or why",
    )

    print("queue_core:")
    store = Store(Path(tmp) / "queue.sqlite3", clock=ModelClock(1000))
    ledger.install(store)  # the reference application's effects table
    store.enqueue("".join(json.dumps(e) + "\n" for e in EVENTS))
    print(f"  {work(store, Handler()).to_dict()}")
    for m in store.dead_letters():
        print(f"  dead: {m.event_id} attempts={m.attempts} last_error={m.last_error}")
        print(f"        payload as stored: {m.payload}")
    held = sum(m.payload_object["amount_cents"] for m in store.dead_letters())
    print(
        f"  total {ledger.report(store).total_cents};",
        f"the dead letters keep the other {held} cents",
    )
    dead = [(m.event_id, m.last_error) for m in store.dead_letters()]
    assert dead == [("E0002", "invalid_payload"), ("E0004", "invalid_payload")]
    assert ledger.report(store).total_cents + held == sent, "nothing vanished"
