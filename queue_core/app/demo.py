"""The reference demo of the specification, on a model clock, in a temporary folder.

Five lines (E0001 twice); a completion, a controlled temporary error, a real
child process that dies between INSERT and COMMIT, a dead letter for an
unknown category; then retries, a re-enqueue that changes nothing, and the
redrive that recovers ``toy`` after the handler learns it.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from . import ledger
from ..clock import ModelClock
from ..errors import TemporaryFailure
from .ledger import Handler, Report
from ..store import Store
from ..transactions import Tx
from ..values import Completion, Lease, Message
from .crash_child import CRASH_EXIT_CODE, run_crashing_completion
from ..worker import work

DEMO_BATCH = (
    '{"event_id": "E0001", "payload": {"category": "book", "amount_cents": 10000}}\n'
    '{"event_id": "E0001", "payload": {"amount_cents": 10000, "category": "book"}}\n'
    '{"event_id": "E0002", "payload": {"category": "pen", "amount_cents": 2000}}\n'
    '{"event_id": "E0003", "payload": {"category": "book", "amount_cents": 5000}}\n'
    '{"event_id": "E0004", "payload": {"category": "toy", "amount_cents": 3000}}\n'
)
START = 1000
LEASE_SECONDS = 2
SNAPSHOT_KEYS = (
    "after_enqueue",
    "intermediate",
    "final",
    "after_reenqueue",
    "after_redrive",
)


@dataclass(frozen=True)
class Step:
    """One thing the demo did, at a model second."""

    now: int
    text: str
    snapshot: str | None = None  # key of the snapshot taken right after this step


@dataclass
class DemoResult:
    steps: list[Step] = field(default_factory=list)
    snapshots: dict[str, Report] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {key: self.snapshots[key].to_dict() for key in SNAPSHOT_KEYS}


def _downstream_unavailable(tx: Tx, message: Message) -> None:
    """The controlled temporary error of E0002's first attempt."""
    raise TemporaryFailure(
        "downstream_unavailable", "the demo's pretend service did not answer"
    )


def run_demo(folder: Path | None = None) -> DemoResult:
    """Run the whole demo; in ``folder`` if given, else in a temporary one."""
    if folder is not None:
        return _run(Path(folder) / "demo.sqlite3")
    with tempfile.TemporaryDirectory(prefix="queue-core-demo-") as tmp:
        return _run(Path(tmp) / "demo.sqlite3")


def _run(db: Path) -> DemoResult:
    result = DemoResult()
    clock = ModelClock(START)
    store = Store(db, clock=clock)
    ledger.install(store)
    handler = Handler()

    def say(text: str) -> None:
        result.steps.append(Step(clock.now(), text))

    def snap(key: str) -> None:
        result.snapshots[key] = ledger.report(store)
        result.steps[-1] = replace(result.steps[-1], snapshot=key)

    added = store.enqueue(DEMO_BATCH)
    say(f"enqueue 5 lines: {added.accepted} accepted, {added.duplicates} duplicate")
    snap("after_enqueue")

    def claim() -> Lease:
        lease = store.claim(LEASE_SECONDS)
        if lease is None:
            raise RuntimeError("the demo expected a message to claim")
        return lease

    def done(completion: Completion) -> str:
        extra = f" ({completion.error})" if completion.error else ""
        when = (
            f", available at {completion.available_at}"
            if completion.available_at
            else ""
        )
        return f"{completion.outcome.value}{extra}{when}"

    lease = claim()
    say(
        f"claim {lease.event_id} (generation {lease.generation}) and complete: "
        f"{done(store.complete(lease, handler))}"
    )
    lease = claim()
    say(
        f"claim {lease.event_id} (generation {lease.generation}); temporary error: "
        f"{done(store.complete(lease, _downstream_unavailable))}"
    )
    lease = claim()
    status = run_crashing_completion(db, lease, clock.now())
    if status != CRASH_EXIT_CODE:
        raise RuntimeError(
            f"the crash child exited with {status}, expected {CRASH_EXIT_CODE}"
        )
    say(
        f"claim {lease.event_id} (generation {lease.generation}); "
        "a child process INSERTs its effect "
        f"and dies with os._exit({status}) before COMMIT: "
        "the effect is rolled back, the claim stays leased"
    )
    lease = claim()
    say(
        f"claim {lease.event_id} (generation {lease.generation}) and complete: "
        f"{done(store.complete(lease, handler))}"
    )
    snap("intermediate")

    clock.set(START + 1)
    summary = work(store, handler, lease_seconds=LEASE_SECONDS)
    say(f"work: {summary.done} done (E0002's retry is due)")
    clock.set(START + 2)
    summary = work(store, handler, lease_seconds=LEASE_SECONDS)
    e0003 = store.message("E0003")
    say(
        f"work: {summary.done} done (E0003's lease expired; "
        f"re-claimed as generation {e0003.generation})"
    )
    snap("final")

    again = store.enqueue(DEMO_BATCH)
    say(
        f"enqueue the same 5 lines again: {again.accepted} accepted, "
        f"{again.duplicates} duplicates"
    )
    snap("after_reenqueue")

    handler = Handler.with_categories({"toy"})
    store.redrive(["E0004"])
    summary = work(store, handler, lease_seconds=LEASE_SECONDS)
    say(f"the handler learns 'toy'; redrive E0004; work: {summary.done} done")
    snap("after_redrive")
    return result


def format_snapshot(snapshot: Report) -> str:
    """One line: the counts by state and the money."""
    data = snapshot.to_dict()
    states = " ".join(f"{name}={count}" for name, count in data["messages"].items())
    effects = data["effects"]
    categories = " ".join(
        f"{name}={cents}" for name, cents in effects["by_category"].items()
    )
    return (
        f"messages: {states} | "
        f"effects: {effects['count']}, total={effects['total_cents']}"
        + (f" ({categories})" if categories else "")
    )
