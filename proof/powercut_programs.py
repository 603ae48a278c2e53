"""The small programs a power-cut run starts on the mount: ``python -m proof.powercut_programs ...``.

* ``writer DB SYNCHRONOUS FIRST``: raw SQLite in WAL mode at ``PRAGMA
  synchronous = SYNCHRONOUS``, one row a transaction (ids from ``FIRST``),
  printing each id once its COMMIT has returned;
* ``observe DB``: a reader that prints each event id it sees ``done`` (the
  observer of committed completions: under ``synchronous = FULL`` a WAL
  commit is visible to readers only after the WAL was synced);
* ``queue-normal ARGS...``: ``queue-core ARGS...`` with every connection
  switched to ``synchronous = NORMAL`` after the queue configured it: the
  queue's own negative control. The switch lives here, in proof code only;
  the package has no knob that lowers its durability.
"""

from __future__ import annotations

import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

POLL_SECONDS = 0.005


def writer(db: str, synchronous: str, first: int) -> int:
    conn = sqlite3.connect(db, isolation_level=None, timeout=30)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    conn.execute("CREATE TABLE IF NOT EXISTS rows (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
    n = first
    while True:
        # a body of a few hundred bytes: several 512-byte units per WAL frame change
        conn.execute("INSERT INTO rows VALUES (?, ?)", (n, f"row {n} " * 40))
        print(n, flush=True)
        n += 1


def observe(db: str) -> int:
    seen: set[str] = set()
    conn: sqlite3.Connection | None = None
    while True:
        try:
            if conn is None:
                conn = sqlite3.connect(db, isolation_level=None, timeout=30)
                conn.execute("PRAGMA query_only = ON")
            rows = conn.execute("SELECT event_id FROM messages WHERE state = 'done'").fetchall()
        except sqlite3.Error:
            rows = []  # not there yet, or busy: look again
        for (event_id,) in rows:
            if event_id not in seen:
                seen.add(event_id)
                print(event_id, flush=True)
        time.sleep(POLL_SECONDS)


def queue_normal(args: list[str]) -> int:
    from queue_core.cli import main
    from queue_core.engines import sqlite as engine

    configured = engine.connect

    def connect(path: Path, *, busy_timeout_ms: int) -> sqlite3.Connection:
        conn = configured(path, busy_timeout_ms=busy_timeout_ms)
        conn.execute("PRAGMA synchronous = NORMAL")
        return conn

    engine.connect = connect
    sys.argv = ["queue-core", *args]
    result: Any = main()
    return int(result or 0)


def main(argv: list[str]) -> int:
    if argv[:1] == ["writer"] and len(argv) == 4:
        return writer(argv[1], argv[2], int(argv[3]))
    if argv[:1] == ["observe"] and len(argv) == 2:
        return observe(argv[1])
    if argv[:1] == ["queue-normal"]:
        return queue_normal(argv[1:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
