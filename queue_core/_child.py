"""A real child process that dies inside a protocol transaction.

Used by the demo and the crash tests: ``python -m queue_core._child`` opens the
database, arms one fault point, runs one operation and dies there with
``os._exit(CODE)`` (no ``finally``, no COMMIT) or with SIGKILL. It is not part
of the ``queue-core`` CLI, so no user reaches it by accident.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from pathlib import Path

from . import faults
from .clock import ModelClock
from .handler import Handler
from .store import Lease, Store

CRASH_EXIT_CODE = 86


def run_crashing_completion(
    db: Path, lease: Lease, now: int, point: str = "complete.after_insert", how: str = "exit"
) -> int:
    """Complete ``lease`` in a child process that dies at ``point``; return its exit status."""
    command = [
        sys.executable, "-m", "queue_core._child", str(db),
        lease.event_id, str(lease.generation), str(lease.attempt), str(lease.lease_until),
        "--now", str(now), "--point", point, "--how", how,
    ]
    return subprocess.run(command, check=False).returncode


def _die(how: str) -> None:
    if how == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    os._exit(CRASH_EXIT_CODE)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m queue_core._child")
    parser.add_argument("db", type=Path)
    parser.add_argument("event_id")
    parser.add_argument("generation", type=int)
    parser.add_argument("attempt", type=int)
    parser.add_argument("lease_until", type=int)
    parser.add_argument("--now", type=int, required=True)
    parser.add_argument("--point", default="complete.after_insert")
    parser.add_argument("--how", choices=("exit", "sigkill"), default="exit")
    args = parser.parse_args(argv)
    faults.arm(args.point, lambda: _die(args.how))
    store = Store(args.db, clock=ModelClock(args.now), create=False)
    store.complete(Lease(args.event_id, args.generation, args.attempt, args.lease_until), Handler())
    return 0  # reached only if the fault point was never hit


if __name__ == "__main__":
    sys.exit(main())
