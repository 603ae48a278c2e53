"""Redrive: a dead letter gets a new cycle, on purpose; without a fix it comes back.

E0004 (category 'toy') is dead after one attempt. A redrive resets attempts
and makes it available now, keeping its generation and payload. Redriven
without a fix, the same handler sends it to dead again. After the handler
learns 'toy', a second redrive recovers it, and it is counted once. Redrive
refuses a message that is not dead, and a request with one bad id changes
nothing at all.

Run: python dead_redrive.py   (needs queue_core installed; leaves nothing behind)
"""

import tempfile
from pathlib import Path

from queue_core import Handler, ModelClock, NotDead, Store, UnknownEvent, ledger

BATCH = (
    '{"event_id": "E0001", "payload": {"category": "book", "amount_cents": 10000}}\n'
    '{"event_id": "E0004", "payload": {"category": "toy", "amount_cents": 3000}}\n'
)

with tempfile.TemporaryDirectory() as tmp:
    clock = ModelClock(1000)
    store = Store(Path(tmp) / "queue.sqlite3", clock=clock)
    ledger.install(store)  # the reference application's effects table
    store.enqueue(BATCH)
    print(
        f"{'step':<34} {'state':<6} {'attempts':>8}",
        f"{'generation':>10} {'available_at':>12}",
    )

    def show(step: str) -> None:
        m = store.message("E0004")
        print(
            f"{step:<34} {m.state:<6} {m.attempts:>8}",
            f"{m.generation:>10} {m.available_at:>12}",
        )

    def claim_and_complete(handler: Handler) -> str:
        lease = store.claim(lease_seconds=2)
        return store.complete(lease, handler).outcome.value

    def at(seconds: int) -> None:
        clock.set(seconds)
        print(f"--- model time {clock.now()}")

    # --8<-- [start:shown]
    print(f"--- model time {clock.now()}")
    claim_and_complete(Handler())  # E0001: done
    show(f"claim + complete: {claim_and_complete(Handler())}")
    at(1500)
    for request, code in (
        (["E0001"], "not_dead"),
        (["E0004", "E0404"], "unknown_event"),
    ):
        try:
            store.redrive(request)
        except (NotDead, UnknownEvent) as exc:
            show(f"redrive {' '.join(request)}: {exc.code}")
            assert exc.code == code, f"only dead ones: {code}"
        else:
            raise AssertionError(f"redrive {request} was accepted")
    dead = store.message("E0004")
    assert (dead.state, dead.attempts) == ("dead", 1), "all or none: nothing changed"
    store.redrive(["E0004"])
    show("redrive E0004")
    m = store.message("E0004")
    assert (m.state, m.attempts, m.available_at) == ("ready", 0, clock.now())
    assert m.generation == dead.generation, "the generation is kept"
    show(f"claim + same handler: {claim_and_complete(Handler())}")
    at(1600)
    store.redrive(["E0004"])
    show("redrive E0004 again")
    knows_toy = Handler.with_categories({"toy"})
    show(f"claim + handler knows toy: {claim_and_complete(knows_toy)}")
    print(f"last_error of E0004 now: {store.message('E0004').last_error}")
    print(f"effects: {ledger.effects(store)}")
    assert [e[0] for e in ledger.effects(store)] == ["E0001", "E0004"], "once each"
    # --8<-- [end:shown]
