"""Throughput of the protocol on this machine, reported as ratios from one run.

    python scripts/bench.py                 # 2,000 events per measurement
    python scripts/bench.py --events 500    # quicker

Machines here are noisy, so absolute numbers mean little; compare the ratios,
which come from measurements taken one after another in the same run:

* ``per_transaction``: one process, claim + complete in a loop, with today's
  connection policy (a connection per transaction, see ``Store._connect``).
* ``idle_connection_held``: the same loop while another connection stays open,
  so closing the per-transaction connection is no longer the *last* close and
  SQLite does not checkpoint and delete the WAL every time. The ratio to
  ``per_transaction`` is what a longer-lived connection could win.
* ``workers_N``: N ``queue-core work`` processes on one file (model time), wall
  clock until the queue is empty. SQLite has one writer at a time, so more
  processes are not expected to scale.

Every measurement also checks its result (every event done, one effect each),
so a fast wrong run cannot be reported. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from queue_core import Handler, ModelClock, Store, ledger
from queue_core.envelope import MAX_LINES

NOW = 1000


def batch(first: int, last: int) -> str:
    return "".join(
        json.dumps({"event_id": f"E{n:04d}", "payload": {"category": "book", "amount_cents": 1}}) + "\n"
        for n in range(first, last)
    )


def fresh_store(folder: Path, name: str, events: int) -> Store:
    store = Store(folder / f"{name}.sqlite3", clock=ModelClock(NOW))
    ledger.install(store)  # the reference application's effects table
    for first in range(0, events, MAX_LINES):  # a batch holds at most MAX_LINES lines
        store.enqueue(batch(first, min(first + MAX_LINES, events)))
    return store


def verified(store: Store, events: int) -> None:
    report = ledger.report(store)
    if report.queue.count("done") != events or report.effects_count != events:
        raise SystemExit(f"wrong result: {report.to_dict()}")


def loop(store: Store) -> None:
    handler = Handler()
    while (lease := store.claim(lease_seconds=60)) is not None:
        store.complete(lease, handler)


def measure_loop(folder: Path, events: int, hold_idle_connection: bool) -> float:
    name = "idle" if hold_idle_connection else "per-tx"
    store = fresh_store(folder, name, events)
    idle = sqlite3.connect(store.path) if hold_idle_connection else None
    try:
        started = time.perf_counter()
        loop(store)
        seconds = time.perf_counter() - started
    finally:
        if idle is not None:
            idle.close()
    verified(store, events)
    return events / seconds


def measure_workers(folder: Path, events: int, workers: int) -> float:
    store = fresh_store(folder, f"workers-{workers}", events)
    command = [sys.executable, "-m", "queue_core", "--db", str(store.path), "--now", str(NOW),
               "work", "--lease-seconds", "60"]
    started = time.perf_counter()
    processes = [subprocess.Popen(command, stdout=subprocess.DEVNULL) for _ in range(workers)]
    statuses = [process.wait() for process in processes]
    seconds = time.perf_counter() - started
    if any(statuses):
        raise SystemExit(f"a worker failed: exit statuses {statuses}")
    verified(store, events)
    return events / seconds


def run(events: int, worker_counts: tuple[int, ...] = (1, 2, 4)) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="queue-core-bench-") as tmp:
        folder = Path(tmp)
        rates = {
            "per_transaction": measure_loop(folder, events, hold_idle_connection=False),
            "idle_connection_held": measure_loop(folder, events, hold_idle_connection=True),
        }
        for count in worker_counts:
            rates[f"workers_{count}"] = measure_workers(folder, events, count)
    base = rates["per_transaction"]
    return {
        "events": events,
        "messages_per_second": {name: round(rate, 1) for name, rate in rates.items()},
        "ratio_to_per_transaction": {name: round(rate / base, 2) for name, rate in rates.items()},
        "sqlite": sqlite3.sqlite_version,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2000, help="events per measurement (max 10000)")
    args = parser.parse_args()
    if not 1 <= args.events <= 10_000:
        parser.error("--events must be 1..10000 (event ids are E0000..E9999)")
    print(json.dumps(run(args.events), indent=2))


if __name__ == "__main__":
    main()
