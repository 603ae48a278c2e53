"""Three silent deaths spend the budget too: the fourth claim moves the message to dead.

E0003's processing kills its worker every time. The program claims E0003 and
hands the lease to a real child process, which starts the completion (BEGIN
IMMEDIATE, the fenced check) and dies with os._exit(86) just as its handler is
about to run. Nobody reports a failure; the lease just runs out. Each claim
counts as an attempt, so after three such deaths the next claim moves E0003 to
dead ('lease_expired', with a detail that says which lease ended when) and
hands out E0004 instead.

Run: python retry_silent_deaths.py   (needs queue_core installed; leaves nothing behind)
"""

import tempfile
from pathlib import Path

from queue_core import MAX_ATTEMPTS, ModelClock, Store, ledger
from queue_core.app.crash_child import run_crashing_completion

with tempfile.TemporaryDirectory() as tmp:
    db = Path(tmp) / "queue.sqlite3"
    clock = ModelClock(1000)
    store = Store(db, clock=clock)
    ledger.install(store)  # the reference application's effects table
    store.enqueue(
        '{"event_id": "E0003", "payload": {"category": "book", "amount_cents": 5000}}\n'
        '{"event_id": "E0004", "payload": {"category": "pen", "amount_cents": 700}}\n'
    )
    print(f"budget: MAX_ATTEMPTS = {MAX_ATTEMPTS} claims per cycle")
    print("E0003, the row after each step:")
    print(
        f"{'now':>6}  {'step':<26} {'state':<6}"
        f" {'attempts':>8} {'generation':>10}  last_error"
    )

    def show(step: str) -> None:
        row = store.message("E0003")
        print(
            f"{clock.now():>6}  {step:<26} {row.state:<6}"
            f" {row.attempts:>8} {row.generation:>10}  {row.last_error or '-'}"
        )

    show("enqueue")
    for _ in range(MAX_ATTEMPTS):
        lease = store.claim(lease_seconds=2)
        show(f"claim, lease until {lease.lease_until}")
        status = run_crashing_completion(
            db, lease, now=clock.now(), point="complete.after_read"
        )
        show(f"worker died (exit {status})")
        clock.set(lease.lease_until)  # nobody reports anything; the lease runs out
    lease = store.claim(lease_seconds=2)
    show(f"next claim returned {lease.event_id}")
    print(f"why E0003 is dead: {store.message('E0003').last_detail}")
    print(f"effects: {ledger.effects(store)}")
    dead = store.message("E0003")
    spent = (dead.state, dead.attempts, dead.last_error)
    assert spent == ("dead", MAX_ATTEMPTS, "lease_expired"), "silent deaths spend it"
    assert lease.event_id == "E0004", "the same claim hands out the next message"
    assert ledger.effects(store) == [], "no money was counted"
