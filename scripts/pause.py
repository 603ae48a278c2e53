"""Pause a real worker (SIGSTOP) past its lease on SQLite and PostgreSQL; print what happened.

    .venv/bin/python scripts/pause.py            # run, print the runs as JSON
    .venv/bin/python scripts/pause.py --record   # and write evidence/pause.json

Each run is one of ``proof/pause.py``'s: a two-step and a plain handler
paused after the claim on each engine, a PostgreSQL backend stopped inside
COMMIT, and the PostgreSQL guard (``idle_in_transaction_session_timeout``)
with its control. PostgreSQL runs need the server binaries (a throwaway
cluster, ``proof/postgres_cluster.py``). The fencing page prints the record.
Exit status 0 when every run ended as it must (see ``verdicts``), 1
otherwise, 2 when it cannot run here.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# the repository's proof package (not installed with queue_core) sits beside scripts/
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from proof import pause, records  # noqa: E402
from proof.pause_table import HELD, NAME  # noqa: E402
from proof import postgres_cluster as postgres_server  # noqa: E402

SHAPES = ("two_step", "plain", "plain_after")
GUARD_MS = 1000
GAP_TRIES = 3  # the guard in the runs: a second, so that it fires within the pause
PARAMS: dict[str, Any] = {"lease_seconds": pause.LEASE, "heartbeat_every": pause.HEARTBEAT,
                          "guard_ms": GUARD_MS,
                          "runs": [*(f"{engine} {shape}" for engine in ("sqlite", "postgresql")
                                     for shape in SHAPES),
                                   "postgresql guard",
                                   *["postgresql guard, first statement"] * GAP_TRIES,
                                   "postgresql commit",
                                   *(f"{engine} plain_after held {HELD} s"
                                     for engine in ("sqlite", "postgresql"))]}


def verdicts(runs: list[dict[str, Any]]) -> list[str]:
    """What went wrong (empty: each run ended as it must)."""
    wrong = []
    for run in runs:
        name = f"{run['engine']} {run['shape']}"
        if any(count != 1 for count in run["effects"].values()):
            wrong.append(f"{name}: effects {run['effects']}")
        if any(state != "done" for state, _ in run["final"].values()):
            wrong.append(f"{name}: not all done {run['final']}")
    return wrong


def _in_folder(body: Callable[[Path], pause.Run]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="pause-") as folder:
        run = body(Path(folder))
    print(f"{run.engine} {run.shape}: paused {run.pause_seconds} s, effects {run.effects}",
          file=sys.stderr)
    return run.to_dict()


def sqlite_runs() -> list[dict[str, Any]]:
    return [_in_folder(lambda f, s=shape: pause.paused_past_lease(  # type: ignore[misc]
                str(f / "queue.sqlite3"), f, "sqlite", s))
            for shape in SHAPES] + [_in_folder(lambda f: pause.paused_past_lease(
                str(f / "queue.sqlite3"), f, "sqlite", "plain_after", hold=HELD))]


def postgres_runs() -> list[dict[str, Any]]:
    bindir = postgres_server.find_bindir()
    assert bindir is not None
    cluster = postgres_server.Cluster(bindir)
    runs = []
    try:
        cluster.start()

        def fresh(body: Callable[[str, Path], pause.Run]) -> dict[str, Any]:
            database = cluster.create_database()
            url = (f"postgresql://{postgres_server.SERVER_USER}@/{database}"
                   f"?host={cluster.root}&port={postgres_server.PORT}")
            try:
                return _in_folder(lambda folder: body(url, folder))
            finally:
                cluster.drop_database(database)

        for shape in SHAPES:
            runs.append(fresh(lambda u, f, s=shape: pause.paused_past_lease(  # type: ignore[misc]
                u, f, "postgresql", s)))
        # the guard fires; then its gap, a race inside psycopg: three tries
        for shape in ("plain_after", *["plain_first"] * GAP_TRIES):
            runs.append(fresh(lambda u, f, s=shape: pause.paused_past_lease(  # type: ignore[misc]
                u, f, "postgresql", s, GUARD_MS)))
        runs.append(fresh(lambda u, f: pause.paused_in_commit(u, f)))
        runs.append(fresh(lambda u, f: pause.paused_past_lease(
            u, f, "postgresql", "plain_after", hold=HELD)))
    finally:
        cluster.stop()
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/pause.py",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true",
                        help=f"write the record to {records.COMMITTED}/{NAME}.json")
    args = parser.parse_args(argv)
    reason = postgres_server.unavailable()
    if reason is not None:
        print(f"python scripts/pause.py: {reason}", file=sys.stderr)
        return 2
    began = time.monotonic()
    runs = sqlite_runs() + postgres_runs()
    result = {"runs": runs, "wrong": verdicts(runs)}
    print(json.dumps(result, indent=1))
    if args.record:
        records.save_record(NAME, PARAMS, result, by="scripts/pause.py --record",
                            seconds=time.monotonic() - began, folder=records.COMMITTED)
    return 1 if result["wrong"] else 0


if __name__ == "__main__":
    sys.exit(main())
