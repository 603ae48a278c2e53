"""A worker process for the clock tests: runs a plan of steps on the system clock and prints what it saw.

Started by tests/conformance/test_clock_steps.py under libfaketime, whose
clock it reads through ``time.time()`` like any worker. Arguments: the queue
(a SQLite file or a PostgreSQL URL), a folder for pause markers, the worker's
name and the plan, a JSON list of steps:

* ``{"do": "time"}``: what ``time.time()`` says (the faked clock);
* ``{"do": "claim", "lease": N}``: claim one message, keep its lease;
* ``{"do": "enqueue", "id": "E0002"}``: enqueue one message;
* ``{"do": "pause", "name": "x"}``: write ``x.reached``, wait for ``x``;
* ``{"do": "complete"}``: complete every lease kept, with the effect below;
* ``{"do": "fail"}``: report a temporary failure of every lease kept (its
  ``available_at``: now by the deciding clock plus the backoff).

``{"client_clock": true}`` before the plan (a negative control) gives the
store this host's clock explicitly: on PostgreSQL the client's time then
decides instead of the server's. ``{"do": "complete", "forge": true}`` (a
negative control) presents each message's current generation and claim token
instead of its own: what a fence blind to them would accept.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

from queue_core import LeaseLost, Message, Store, SystemClock, Tx
from queue_core.values import Lease

EFFECTS = "CREATE TABLE IF NOT EXISTS clock_effects (event_id TEXT NOT NULL, worker TEXT NOT NULL)"


def effect(worker: str) -> Any:
    """The effect, one row per completion: no key, so a second one would show."""
    def write(tx: Tx, message: Message) -> None:
        tx.execute("INSERT INTO clock_effects (event_id, worker) VALUES (?, ?)",
                   (message.event_id, worker))
    return write


def forged(store: Store, lease: Lease) -> Lease:
    """The lease with the message's current generation and claim token (a negative control)."""
    found = store.read(lambda tx: tx.ops.lease_locked(tx.conn, store.queue, lease.event_id))
    assert found is not None
    message, token = found
    return dataclasses.replace(lease, generation=message.generation, token=token)


def wait_for(marker: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout  # monotonic: libfaketime leaves it alone here
    while not marker.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"{marker} never came")
        threading.Event().wait(0.01)  # time.sleep fails (EINVAL) under libfaketime with a real monotonic clock


def run(store: Store, folder: Path, worker: str, plan: list[dict[str, Any]]) -> list[object]:
    seen: list[object] = []
    held: list[Lease] = []
    for step in plan:
        if step["do"] == "time":
            seen.append(time.time())
        elif step["do"] == "claim":
            lease = store.claim(step["lease"])
            if lease is not None:
                held.append(lease)
            seen.append(None if lease is None else [lease.event_id, lease.generation, lease.lease_until])
        elif step["do"] == "enqueue":
            body = {"category": "book", "amount_cents": 100}
            store.enqueue(json.dumps({"event_id": step["id"], "payload": body}))
            seen.append(step["id"])
        elif step["do"] == "pause":
            (folder / f"{step['name']}.reached").touch()
            wait_for(folder / step["name"])
            seen.append(step["name"])
        elif step["do"] == "complete":
            outcomes: list[str] = []
            for lease in held:
                try:
                    presented = forged(store, lease) if step.get("forge") else lease
                    store.complete(presented, effect(worker))
                    outcomes.append("done")
                except LeaseLost:
                    outcomes.append("lease_lost")
            held.clear()
            seen.append(outcomes)
        elif step["do"] == "fail":
            seen.append([store.fail(lease, "timeout").available_at for lease in held])
            held.clear()
    return seen


def main() -> None:
    target, folder, worker, plan_text = sys.argv[1:5]
    options = json.loads(plan_text)
    clock = SystemClock() if options.get("client_clock") else None
    with Store(target, clock=clock) as store:
        print(json.dumps(run(store, Path(folder), worker, options["plan"])))


if __name__ == "__main__":
    main()
