"""Helpers for writing batches in tests, and for waiting on another thread or process."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable

from queue_core import Store, ledger


def line(event_id: str, category: str = "book", amount_cents: int = 100, **extra: object) -> str:
    """One JSONL line of the batch format."""
    return json.dumps({"event_id": event_id, "payload": {"category": category, "amount_cents": amount_cents, **extra}})


def batch(*lines: str) -> str:
    return "\n".join(lines) + "\n"


# The reference demo's five lines, written out from SPEC on purpose (not taken
# from queue_core.app.demo), so that tests do not inherit a mistake of the code.
DEMO_LINES = (
    '{"event_id": "E0001", "payload": {"category": "book", "amount_cents": 10000}}\n'
    '{"event_id": "E0001", "payload": {"amount_cents": 10000, "category": "book"}}\n'
    '{"event_id": "E0002", "payload": {"category": "pen", "amount_cents": 2000}}\n'
    '{"event_id": "E0003", "payload": {"category": "book", "amount_cents": 5000}}\n'
    '{"event_id": "E0004", "payload": {"category": "toy", "amount_cents": 3000}}\n'
)


def money(store: Store) -> tuple[int, int]:
    """(number of effects, total cents) in the reference ledger of ``store``."""
    totals = ledger.totals(store)
    return totals.count, totals.total_cents


def until(condition: Callable[[], bool], timeout: float = 10, what: str = "nothing happened in time") -> None:
    """Wait in real time (polling every 5 ms) until another thread or process has acted."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


# `python -m queue_core` with the COMMIT guard switched off (queue_core/interrupts.py):
# the path before it, for the negative controls of tests/conformance/test_commit_in_flight.py
# and tests/test_sync_standby_commit.py. A seam of the tests, not an option of the command.
GUARD_OFF = (
    "import contextlib, sys\n"
    "from queue_core import interrupts\n"
    "interrupts.committing = contextlib.nullcontext\n"
    "from queue_core.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def queue_core_command(guarded: bool = True) -> list[str]:
    """The argv that starts ``queue-core`` in a child process; ``guarded=False``: with the guard off."""
    return [sys.executable, "-m", "queue_core"] if guarded else [sys.executable, "-c", GUARD_OFF]
