"""What ``queue-core --help`` states of the library and of the reference application,
without importing them.

The help names the default queue and the default wait for a busy database (the
global options), explains the ledger's rules (its categories, its amounts),
and ``lab`` offers the lab's cases. Reading them where they are defined would
import the library's values and rules (some 25 ms of CPU: its dataclasses,
``secrets``, ``hashlib``), or the reference application with the store, the
engines and sqlite3, into ``--help`` itself. So these few facts are written
here, and ``differences()`` (run by tests/test_cli_table.py) compares each with
its home: a change there fails the test until it is made here too. Every other
constant the command line shows or checks (bounds, defaults) is read from the
library when the command that uses it runs.
"""

from __future__ import annotations

from typing import Final

# queue_core.queues.DEFAULT_QUEUE, queue_core.rules.BUSY_RETRY_SECONDS
DEFAULT_QUEUE: Final = "default"
BUSY_RETRY_SECONDS: Final = 60.0
# queue_core.app.ledger: DEFAULT_CATEGORIES, MIN_AMOUNT_CENTS, MAX_AMOUNT_CENTS
LEDGER_CATEGORIES: Final = ("bag", "book", "pen")  # sorted, as the help names them
MIN_AMOUNT_CENTS: Final = 1
MAX_AMOUNT_CENTS: Final = 9_999_999
# queue_core.app.lab: STORIES (run by ``lab`` without a case) and CASES
LAB_STORIES: Final = ("normal", "duplicate-effect", "reuse-effect", "early-ack")
LAB_CASES: Final = LAB_STORIES + ("expiry",)


def differences() -> list[str]:
    """Each fact here that differs from its home's (none: in step)."""
    from .. import queues, rules
    from ..app import lab, ledger

    pairs = {
        "DEFAULT_QUEUE": (DEFAULT_QUEUE, queues.DEFAULT_QUEUE),
        "BUSY_RETRY_SECONDS": (BUSY_RETRY_SECONDS, rules.BUSY_RETRY_SECONDS),
        "LEDGER_CATEGORIES": (
            LEDGER_CATEGORIES,
            tuple(sorted(ledger.DEFAULT_CATEGORIES)),
        ),
        "MIN_AMOUNT_CENTS": (MIN_AMOUNT_CENTS, ledger.MIN_AMOUNT_CENTS),
        "MAX_AMOUNT_CENTS": (MAX_AMOUNT_CENTS, ledger.MAX_AMOUNT_CENTS),
        "LAB_STORIES": (LAB_STORIES, tuple(lab.STORIES)),
        "LAB_CASES": (LAB_CASES, tuple(lab.CASES)),
    }
    return [
        f"{name}: the command line says {ours!r}, the application {theirs!r}"
        for name, (ours, theirs) in pairs.items()
        if ours != theirs
    ]
