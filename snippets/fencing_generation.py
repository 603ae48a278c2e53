"""The same race against queue_core: the stale worker is refused by its generation.

Worker A claims E0001 (generation 1) and stalls past its lease; worker B
claims it again (generation 2). A wakes up inside B's lease: the time check
alone would pass, but A presents generation 1 and the row holds 2, so A's
fenced ACK changes no row and the transaction with A's effect is rolled back
(LeaseLost). A's failure report is refused the same way and moves nothing.
B's completion is the only effect. Both workers take the worker's path:
claim_message, then complete_message.

Run it in an empty folder with queue_core installed: python fencing_generation.py
"""

import tempfile
from pathlib import Path

from queue_core import Handler, LeaseLost, ModelClock, Store, ledger

clock = ModelClock(1000)
refusal = ""

with tempfile.TemporaryDirectory() as folder:
    store = Store(Path(folder) / "queue.sqlite3", clock=clock)
    ledger.install(store)  # the reference application's effects table
    store.enqueue(
        '{"event_id": "E0001", "payload": {"category": "book", "amount_cents": 10000}}'
    )

    def row(who: str, result: str) -> None:
        m = store.message("E0001")
        print(
            f"{clock.now():>4}  {who:<17} {result:<24} {m.generation:>10} "
            f"{m.state:<6} {ledger.report(store).total_cents:>11}"
        )

    print(
        f"{'now':>4}  {'who':<17} {'result':<24} "
        f"{'generation':>10} {'state':<6} {'total_cents':>11}"
    )
    # --8<-- [start:shown]
    a = store.claim_message(lease_seconds=2)
    row("A: claim", f"generation {a.lease.generation}, until {a.lease.lease_until}")
    clock.set(1002)  # A's lease has ended; A itself is frozen mid-work
    b = store.claim_message(lease_seconds=2)
    row("B: claim", f"generation {b.lease.generation}, until {b.lease.lease_until}")
    clock.set(1003)  # A wakes up inside B's lease
    try:
        store.complete_message(a, Handler())
    except LeaseLost as exc:
        assert exc.code == "lease_lost"
        refusal = str(exc)
        row("A wakes: complete", "LeaseLost")
    else:
        raise AssertionError("a stale generation was acknowledged")
    assert ledger.effects(store) == [], "the stale worker's effect was kept"
    try:
        # A reports a failure instead: fenced the same way
        store.fail(a.lease, "downstream_unavailable")
    except LeaseLost as exc:
        assert exc.code == "lease_lost"
        row("A wakes: fail", "LeaseLost")
    else:
        raise AssertionError("a stale fail() was recorded")
    m = store.message("E0001")
    # B's lease, untouched
    assert (m.state, m.generation, m.attempts, m.last_error) == ("leased", 2, 2, None)
    row("B: complete", store.complete_message(b, Handler()).outcome.value)
    assert ledger.effects(store) == [("E0001", "book", 10000)]  # one effect, B's
    # --8<-- [end:shown]
    print()
    print("A was refused:")
    print(f"  {refusal}")
    print(f"effects: {ledger.effects(store)}")
