"""What every measurement of the bench shares: the messages it enqueues, their check, a stopwatch, the CPUs.

The money check is ``messages * AMOUNT``: every message done once with one
effect each, so a fast wrong run cannot be reported.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from queue_core import ModelClock, Store, ledger
from queue_core.envelope import MAX_LINES

NOW = 1000
AMOUNT = 7  # cents per message: the money check is messages * AMOUNT
ROOT = Path(__file__).resolve().parent.parent


def batch_text(first: int, last: int, amount: int = AMOUNT) -> str:
    return "".join(
        json.dumps({"event_id": f"E{n:04d}", "payload": {"category": "book", "amount_cents": amount}}) + "\n"
        for n in range(first, last)
    )


def fresh_queue(folder: Path, name: str, messages: int) -> Path:
    """A new queue file in ``folder`` with ``messages`` ready messages."""
    path = folder / f"{name}.sqlite3"
    fill_queue(path, messages)
    return path


def fill_queue(target: Path | str, messages: int) -> None:
    """Install the ledger into a new file or an empty PostgreSQL database, and enqueue ``messages``."""
    with Store(target, clock=ModelClock(NOW)) as store:
        ledger.install(store)
        for first in range(0, messages, MAX_LINES):
            store.enqueue(batch_text(first, min(first + MAX_LINES, messages)))


def verify_queue(path: Path | str, messages: int) -> None:
    with Store(path, clock=ModelClock(NOW), create=False) as store:
        report = ledger.report(store)
    expected = {"messages": {"ready": 0, "leased": 0, "done": messages, "dead": 0},
                "effects": {"count": messages, "total_cents": messages * AMOUNT,
                            "by_category": {"book": messages * AMOUNT}}}
    if report.to_dict() != expected:
        raise SystemExit(f"{path}: wrong result {report.to_dict()}, expected {expected}")


@contextmanager
def timed() -> Iterator[list[float]]:
    box: list[float] = []
    started = time.perf_counter()
    yield box
    box.append(time.perf_counter() - started)


def cpu_ticks() -> tuple[int, int]:
    """(busy, total) clock ticks of every CPU of the machine so far, from /proc/stat (Linux)."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = [int(v) for v in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle and iowait
    return sum(fields) - idle, sum(fields)


def busy_between(before: tuple[int, int], after: tuple[int, int]) -> float | None:
    """The share of the machine's CPU time that was busy between two readings."""
    total = after[1] - before[1]
    return None if total <= 0 else round((after[0] - before[0]) / total, 3)
