"""Retrying at once, forever: one failing message takes every claim, the others starve.

A naive worker on a real SQLite file puts a failed message straight back to
'ready'. E0001 needs a downstream service that is down until model second
1003; E0002 needs nothing and would succeed at once. The naive loop never
waits, so its model clock never moves; we stop it after 20 claims (a real one
spins until the service is back, and forever for a message that never works).
Then the same two messages go through queue_core.

Run: python retry_naive.py   (needs queue_core installed; leaves nothing behind)
"""

import json
import sqlite3
import tempfile
from pathlib import Path

from queue_core import Handler, ModelClock, Store, TemporaryFailure, ledger

DOWN_UNTIL = 1003  # the downstream service answers again at this model second
EVENTS = [
    {
        "event_id": "E0001",
        "payload": {"category": "pen", "amount_cents": 2000, "needs": "downstream"},
    },
    {"event_id": "E0002", "payload": {"category": "book", "amount_cents": 10000}},
]


def handle(payload, now):
    """The business step: fails for a while if it needs the downstream service."""
    if payload.get("needs") == "downstream" and now < DOWN_UNTIL:
        raise TemporaryFailure("downstream_unavailable")
    return Handler().effect(payload)  # the ledger's rule: the Effect of this payload


def handler(tx, message):
    """The same step as a queue_core handler: it writes in the completion's tx."""
    if message.payload_object.get("needs") == "downstream" and tx.now() < DOWN_UNTIL:
        raise TemporaryFailure("downstream_unavailable")
    Handler()(tx, message)  # the ledger's INSERT, inside the completion's transaction


with tempfile.TemporaryDirectory() as tmp:
    print("naive: a failed message is ready again at once; no budget")
    conn = sqlite3.connect(Path(tmp) / "naive.sqlite3", isolation_level=None)
    conn.execute(
        "CREATE TABLE messages"
        " (event_id TEXT PRIMARY KEY, payload TEXT, state TEXT, attempts INT)"
    )
    conn.execute("CREATE TABLE effects (event_id TEXT, amount_cents INT)")
    for event in EVENTS:
        conn.execute(
            "INSERT INTO messages VALUES (?, ?, 'ready', 0)",
            (event["event_id"], json.dumps(event["payload"])),
        )
    # --8<-- [start:shown]
    now = 1000
    for _ in range(20):
        conn.execute("BEGIN IMMEDIATE")
        event_id, payload = conn.execute(
            "SELECT event_id, payload FROM messages WHERE state = 'ready'"
            " ORDER BY event_id LIMIT 1"
        ).fetchone()
        conn.execute(
            "UPDATE messages SET attempts = attempts + 1 WHERE event_id = ?",
            (event_id,),
        )
        try:
            effect = handle(json.loads(payload), now)
        except TemporaryFailure:
            # still 'ready': the next claim takes it again, at once
            conn.execute("COMMIT")
            continue
        conn.execute(
            "INSERT INTO effects VALUES (?, ?)", (event_id, effect.amount_cents)
        )
        conn.execute(
            "UPDATE messages SET state = 'done' WHERE event_id = ?", (event_id,)
        )
        conn.execute("COMMIT")
    # --8<-- [end:shown]
    for event_id, attempts, state in conn.execute(
        "SELECT event_id, attempts, state FROM messages"
    ):
        tried = (
            f"{attempts} attempts, all at model second {now}"
            if attempts
            else "never claimed"
        )
        print(f"  {event_id}: {tried}; state={state}")
    print(f"  effects: {conn.execute('SELECT count(*) FROM effects').fetchone()[0]}")
    starved = conn.execute("SELECT attempts FROM messages WHERE event_id = 'E0002'")
    assert starved.fetchone()[0] == 0, "the naive loop never claims E0002"
    conn.close()

    print("queue_core: a temporary failure waits (backoff) and the others go on")
    clock = ModelClock(1000)
    store = Store(Path(tmp) / "queue.sqlite3", clock=clock)
    ledger.install(store)  # the reference application's effects table
    store.enqueue("".join(json.dumps(event) + "\n" for event in EVENTS))
    while clock.now() <= DOWN_UNTIL:
        lease = store.claim(lease_seconds=2)
        if lease is None:  # nothing is due now: wait a (model) second
            clock.advance(1)
            continue
        completion = store.complete(lease, handler)
        if completion.error:  # a temporary failure: due again after the backoff
            wait = 2 ** (lease.attempt - 1)  # the rule: 1 s, then 2 s, doubling
            due = clock.now() + wait
            assert completion.available_at == due, "available_at = now + backoff"
        why = (
            f" ({completion.error}), due again at {completion.available_at}"
            if completion.error
            else ""
        )
        print(
            f"  t={clock.now()} {lease.event_id} attempt {lease.attempt}:"
            f" {completion.outcome.value}{why}"
        )
    print(f"  effects: {ledger.effects(store)}")
    assert len(ledger.effects(store)) == 2, "both sales counted once"
