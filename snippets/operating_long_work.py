"""Work that outlasts its lease: without an extension, with one, and their fence.

Every worker claims E0001 with a 10-second lease; the work takes 25 seconds.
1. Without an extension each lease runs out in the middle of the work: B
   takes the message over from A, C from B, A's completion is refused, and
   after three claims a message with nothing wrong in it is a dead letter.
2. With an extension every 5 seconds, B finds nothing to claim, and A
   completes with its first attempt.
3. The fence: an expired lease cannot be revived, even when nobody has taken
   it over yet, and a stale worker cannot extend a lease it lost.

Run it in an empty folder with queue_core installed: python operating_long_work.py
"""

import tempfile
from collections.abc import Callable
from pathlib import Path

from queue_core import Handler, LeaseLost, ModelClock, Store, ledger

EVENT = '{"event_id": "E0001", "payload": {"category": "book", "amount_cents": 10000}}'


def new_queue(folder: str, name: str) -> tuple[Store, ModelClock]:
    clock = ModelClock(1000)
    store = Store(Path(folder) / f"{name}.sqlite3", clock=clock)
    ledger.install(store)
    store.enqueue(EVENT)
    return store, clock


def row(store: Store, clock: ModelClock, who: str, result: object) -> None:
    m = store.message("E0001")
    print(
        f"{clock.now():>5}  {who:<12} {str(result):<45} "
        f"{m.state:<7}{m.attempts:>3}{m.generation:>5}{str(m.lease_until):>7}"
    )


def header(title: str) -> None:
    print(title)
    print(
        f"{'now':>5}  {'who':<12} {'returns':<45} "
        f"{'state':<7}{'att':>3}{'gen':>5}{'until':>7}"
    )


def refused(call: Callable[[], object]) -> str:
    try:
        call()
    except LeaseLost as exc:
        return f"LeaseLost: {exc.message.split(': ', 1)[1].split(';')[0]}"
    return "accepted"


# --8<-- [start:shown]
with tempfile.TemporaryDirectory() as folder:
    header("1. No extension: each lease runs out in the middle of the work")
    store, clock = new_queue(folder, "one")
    a = store.claim(lease_seconds=10)
    row(store, clock, "A: claim", f"generation {a.generation}")
    for second, who in ((1010, "B"), (1020, "C")):
        clock.set(second)
        taken = store.claim(lease_seconds=10)  # the previous worker is still working
        row(store, clock, f"{who}: claim", f"generation {taken.generation}")
    clock.set(1025)
    row(store, clock, "A: complete", refused(lambda: store.complete(a, Handler())))
    clock.set(1030)
    # C's lease, the third, ran out
    row(store, clock, "D: claim", store.claim(lease_seconds=10))
    dead = store.message("E0001")
    print(
        f"       E0001: {dead.state}, {dead.last_error}; expired leases taken over: "
        f"{store.metrics().expired_leases}; effects: {ledger.effects(store)}"
    )
    store.close()
    print()

    header("2. An extension every 5 s: the lease moves ahead of the work")
    store, clock = new_queue(folder, "two")
    a = store.claim(lease_seconds=10)
    row(store, clock, "A: claim", f"generation {a.generation}")
    for second in (1005, 1010, 1015, 1020):
        clock.set(second)
        # fenced like a completion; spends no attempt
        a = store.extend(a, lease_seconds=10)
        row(store, clock, "A: extend", f"lease until {a.lease_until}")
        if second == 1010:
            row(store, clock, "B: claim", store.claim(lease_seconds=10))
    clock.set(1025)
    row(store, clock, "A: complete", store.complete(a, Handler()).outcome.value)
    print(
        f"       expired leases taken over: {store.metrics().expired_leases}; "
        f"effects: {ledger.effects(store)}"
    )
    store.close()
    print()
    # --8<-- [end:shown]

    header("3. The fence: a lost lease stays lost")
    store, clock = new_queue(folder, "three")
    a = store.claim(lease_seconds=10)
    row(store, clock, "A: claim", f"generation {a.generation}")
    clock.set(1010)
    row(store, clock, "A: extend", refused(lambda: store.extend(a, lease_seconds=10)))
    b = store.claim(lease_seconds=10)
    row(store, clock, "B: claim", f"generation {b.generation}")
    clock.set(1012)
    row(store, clock, "A: extend", refused(lambda: store.extend(a, lease_seconds=60)))
    row(store, clock, "B: complete", store.complete(b, Handler()).outcome.value)
    print(f"       effects: {ledger.effects(store)}")
    store.close()
