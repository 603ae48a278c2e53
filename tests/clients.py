"""Client programs that the tests start as separate OS processes.

    python tests/clients.py claim DB NOW START_FILE     -> prints the lease as JSON (or null)
    python tests/clients.py work DB NOW START_FILE      -> prints the work summary as JSON
    python tests/clients.py hold DB SECONDS             -> holds the write lock, prints "locked"
"""

from __future__ import annotations

import json
import sqlite3
import sys
import time
from dataclasses import asdict
from pathlib import Path

from queue_core import Handler, ModelClock, Store, ledger, work


def wait_for(start: Path) -> None:
    # Both clients block here so that they really start at the same moment.
    deadline = time.monotonic() + 30
    while not start.exists():
        if time.monotonic() > deadline:
            raise SystemExit("start signal never came")
        time.sleep(0.001)


def main(argv: list[str]) -> int:
    command, db = argv[0], Path(argv[1])
    if command == "hold":
        conn = sqlite3.connect(db, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            print("locked", flush=True)
            time.sleep(float(argv[2]))
            conn.execute("COMMIT")
        finally:
            conn.close()
        return 0
    store = Store(db, clock=ModelClock(int(argv[2])), create=False)
    if command == "work":
        ledger.install(store)  # the reference application's table (idempotent), before the race starts
    wait_for(Path(argv[3]))
    if command == "claim":
        lease = store.claim(lease_seconds=30)
        print(json.dumps(asdict(lease) if lease else None))
    elif command == "work":
        print(json.dumps(work(store, Handler(), lease_seconds=30).to_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
