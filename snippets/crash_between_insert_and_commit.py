"""A real process dies between INSERT and COMMIT; then one dies just after COMMIT.

Part 1: E0003 is claimed (committed). A separate OS process completes that
lease: BEGIN IMMEDIATE, the fenced check, the handler's INSERT of the effect,
and then it dies with os._exit(86) before COMMIT (set HOW = "sigkill" to kill
it with SIGKILL instead). What does the next worker find? Then the lease runs
out, the message is claimed again with a new generation, and completed.
Part 2: the child dies just after its COMMIT instead.

Run: python crash_between_insert_and_commit.py
(needs queue_core; leaves nothing behind)
"""

import sqlite3
import tempfile
from contextlib import closing
from pathlib import Path

from queue_core import Handler, ModelClock, Store, ledger
from queue_core.app.crash_child import run_crashing_completion

HOW = "exit"  # or "sigkill"


def story(point: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "queue.sqlite3"
        clock = ModelClock(1000)

        def show(store: Store, step: str) -> tuple:
            m = store.message("E0003")
            effects = ledger.effects(store)
            shown = ", ".join(f"{e} {c} {a}" for e, c, a in effects) or "none"
            print(f"  t={clock.now()} {step}")
            print(
                f"         E0003 {m.state}, generation {m.generation}, "
                f"lease_until {m.lease_until}; effects: {shown}"
            )
            return m.state, m.generation, len(effects)

        # --8<-- [start:shown]
        with Store(db, clock=clock) as store:
            ledger.install(store)  # the reference application's effects table
            store.enqueue(
                '{"event_id": "E0003",'
                ' "payload": {"category": "book", "amount_cents": 5000}}'
            )
            lease = store.claim(lease_seconds=2)
            show(store, f"claimed (generation {lease.generation}), committed")
        status = run_crashing_completion(
            db, lease, now=clock.now(), point=point, how=HOW
        )
        print(f"  the child process died at {point}: exit status {status}")
        with closing(sqlite3.connect(db)) as check:
            health = check.execute("PRAGMA integrity_check").fetchone()[0]
        print(f"  PRAGMA integrity_check: {health}")
        assert health == "ok", "a crash leaves a healthy file"
        committed = point == "complete.after_commit"
        with Store(db, clock=clock) as store:
            found = show(store, "what the next worker finds")
            if committed:
                assert found == ("done", 1, 1), "after COMMIT: done, one effect"
            else:
                assert found == ("leased", 1, 0), "before COMMIT: nothing of it"
            clock.set(lease.lease_until)  # the dead worker's lease runs out
            again = store.claim(lease_seconds=2)
            if again is None:
                show(store, "the next claim: nothing to redo")
                assert committed, "only a committed completion has nothing to redo"
                return
            outcome = store.complete(again, Handler()).outcome.value
            found = show(
                store,
                f"claimed again (generation {again.generation}), completed: {outcome}",
            )
            assert found == ("done", 2, 1), "the re-claim counts it once"
        # --8<-- [end:shown]


print("1. crash between INSERT and COMMIT")
story("complete.after_effect")
print("2. crash just after COMMIT")
story("complete.after_commit")
