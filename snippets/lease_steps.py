"""A lease from claim to ACK, on a model clock: the stored row after each step.

Shows the boundary (at lease_until - 1 the lease still holds, at lease_until
it does not), lazy expiry (status shows the stored row until the next claim
re-issues it) and the second lease with a higher generation.

Run it in an empty folder with queue_core installed: python lease_steps.py
"""

import tempfile
from pathlib import Path

from queue_core import Handler, LeaseLost, ModelClock, Store, ledger

# model seconds: the example never sleeps and always prints the same
clock = ModelClock(1000)
refusal = ""

with tempfile.TemporaryDirectory() as folder:
    store = Store(Path(folder) / "queue.sqlite3", clock=clock)
    ledger.install(store)  # the reference application's effects table

    def row(step: str, result: object) -> None:
        m = store.message("E0001")
        print(
            f"{clock.now():>4}  {step:<11} {str(result):<19} "
            f"{m.state:<6} {m.attempts:>8} {m.generation:>10} {str(m.lease_until):>11}"
        )

    print(
        f"{'now':>4}  {'step':<11} {'returns':<19} "
        f"{'state':<6} {'attempts':>8} {'generation':>10} {'lease_until':>11}"
    )
    # --8<-- [start:shown]
    store.enqueue(
        '{"event_id": "E0001", "payload": {"category": "book", "amount_cents": 10000}}'
    )
    row("enqueue", "")

    first = store.claim(lease_seconds=2)
    row("A: claim", f"lease, generation {first.generation}")

    clock.set(first.lease_until - 1)
    early = store.claim(lease_seconds=2)  # A still holds it: nothing to claim
    row("B: claim", early)
    assert early is None, "a lease was taken over before lease_until"

    clock.set(first.lease_until)
    # expired, but stored as leased until a claim
    counts = store.status().messages  # every state; the table shows those with one
    row("status", {state: n for state, n in counts.items() if n})
    assert store.message("E0001").state == "leased", "expiry wrote something"
    try:
        store.complete(first, Handler())
    except LeaseLost as exc:
        assert exc.code == "lease_lost"
        refusal = str(exc)
        row("A: complete", "LeaseLost")
    else:
        raise AssertionError("a completion at lease_until was accepted")
    assert ledger.effects(store) == [], "a refused completion left an effect"

    second = store.claim(lease_seconds=2)
    row("B: claim", f"lease, generation {second.generation}")
    assert (second.generation, second.attempt) == (2, 2), "not a new lease"

    clock.advance(1)
    row("B: complete", store.complete(second, Handler()).outcome.value)
    # --8<-- [end:shown]
    print()
    print(f"A was refused: {refusal}")
    print(f"effects: {ledger.effects(store)}")
    assert ledger.effects(store) == [("E0001", "book", 10000)], "not counted once"
